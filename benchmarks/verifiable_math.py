"""What `+recipe=math` reaches on the embedded model: the held-out format and accuracy, start -> end.

Runs the recipe through ``run.py`` (real GRPO training, ``logger=none``) once per seed, one after the
other, and prints a markdown table: per seed, each part's held-out mean before the first step (the
warm-up model, TRL's evaluation on start) and after the last, from the job's ``summary.json``, and
its training mean over the first and last tenth of the steps, from ``metrics.jsonl``.

Usage::

    .venv/bin/python benchmarks/verifiable_math.py                       # seeds 42 43, into a temporary folder
    .venv/bin/python benchmarks/verifiable_math.py --seeds 42 --out runs --threads 1 optimizer.lr=3e-4
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

PARTS = ("format", "accuracy")
EDGE_FRACTION = 0.1  # first and last tenth of the training steps


def run_one(seed: int, out: Path, threads: int | None, extra: list[str]) -> dict:
    """One training job; its held-out and training figures per part, and its wall time."""
    job = out / f"math-{seed}"
    overrides = ["+recipe=math", f"seed={seed}", "logger=none", *extra, *([f"threads={threads}"] if threads else [])]
    done = harness.run_job(*overrides, job=job, check=True)
    summary, rows = done.summary(), done.steps()
    figures = {"seed": seed, "seconds": round(done.finished.wall_s), "steps": summary["steps"]}
    for part in PARTS:
        series = [
            float(r[f"rewards/{part}/mean"]) for r in rows if math.isfinite(r.get(f"rewards/{part}/mean", math.nan))
        ]
        n = max(1, math.ceil(len(series) * EDGE_FRACTION))
        figures[part] = {
            "eval": (summary["base_eval_parts"][part], summary["eval_parts"][part]),
            "train": (statistics.mean(series[:n]), statistics.mean(series[-n:])),
        }
    return figures


def table(runs: list[dict]) -> str:
    lines = [
        "| seed | steps | format, held-out | accuracy, held-out | format, training (first → last tenth) "
        "| accuracy, training | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        cells = [f"{r[p][k][0]:.2f} → {r[p][k][1]:.2f}" for k in ("eval",) for p in PARTS]
        cells += [f"{r[p]['train'][0]:.2f} → {r[p]['train'][1]:.2f}" for p in PARTS]
        lines.append(f"| {r['seed']} | {r['steps']} | " + " | ".join(cells) + f" | {r['seconds']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--out", type=Path, default=None, help="where the job folders go (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per job (default: torch's)")
    parser.add_argument("overrides", nargs="*", help="more run.py overrides, e.g. optimizer.lr=3e-4")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="math-bench-"))
    runs = [run_one(seed, out, args.threads, args.overrides) for seed in args.seeds]
    print(table(runs))
    print(f"\njob folders: {out}")


if __name__ == "__main__":
    main()
