"""Snippets per second through ``grpo_exp.sandbox``: fork server against fresh interpreters, and per-test limits.

First HumanEval's 164 problems (``benchmarks/data/humaneval``, OpenAI's MIT-licensed release):
the reference solutions, then stubs (the prompt's signature with ``pass``), each timed as one
batch, graded with 2 workers by a fork server and by a fresh interpreter per snippet,
alternately, ``--repeats`` times each, so both see the same machine load. Every reference must
score full marks and no stub may, in every run.

Then two workloads, each snippet distinct (so the cache never helps) and graded against 3 asserts of a
problem that has a reference solution:

- ``trivial``: a correct one-line function;
- ``mix``: the same, except that a share of the snippets spin forever (``while True: pass``),
  so each of those holds a worker and a CPU until its time limits end it.

Each is run with the configured per-test limit (``configured``) and with the limit derived from
the reference solution's measured time (``from reference``: ``--multiple`` times its slowest
test, at least ``--floor-s``), alternately, so both see the same machine load. Then every
reference solution of the shipped problems (``grpo_exp/data/code_generation.jsonl``) is graded as
a candidate under the derived limits: the held-in check, which must pass them all.

Usage (prints Markdown tables)::

    .venv/bin/python benchmarks/sandbox_throughput.py                 # the best mode, 2 workers
    .venv/bin/python benchmarks/sandbox_throughput.py --modes bwrap unshare none --workers 2 4
    .venv/bin/python benchmarks/sandbox_throughput.py --part humaneval --repeats 5   # the fork server alone
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "grpo_exp" / "data" / "code_generation.jsonl"
HUMANEVAL = ROOT / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz"
STUB_BODY = "    pass\n"
KINDS = {"reference": True, "stub": False}  # candidate kind: whether it must score full marks
REFERENCE = "def add(a, b):\n    return a + b\n"
TESTS = TestSpec.mbpp(
    ["assert add(1, 2) == 3", "assert add(2, 3) == 5", "assert add(-1, 1) == 0"], entry_point="add", reference=REFERENCE
)
GOOD = "def add(a, b):\n    return a + b  # {n}\n"
SPIN = "def add(a, b):\n    while True:  # {n}\n        pass\n"
WARMUP_SNIPPETS = 4


def workload(kind: str, count: int, spin_share: float, tag: str) -> list[tuple[str, TestSpec]]:
    """``count`` distinct snippets; in ``mix`` every ``1/spin_share``-th one never returns."""
    every = round(1 / spin_share) if kind == "mix" and spin_share > 0 else 0
    return [((SPIN if every and n % every == every - 1 else GOOD).format(n=f"{tag}-{n}"), TESTS) for n in range(count)]


def rate(box: Sandbox, kind: str, count: int, spin_share: float) -> tuple[float, float]:
    """Snippets/s of one run, and the share of snippets that passed all tests."""
    items = workload(kind, count, spin_share, f"{box.mode}-{box.workers}-{kind}-{time.time_ns()}")
    started = time.perf_counter()
    results = box.grade_many(items)
    elapsed = time.perf_counter() - started
    return count / elapsed, sum(r.fraction == 1.0 for r in results) / count


def held_in(box: Sandbox) -> tuple[int, int, float]:
    """Shipped reference solutions that pass under ``box``'s limits, of those with tests; slowest s."""
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines() if line.strip()]
    items = []
    for row in rows:
        spec = TestSpec.from_row(
            row["test_list"], row["test"], row["entry_point"], row["test_setup_code"], reference=row["reference"]
        )
        if spec is not None:
            items.append((row["reference"] + "\n# as a candidate\n", spec))
    results = box.grade_many(items)
    passed = sum(r is not None and r.fraction == 1.0 for r in results)
    return passed, len(items), max(r.wall_s for r in results if r is not None)


