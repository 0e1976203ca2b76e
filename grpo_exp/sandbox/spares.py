"""Fresh interpreters for snippets: started on demand, or one started a little earlier.

This is where snippets come from without the fork server (``forkserver``): under unshare or
none, with ``fork_server=False``, and for standalone runs. Starting an isolated interpreter takes
~30 ms of latency (bwrap or unshare, then Python's own start-up), and only ~5 ms of that is the
parent's time. So a worker that takes an interpreter immediately starts the next one, which
boots in the background while the worker grades. Every snippet gets a fresh interpreter of its
own, started with the same isolation and limits, that has run nothing but the trusted start-up
code; it merely waits, idle, for its job. Spare interpreters are killed when the sandbox closes, and exit by themselves
if the trainer dies (their request pipe closes; bwrap/unshare also kill them with the trainer).
"""

from __future__ import annotations

import logging
import threading
import time

from grpo_exp.sandbox.isolation import Launcher
from grpo_exp.sandbox.limits import Limits
from grpo_exp.sandbox.process import ChildProcess

log = logging.getLogger("grpo_exp.sandbox")


class ChildSource:
    """Hands out started interpreters, keeping up to ``spares`` booted ahead of demand."""

    def __init__(self, launcher: Launcher, limits: Limits, spares: int = 0) -> None:
        self.launcher = launcher
        self.limits = limits
        self.spares = spares
        self._idle: list[ChildProcess] = []
        self._starting = 0
        self._closed = False
        self._lock = threading.Lock()

    def start(self, job: dict, budget_s: float) -> ChildProcess:
        """An interpreter that has been sent ``job``; raises ChildTimeout or OSError.

        ``budget_s`` counts from ``Channel.started``, once the interpreter is taken (a fresh one's boot counts).
        """
        child = self._take()
        child.started = time.monotonic()
        try:
            child.send(job, child.started + budget_s)
        except OSError:  # a spare that died while it waited: one fresh try
            child.close()
            child = ChildProcess(self.launcher, self.limits)
            child.send(job, child.started + budget_s)
        except BaseException:
            child.close()
            raise
        self._replenish()
        return child

    def close(self) -> None:
        """Kill the idle spares; interpreters already handed out are their users' to close."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.close()

    def _take(self) -> ChildProcess:
        while True:
            with self._lock:
                child = self._idle.pop() if self._idle else None
            if child is None:
                return ChildProcess(self.launcher, self.limits)
            if not child.has_exited():
                return child
            child.close()

    def _replenish(self) -> None:
        with self._lock:
            if self._closed or len(self._idle) + self._starting >= self.spares:
                return
            self._starting += 1
        spare = None
        try:
            spare = ChildProcess(self.launcher, self.limits)
        except Exception as exc:  # no spare this time; the next snippet starts its own
            log.debug("could not start a spare sandbox interpreter: %s", exc)
        finally:
            with self._lock:
                self._starting -= 1
                keep = spare is not None and not self._closed
                if keep:
                    self._idle.append(spare)
        if spare is not None and not keep:
            spare.close()
