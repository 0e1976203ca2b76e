"""Adaptive group size against fixed groups of 4, 6 and 8 at the same number of generated completions.

Every arm trains the tiny model on the customer-service prompts (real GRPO through ``run.py``,
``logger=none``) with ``grpo.hold_fixed=completions``: each step generates the same number of
completions whatever the group size, so a budget of completions is a number of steps. The adaptive
arm's profiles generate completions too; they are charged to its budget, so it trains fewer steps.
Afterwards every final model answers the held-out prompts (``dataset.eval_fraction``'s split, which no
run trained on) ``--eval-samples`` times each, scored by the same reward; the table gives that
held-out reward as mean ± std over the seeds, with the final training reward and TRL's own final
held-out evaluation beside it.

Usage::

    .venv/bin/python benchmarks/adaptive_group_size.py                          # 4 arms x seeds 42 43 44
    .venv/bin/python benchmarks/adaptive_group_size.py --steps 40 --seeds 42 --jobs 1
    .venv/bin/python benchmarks/adaptive_group_size.py --tabulate runs.json      # an earlier --json
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

FIXED = (4, 6, 8)
# Shared by every arm: whole groups of 4, 6, 8 and 12 fit 24 completions.
# TRL's own held-out evaluation runs once, after the last step (a cross-check of ours, with fewer samples).
COMMON = ["logger=none", "grpo.hold_fixed=completions", "grpo.eval_steps=1000000", "grpo.eval_on_start=false"]


def adaptive_steps(budget: int, per_step: int, interval: int, profile_cost: int) -> int:
    """The most steps whose completions plus one profile per started stage fit ``budget``."""
    steps = budget // per_step
    while steps > 0 and steps * per_step + math.ceil(steps / interval) * profile_cost > budget:
        steps -= 1
    return steps


def arms(args: argparse.Namespace) -> dict[str, list[str]]:
    """Arm name -> its overrides."""
    per_step = ["grpo.completions_per_step=" + str(args.per_step)]
    adaptive = [
        "adaptive.enabled=true",
        f"adaptive.interval={args.interval}",
        f"adaptive.profile_prompts={args.profile_prompts}",
        f"adaptive.samples_per_prompt={args.profile_samples}",
        f"adaptive.max_generations={args.max_group}",
    ]
    cost = args.profile_prompts * args.profile_samples
    steps = adaptive_steps(args.steps * args.per_step, args.per_step, args.interval, cost)
    table = {f"fixed {g}": [*per_step, f"grpo.num_generations={g}", f"grpo.max_steps={args.steps}"] for g in FIXED}
    table["adaptive"] = [*per_step, *adaptive, f"grpo.max_steps={steps}"]
    return table


def run_one(name: str, overrides: list[str], seed: int, workdir: Path, threads: int, samples: int) -> dict:
    out = workdir / f"{name.replace(' ', '')}-{seed}"
    done = harness.Job(out).summary()
    if done.get("status") == "completed":  # kept from an earlier call
        return {"arm": name, "seed": seed, "folder": str(out), "wall_s": done["wall_time_s"]}
    job = harness.run_job(*COMMON, *overrides, f"seed={seed}", f"threads={threads}", job=out, check=True)
    # Scored at once, in its own process (one thread like the run), while other runs still train.
    score = [__file__, "--score", out, "--seeds", str(seed), "--eval-samples", str(samples)]
    harness.python(*score, env={**os.environ, "OMP_NUM_THREADS": str(threads)}, check=True)
    return {"arm": name, "seed": seed, "folder": str(out), "wall_s": job.finished.wall_s}


def score_held_out(folder: Path, model_path: str | None, seed: int, samples: int) -> tuple[float, int]:
    """Mean reward of ``samples`` completions per held-out prompt from a model (default: the run's final one)."""
    import torch

    from grpo_exp import dataset, models
    from grpo_exp.job.resume import recorded_settings
    from grpo_exp.rewards.compose import build_rewards
    from grpo_exp.training.profile import Sampler

    settings = recorded_settings(folder)
    rewards, weights = build_rewards(settings.reward)
    model, tokenizer = models.load(settings.model, model_path or str(folder / "model"))
    held_out = dataset.load_splits(settings.dataset, tokenizer)[1]
    torch.manual_seed(seed)
    sampler = Sampler(model, tokenizer, rewards, weights, settings.grpo, batch=64)
    scores = sampler.scores(list(held_out), samples, step=settings.grpo.max_steps)
    return sum(map(sum, scores)) / sum(map(len, scores)), len(held_out)


def untrained(run: dict, samples: int) -> dict:
    """The same measurement for the model every arm starts from."""
    from grpo_exp import models
    from grpo_exp.job.resume import recorded_settings

    folder = Path(run["folder"])
    start = models.model_path(recorded_settings(folder).model)
    reward, _ = score_held_out(folder, start, run["seed"], samples)
    return {"arm": "untrained", "seed": run["seed"], "held_out": reward, "steps": 0, "completions": 0, "groups": []}


def held_out_reward(run: dict, samples: int) -> None:
    """Score the run's final model on the held-out prompts; adds its figures to ``run``.

    The score is kept in the job folder (``held_out.json``), so a second call reuses it."""
    from grpo_exp.job.resume import recorded_settings

    folder = Path(run["folder"])
    cache = folder / f"held_out_{samples}.json"
    if not cache.is_file():
        cache.write_text(json.dumps(score_held_out(folder, None, run["seed"], samples)))
    reward, prompts = json.loads(cache.read_text())
    job = harness.Job(folder)
    summary, rows, logged = job.summary(), job.steps(), job.rows()
    profiles = [row for row in logged if "adaptive/num_generations" in row]
    trained = recorded_settings(folder).grpo.completions_per_step * summary["steps"]
    profiled = profiles[-1]["adaptive/profile_completions"] if profiles else 0
    run.update(
        held_out=reward,
        held_out_prompts=prompts,
        final_reward=summary["final_reward"],
        trl_final_eval=summary.get("final_eval_reward"),
        steps=summary["steps"],
        completions=trained + profiled,
        groups=[int(p["adaptive/num_generations"]) for p in profiles],
        dropped=[int(p["adaptive/dropped_prompts"]) for p in profiles],
        train_s=summary["wall_time_s"],
        logged_steps=len(rows),
    )


def spread(values: list[float], digits: int = 3) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    mean = f"{statistics.mean(values):.{digits}f}"
    return f"{mean} ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else mean


def table(runs: list[dict]) -> None:
    print(f"seeds {' '.join(sorted({str(r['seed']) for r in runs}))}: mean ± std over seeds\n")
    print("| arm | steps | completions generated | held-out reward | final training reward | TRL final eval | "
          "group sizes per stage | run s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for arm in dict.fromkeys(r["arm"] for r in runs):
        mine = [r for r in runs if r["arm"] == arm]
        groups = "; ".join("-".join(map(str, r["groups"])) for r in mine) if mine[0]["groups"] else arm.split()[-1]
        cells = [spread([r.get(k) for r in mine]) for k in ("held_out", "final_reward", "trl_final_eval")]
        print(f"| {arm} | {mine[0]['steps']} | {mine[0]['completions']} | {' | '.join(cells)} | "
              f"{groups} | {spread([r.get('wall_s') for r in mine], 0)} |")  # fmt: skip
    print(f"\nheld-out prompts: {max(r.get('held_out_prompts', 0) for r in runs)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=80, help="steps of the fixed arms (the budget / per step)")
    parser.add_argument("--per-step", type=int, default=24, help="completions per step, every arm")
    parser.add_argument("--interval", type=int, default=25, help="adaptive: steps per stage")
    parser.add_argument("--profile-prompts", type=int, default=16, help="adaptive: prompts per profile")
    parser.add_argument("--profile-samples", type=int, default=4, help="adaptive: completions per profiled prompt")
    parser.add_argument("--max-group", type=int, default=12, help="adaptive: largest group size")
    parser.add_argument("--eval-samples", type=int, default=8, help="completions per held-out prompt")
    parser.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side (each on threads=cores/jobs)")
    parser.add_argument("--json", type=Path, help="also write every run's figures to this file")
    parser.add_argument(
        "--keep", type=Path, help="keep the job folders here (default: a temporary folder); completed ones are reused"
    )
    parser.add_argument("--tabulate", type=Path, help="only tabulate an earlier --json file")
    parser.add_argument("--score", type=Path, help="only score this job folder's model on the held-out prompts")
    args = parser.parse_args()
    if args.score:
        held_out_reward({"folder": str(args.score), "seed": args.seeds[0]}, args.eval_samples)
        return
    if args.tabulate:
        table(json.loads(args.tabulate.read_text()))
        return
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    print(f"CPUs: {os.cpu_count()}; {args.jobs} runs at a time; load average before: {os.getloadavg()[0]:.2f}")
    # Seed by seed, so a benchmark cut short still compares every arm on the seeds it finished.
    jobs = [(name, overrides, seed) for seed in args.seeds for name, overrides in arms(args).items()]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(lambda job: run_one(*job, workdir, threads, args.eval_samples), jobs))
        print(f"load average after training: {os.getloadavg()[0]:.2f}\n")
        for run in runs:
            held_out_reward(run, args.eval_samples)
        first = {run["seed"]: run for run in runs}.values()
        runs = [untrained(run, args.eval_samples) for run in first] + runs
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2) + "\n")
    table(runs)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
