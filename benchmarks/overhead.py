"""What grpo-exp costs over TRL by hand: the framework and a plain TRL script, run alternately.

Each round runs, one after the other: ``run.py`` with ``logger=none``, ``run.py`` with W&B
offline (for each version measured), and ``trl_baseline.py`` (the same model, prompts, reward
and GRPOConfig); then the light paths, ``run.py --help`` / ``--cfg job`` beside a bare Hydra
app over the same conf/ tree.
Alternating (in reverse order every other round) spreads the machine's changing load over both
sides; medians are printed, with the load average before and after, and whether both sides
logged the same per-step rewards and loss.

Figures, as a Markdown table:

- whole process: wall time of the command, from start to exit;
- training loop: the trainer's ``train_runtime``;
- start to first logged step: until the first line of ``metrics.jsonl`` appears;
- ``--help`` and ``--cfg job``: wall time of the command.

Usage::

    .venv/bin/python benchmarks/overhead.py                       # 60 steps, 3 repeats
    .venv/bin/python benchmarks/overhead.py --steps 60 --repeats 5 --light-repeats 7
    .venv/bin/python benchmarks/overhead.py --before /tmp/old   # also an older checkout (git archive)
    .venv/bin/python benchmarks/overhead.py --repeats 0          # only --help / --cfg job
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

HERE = Path(__file__).resolve().parent
ROOT = harness.ROOT
TIMEOUT_S = 1800


def timed_run(command: list[str], cwd: Path, job: Path | None = None) -> dict[str, float]:
    """Wall time of ``python <command>``; with its ``job`` folder, also when the first line of its
    metrics.jsonl appeared, the train_runtime and every step's reward and loss."""
    until = harness.logged(job) if job is not None else None
    finished = harness.python(*command, cwd=cwd, env=harness.quiet_env(), until=until, timeout_s=TIMEOUT_S, check=True)
    figures = {"whole": finished.wall_s}
    if job is not None:
        rows = harness.Job(job).rows()
        figures["first_step"] = finished.reached_s if finished.reached_s is not None else finished.wall_s
        figures["train_runtime"] = float(next(r["train_runtime"] for r in rows if "train_runtime" in r))
        figures["rows"] = [(r["step"], r["reward"], r["loss"]) for r in rows if "reward" in r]
    return figures


def has_eval_split(root: Path) -> bool:
    """Whether the checkout at ``root`` knows ``dataset.eval_fraction`` (and checkpoints by default)."""
    return any("eval_fraction" in path.read_text(encoding="utf-8") for path in (root / "conf").rglob("*.yaml"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of the training runs")
    parser.add_argument("--light-repeats", type=int, default=5, help="alternating rounds of --help / --cfg job")
    parser.add_argument("--root", type=Path, default=ROOT, help="the grpo-exp checkout to measure")
    parser.add_argument("--before", type=Path, help="an older checkout, measured in the same rounds")
    args = parser.parse_args()
    versions = {"after": args.root.resolve(), **({"before": args.before.resolve()} if args.before else {})}
    model = harness.default_model(versions["after"])
    load_before = os.getloadavg()
    samples: dict[str, list[dict]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.repeats):
            runs: dict[str, tuple[Path, list[str]]] = {}
            for version, root in versions.items():
                # Like the baseline, no periodic checkpoints and no held-out evaluation: their cost is a
                # feature's, measured by benchmarks/checkpoints.py and eval_cost.py (a checkout older
                # than the held-out split has neither by default).
                plain = ["grpo.save_steps=0", "dataset.eval_fraction=0"] if has_eval_split(root) else []
                runs[f"{version}:framework"] = (root, ["run.py", "logger=none", *plain])
                runs[f"{version}:wandb"] = (root, ["run.py", "logger.mode=offline", *plain])
            runs["baseline"] = (ROOT, [str(HERE / "trl_baseline.py"), "--model", model])
            for name in list(runs) if n % 2 == 0 else reversed(runs):  # no side always goes first
                root, command = runs[name]
                out = Path(tmp, f"{name.replace(':', '-')}-{n}")
                if name == "baseline":
                    command = [*command, "--out", str(out), "--max-steps", str(args.steps)]
                else:
                    command = [*command, f"hydra.run.dir={out}", f"grpo.max_steps={args.steps}"]
                samples[name].append(timed_run(command, root, out))
                print(f"round {n + 1}/{args.repeats} {name}: {samples[name][-1]['whole']:.1f} s", file=sys.stderr)
        light = {"help": ["--help"], "cfg": ["--cfg", "job"]}
        for n in range(args.light_repeats):
            for key, flags in light.items():
                pair = [(f"{v}:{key}", root, ["run.py", *flags]) for v, root in versions.items()]
                pair.append((f"bare:{key}", ROOT, [str(HERE / "bare_hydra_app.py"), *flags]))
                for name, root, command in pair if n % 2 == 0 else reversed(pair):
                    samples[name].append(timed_run(command, root))
    load_after = os.getloadavg()

    def median(name: str, figure: str) -> float:
        return statistics.median(s[figure] for s in samples[name])

    print(f"CPUs: {os.cpu_count()}; load average (1/5/15 min) before: {_load(load_before)}, after: {_load(load_after)}")
    print(
        f"{args.steps} steps; medians of {args.repeats} alternating rounds ({args.light_repeats} for the light paths)"
    )
    for version, root in versions.items():
        print(f"\n{version}: {root}\n")
        print("| figure | grpo-exp (s) | compared with (s) | ratio | difference (s) |\n|---|---|---|---|---|")
        rows = [
            ("whole process vs plain TRL", (f"{version}:framework", "whole"), ("baseline", "whole")),
            ("training loop (train_runtime) vs plain TRL", (f"{version}:framework", "train_runtime"),
             ("baseline", "train_runtime")),
            ("start to first logged step vs plain TRL", (f"{version}:framework", "first_step"),
             ("baseline", "first_step")),
            ("W&B offline vs `logger=none`, whole process", (f"{version}:wandb", "whole"),
             (f"{version}:framework", "whole")),
            ("W&B offline vs `logger=none`, training loop", (f"{version}:wandb", "train_runtime"),
             (f"{version}:framework", "train_runtime")),
            ("`--help` vs a bare Hydra app", (f"{version}:help", "whole"), ("bare:help", "whole")),
            ("`--cfg job` vs a bare Hydra app", (f"{version}:cfg", "whole"), ("bare:cfg", "whole")),
        ]  # fmt: skip
        for label, ours, theirs in rows:
            if not samples[ours[0]] or not samples[theirs[0]]:
                continue  # a part left out with --repeats 0 or --light-repeats 0
            a, b = median(*ours), median(*theirs)
            print(f"| {label} | {a:.2f} | {b:.2f} | {a / b:.3f} | {a - b:+.2f} |")
        if args.repeats:
            pairs = zip(samples[f"{version}:framework"], samples["baseline"], strict=True)
            same = all(ours["rows"] == theirs["rows"] for ours, theirs in pairs)
            print(f"\nper-step rewards and loss identical to the plain TRL runs: {same}")


def _load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.2f}" for x in load)


if __name__ == "__main__":
    main()
