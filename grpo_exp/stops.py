"""Clean stops: Ctrl-C (SIGINT) or SIGTERM finishes the current step, checkpoints, and stops.

A long run on a shared GPU is stopped by people (Ctrl-C), by schedulers (SIGTERM before a kill) and
by pre-emption. The first signal only raises a flag; ``StopCallback`` sees it at the end of the
step and asks the trainer to save a checkpoint and stop, so the job ends with its model, summary
and W&B run in order. A second signal stops at once (``KeyboardInterrupt``, still without a
traceback on the console).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger("grpo_exp")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Which signal asked the job to stop (None while nobody has)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + (self.signum or 0)

    @contextlib.contextmanager
    def listening(self) -> Iterator[StopRequest]:
        """Catch SIGINT/SIGTERM while training; handlers can only be set from the main thread."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # the second signal: stop now
        self.signum = signum
        log.warning(
            "%s received: stopping after this step with a checkpoint (press Ctrl-C again to stop at once)",
            signal.Signals(signum).name,
        )


class JobStopped(Exception):
    """Raised after a clean stop, once everything is saved; the job exits with ``exit_code``."""

    def __init__(self, exit_code: int, step: int, checkpoint: str | None) -> None:
        super().__init__(f"stopped at step {step}")
        self.exit_code, self.step, self.checkpoint = exit_code, step, checkpoint
