"""Kill a changing set of processes until none is left."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable


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
