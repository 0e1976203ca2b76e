"""What the typed schema costs ``python run.py --cfg job``, against a bare Hydra app of the same size.

The bare app is a plain ``@hydra.main`` whose config is this project's composed job config written
out as one YAML file: the same keys and values, but no schema, no config groups and none of our
modules. Both print the config and exit; the difference is the price of the schema (generated
GRPOConfig fields, enums) and of importing grpo_exp. Runs alternate, so load changes hit both alike.

Usage::

    .venv/bin/python benchmarks/cfg_job_startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

BARE_APP = """
import hydra

@hydra.main(config_path=".", config_name="config", version_base="1.3")
def main(cfg):
    return None

if __name__ == "__main__":
    main()
"""
# The Done-when of issue 8: --cfg job within this many seconds of the bare app.
BUDGET_S = 0.3


def seconds(command: list[str], cwd: Path) -> float:
    return harness.run(command, cwd=cwd, check=True).wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    ours = [sys.executable, "run.py", "--cfg", "job"]
    composed = harness.run(ours, check=True).stdout
    with tempfile.TemporaryDirectory() as folder:
        bare_dir = Path(folder)
        (bare_dir / "config.yaml").write_text(composed, encoding="utf-8")
        (bare_dir / "app.py").write_text(BARE_APP, encoding="utf-8")
        bare = [sys.executable, "app.py", "--cfg", "job"]
        keys = sum(1 for line in composed.splitlines() if ":" in line)
        ours_s, bare_s = [], []
        for _ in range(args.repeats):
            ours_s.append(seconds(ours, harness.ROOT))
            bare_s.append(seconds(bare, bare_dir))
    ours_med, bare_med = statistics.median(ours_s), statistics.median(bare_s)
    print(f"config lines with a key: {keys}; repeats: {args.repeats}; load average: {os.getloadavg()[0]:.2f}")
    print("| command | median s | min s |")
    print("|---|---|---|")
    print(f"| `python run.py --cfg job` | {ours_med:.2f} | {min(ours_s):.2f} |")
    print(f"| bare Hydra app, same config as one YAML | {bare_med:.2f} | {min(bare_s):.2f} |")
    verdict = "within" if ours_med - bare_med <= BUDGET_S else "OVER"
    print(
        f"difference {ours_med - bare_med:+.2f} s, ratio {ours_med / bare_med:.2f} ({verdict} the {BUDGET_S} s budget)"
    )


if __name__ == "__main__":
    main()
