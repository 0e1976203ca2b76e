"""What each of the article's scenarios does on the embedded model, before anyone spends GPU time.

Runs every shipped scenario recipe on the tiny model (real GRPO training through ``run.py``,
``logger=none``) for each seed, and prints, per reward part, the mean of the first and last tenth
of the steps the part was active (mean ± std over the seeds), and the wall time of a run.

Usage::

    .venv/bin/python benchmarks/recipes.py                              # every recipe, seeds 42 43 44
    .venv/bin/python benchmarks/recipes.py --recipes content_creation --seeds 42 --jobs 1
    .venv/bin/python benchmarks/recipes.py --seeds 42 --json a.json   # then --seeds 43 --json b.json
    .venv/bin/python benchmarks/recipes.py --tabulate a.json b.json    # one table over both
    .venv/bin/python benchmarks/recipes.py --tabulate runs/content_creation-42   # a run's job folder
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

# recipe name -> the overrides that run it on the embedded model
RECIPES: dict[str, list[str]] = {
    "default": [],
    "customer_service_bot": ["+recipe=customer_service_bot"],
    "content_creation": ["model=tiny_writing", "+recipe=content_creation", "optimizer.lr=1e-3"],  # the recipe's notes
    "code_generation": ["model=tiny_code", "+recipe=code_generation"],
}
EDGE_FRACTION = 0.1  # first and last tenth, as summary.json reads a run


def part_edges(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Each reward part's mean over the first and last tenth of the steps it was scored."""
    edges = {}
    for key in sorted({k for row in rows for k in row if k.startswith("rewards/") and k.endswith("/mean")}):
        series = [float(r[key]) for r in rows if isinstance(r.get(key), int | float) and math.isfinite(r[key])]
        if series:
            n = max(1, math.ceil(len(series) * EDGE_FRACTION))
            edges[key.split("/")[1]] = (statistics.mean(series[:n]), statistics.mean(series[-n:]))
    return edges


def run_one(recipe: str, seed: int, workdir: Path, threads: int) -> dict:
    out = workdir / f"{recipe}-{seed}"
    harness.run_py(*RECIPES[recipe], f"seed={seed}", "logger=none", f"threads={threads}", job=out, check=True)
    return collect(recipe, seed, out)


def collect(recipe: str, seed: int, out: Path) -> dict:
    """One finished run's figures, from its job folder."""
    job = harness.Job(out)
    summary = job.summary()
    return {
        "recipe": recipe,
        "seed": seed,
        "parts": part_edges(job.steps()),
        "train_s": summary["wall_time_s"] - summary["startup_s"],
        "steps": summary["steps"],
        "alerts": sorted(a["kind"] for a in summary["alerts"]),
    }


def load(path: Path) -> list[dict]:
    """Runs from a --json file, or from a job folder named ``<recipe>-<seed>``."""
    if path.is_dir():
        recipe, seed = path.name.rsplit("-", 1)
        return [collect(recipe, int(seed), path)]
    return json.loads(path.read_text())


def spread(values: list[float], digits: int = 2) -> str:
    mean = f"{statistics.mean(values):.{digits}f}"
    return f"{mean} ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", choices=sorted(RECIPES), default=list(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side (each on threads=cores/jobs)")
    parser.add_argument("--json", type=Path, help="also write every run's figures to this file")
    parser.add_argument("--tabulate", nargs="+", type=Path, help="only tabulate earlier --json files or job folders")
    args = parser.parse_args()
    if args.tabulate:
        runs = [run for path in args.tabulate for run in load(path)]
        table(runs, [r for r in RECIPES if any(run["recipe"] == r for run in runs)])
        return
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    print(f"CPUs: {os.cpu_count()}; {args.jobs} runs at a time; load average before: {os.getloadavg()[0]:.2f}\n")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        jobs = [(recipe, seed) for recipe in args.recipes for seed in args.seeds]
        runs = list(pool.map(lambda job: run_one(*job, Path(tmp), threads), jobs))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    table(runs, args.recipes)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


def table(runs: list[dict], recipes: list[str]) -> None:
    """Markdown table: per recipe and part, first and last tenth and the gain, mean ± std over seeds."""
    print(f"seeds {' '.join(sorted({str(r['seed']) for r in runs}))}: mean ± std over seeds\n")
    print("| recipe | steps | part | first tenth | last tenth | gain | training s (per run) | alerts |")
    print("|---|---|---|---|---|---|---|---|")
    for recipe in recipes:
        mine = [r for r in runs if r["recipe"] == recipe]
        alerts = sorted({a for r in mine for a in r["alerts"]})
        for i, part in enumerate(mine[0]["parts"]):
            first, last = ([r["parts"][part][k] for r in mine] for k in (0, 1))
            gain = [b - a for a, b in zip(first, last, strict=True)]
            head = (f"`{recipe}`", str(mine[0]["steps"])) if i == 0 else ("", "")
            tail = (spread([r["train_s"] for r in mine], digits=0), ", ".join(alerts) or "none") if i == 0 else ("", "")
            print(f"| {head[0]} | {head[1]} | {part} | {spread(first)} | {spread(last)} | {spread(gain)} | "
                  f"{tail[0]} | {tail[1]} |")  # fmt: skip


if __name__ == "__main__":
    main()
