"""Successive halving against the full sweep: the tiny 3x3 sweep (``+sweep=group_size_lr_tiny``) over seeds.

Both arms are real multiruns of ``run.py`` (``logger=none``, ``+launcher=parallel``). The full arm trains
every configuration x seed to ``grpo.max_steps``; the halving arm (``sweep.halving.enabled=true``) ranks
the configurations by their mean held-out reward over the seeds at each rung and continues the best
1/eta. The table compares the configuration halving picks with the full sweep's best on the full-length
held-out reward (``final_eval_reward``, mean ± std over seeds, from the full arm's jobs), and the completions
each arm generated (``halving.json``; the full arm's is jobs x steps x completions per step).

The acceptance reading: halving's pick is within the full sweep's seed spread (one std) of its best,
and halving generates at most half the completions.

Usage::

    .venv/bin/python benchmarks/halving.py                                   # seeds 1 2 3, 100 steps
    .venv/bin/python benchmarks/halving.py --seeds 1 --max-steps 27 --min-steps 3 --out /tmp/halving
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness
from grpo_exp.folder import JobFolder
from grpo_exp.sweep import halving

COMMON = ["+sweep=group_size_lr_tiny", "logger=none", "+launcher=parallel"]
SWEPT = ("grpo.num_generations", "optimizer.lr")


def sweep(out: Path, name: str, overrides: list[str]) -> tuple[Path, float]:
    folder = out / name
    return folder, harness.run_py("-m", f"hydra.sweep.dir={folder}", *COMMON, *overrides, check=True).wall_s


def configuration(job: Path) -> str:
    overrides = harness.Job(job).summary()["overrides"]
    return " ".join(f"{k}={overrides[k]}" for k in SWEPT if k in overrides)


def by_configuration(folder: Path) -> dict[str, list[float]]:
    """Each configuration's final held-out rewards over its seeds (completed jobs only)."""
    found: dict[str, list[float]] = {}
    for job in sorted(p for p in folder.iterdir() if p.name.isdigit()):
        summary = harness.Job(job).summary()
        if summary.get("status") != "completed" or summary.get("final_eval_reward") is None:
            continue
        found.setdefault(configuration(job), []).append(float(summary["final_eval_reward"]))
    return found


def completions(folder: Path) -> int:
    return sum(
        int(harness.Job(job).summary().get("steps") or 0) * halving.completions_per_step(JobFolder(job))
        for job in folder.iterdir()
        if job.name.isdigit()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--min-steps", type=int, default=None)
    parser.add_argument("--eta", type=int, default=3)
    parser.add_argument("--out", type=Path, default=harness.ROOT / "outputs" / "benchmarks" / "halving")
    args = parser.parse_args()
    seeds = ["seed=" + ",".join(map(str, args.seeds)), f"grpo.max_steps={args.max_steps}"]
    halving_on = ["sweep.halving.enabled=true", f"sweep.halving.eta={args.eta}"]
    if args.min_steps:
        halving_on.append(f"sweep.halving.min_steps={args.min_steps}")
    full_dir, full_s = sweep(args.out, "full", seeds)
    halved_dir, halved_s = sweep(args.out, "halving", [*seeds, *halving_on])

    full = by_configuration(full_dir)
    means = {c: statistics.fmean(v) for c, v in full.items()}
    best = max(means, key=means.__getitem__)
    spread = statistics.stdev(full[best]) if len(full[best]) > 1 else 0.0
    record = json.loads((halved_dir / "halving.json").read_text())
    picked = configuration(halved_dir / str(record["rungs"][-1]["jobs"][0]))  # the last rung's configuration
    made, whole = record["completions"]["generated"], completions(full_dir)
    lines = [
        f"| arm | configuration picked | its full-length held-out reward (mean ± std over {len(args.seeds)} seeds) "
        "| completions generated | wall time |",
        "| --- | --- | --- | --- | --- |",
        f"| full sweep | `{best}` | {means[best]:.3f} ± {spread:.3f} | {whole:,} | {full_s:.0f} s |",
        f"| halving (eta {args.eta}, rungs {record['rungs_at']}) | `{picked}` | "
        f"{means[picked]:.3f} ± {statistics.stdev(full[picked]) if len(full[picked]) > 1 else 0.0:.3f} | "
        f"{made:,} ({made / whole:.0%}) | {halved_s:.0f} s |",
        "",
        f"Within the full sweep's seed spread of its best: {abs(means[best] - means[picked]) <= spread} "
        f"(gap {means[best] - means[picked]:.3f}, spread {spread:.3f}); at most half the completions: "
        f"{made <= whole / 2}.",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
