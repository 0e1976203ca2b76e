"""Peak host memory of one snippet that forks children which each fill 400 MB.

The review's case: with per-process limits only, 8 such children held ~2.4 GB and the snippet
still scored. Here the snippet's processes name themselves with a token and a sampler sums
their resident memory (VmRSS, so pages a child shares with its parent count twice) every 20 ms,
independently of the mechanism under test.

Usage::

    .venv/bin/python benchmarks/sandbox_memory.py                 # a cgroup per snippet, if any
    .venv/bin/python benchmarks/sandbox_memory.py --no-cgroup     # rlimits only (forks refused)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes

MIB = 1024 * 1024
SAMPLE_PAUSE_S = 0.02
SNIPPET = """
import os, time
def f():
    for _ in range({children}):
        if os.fork() == 0:
            try:
                with open("/proc/self/comm", "w") as fh:
                    fh.write({token!r})
                hog = b"x" * ({child_mb} * 1024 * 1024)
                time.sleep(6)
            finally:
                os._exit(0)
    time.sleep(5)  # long enough for every child to fill its memory on a loaded machine
    return 1
"""


def resident(token: str) -> int:
    total = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if Path(f"/proc/{name}/comm").read_text().strip() != token:
                    continue
                status = Path(f"/proc/{name}/status").read_text()
            except OSError:
                continue
            total += sum(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default=None, help="isolation (default: the strongest working mode)")
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument("--children", type=int, default=8)
    parser.add_argument("--child-mb", type=int, default=400)
    parser.add_argument("--no-cgroup", action="store_true")
    args = parser.parse_args()
    mode = args.mode or (available_modes() or ["none"])[0]
    limits = Limits(timeout_s=10.0, test_timeout_s=10.0, memory_mb=args.memory_mb)
    if args.no_cgroup:
        limits = dataclasses.replace(limits, cgroup=False)
    token = "hog" + secrets.token_hex(5)
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], resident(token))
            time.sleep(SAMPLE_PAUSE_S)

    watcher = threading.Thread(target=watch)
    watcher.start()
    code = SNIPPET.format(children=args.children, token=token, child_mb=args.child_mb)
    with Sandbox(limits, isolation=mode, workers=1, cache_size=0) as box:
        result = box.grade(code, TestSpec.mbpp(["assert f() == 1"]))
    done.set()
    watcher.join()
    print(f"{mode}, memory_mb={args.memory_mb}, {args.children} children x {args.child_mb} MB, load "
          f"{os.getloadavg()[0]:.2f}: peak resident {peak[0] / MIB:.0f} MiB, outcome {result.outcomes}")  # fmt: skip


if __name__ == "__main__":
    main()
