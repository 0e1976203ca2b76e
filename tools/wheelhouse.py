"""Helpers of `make wheelhouse`, run with any Python before a venv exists (standard library only).

``list REPORT``: the packages a ``pip install --dry-run --report`` would install, as ``name==version``
lines; ``--sdists`` keeps those the index has as source only (make builds their wheels, pure Python),
``--leave-out REGEX`` drops those whose names match (a node's own torch and its CUDA libraries). The
project itself (a local folder) is never listed: it is installed from the tree.

``platforms TAG``: pip's ``--platform`` options for a node of that wheel platform. pip matches the
tags it is given literally, so a manylinux_2_28 node also needs the older manylinux tags it runs
(manylinux_2_17 and its alias manylinux2014 are the commonest).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

# The legacy manylinux names and the glibc version each stands for (PEP 600).
LEGACY_MANYLINUX = {"manylinux2014": 17, "manylinux2010": 12, "manylinux1": 5}
OLDEST_GLIBC_MINOR = 5
MANYLINUX = re.compile(r"manylinux_2_(\d+)_(\w+)")


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


def platforms(tag: str) -> list[str]:
    """``tag`` and every older manylinux tag a machine of that tag runs, newest first."""
    for legacy, minor in LEGACY_MANYLINUX.items():
        if tag.startswith(legacy + "_"):
            tag = f"manylinux_2_{minor}_{tag.removeprefix(legacy + '_')}"
    match = MANYLINUX.fullmatch(tag)
    if match is None:
        return [tag]  # not manylinux (macOS, Windows, musllinux): as given
    newest, arch = int(match.group(1)), match.group(2)
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, OLDEST_GLIBC_MINOR - 1, -1)]
    return tags + [f"{legacy}_{arch}" for legacy, minor in LEGACY_MANYLINUX.items() if minor <= newest]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="name==version for each package a pip report installs")
    listing.add_argument("report", type=Path)
    listing.add_argument("--sdists", action="store_true", help="only the packages without a wheel on the index")
    listing.add_argument("--leave-out", type=re.compile, default=None, help="a regex of package names to drop")
    tags = commands.add_parser("platforms", help="pip --platform options for a node of this wheel platform")
    tags.add_argument("tag")
    args = parser.parse_args()
    if args.command == "list":
        print("\n".join(wanted(json.loads(args.report.read_text()), args.sdists, args.leave_out)))
    else:
        print(" ".join(f"--platform {tag}" for tag in platforms(args.tag)))


if __name__ == "__main__":
    main()
