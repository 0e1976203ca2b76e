"""Does the support agent learn to call its tools? ``+recipe=support_agent`` on the embedded model, per seed.

For each seed, one run as docs/rewards.md gives it (``python run.py +recipe=support_agent``, no W&B), and
from its held-out evaluations (24 requests the trainer never sees, 8 rollouts each): the share of
rollouts whose first call is the right tool with valid arguments (``tool_call``) and whose final
reply states what the tool returned (``answer``), before the first step and after the last; plus
TRL's tool calls per rollout and the share of them that failed over the last tenth of steps.

Usage::

    .venv/bin/python benchmarks/agent.py              # seeds 42 and 43
    .venv/bin/python benchmarks/agent.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

PARTS = ("tool_call", "answer")


def run(seed: int, out: Path) -> tuple[dict, list[dict], float]:
    job = harness.run_job("+recipe=support_agent", "logger=none", f"seed={seed}", job=out, check=True)
    return job.summary(), job.evaluations(), job.finished.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    args = parser.parse_args()
    print("| seed | held-out right call: start -> end | held-out fact stated: start -> end | "
          "calls per rollout | failed calls | minutes |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    gains = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            summary, evals, seconds = run(seed, Path(tmp, str(seed)))
            first, last = evals[0], evals[-1]
            cells = [f"{first[f'eval/rewards/{p}/mean']:.2f} -> {last[f'eval/rewards/{p}/mean']:.2f}" for p in PARTS]
            gains.append(last["eval/rewards/tool_call/mean"] - first["eval/rewards/tool_call/mean"])
            print(f"| {seed} | {' | '.join(cells)} | {summary['tool_call_frequency']:.2f} | "
                  f"{summary['tool_failure_frequency']:.0%} | {seconds / 60:.1f} |")  # fmt: skip
    print(f"\nheld-out right-call gain: {', '.join(f'{g:+.2f}' for g in gains)} (target: +0.30 each)")


if __name__ == "__main__":
    main()
