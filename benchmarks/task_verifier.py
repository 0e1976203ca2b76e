"""What running reasoning-gym's verifiers isolated costs a training step (grpo_exp/tasks/verifier.py).

A step's batch of chain_sum answers (``--answers``, 128 by default: e.g. 16 prompts x 8 samples),
scored by the task's ``score_answer`` in this process (as before issue 60) and by the isolated
verifier (a fork server under the sandbox's namespaces, one process per answer): the fork
server's start once, then the median of ``--steps`` batches.

Usage::

    .venv/bin/python benchmarks/task_verifier.py
    .venv/bin/python benchmarks/task_verifier.py --answers 64 --steps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_exp.tasks.problems import Region, draw
from grpo_exp.tasks.verifier import Verifier, parallel

TIMEOUT_S = 5.0  # conf/reward/reasoning_gym.yaml's per-answer limit
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every process below it, reaped children included (the answers' processes)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, fields in stats.items() if int(fields[1]) in frontier} - tree
        tree |= frontier
    # after the command's name: state, ppid, ... utime stime cutime cstime are fields 14-17 of stat
    return sum(sum(int(v) for v in stats[pid][11:15]) for pid in tree if pid in stats) / TICKS_PER_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=128, help="answers in a step's batch")
    parser.add_argument("--steps", type=int, default=5, help="batches timed after the first")
    args = parser.parse_args()
    from reasoning_gym import get_score_answer_fn

    problems = draw("chain_sum", {}, seed=0, count=args.answers, region=Region(0.0, held_out=False))
    answers = [p["answer"] for p in problems]
    print(f"load average before: {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; {parallel()} answers at once")

    score_answer = get_score_answer_fn("chain_sum")
    started = time.perf_counter()
    in_process = [score_answer(a, p) for a, p in zip(answers, problems, strict=True)]
    in_process_s = time.perf_counter() - started

    verifier = Verifier()
    try:
        started = time.perf_counter()
        first = verifier.score(problems, answers, TIMEOUT_S)
        first_s = time.perf_counter() - started
        server = verifier.helper._proc.pid
        steps, cpu = [], []
        for _ in range(args.steps):
            started, cpu_before = time.perf_counter(), tree_cpu_s(server)
            isolated = verifier.score(problems, answers, TIMEOUT_S)
            steps.append(time.perf_counter() - started)
            cpu.append(tree_cpu_s(server) - cpu_before)
        assert first == isolated == [float(v) for v in in_process], "the isolated verdicts differ from the task's own"
    finally:
        verifier.close()
    step_s = statistics.median(steps)
    print(f"isolation: {verifier.mode}")
    print(f"in-process: {in_process_s * 1e3:.1f} ms a step ({in_process_s / args.answers * 1e6:.0f} us an answer)")
    print(f"isolated, first step (fork server start included): {first_s:.2f} s")
    print(
        f"isolated, median of {args.steps} steps: {step_s:.2f} s a step "
        f"({step_s / args.answers * 1e3:.1f} ms an answer; min {min(steps):.2f}, max {max(steps):.2f})"
    )
    print(f"fork server and answers' CPU, median: {statistics.median(cpu):.2f} s a step")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