def humaneval(kind: str, tag: str) -> list[tuple[str, TestSpec]]:
    """HumanEval's problems with each reference solution (``kind="reference"``) or a stub as the candidate."""
    with gzip.open(HUMANEVAL, "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    items = []
    for row in rows:
        body = row["canonical_solution"] if kind == "reference" else STUB_BODY
        spec = TestSpec.humaneval(row["test"], row["entry_point"], prompt=row["prompt"])
        items.append((f"{row['prompt']}{body}\n# {tag}\n", spec))  # the tag: no result is cached
    return items


def fork_server_against_fresh(workers: int, repeats: int, limits: Limits) -> None:
    """HumanEval's references and stubs, timed apart, fork server and fresh interpreters alternating."""
    mode = "bwrap"
    boxes = {fork: Sandbox(limits, isolation=mode, workers=workers, cache_size=0, fork_server=fork)
             for fork in (True, False)}  # fmt: skip
    rates: dict[tuple[bool, str], list[float]] = {(fork, kind): [] for fork in boxes for kind in KINDS}
    for fork, box in boxes.items():  # untimed: every problem's tests compiled once, as in training
        box.grade_many(humaneval("reference", f"warm-up {fork}"))
    for n in range(repeats):
        for fork in (True, False) if n % 2 == 0 else (False, True):
            for kind, full_marks in KINDS.items():
                items = humaneval(kind, f"{fork}-{n}")
                started = time.perf_counter()
                results = boxes[fork].grade_many(items)
                rates[fork, kind].append(len(items) / (time.perf_counter() - started))
                scored = sum(r is not None and r.fraction == 1.0 for r in results)
                assert scored == (len(items) if full_marks else 0), f"fork_server={fork}: {scored} {kind}s full marks"
    print(f"HumanEval: {len(items)} problems; every reference solution scores full marks and no stub does,")
    print(f"in every run. {workers} workers, {mode}, {repeats} runs each, alternating; median (runs)\n")
    print("| sandbox | references/s | stubs/s |")
    print("|---|---|---|")
    for name, fork in (("fork server", True), ("fresh interpreter per program", False)):
        cells = [f"{statistics.median(rates[fork, k]):.1f} ({', '.join(f'{r:.0f}' for r in rates[fork, k])})"
                 for k in KINDS]  # fmt: skip
        print(f"| {name} | {' | '.join(cells)} |")
    speedups = [statistics.median(rates[True, k]) / statistics.median(rates[False, k]) for k in KINDS]
    print(f"\nspeed-up: {speedups[0]:.1f}x on references, {speedups[1]:.1f}x on stubs\n", flush=True)
    for box in boxes.values():
        box.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", default=None, help="default: the strongest working mode")
    parser.add_argument("--workers", nargs="+", type=int, default=[2])
    parser.add_argument("--snippets", type=int, default=100)
    parser.add_argument("--spin-share", type=float, default=0.1, help="share of spinning snippets in the mix")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="per snippet (conf/reward/code_generation)")
    parser.add_argument("--test-timeout-s", type=float, default=2.0, help="configured per-test limit")
    parser.add_argument("--multiple", type=float, default=10.0, help="reference_time_multiple")
    parser.add_argument("--floor-s", type=float, default=0.25, help="min_test_timeout_s")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=["all", "humaneval", "limits"], default="all")
    args = parser.parse_args()
    modes = args.modes or (available_modes() or ["none"])[:1]
    configured = Limits(timeout_s=args.timeout_s, test_timeout_s=args.test_timeout_s)
    derived = dataclasses.replace(configured, reference_time_multiple=args.multiple, min_test_timeout_s=args.floor_s)

    print(f"CPUs: {os.cpu_count()}; load average before: {os.getloadavg()[0]:.2f}")
    if args.part in ("all", "humaneval"):
        fork_server_against_fresh(args.workers[0], args.repeats, configured)
    if args.part == "humaneval":
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return
    print(f"{args.snippets} snippets x 3 asserts, median of {args.repeats} runs (settings alternating);")
    print(f"mix: {args.spin_share:.0%} spin; timeout_s={args.timeout_s}, test_timeout_s={args.test_timeout_s},")
    print(f"from reference: {args.multiple:g} x the reference's slowest test, at least {args.floor_s} s\n")
    print("| isolation | workers | per-test limit | trivial (snippets/s) | mix (snippets/s) |")
    print("|---|---|---|---|---|")
    for mode in modes:
        for workers in args.workers:
            boxes = {name: Sandbox(limits, isolation=mode, workers=workers, cache_size=0)
                     for name, limits in (("configured", configured), ("from reference", derived))}  # fmt: skip
            figures: dict[str, dict[str, list[float]]] = {name: {"trivial": [], "mix": []} for name in boxes}
            for box in boxes.values():
                box.grade_many(workload("trivial", WARMUP_SNIPPETS, 0, f"warmup-{mode}-{workers}"))
            for _ in range(args.repeats):
                for kind in ("trivial", "mix"):
                    for name, box in boxes.items():
                        speed, ok = rate(box, kind, args.snippets, args.spin_share if kind == "mix" else 0)
                        assert ok == 1.0 or kind == "mix", f"{mode}: correct snippets failed"
                        assert abs(ok - (1 - args.spin_share)) < 0.02 or kind == "trivial", f"{name}: mix passed {ok}"
                        figures[name][kind].append(speed)
            for name, box in boxes.items():
                limit = box.test_limit(TESTS)
                trivial, mix = (statistics.median(figures[name][k]) for k in ("trivial", "mix"))
                print(f"| {mode} | {workers} | {name} ({limit:.2f} s) | {trivial:.1f} | {mix:.1f} |", flush=True)
            passed, total, slowest = held_in(boxes["from reference"])
            print(f"\nheld-in ({mode}): {passed}/{total} shipped reference solutions pass under the derived limits")
            print(f"(slowest snippet {slowest:.2f} s)\n")
            assert passed == total, "a correct held-in solution failed under the derived limits"
            for box in boxes.values():
                box.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
