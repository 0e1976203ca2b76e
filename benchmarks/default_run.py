"""How fast the everyday commands answer, and what the default run achieves.

Prints, as a Markdown table:

- ``python run.py --help`` and a rejected command (a misspelt key): the light paths, which must
  not import torch or trl;
- the default job (``python run.py`` on the embedded tiny model): start-up until training begins,
  training time, whole wall time, and the format reward of the first and last tenth of steps.
  With ``--fresh-cache`` the tiny model is built first (the one-off cost of a first run).

Usage::

    .venv/bin/python benchmarks/default_run.py                 # model already built
    .venv/bin/python benchmarks/default_run.py --fresh-cache   # include the one-off build
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

REPEATS = 3


def median_seconds(args: list[str]) -> float:
    return statistics.median(harness.run_py(*args).wall_s for _ in range(REPEATS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fresh-cache", action="store_true", help="build the tiny model into an empty cache first")
    args = parser.parse_args()
    print(f"CPUs: {os.cpu_count()}; load average before: {os.getloadavg()[0]:.2f}\n")
    print("| command | seconds |\n|---|---|")
    print(f"| `python run.py --help` (median of {REPEATS}) | {median_seconds(['--help']):.2f} |")
    print(f"| `python run.py grpo.num_generation=4` (rejected, median of {REPEATS}) | "
          f"{median_seconds(['grpo.num_generation=4']):.2f} |")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, **({"GRPO_EXP_CACHE": f"{tmp}/cache"} if args.fresh_cache else {}))
        job = harness.run_job("logger=none", job=Path(tmp, "run"), env=env, check=True)
        seconds, summary = job.finished.wall_s, job.summary()
    startup = summary["startup_s"]
    print(f"| default run: start-up until training{' (with the build)' if args.fresh_cache else ''} | {startup:.1f} |")
    print(f"| default run: training ({summary['steps']} steps) | {summary['wall_time_s'] - startup:.1f} |")
    print(f"| default run: whole command | {seconds:.1f} |")
    print(f"\nformat reward: first tenth {summary['first_reward']:.2f}, last tenth {summary['final_reward']:.2f}, "
          f"peak {summary['peak_reward']:.2f}; mean KL {summary['mean_kl']:.2f}")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
