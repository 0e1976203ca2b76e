"""Health checks on the training metrics, with the article's remedies.

The article names three signals to watch (mean reward, reward std, KL) and the usual troubles:
a reward that swings, groups whose completions all score the same, a KL that drifts, a reward
that barely improves. ``HealthMonitor`` watches moving windows of the logged metrics and raises
each kind of alert once per run, with the fix in the message.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from grpo_exp.config import MonitorSettings


@dataclass(frozen=True)
class Alert:
    kind: str
    step: int
    message: str


class HealthMonitor:
    """Feed it each logging step's metrics; it returns the alerts that step newly raises."""

    def __init__(self, settings: MonitorSettings) -> None:
        self.settings = settings
        self.windows: dict[str, deque[float]] = {}
        self.first_reward: float | None = None
        self.best_reward: float | None = None
        self.alerts: list[Alert] = []
        self.rewards_seen = 0

    def observe(self, step: int, logs: dict[str, float]) -> list[Alert]:
        means = {k: self._push(k, v) for k, v in logs.items() if isinstance(v, int | float)}
        self.rewards_seen += "reward" in logs
        return self._raise(step, self._breaches({k: v for k, v in means.items() if v is not None}))

    def finish(self, step: int) -> list[Alert]:
        """End-of-run check: a reward that barely moved gets the article's 'weak improvement' advice.

        Judged only when the first and last windows do not overlap: on a shorter run they share steps,
        so the "improvement" would be measured partly against itself.
        """
        last = self._mean("reward")
        too_short = self.rewards_seen < 2 * self.settings.window
        if too_short or self.first_reward is None or last is None:
            return []
        if last - self.first_reward >= self.settings.min_improvement:
            return []
        advice = (
            f"mean reward moved only from {self.first_reward:.3f} to {last:.3f}: sharpen the reward's differences "
            "between good and bad completions, pick a base model closer to the task, or train longer "
            "(grpo.max_steps, grpo.num_train_epochs) with a bigger batch"
        )
        return self._raise(step, iter([("weak_improvement", advice)]))

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps, so a resumed run neither forgets its windows nor repeats an alert."""
        state = {k: v for k, v in vars(self).items() if k != "settings"}
        state["windows"] = {key: list(window) for key, window in self.windows.items()}
        state["alerts"] = [asdict(alert) for alert in self.alerts]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        vars(self).update({k: v for k, v in state.items() if k not in ("windows", "alerts")})
        self.windows = {k: deque(v, maxlen=self.settings.window) for k, v in state.get("windows", {}).items()}
        self.alerts = [Alert(**alert) for alert in state.get("alerts", [])]

    def _breaches(self, means: dict[str, float]) -> Iterator[tuple[str, str]]:
        s = self.settings
        if (kl := means.get("kl")) is not None and kl > s.kl_threshold:
            yield (
                "kl_drift",
                (
                    f"KL {kl:.3f} is above {s.kl_threshold} (mean of {s.window} steps): the policy is drifting "
                    "from the base model; raise grpo.beta or lower optimizer.lr"
                ),
            )
        if (std := means.get("reward_std")) is not None and std < s.min_reward_std:
            yield (
                "low_reward_std",
                (
                    f"reward std {std:.3f} is below {s.min_reward_std}: completions score alike (homogeneous "
                    "generations), so GRPO has little to compare; unless the reward is at its ceiling, raise "
                    "grpo.temperature or grpo.num_generations=8, or grade the reward more finely"
                ),
            )
        if (zero := means.get("frac_reward_zero_std")) is not None and zero > s.max_zero_std_fraction:
            yield (
                "zero_std_groups",
                (
                    f"{zero:.0%} of groups scored every completion the same, which gives no learning signal; "
                    "raise grpo.num_generations or grpo.temperature, or make the reward less all-or-nothing"
                ),
            )
        if (reward := means.get("reward")) is not None:
            self.first_reward = reward if self.first_reward is None else self.first_reward
            self.best_reward = reward if self.best_reward is None else max(self.best_reward, reward)
            if self.best_reward - reward > s.reward_drop:
                yield (
                    "reward_unstable",
                    (
                        f"mean reward fell from {self.best_reward:.3f} to {reward:.3f}: training is unstable; "
                        "simplify the reward to one or two goals, use grpo.num_generations=8, and "
                        "optimizer.lr=1e-5 with optimizer.warmup_steps=0.1"
                    ),
                )

    def _raise(self, step: int, breaches: Iterator[tuple[str, str]]) -> list[Alert]:
        seen = {a.kind for a in self.alerts}
        new = [Alert(kind, step, message) for kind, message in breaches if kind not in seen]
        self.alerts.extend(new)
        return new

    def _push(self, key: str, value: float) -> float | None:
        """The mean of the last ``window`` values of ``key``, once that many have arrived."""
        window = self.windows.setdefault(key, deque(maxlen=self.settings.window))
        window.append(float(value))
        return self._mean(key) if len(window) == window.maxlen else None

    def _mean(self, key: str) -> float | None:
        window = self.windows.get(key)
        return sum(window) / len(window) if window else None
