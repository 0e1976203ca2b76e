"""The collapse scenario without and with rollback, and dynamic sampling at equal generated completions.

Real GRPO on the tiny model through ``run.py`` (``logger=none``, one thread per job):

- ``collapse``: ``+recipe=collapse`` (10x the tiny model's learning rate, 120 steps), ``collapse+rollback``:
  the same with ``monitor.on_collapse=rollback``, and ``stable``: the recipe at the tiny model's own
  learning rate (5e-4); peak (best 10-step mean) and last-tenth training reward per seed, the rollbacks
  taken, and whether every step is in ``metrics.jsonl`` once. Seeds 42 (the default) 1 2 3 unless
  ``--seeds`` says otherwise; ``--set`` adds overrides to every collapse arm (a knob tried on the recipe).
- ``dynamic`` (``grpo.dynamic_sampling=true`` at ``grpo.num_generations=4``, ``--group-size``; up to 10
  extra generation rounds a step) for ``--ds-steps`` steps, then
  ``plain`` at the same group size for as many steps as the completions ``dynamic`` generated buy;
  the held-out reward after the last step (TRL's evaluation of ``dataset.eval_fraction``'s split),
  and the alike (zero-std) share of the groups trained on. ``--task`` picks the task: the default
  customer-service one, or ``math`` (``+recipe=math``: the tiny math model on the shipped word
  problems, where many groups score all 0 or all 0.2), at ``--group-size`` completions a group.

A job folder that already holds a summary is read, not run again (``--out`` keeps them); its name
says arm and seed only, so give each task, group size and budget an ``--out`` of its own.

Usage::

    .venv/bin/python benchmarks/stability.py --out /tmp/stability            # both parts (collapse: seeds 42 1 2 3)
    .venv/bin/python benchmarks/stability.py --out /tmp/stability --part collapse --jobs 2
    .venv/bin/python benchmarks/stability.py --out /tmp/ds-math --part dynamic --task math --ds-steps 40 --jobs 2
    .venv/bin/python benchmarks/stability.py --out /tmp/try --part collapse --arms collapse \
        --set optimizer.lr=4.5e-3                                          # a knob tried on the recipe
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

COMMON = ["logger=none", "threads=1", "save_model=false"]
NO_EVAL = ["grpo.eval_strategy=no", "grpo.eval_on_start=false"]
COLLAPSE_ARMS = {
    "collapse": ["+recipe=collapse", "grpo.save_steps=0", *NO_EVAL],
    "collapse+rollback": ["+recipe=collapse", "monitor.on_collapse=rollback", *NO_EVAL],
    "stable": ["+recipe=collapse", "optimizer.lr=5e-4", "grpo.save_steps=0", *NO_EVAL],
}
# the held-out reward after the last step only, from 8 completions per held-out prompt (customer
# service: 26 x 8; math: 10 x 8)
DS = [
    "grpo.eval_on_start=false",
    "grpo.eval_steps=1000000",
    "grpo.num_generations_eval=8",
    "grpo.save_steps=0",
]
# extra generation rounds a step may take: no step runs out in 40 steps on either task, but late in
# a 100-step customer-service run, with most prompts solved, some do (benchmarks/stability.md)
ROUNDS = 10
DYNAMIC = ["grpo.dynamic_sampling=true", f"grpo.max_sampling_rounds={ROUNDS}"]
PROMPTS_PER_STEP = 2  # conf/grpo/default.yaml's grpo.prompts_per_step: a step is 2 groups
TASKS = {"customer_service": [], "math": ["+recipe=math"]}
WINDOW = 10
EARLY = 10  # the first steps, where alike groups are most common: their shares are given apart too


def train(job: Path, overrides: list[str]) -> dict:
    """Run one job unless its folder holds a summary already; its summary and metrics rows."""
    if not harness.Job(job).summary():
        harness.run_py(*COMMON, *overrides, job=job)  # a failed job is read as it is: its summary says how
    return {"summary": harness.Job(job).summary(), "rows": harness.Job(job).rows()}


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


def ds_part(out: Path, seeds: list[int], jobs: int, steps: int, task: str = "customer_service", group: int = 4) -> dict:
    batch = group * PROMPTS_PER_STEP  # completions per step
    common = [*TASKS[task], *DS, f"grpo.num_generations={group}"]

    def pair(seed: int) -> dict:
        dynamic = train(out / f"dynamic_s{seed}", [*common, *DYNAMIC, f"grpo.max_steps={steps}", f"seed={seed}"])
        made = sum(r.get("dynamic_sampling/completions", 0) for r in dynamic["rows"])
        plain_steps = round(made / batch)
        plain = train(out / f"plain_s{seed}", [*common, f"grpo.max_steps={plain_steps}", f"seed={seed}"])
        trained_rows = [r for r in dynamic["rows"] if "reward" in r]
        plain_rows = [r for r in plain["rows"] if "reward" in r]
        # alike share: every alike group, solved or not, as dynamic sampling drops them (TRL's frac_reward_zero_std)
        return {
            "dynamic": {
                "steps": steps,
                "completions": made,
                "eval": dynamic["summary"].get("final_eval_reward"),
                "eval_parts": dynamic["summary"].get("eval_parts"),
                "trained_zero_std": _mean(r["dynamic_sampling/trained_zero_std_share"] for r in trained_rows),
                "dropped": _dropped(trained_rows),
                "rounds": _mean(r["dynamic_sampling/rounds"] for r in trained_rows),
                # a step ran out when its extra rounds were spent and dropped groups filled the batch
                "ran_out_steps": sum(
                    1
                    for r in trained_rows
                    if r["dynamic_sampling/rounds"] >= ROUNDS and r["dynamic_sampling/trained_zero_std_share"] > 0
                ),
                "train_reward": _mean(r["reward"] for r in trained_rows),
                "dropped_first": _dropped(trained_rows[:EARLY]),
            },
            "plain": {
                "steps": plain_steps,
                "completions": plain_steps * batch,
                "eval": plain["summary"].get("final_eval_reward"),
                "eval_parts": plain["summary"].get("eval_parts"),
                "trained_zero_std": _mean(r["frac_reward_zero_std"] for r in plain_rows),
                "trained_solved_groups": _mean(r.get("frac_solved_groups", 0.0) for r in plain_rows),
                "train_reward": _mean(r["reward"] for r in plain_rows),
                "trained_zero_std_first": _mean(r["frac_reward_zero_std"] for r in plain_rows[:EARLY]),
            },
        }

    with ThreadPoolExecutor(jobs) as pool:
        results = dict(zip((f"s{s}" for s in seeds), pool.map(pair, seeds), strict=True))
    spread = {}
    for arm in ("dynamic", "plain"):
        held_out = [r[arm]["eval"] for r in results.values() if r[arm]["eval"] is not None]
        if len(held_out) > 1:
            spread[f"{arm}_eval_mean_std"] = [statistics.fmean(held_out), statistics.stdev(held_out)]
    return {**results, **spread}


def _dropped(rows: list[dict]) -> float | None:
    """The dropped share of every group the rows' steps generated (a step's share weighed by its groups)."""
    made = sum(r["dynamic_sampling/completions"] for r in rows)
    if not made:
        return None
    return sum(r["dynamic_sampling/dropped_share"] * r["dynamic_sampling/completions"] for r in rows) / made


def _mean(values) -> float | None:
    values = list(values)
    return statistics.fmean(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    # collapse: 42 (the config's default seed, the one `python run.py +recipe=collapse` trains with)
    # and 1 2 3; dynamic: 1 2 3
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--part", choices=["collapse", "dynamic", "both"], default="both")
    parser.add_argument("--ds-steps", type=int, default=40)
    parser.add_argument("--task", choices=sorted(TASKS), default="customer_service", help="dynamic part's task")
    parser.add_argument("--group-size", type=int, default=4, help="dynamic part's grpo.num_generations")
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
        results["dynamic"] = ds_part(
            args.out, args.seeds or [1, 2, 3], args.jobs, args.ds_steps, args.task, args.group_size
        )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
