"""Find processes by the lists the kernel keeps, and kill a changing set of them until none is left."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable

READ_CHUNK = 65536


def pids_in(path: str) -> list[int]:
    """The pids a kernel list holds (``cgroup.procs``, ``/proc/<pid>/task/<pid>/children``); raises OSError.

    Read with two syscalls, not a file object, which costs several times that: it is read per program.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        data = b""
        while chunk := os.read(fd, READ_CHUNK):
            data += chunk
    finally:
        os.close(fd)
    return [int(pid) for pid in data.split()]


def kill_until_gone(find: Callable[[], Iterable[int]], rounds: int, pause_s: float) -> bool:
    """SIGKILL whatever ``find()`` lists, round after round, until it lists nothing; False if it never does.

    A process killed in one round cannot fork again, so the rounds converge on what is still dying.
    """
    for _ in range(rounds):
        pids = list(find())
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause_s)
    return not list(find())
