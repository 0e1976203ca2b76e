"""Start-up of a short job: a 1-step ``run.py`` against plain TRL with the same settings, or this checkout
against an older one; alternated pairs, so the machine's changing load falls on both sides alike.

- ``--against trl`` (the default): ``python run.py grpo.max_steps=1 logger=none save_model=false
  grpo.save_steps=0 dataset.eval_fraction=0`` against ``trl_baseline.py --max-steps 1 --no-save``
  (the same cached tiny model, prompts, reward and GRPOConfig: the script a TRL user would write).
  A 1-step job is start-up and one step, so the ratio is what the framework adds before training.
  Printed per pair: wall time and CPU time (user + system, the process and its children) of each
  side and their ratio, the load average; then the median ratio over the pairs.
- ``--before DIR``: this checkout against an older one (``git archive <commit>``), 2-step jobs:
  seconds to the first logged step and to the end.

Usage::

    .venv/bin/python benchmarks/startup.py --pairs 5                 # run.py against plain TRL, 1 step
    .venv/bin/python benchmarks/startup.py --pairs 5 --threads 1     # one torch thread each: steadier when shared
    git archive <commit> | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    .venv/bin/python benchmarks/startup.py --before /tmp/before --pairs 4
    .venv/bin/python benchmarks/startup.py --before /tmp/before --logger wandb   # W&B offline
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

HERE = Path(__file__).resolve().parent
PLAIN = ["grpo.save_steps=0", "dataset.eval_fraction=0", "save_model=false"]  # as the baseline: no extras


def timed_run_py(root: Path, job: Path, steps: int, logger: list[str], env: dict[str, str]) -> harness.Finished:
    overrides = [*logger, *PLAIN, f"grpo.max_steps={steps}"]
    finished = harness.run_py(*overrides, job=job, root=root, env=env, until=harness.logged(job))
    return finished if finished.ok else sys.exit(finished.failure())


def timed_baseline(model: str, out: Path, steps: int, env: dict[str, str]) -> harness.Finished:
    script = [HERE / "trl_baseline.py", "--model", model, "--out", out, "--max-steps", str(steps), "--no-save"]
    finished = harness.python(*script, env=env, until=harness.logged(out))
    return finished if finished.ok else sys.exit(finished.failure())


def against_trl(pairs: int, work: Path, env: dict[str, str]) -> None:
    model = harness.default_model()
    threads = env.get("OMP_NUM_THREADS", "torch's default")
    print(f"{pairs} alternated pairs of a 1-step job, torch threads: {threads}; "
          f"load average (1/5/15 min) before: {harness.load_average()}")  # fmt: skip
    print("| pair | order | run.py wall s | plain TRL wall s | ratio | run.py CPU s | plain TRL CPU s | CPU ratio "
          "| first step s (run.py / TRL) | load after |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    ratios, cpu_ratios = [], []
    for n in range(pairs):
        sides = {
            "run.py": lambda n=n: timed_run_py(harness.ROOT, work / f"ours-{n}", 1, ["logger=none"], env),
            "TRL": lambda n=n: timed_baseline(model, work / f"trl-{n}", 1, env),
        }
        order = list(sides) if n % 2 == 0 else list(reversed(sides))
        done = {name: sides[name]() for name in order}
        ours, theirs = done["run.py"], done["TRL"]
        ratios.append(ours.wall_s / theirs.wall_s)
        cpu_ratios.append(ours.cpu_s / theirs.cpu_s)
        print(
            f"| {n + 1} | {' first, '.join(order)} second | {ours.wall_s:.2f} | {theirs.wall_s:.2f} | {ratios[-1]:.3f} "
            f"| {ours.cpu_s:.2f} | {theirs.cpu_s:.2f} | {cpu_ratios[-1]:.3f} "
            f"| {ours.reached_s:.2f} / {theirs.reached_s:.2f} | {harness.load_average()} |",
            flush=True,
        )
    print(f"\nmedian ratio, wall: {statistics.median(ratios):.3f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)})")
    print(f"median ratio, CPU:  {statistics.median(cpu_ratios):.3f}")


def against_before(before: Path, pairs: int, logger_name: str, work: Path, env: dict[str, str]) -> None:
    logger = ["logger=none"] if logger_name == "none" else ["logger.mode=offline"]
    versions = {"before": before.resolve(), "after": harness.ROOT}
    figures: dict[str, list[harness.Finished]] = {name: [] for name in versions}
    for n in range(pairs):
        order = list(versions.items()) if n % 2 == 0 else list(reversed(versions.items()))
        for name, root in order:
            figures[name].append(timed_run_py(root, work / f"{name}-{n}", 2, logger, env))
    print(f"{pairs} alternating rounds of a 2-step job, logger={logger_name}; medians (all rounds)")
    for name, rows in figures.items():
        first = [r.reached_s if r.reached_s is not None else r.wall_s for r in rows]
        whole, cpu = [r.wall_s for r in rows], [r.cpu_s for r in rows]
        print(
            f"{name:6}  first step {statistics.median(first):.2f} s ({', '.join(f'{v:.2f}' for v in first)})  "
            f"whole {statistics.median(whole):.2f} s ({', '.join(f'{v:.2f}' for v in whole)})  "
            f"CPU {statistics.median(cpu):.2f} s ({', '.join(f'{v:.2f}' for v in cpu)})"
        )
    print(f"load average after: {harness.load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="an older checkout: compare 2-step jobs with it instead of TRL")
    parser.add_argument("--pairs", "--rounds", type=int, default=5, help="alternated pairs (default 5)")
    parser.add_argument("--logger", choices=["none", "wandb"], default="none", help="with --before: the tracker")
    parser.add_argument(
        "--threads", type=int, help="OMP_NUM_THREADS for both sides (steadier on a shared machine; default: unset)"
    )
    args = parser.parse_args()
    env = harness.quiet_env(**({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}))
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            against_before(args.before, args.pairs, args.logger, Path(tmp), env)
        else:
            against_trl(args.pairs, Path(tmp), env)


if __name__ == "__main__":
    main()
