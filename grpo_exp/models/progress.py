"""Progress of a build step loop in log lines: steps done, time so far and, from the rate so far, time left.

The tiny model's warm-up runs for minutes on a loaded machine (``model=tiny_arithmetic``: 3 minutes on
2 free cores, several times that when parallel jobs share them); a step count alone does not say
when it ends. The rate is measured, not assumed, so the estimate follows the machine's load.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A line at least this often (seconds), whatever the step count: on a loaded machine 50 steps can take minutes.
LOG_SECONDS = 15.0
LOG_EVERY = 50  # and every this many steps


class StepProgress:
    """``total`` steps of one loop; ``clock`` is injectable for tests."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.clock = total, clock
        self.start = self.last = clock()

    def due(self, done: int) -> bool:
        """Whether ``done`` steps deserve a line (the first, the last, every LOG_EVERY, or LOG_SECONDS since one)."""
        if done in (1, self.total) or done % LOG_EVERY == 0 or self.clock() - self.last >= LOG_SECONDS:
            self.last = self.clock()
            return True
        return False

    def timing(self, done: int) -> str:
        """``12 s so far, about 40 s left`` (nothing left to say at the last step but the time taken)."""
        elapsed = self.clock() - self.start
        if done >= self.total:
            return f"took {_duration(elapsed)}"
        left = elapsed / done * (self.total - done) if done else float("nan")
        return f"{_duration(elapsed)} so far, about {_duration(left)} left"


def _duration(seconds: float) -> str:
    if seconds != seconds:  # NaN: no rate yet
        return "? s"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
