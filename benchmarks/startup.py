"""Start-up of a short job, this checkout against an older one, alternating: seconds to the first
logged step and to the end of a 2-step job (no checkpoints, no held-out split).

``overhead.py`` times 60-step jobs, whose run-to-run spread (1-2 s) hides a start-up change of a
few tenths; a 2-step job keeps the start-up and little else, so more rounds fit in the same time.

Usage::

    git archive <commit> | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    .venv/bin/python benchmarks/startup.py --before /tmp/before --rounds 4
    .venv/bin/python benchmarks/startup.py --before /tmp/before --logger wandb   # W&B offline
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLL_S = 0.02
STEPS = 2


def timed(root: Path, out: Path, logger: list[str]) -> tuple[float, float]:
    """Seconds to the first line of metrics.jsonl and to the process's exit."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", *logger, "grpo.save_steps=0", "dataset.eval_fraction=0"]
    command += [f"grpo.max_steps={STEPS}", "save_model=false", f"hydra.run.dir={out}"]
    metrics, first = out / "metrics.jsonl", None
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while process.poll() is None:
        if first is None and metrics.is_file() and metrics.stat().st_size:
            first = time.perf_counter() - start
        time.sleep(POLL_S)
    whole = time.perf_counter() - start
    if process.returncode:
        sys.exit(f"{root}: {' '.join(command)} failed:\n{process.stderr.read().decode()[-2000:]}")
    return first if first is not None else whole, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the older checkout")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--logger", choices=["none", "wandb"], default="none")
    args = parser.parse_args()
    logger = ["logger=none"] if args.logger == "none" else ["logger.mode=offline"]
    versions = {"before": args.before.resolve(), "after": ROOT}
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in versions}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            order = list(versions.items()) if n % 2 == 0 else list(reversed(versions.items()))
            for name, root in order:
                figures[name].append(timed(root, Path(tmp, f"{name}-{n}"), logger))
    print(f"{args.rounds} alternating rounds of a {STEPS}-step job, logger={args.logger}; medians (all rounds)")
    for name, rows in figures.items():
        first, whole = zip(*rows, strict=True)
        print(
            f"{name:6}  first step {statistics.median(first):.2f} s ({', '.join(f'{v:.2f}' for v in first)})  "
            f"whole {statistics.median(whole):.2f} s ({', '.join(f'{v:.2f}' for v in whole)})"
        )


if __name__ == "__main__":
    main()
