"""Wall time of a real 3 x 3 sweep on the tiny model, one job at a time vs two side by side.

Runs ``python run.py -m +sweep=group_size_lr_tiny`` with the basic launcher and with
``+launcher=parallel`` (joblib, 2 workers, 1 torch thread each), then prints both wall times and
the verdict of each report, which should agree: the jobs are seeded and deterministic.

Usage (about 10 minutes on 2 cores)::

    .venv/bin/python benchmarks/sweep_launchers.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

LAUNCHERS = {"sequential": [], "parallel (joblib, 2 workers)": ["+launcher=parallel"]}


def run_sweep(sweep_dir: Path, extra: list[str]) -> float:
    overrides = ["-m", "+sweep=group_size_lr_tiny", "logger=none", f"hydra.sweep.dir={sweep_dir}", *extra]
    return harness.run_py(*overrides, check=True).wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="write the sweeps here instead of a temporary folder")
    args = parser.parse_args()
    print(f"CPUs: {os.cpu_count()}; load average before: {os.getloadavg()[0]:.2f}\n")
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        results = {}
        for n, (name, extra) in enumerate(LAUNCHERS.items()):
            sweep_dir = base / f"sweep{n}"
            results[name] = (run_sweep(sweep_dir, extra), sweep_dir / "report" / "report.md")
        print("| launcher | wall time (s) |\n|---|---|")
        for name, (seconds, _) in results.items():
            print(f"| {name} | {seconds:.0f} |")
        for name, (_, report) in results.items():
            verdict = report.read_text().split("## Results")[0].split("## Verdict")[1].strip()
            print(f"\n{name}:\n{verdict}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
