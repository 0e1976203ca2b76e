"""Snippets per second through ``grpo_exp.sandbox``, per isolation mode.

Two workloads, each snippet distinct (so the cache never helps) and graded against 3 asserts:

- ``trivial``: a correct one-line function;
- ``mix``: the same, except that a share of the snippets spin forever (``while True: pass``),
  so each of those holds a worker and a CPU until its snippet timeout.

Usage (prints a Markdown table)::

    .venv/bin/python benchmarks/sandbox_throughput.py                 # every mode that works here
    .venv/bin/python benchmarks/sandbox_throughput.py --modes bwrap --workers 2 4 --snippets 300
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes
from grpo_exp.sandbox.isolation import interpreter

TESTS = TestSpec.mbpp(["assert add(1, 2) == 3", "assert add(2, 3) == 5", "assert add(-1, 1) == 0"])
GOOD = "def add(a, b):\n    return a + b  # {n}\n"
SPIN = "def add(a, b):\n    while True:  # {n}\n        pass\n"
WARMUP_SNIPPETS = 4
BARE_STARTS = 30


def workload(kind: str, count: int, spin_share: float, tag: str) -> list[tuple[str, TestSpec]]:
    """``count`` distinct snippets; in ``mix`` every ``1/spin_share``-th one never returns."""
    every = round(1 / spin_share) if kind == "mix" and spin_share > 0 else 0
    return [((SPIN if every and n % every == every - 1 else GOOD).format(n=f"{tag}-{n}"), TESTS) for n in range(count)]


def measure(box: Sandbox, kind: str, count: int, spin_share: float, repeats: int) -> tuple[float, float]:
    """Median snippets/s over ``repeats`` runs, and the share of snippets that passed all tests."""
    rates, passed = [], 0.0
    for r in range(repeats):
        items = workload(kind, count, spin_share, f"{box.mode}-{box.workers}-{kind}-{r}-{time.time_ns()}")
        started = time.perf_counter()
        results = box.grade_many(items)
        rates.append(count / (time.perf_counter() - started))
        passed = sum(res.fraction == 1.0 for res in results) / count
    return statistics.median(rates), passed


def bare_interpreter_ms() -> float:
    """Cost of one fresh ``python -I -S`` doing nothing, started from this process."""
    started = time.perf_counter()
    for _ in range(BARE_STARTS):
        subprocess.run([interpreter(), "-I", "-S", "-c", "pass"], check=True)
    return (time.perf_counter() - started) / BARE_STARTS * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=None, help="default: every working mode, then none")
    parser.add_argument("--workers", nargs="+", type=int, default=[os.cpu_count() or 1])
    parser.add_argument("--snippets", type=int, default=200)
    parser.add_argument("--spin-share", type=float, default=0.1, help="share of spinning snippets in the mix")
    parser.add_argument("--timeout-s", type=float, default=1.0, help="per-snippet timeout for the mix")
    parser.add_argument("--test-timeout-s", type=float, default=0.5)
    parser.add_argument("--max-restarts", type=int, default=Limits.max_restarts)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-prestart", action="store_true", help="start each interpreter only when needed")
    args = parser.parse_args()
    modes = args.modes or [*available_modes(), "none"]
    limits = Limits(timeout_s=args.timeout_s, test_timeout_s=args.test_timeout_s, max_restarts=args.max_restarts)

    print(f"CPUs: {os.cpu_count()}; load average before: {os.getloadavg()[0]:.2f}; python: {interpreter()}")
    print(f"bare `python -I -S -c pass`: {bare_interpreter_ms():.1f} ms per start (sequential)\n")
    print(f"{args.snippets} snippets x 3 asserts, median of {args.repeats}; mix: {args.spin_share:.0%} spin until the")
    print(f"{args.timeout_s} s snippet timeout ({args.test_timeout_s} s per test, {args.max_restarts} restarts);")
    print(f"interpreters booted ahead: {'no' if args.no_prestart else 'yes'}\n")
    print("| isolation | workers | trivial (snippets/s) | mix (snippets/s) |")
    print("|---|---|---|---|")
    for mode in modes:
        for workers in args.workers:
            box = Sandbox(limits, isolation=mode, workers=workers, cache_size=0, prestart=not args.no_prestart)
            with box:
                box.grade_many(workload("trivial", WARMUP_SNIPPETS, 0, f"warmup-{mode}-{workers}"))
                trivial, ok = measure(box, "trivial", args.snippets, 0, args.repeats)
                assert ok == 1.0, f"{mode}: correct snippets failed"
                mix, ok = measure(box, "mix", args.snippets, args.spin_share, args.repeats)
                print(f"| {mode} | {workers} | {trivial:.1f} | {mix:.1f} (passed {ok:.0%}) |", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
