"""The collapse scenario without and with rollback, and dynamic sampling at equal generated completions.

Real GRPO on the tiny model through ``run.py`` (``logger=none``, one thread per job):

- ``collapse``: ``+recipe=collapse`` (10x the tiny model's learning rate, 150 steps), ``collapse+rollback``:
  the same with ``monitor.on_collapse=rollback``, and ``stable``: the recipe at the tiny model's own
  learning rate (5e-4); peak (best 10-step mean) and last-tenth training reward per seed, the rollbacks
  taken, and whether every step is in ``metrics.jsonl`` once. Seeds 42 (the default) 1 2 3 unless
  ``--seeds`` says otherwise; ``--set`` adds overrides to every collapse arm (a knob tried on the recipe).
- ``dynamic`` (``grpo.num_generations=4 grpo.dynamic_sampling=true``, up to 10 extra
  generation rounds a step) for ``--ds-steps`` steps, then
  ``plain`` at the same group size for as many steps as the completions ``dynamic`` generated buy;
  the held-out reward after the last step (TRL's evaluation of ``dataset.eval_fraction``'s split),
  and the zero-std share of the groups trained on.

A job folder that already holds a summary is read, not run again (``--out`` keeps them).

Usage::

    .venv/bin/python benchmarks/stability.py --out /tmp/stability            # both parts (collapse: seeds 42 1 2 3)
    .venv/bin/python benchmarks/stability.py --out /tmp/stability --part collapse --jobs 2
    .venv/bin/python benchmarks/stability.py --out /tmp/try --part collapse --arms collapse \
        --set optimizer.lr=4.5e-3                                          # a knob tried on the recipe
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["logger=none", "threads=1", "save_model=false"]
NO_EVAL = ["grpo.eval_strategy=no", "grpo.eval_on_start=false"]
COLLAPSE_ARMS = {
    "collapse": ["+recipe=collapse", "grpo.save_steps=0", *NO_EVAL],
    "collapse+rollback": ["+recipe=collapse", "monitor.on_collapse=rollback", *NO_EVAL],
    "stable": ["+recipe=collapse", "optimizer.lr=5e-4", "grpo.save_steps=0", *NO_EVAL],
}
# the held-out reward after the last step only, from 8 completions per held-out prompt (26 x 8)
DS = [
    "grpo.num_generations=4",
    "grpo.eval_on_start=false",
    "grpo.eval_steps=1000000",
    "grpo.num_generations_eval=8",
    "grpo.save_steps=0",
]
# extra generation rounds a step may take: enough that no step runs out on this task
DYNAMIC = ["grpo.dynamic_sampling=true", "grpo.max_sampling_rounds=10"]
BATCH = 8  # completions per step at num_generations=4 (2 prompts per step)
WINDOW = 10


def train(job: Path, overrides: list[str]) -> dict:
    """Run one job unless its folder holds a summary already; its summary and metrics rows."""
    if not (job / "summary.json").is_file():
        command = [sys.executable, "run.py", *COMMON, *overrides, f"hydra.run.dir={job}"]
        subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    summary = json.loads((job / "summary.json").read_text()) if (job / "summary.json").is_file() else {}
    lines = (job / "metrics.jsonl").read_text().splitlines() if (job / "metrics.jsonl").is_file() else []
    return {"summary": summary, "rows": [json.loads(line) for line in lines]}


def collapse_figures(result: dict) -> dict:
    rows = [r for r in result["rows"] if "reward" in r]
    rewards = [r["reward"] for r in rows]
    means = [statistics.fmean(rewards[i - WINDOW : i]) for i in range(WINDOW, len(rewards) + 1)]
    tenth = max(1, len(rewards) // 10)
    steps = [r["step"] for r in rows]
    return {
        "peak": max(means) if means else None,
        "last_tenth": statistics.fmean(rewards[-tenth:]) if rewards else None,
        "rollbacks": [(r["from_step"], r["to_step"], r["cause"]) for r in result["summary"].get("rollbacks", [])],
        "steps_once": steps == list(range(1, len(steps) + 1)),
        "status": result["summary"].get("status"),
    }


def collapse_part(out: Path, seeds: list[int], jobs: int, arms: list[str], extra: list[str]) -> dict:
    tasks = [(arm, seed) for arm in arms for seed in seeds]
    with ThreadPoolExecutor(jobs) as pool:
        done = pool.map(
            lambda t: train(out / f"{t[0]}_s{t[1]}", [*COLLAPSE_ARMS[t[0]], *extra, f"seed={t[1]}"]),
            tasks,
        )
        return {f"{arm}_s{seed}": collapse_figures(r) for (arm, seed), r in zip(tasks, done, strict=True)}


def ds_part(out: Path, seeds: list[int], jobs: int, steps: int) -> dict:
    def pair(seed: int) -> dict:
        dynamic = train(
            out / f"dynamic_s{seed}",
            [*DS, *DYNAMIC, f"grpo.max_steps={steps}", f"seed={seed}"],
        )
        made = sum(r.get("dynamic_sampling/completions", 0) for r in dynamic["rows"])
        plain = train(out / f"plain_s{seed}", [*DS, f"grpo.max_steps={round(made / BATCH)}", f"seed={seed}"])
        trained = [r["dynamic_sampling/trained_zero_std_share"] for r in dynamic["rows"] if "reward" in r]
        # alike groups that are not solved, as dynamic sampling counts them (a solved group is all alike too)
        plain_zero = [
            r["frac_reward_zero_std"] - r.get("frac_solved_groups", 0.0) for r in plain["rows"] if "reward" in r
        ]
        return {
            "dynamic": {
                "steps": steps,
                "completions": made,
                "eval": dynamic["summary"].get("final_eval_reward"),
                "trained_zero_std": statistics.fmean(trained) if trained else None,
                "dropped": statistics.fmean(
                    r["dynamic_sampling/dropped_share"] for r in dynamic["rows"] if "reward" in r
                ),
            },
            "plain": {
                "steps": round(made / BATCH),
                "completions": round(made / BATCH) * BATCH,
                "eval": plain["summary"].get("final_eval_reward"),
                "trained_zero_std": statistics.fmean(plain_zero) if plain_zero else None,
            },
        }

    with ThreadPoolExecutor(jobs) as pool:
        return dict(zip((f"s{s}" for s in seeds), pool.map(pair, seeds), strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    # collapse: 42 (the config's default seed, the one `python run.py +recipe=collapse` trains with)
    # and 1 2 3; dynamic: 1 2 3
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--part", choices=["collapse", "dynamic", "both"], default="both")
    parser.add_argument("--ds-steps", type=int, default=40)
    parser.add_argument(
        "--arms", nargs="+", choices=list(COLLAPSE_ARMS), default=list(COLLAPSE_ARMS), help="collapse arms to run"
    )
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="Hydra overrides added to every collapse arm (e.g. optimizer.lr=4.5e-3), to try a recipe's knobs",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    if args.part in ("collapse", "both"):
        results["collapse"] = collapse_part(args.out, args.seeds or [42, 1, 2, 3], args.jobs, args.arms, args.set)
    if args.part in ("dynamic", "both"):
        results["dynamic"] = ds_part(args.out, args.seeds or [1, 2, 3], args.jobs, args.ds_steps)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
