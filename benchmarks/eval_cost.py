"""What held-out evaluation costs the default run, and what the run still learns.

Runs the default job (``python run.py logger=none``, plus any overrides given) twice: with the
held-out evaluation of the defaults and with ``dataset.eval_fraction=0``. Prints, as a Markdown
table: wall time, training time, time spent evaluating (TRL's ``eval/runtime`` summed), the
number of evaluations, the format reward of the first and last tenth of steps and the held-out
reward of the first and last evaluation.

Usage::

    .venv/bin/python benchmarks/eval_cost.py                                      # the default run, 150 steps
    .venv/bin/python benchmarks/eval_cost.py grpo.max_steps=20 grpo.eval_steps=10  # a short look
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

VARIANTS = {
    "held-out evaluation (defaults)": [],
    "no evaluation (dataset.eval_fraction=0)": ["dataset.eval_fraction=0"],
}


def measure(overrides: list[str], folder: Path) -> dict[str, str]:
    job = harness.run_job("logger=none", "save_model=false", *overrides, job=folder, check=True)
    wall, summary, evaluations = job.finished.wall_s, job.summary(), job.evaluations()
    runtime = [row["train_runtime"] for row in job.rows() if "train_runtime" in row]
    return {
        "wall (s)": f"{wall:.0f}",
        "training incl. evaluations (s)": f"{runtime[-1]:.0f}" if runtime else "?",
        "evaluating (s)": f"{sum(row.get('eval/runtime', 0.0) for row in evaluations):.0f}",
        "evaluations": str(len(evaluations)),
        "format reward, first → last tenth": _arrow(summary.get("first_reward"), summary.get("final_reward")),
        "held-out reward, first → final": _arrow(summary.get("first_eval_reward"), summary.get("final_eval_reward")),
        "steps": str(len(job.steps())),
    }


def _arrow(first: float | None, last: float | None) -> str:
    return "—" if first is None or last is None else f"{first:.2f} → {last:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="run.py overrides for both runs, e.g. grpo.max_steps=20")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            name: measure([*extra, *args.overrides], Path(tmp) / str(i))
            for i, (name, extra) in enumerate(VARIANTS.items())
        }
    columns = list(next(iter(results.values())))
    print("| run | " + " | ".join(columns) + " |")
    print("| --- " * (len(columns) + 1) + "|")
    for name, figures in results.items():
        print(f"| {name} | " + " | ".join(figures[c] for c in columns) + " |")


if __name__ == "__main__":
    main()
