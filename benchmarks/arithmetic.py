"""A skill the embedded model learns by RL: held-out chain sums before and after GRPO (``+recipe=arithmetic``).

Runs the recipe (real GRPO through ``run.py``, ``logger=none``) for each seed and prints, per seed, the
held-out ``mean@8`` of the warmed-up model (the evaluation before step 1) and after training, their
difference, pass@1/pass@8 after, and the training time. The held-out problems come from a region of
chain_sum's problem space that neither the warm-up nor training draws from (docs/tasks.md), so a gain
is accuracy on problems the model never saw. Results: benchmarks/arithmetic.md.

Usage::

    .venv/bin/python benchmarks/arithmetic.py                         # seeds 42 43 44, one after another
    .venv/bin/python benchmarks/arithmetic.py --seeds 42 --set grpo.max_steps=200
    .venv/bin/python benchmarks/arithmetic.py --tabulate runs/arithmetic-42 runs/arithmetic-43
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

MEAN = "mean@8"


def figures(out: Path) -> dict:
    """One finished run's held-out task metrics, from its job folder's summary.json."""
    summary = harness.Job(out).summary()
    before, after = summary["base_eval_task"], summary["eval_task"]
    return {
        "run": out.name,
        "before": before[MEAN],
        "after": after[MEAN],
        "gain": after[MEAN] - before[MEAN],
        "pass@1": after["pass@1"],
        "pass@8": after.get("pass@8"),
        "pass@8 before": before.get("pass@8"),
        "train_s": summary["wall_time_s"] - summary["startup_s"],
        "steps": summary["steps"],
    }


def table(rows: list[dict]) -> str:
    lines = [
        f"| run | held-out {MEAN} before | after | gain | pass@8 before -> after | training s | steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['before']:.3f} | {r['after']:.3f} | **{r['gain']:+.3f}** | "
            f"{r['pass@8 before']:.3f} -> {r['pass@8']:.3f} | {r['train_s']:.0f} | {r['steps']} |"
        )
    gains = [r["gain"] for r in rows]
    lines.append(f"\nmean gain {statistics.mean(gains):+.3f}, smallest {min(gains):+.3f} over {len(rows)} seeds")
    return "\n".join(lines)


def main() -> None:
    harness.recipe_over_seeds(__doc__, "arithmetic", figures, table)


if __name__ == "__main__":
    main()
