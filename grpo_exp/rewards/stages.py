"""Staged rewards: parts that join a run at a step (``start_step``) or once a logged metric reaches a
threshold (``start_when``), as the article trains format first, then adds information, then tone.

A threshold is judged on the metrics as TRL logs them (``trainer_state.log_history``, the rows of
``metrics.jsonl``): a part enters at the step after the last ``window`` logged values of its
metric first average past the threshold, and stays in. Because the stages are computed from the
log history alone, and TRL saves that history in every checkpoint, a resumed run is in the stage
it left without any state of ours. The current stage (1 + the parts entered so far) is logged as
``stage``, so it lands in metrics.jsonl, on W&B as ``train/stage`` and in the run summary.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Mapping
from typing import Any

from grpo_exp.config.schema import RewardPart, StartWhen
from grpo_exp.errors import UserError

STAGE_METRIC = "stage"
# Metrics every GRPO run logs (TRL's names), besides the per-part ones.
RUN_METRICS = frozenset(
    {
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "kl",
        "entropy",
        "completions/mean_length",
        "completions/clipped_ratio",
    }
)
PART_METRIC = re.compile(r"^rewards/(?P<part>[^/]+)/(mean|std|group_std)$")


class StageGate:
    """Which reward parts count at a training step, shared by all parts of one reward."""

    def __init__(self, parts: Mapping[str, RewardPart]) -> None:
        check_conditions(parts)
        self.gated = {name: part for name, part in parts.items() if part.start_step > 0 or part.start_when}
        self._reset()

    def _reset(self) -> None:
        self._seen = 0  # log_history rows read so far
        self._windows: dict[str, deque[float]] = {}
        self._met_at: dict[str, int] = {}  # part -> the step its threshold was first met

    @property
    def staged(self) -> bool:
        """Whether any part waits, i.e. whether the run has stages to log."""
        return bool(self.gated)

    def entry_step(self, name: str, state: Any) -> int | None:
        """The step from which ``name`` counts; None while it is still waiting."""
        part = self.gated.get(name)
        if part is None:
            return 0
        if part.start_when is None:
            return part.start_step
        self._read(getattr(state, "log_history", None) or [])
        met = self._met_at.get(name)
        return None if met is None else max(part.start_step, met)

    def counts(self, name: str, state: Any) -> bool:
        """Whether part ``name`` is scored at ``state.global_step`` (always, outside a trainer)."""
        if state is None:
            return True
        entry = self.entry_step(name, state)
        return entry is not None and state.global_step >= entry

    def stage(self, state: Any) -> int:
        """1 + the number of waiting parts that count by now."""
        return 1 + sum(self.counts(name, state) for name in self.gated)

    def _read(self, history: list[dict[str, Any]]) -> None:
        """Fold log rows not seen yet into the windows (from scratch if the history was rewound)."""
        if len(history) < self._seen:
            self._reset()
        for row in history[self._seen :]:
            for name, part in self.gated.items():
                condition = part.start_when
                value = row.get(condition.metric) if condition else None
                if name in self._met_at or not isinstance(value, int | float) or not math.isfinite(value):
                    continue
                window = self._windows.setdefault(name, deque(maxlen=condition.window))
                window.append(float(value))
                if len(window) == condition.window and _meets(condition, sum(window) / len(window)):
                    self._met_at[name] = int(row.get("step", 0))
        self._seen = len(history)


def _meets(condition: StartWhen, mean: float) -> bool:
    low_ok = condition.at_least is None or mean >= condition.at_least
    return low_ok and (condition.at_most is None or mean <= condition.at_most)


def check_conditions(parts: Mapping[str, RewardPart]) -> None:
    """Refuse, in one line each, thresholds that can't be judged or can never be met."""
    waits: dict[str, str] = {}  # part -> the part whose metric it waits on
    for name, part in parts.items():
        condition = part.start_when
        if condition is None:
            continue
        where = f"reward.parts.{name}.start_when"
        if condition.at_least is None and condition.at_most is None:
            raise UserError(f"{where} needs a threshold: add at_least=<value> or at_most=<value>")
        if condition.window < 1:
            raise UserError(f"{where}.window={condition.window}: give the number of logged steps to average (>= 1)")
        if (match := PART_METRIC.match(condition.metric)) is not None:
            target = match["part"]
            if target not in parts:
                raise UserError(f"{where}.metric={condition.metric}: no part {target!r} (parts: {', '.join(parts)})")
            if target == name:
                raise UserError(
                    f"{where}.metric={condition.metric}: a part logs nothing before it starts, "
                    "so it can't wait on its own metric; name another part's"
                )
            waits[name] = target
        elif condition.metric not in RUN_METRICS:
            forms = ", ".join(sorted(RUN_METRICS))
            raise UserError(
                f"{where}.metric={condition.metric}: not a logged metric; use rewards/<part>/mean (or /std, "
                f"/group_std) or one of {forms}"
            )
    for name in waits:
        chain = [name]
        while (target := waits.get(chain[-1])) is not None:
            if target in chain:
                raise UserError(
                    f"reward parts wait on each other's metrics, so none can start: {' -> '.join([*chain, target])}"
                )
            chain.append(target)
