"""How often the sweep report's decision over seeds is right, on simulated seeds (no training).

Two configurations, n seeds each, their objective drawn per seed: identical configurations (A/A) must be
"can't be told apart", a truly better one must be the "clear best". For each seed count the script runs
the report's own decision (``grpo_exp.report.decision.decide`` with ``sweep.verdict``'s defaults, but
``enough_seeds`` lowered to 2 so that every count is judged on its intervals) and counts:

- A/A: how often the two 95 % intervals come apart (a false "clear best");
- lift: how often a configuration whose draws are ``lift`` higher is the clear best.

Two seed distributions: ``normal`` (0.75, sd 0.1) and ``tiny`` (the same with 15 % of seeds collapsed to
0.35, sd 0.1, as the tiny model's held-out reward sometimes does); values are clipped to [0, 1].

Usage::

    .venv/bin/python benchmarks/seed_verdicts.py                      # 3 to 8 seeds, 1000 repetitions each
    .venv/bin/python benchmarks/seed_verdicts.py --seeds 4 --repetitions 200 --lifts 0.1 0.3
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_exp.config.schema import VerdictSettings  # noqa: E402
from grpo_exp.report.decision import Outcome, decide  # noqa: E402

CENTRE, SPREAD = 0.75, 0.1
COLLAPSED, COLLAPSE_SHARE = 0.35, 0.15


def draw(rng, n: int, kind: str, lift: float = 0.0) -> list[float]:
    """n seeds' objective from the ``kind`` distribution, lifted by ``lift``, clipped to [0, 1]."""
    values = []
    for _ in range(n):
        collapsed = kind == "tiny" and rng.random() < COLLAPSE_SHARE
        values.append(min(1.0, max(0.0, rng.normal(COLLAPSED if collapsed else CENTRE, SPREAD) + lift)))
    return values


def rate(rng, n: int, kind: str, lift: float, repetitions: int, settings: VerdictSettings) -> float:
    """The share of repetitions whose decision is "clear best" (for lift > 0: the lifted configuration)."""
    hits = 0
    for _ in range(repetitions):
        decision = decide({"a": draw(rng, n, kind), "b": draw(rng, n, kind, lift)}, True, settings)
        hits += decision.outcome == Outcome.clear_best and (lift == 0 or decision.leader.label == "b")
    return hits / repetitions


def main() -> None:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5, 6, 8])
    parser.add_argument("--repetitions", type=int, default=1000)
    parser.add_argument("--lifts", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    parser.add_argument("--kinds", nargs="+", default=["normal", "tiny"])
    args = parser.parse_args()
    settings = dataclasses.replace(VerdictSettings(), enough_seeds=2)
    rng = np.random.default_rng(2026)
    started = time.perf_counter()
    header = ["distribution", "seeds", "A/A: intervals apart", *(f"lift {lift:g}: clear best" for lift in args.lifts)]
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join(["---"] * len(header)) + " |")
    for kind in args.kinds:
        for n in args.seeds:
            cells = [rate(rng, n, kind, lift, args.repetitions, settings) for lift in (0.0, *args.lifts)]
            print(f"| {kind} | {n} | " + " | ".join(f"{c:.1%}" for c in cells) + " |", flush=True)
    print(f"\n{args.repetitions} repetitions per cell, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
