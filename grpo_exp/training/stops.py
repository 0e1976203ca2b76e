"""Clean stops: Ctrl-C (SIGINT), SIGTERM or a launcher's pre-emption signal finishes the step and checkpoints.

A long run on a shared GPU is stopped by people (Ctrl-C), by schedulers (SIGTERM before a kill) and
by pre-emption. Once the trainer trains (``StopRequest.defer``), the first signal only raises a
flag; ``callbacks.StopCallback`` sees it at the end of the step and asks the trainer to save a
checkpoint and stop, so the job ends with its model, summary and W&B run in order. A second signal
stops at once (``KeyboardInterrupt``, still without a traceback on the console).

Before training starts (the embedded model's build, a model's load) there is nothing to
checkpoint, and waiting for the load to end can take minutes: a plain run's first signal stops it
there and then (``StoppedBeforeTraining``), with its summary written.

Under torchrun or accelerate (several processes), a signal to any one rank stops them all at the
same step: ``callbacks.StopCallback`` shares the request (``ranks.largest``) at each step's end.
Ctrl-C there reaches every rank twice, from the terminal and again from the launcher, which passes
its own on; a repeat within ``LAUNCHER_REPEAT_S`` is taken for that, not for a second press.

Under submitit (``+launcher=slurm``), the pre-emption signal (SIGUSR2 unless
``SUBMITIT_PREEMPT_SIGNAL`` says otherwise) is submitit's cue to requeue the job. It is caught the
same way, and once the checkpoint is saved, submitit's own handler is called (``handover``): it
requeues the job, which then resumes (``resume=auto``) from that checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from grpo_exp import hardware

log = logging.getLogger("grpo_exp")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
PREEMPTION_SIGNAL = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), signal.SIGUSR2)
# How soon after a signal torchrun's copy of it arrives (it forwards within milliseconds); a person
# pressing Ctrl-C again takes longer.
LAUNCHER_REPEAT_S = 1.0
LAUNCHED_BY = "TORCHELASTIC_RUN_ID"  # set by torchrun and accelerate launch for the processes they start


class StoppedBeforeTraining(KeyboardInterrupt):
    """A stop signal that came before training started: the load in progress is abandoned."""


class StopRequest:
    """Which signal asked the job to stop (None while nobody has)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        self.at = 0.0  # when the signal came (time.monotonic)
        self.launched = LAUNCHED_BY in os.environ
        # Until training starts, a plain run stops at once. Launched ranks keep to the flag: they
        # agree on a stop at the stage's start (``ranks.largest``), so none is left waiting for another.
        self.at_once = not self.launched

    def defer(self) -> None:
        """From the first step on (and through the saves after the last): a signal waits for the end
        of the step, which checkpoints."""
        self.at_once = False

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + (self.signum or 0)

    @contextlib.contextmanager
    def listening(self) -> Iterator[StopRequest]:
        """Catch the stop signals while training; handlers can only be set from the main thread."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        watched = list(SIGNALS)
        if callable(signal.getsignal(PREEMPTION_SIGNAL)):  # a launcher (submitit) listens for it
            watched.append(PREEMPTION_SIGNAL)
        self.previous = {s: signal.signal(s, self._handle) for s in watched}
        try:
            yield self
        finally:
            for signum, handler in self.previous.items():
                signal.signal(signum, handler)

    def handover(self) -> Callable[[], None] | None:
        """The launcher's own handler for the signal that stopped the job (submitit's requeue), if any."""
        handler = self.previous.get(self.signum) if self.signum is not None else None
        if self.signum != PREEMPTION_SIGNAL or not callable(handler):
            return None
        return lambda: handler(self.signum, None)

    def adopt(self, signum: int) -> None:
        """Stop for another rank's signal, as if it had come here."""
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            if _primary():
                log.warning("%s received by another process: stopping with a checkpoint", signal.Signals(signum).name)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            if self.launched and signum == self.signum and time.monotonic() - self.at < LAUNCHER_REPEAT_S:
                return  # the launcher passing on the signal this process already has
            raise KeyboardInterrupt  # the second signal: stop now
        self.signum, self.at = signum, time.monotonic()
        if self.at_once:
            log.warning("%s received before training started: stopping now", signal.Signals(signum).name)
            raise StoppedBeforeTraining
        if _primary():
            log.warning(
                "%s received: stopping after this step with a checkpoint (press Ctrl-C again to stop at once)",
                signal.Signals(signum).name,
            )


def _primary() -> bool:
    return hardware.rank() == 0


class JobStopped(Exception):
    """Raised after a clean stop, once everything is saved; the job exits with ``exit_code``."""

    def __init__(
        self, exit_code: int, step: int, checkpoint: str | None, handover: Callable[[], None] | None = None
    ) -> None:
        super().__init__(f"stopped at step {step}")
        self.exit_code, self.step, self.checkpoint, self.handover = exit_code, step, checkpoint, handover
