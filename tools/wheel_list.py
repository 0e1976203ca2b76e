"""The packages a ``pip install --dry-run --report`` would install, as ``name==version`` lines (make wheelhouse).

``--sdists``: only those the index has as source only (their wheels are built here, pure Python);
``--leave-out REGEX``: drop the packages whose names match (a node's own torch and its CUDA libraries).
The project itself (a local folder) is never listed: it is installed from the tree.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def wanted(report: dict, sdists: bool, leave_out: re.Pattern[str] | None) -> list[str]:
    lines = []
    for item in report["install"]:
        info, name = item["download_info"], item["metadata"]["name"]
        if "dir_info" in info or (leave_out and leave_out.fullmatch(name.lower())):
            continue
        if sdists and info["url"].endswith(".whl"):
            continue
        lines.append(f"{name}=={item['metadata']['version']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--sdists", action="store_true", help="only the packages without a wheel on the index")
    parser.add_argument("--leave-out", type=re.compile, default=None, help="a regex of package names to drop")
    args = parser.parse_args()
    print("\n".join(wanted(json.loads(args.report.read_text()), args.sdists, args.leave_out)))


if __name__ == "__main__":
    main()
