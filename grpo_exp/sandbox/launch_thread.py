"""One thread that starts long-lived sandbox processes and lives exactly as long as their owner.

bwrap's ``--die-with-parent`` is PR_SET_PDEATHSIG: the kernel kills the sandbox when the *thread*
that forked it exits, not when the trainer does. Reward parts run in a thread of their own per
call (``grpo_exp.deadline``), so zygotes started there died as soon as the first call returned,
and the next call restarted every one on a program's clock. Started from this thread, they die
with the trainer (the thread is a daemon, so it ends with the process) or when their owner
closes it, and never earlier.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class LaunchThread:
    """Runs callables (each a process start) one at a time on its own thread; see the module docstring."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future] | None] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()  # no call is queued behind the close
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def call(self, start: Callable[[], T]) -> T:
        """``start()`` run on this thread: its result, or its exception re-raised here; OSError once closed."""
        if threading.current_thread() is self._thread:
            return start()
        done: Future = Future()
        with self._lock:
            if self._closed:
                raise OSError("the sandbox's launch thread is closed")
            self._jobs.put((start, done))
        return done.result()

    def close(self) -> None:
        """End the thread once the calls already asked for are done: what it started gets SIGKILL then."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            start, done = job
            try:
                done.set_result(start())
            except BaseException as exc:  # handed to the caller, who made the call
                done.set_exception(exc)
