"""What counts as a collapse, and where the run was last healthy (``monitor.on_collapse``).

The health monitor (tracking/monitor.py) warns early and once; a collapse is the stronger judgement a
rollback or a stop acts on:

- the windowed mean reward (``monitor.window`` steps) has lost ``collapse_drop`` of its rise (its
  peak minus its first window) and stayed that low for ``collapse_window`` steps; a rise below
  ``min_improvement`` is noise, not something to lose;
- one step's KL above ``collapse_kl_multiple`` x ``kl_threshold``;
- a NaN or infinite loss or reward (a score past float32's range reaches TRL as inf).

A step nothing was scored at (every part None for every completion, e.g. timed out under
``reward.on_timeout=skip``) has no reward: TRL logs the mean of no scores as None. That is no
divergence: the step is left out of the reward's judgement (its loss and KL are still judged).

The last healthy point is, for the first kind, the last step before the window in which the reward
began to fall (never before its peak), and the step before for the others: a rollback goes back to
the newest checkpoint at or before it. The detector holds no state a
checkpoint must keep: it is rebuilt by replaying the ``metrics.jsonl`` rows up to the step resumed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grpo_exp.config.schema import MonitorSettings

FINITE_KEYS = ("loss", "reward")  # a NaN or inf here: the run has diverged
UNSCORED_KEYS = ("reward",)  # None here: nothing was scored (TRL's mean of an all-NaN batch), no divergence
ROLLBACK_PREFIX = "rollback/"  # the metrics.jsonl row a rollback writes: rollback/<field>


@dataclass(frozen=True)
class Collapse:
    cause: str  # reward_collapse | kl_spike | non_finite
    step: int  # the step it was judged at
    healthy_step: int  # the last healthy step: a rollback goes back to a checkpoint at or before it
    message: str


class CollapseDetector:
    """Feed it each training step's logged metrics; ``observe`` returns a Collapse once there is one."""

    def __init__(self, settings: MonitorSettings) -> None:
        self.settings = settings
        self.rewards: deque[float] = deque(maxlen=settings.window)
        self.first: float | None = None
        self.peak: float | None = None
        self.peak_step = 0
        self.down_since: int | None = None
        self.last_step = 0

    def replay(self, rows: Iterable[dict[str, Any]]) -> None:
        """Rebuild the state from earlier training rows (a resumed or rolled-back run's ``metrics.jsonl``)."""
        for row in replayed(rows):
            self.observe(int(row["step"]), row)

    @property
    def healthy(self) -> bool:
        """No sign of trouble at the last step seen: a checkpoint here is one to come back to."""
        return self.down_since is None

    def observe(self, step: int, logs: dict[str, Any]) -> Collapse | None:
        s, previous = self.settings, self.last_step
        self.last_step = step
        bad = [k for k in FINITE_KEYS if k in logs and not _finite(logs[k]) and not _unscored(k, logs[k])]
        if bad:
            what = " and ".join(f"{k} {'NaN' if logs[k] is None else logs[k]}" for k in bad)
            return Collapse("non_finite", step, previous, f"{what} at step {step}")
        kl, limit = logs.get("kl"), s.collapse_kl_multiple * s.kl_threshold
        if isinstance(kl, int | float) and kl > limit:
            message = f"KL {kl:.3g} at step {step}, above {s.collapse_kl_multiple:g} x monitor.kl_threshold ({limit:g})"
            return Collapse("kl_spike", step, previous, message)
        if not isinstance(logs.get("reward"), int | float):
            return None
        self.rewards.append(float(logs["reward"]))
        if len(self.rewards) < self.rewards.maxlen:
            return None
        mean = sum(self.rewards) / len(self.rewards)
        self.first = mean if self.first is None else self.first
        if self.peak is None or mean > self.peak:
            self.peak, self.peak_step, self.down_since = mean, step, None
            return None
        rise = self.peak - self.first
        if rise < s.min_improvement or mean > self.peak - s.collapse_drop * rise:
            self.down_since = None
            return None
        self.down_since = step if self.down_since is None else self.down_since
        if step - self.down_since + 1 < s.collapse_window:
            return None
        message = (
            f"mean reward {mean:.3f} at step {step}, down from its peak {self.peak:.3f} (step {self.peak_step}) "
            f"since step {self.down_since}: more than {s.collapse_drop:.0%} of its rise from {self.first:.3f} lost"
        )
        return Collapse("reward_collapse", step, self.last_clean(self.down_since), message)

    def last_clean(self, step: int) -> int:
        """The last step no bad step can have weighed on, judged at ``step``: the window's mean there
        already counts the ``window - 1`` steps before it, and nothing before the peak is trouble."""
        return max(self.peak_step, step - self.settings.window)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _unscored(key: str, value: Any) -> bool:
    return value is None and key in UNSCORED_KEYS


def replayed(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training rows ``replay`` observes, cut to the keys ``observe`` reads: what rank 0 shares with
    the other ranks, whose detectors must judge as its own does."""
    return [
        {k: row[k] for k in ("step", "kl", *FINITE_KEYS) if k in row}
        for row in rows
        if "reward" in row and not any(k.startswith(ROLLBACK_PREFIX) for k in row)
    ]


def rollback_records(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rollbacks a run's ``metrics.jsonl`` records, oldest first, as ``{to_step, from_step, cause, ...}``."""
    return [
        {k.removeprefix(ROLLBACK_PREFIX): v for k, v in row.items() if k.startswith(ROLLBACK_PREFIX)}
        for row in rows
        if any(k.startswith(ROLLBACK_PREFIX) for k in row)
    ]
