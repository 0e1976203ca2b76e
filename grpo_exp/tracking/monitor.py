"""Health checks on the training metrics, with the article's remedies.

The article names three signals to watch (mean reward, reward std, KL) and the usual troubles:
a reward that swings, groups whose completions all score the same, a KL that drifts, a reward
that barely improves. Two more come from running the article's scenarios on a small model:
completions cut at ``max_completion_length`` (a length or format goal they can't reach), and a
reward part that never varies within a group (it weighs on the reward but teaches nothing). One
watches the sampler: on the vLLM path TRL logs the per-token log-prob gap between the completions'
sampler (vLLM) and the trained policy; a gap past bf16's noise means vLLM samples from other weights
than the policy's (a weight sync that never lands), which nothing else in the metrics shows.
``HealthMonitor`` watches moving windows of the logged metrics and raises each kind of alert once
per run (once per part for flat parts), with the fix in the message.

Success looks like homogeneity: once every completion of a group is right, the group scores alike.
Where the reward's parts have ceilings, each batch logs the share of completions at them
(``frac_solved``) and of groups solved whole (``frac_solved_groups``; rewards/solved.py, judged per
part, so a completion is solved when every part that scored it is at its ceiling). The std checks
count only what lies below the ceiling: ``zero_std_groups`` the share of groups that scored alike
without being solved, and ``low_reward_std`` only while most completions are below the ceiling (a
spread under ``min_reward_std`` leaves the scores bunched at one value: the ceiling when most are
there, a value below it otherwise). Without ceilings nothing is logged and both judge every group.

The remedies are constants, shared with the reward probe (grpo_exp/plan/probe.py), which gives the
same advice before training.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from grpo_exp.config.schema import MonitorSettings
from grpo_exp.rewards.solved import SOLVED, SOLVED_GROUPS
from grpo_exp.tracking.metrics import LOGP_DIFFERENCE

PART_PREFIX, GROUP_STD_SUFFIX = "rewards/", "/group_std"  # the key compose.WeightedReward logs

SAMPLER_DRIFT = "sampler_drift"  # the alert's kind, which the sweep report looks for
MOSTLY = 0.5  # at least this share of completions at the ceiling: a low spread there is convergence
# The remedies, quoted by the alerts and by the probe's verdicts ("{part}": the reward part's name).
HOMOGENEOUS_REMEDY = "raise grpo.temperature or grpo.num_generations=8, or grade the reward more finely"
ZERO_STD_REMEDY = "raise grpo.num_generations or grpo.temperature, or make the reward less all-or-nothing"
TRUNCATED_REMEDY = "raise grpo.max_completion_length"
FLAT_REMEDY = (
    "check that the model can produce what it rewards (a warm-up or base model closer to the task), grade it more "
    "finely, or drop reward.parts.{part}"
)
SAMPLER_DRIFT_REMEDY = (
    "check that the weight sync reaches vLLM each step (the policy's weights, a LoRA adapter merged into them), "
    "and the sampler's precision: TRL passes vLLM no dtype, so it samples a float32 model in bf16 "
    "(grpo.bf16=true trains in bf16 too)"
)
CEILING_REMEDY = (
    "the model already scores it at its best, so it only adds a constant: make it stricter, or drop reward.parts.{part}"
)


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
        self.varied: set[str] = set()  # group_std keys that have been above the flat threshold once

    def observe(self, step: int, logs: dict[str, float]) -> list[Alert]:
        self.varied |= {
            k for k, v in logs.items() if k.endswith(GROUP_STD_SUFFIX) and v > self.settings.min_part_group_std
        }
        means = {k: self._push(k, v) for k, v in logs.items() if isinstance(v, int | float)}
        self.rewards_seen += "reward" in logs
        return self._raise(step, self._breaches({k: v for k, v in means.items() if v is not None}))

    def finish(self, step: int) -> list[Alert]:
        """End-of-run check: a reward that barely moved gets the article's 'weak improvement' advice.

        Judged only when the first and last windows do not overlap: on a shorter run they share steps,
        so the "improvement" would be measured partly against itself; and not when the last window is
        mostly solved (at the reward's ceiling), where nothing is left to gain.
        """
        last = self._mean("reward")
        too_short = self.rewards_seen < 2 * self.settings.window
        if too_short or self.first_reward is None or last is None or (self._mean(SOLVED) or 0.0) >= MOSTLY:
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
        state = {k: sorted(v) if isinstance(v, set) else v for k, v in vars(self).items() if k != "settings"}
        state["windows"] = {key: list(window) for key, window in self.windows.items()}
        state["alerts"] = [asdict(alert) for alert in self.alerts]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            if key not in ("windows", "alerts"):
                setattr(self, key, set(value) if isinstance(getattr(self, key, None), set) else value)
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
        solved, solved_groups = means.get(SOLVED, 0.0), means.get(SOLVED_GROUPS, 0.0)  # 0: no ceilings known
        if (std := means.get("reward_std")) is not None and std < s.min_reward_std and solved < MOSTLY:
            yield (
                "low_reward_std",
                (
                    f"reward std {std:.3f} is below {s.min_reward_std}: completions score alike (homogeneous "
                    "generations), so GRPO has little to compare; unless the reward is at its ceiling, "
                    f"{HOMOGENEOUS_REMEDY}"
                ),
            )
        zero = means.get("frac_reward_zero_std")
        if zero is not None and (stuck := zero - solved_groups) > s.max_zero_std_fraction:
            below = " below the reward's ceiling" if SOLVED_GROUPS in means else ""
            yield (
                "zero_std_groups",
                (
                    f"{stuck:.0%} of groups scored every completion the same{below}, which gives no learning "
                    f"signal; {ZERO_STD_REMEDY}"
                ),
            )
        if (clipped := means.get("completions/clipped_ratio")) is not None and clipped > s.max_clipped_ratio:
            yield (
                "truncated",
                (
                    f"{clipped:.0%} of completions were cut at the length limit (mean of {s.window} steps): "
                    f"they can't finish, so rewards on their ending or length can't improve; {TRUNCATED_REMEDY}"
                ),
            )
        if (gap := means.get(LOGP_DIFFERENCE)) is not None and gap > s.max_logp_difference:
            yield (
                SAMPLER_DRIFT,
                (
                    f"vLLM's log-probs of its own completions differ from the trained policy's by {gap:.3f} per "
                    f"token (mean of {s.window} steps), above {s.max_logp_difference}: the completions come from "
                    "another model than the one trained (the importance-sampling correction only reweights them); "
                    f"{SAMPLER_DRIFT_REMEDY}"
                ),
            )
        yield from self._flat_parts(means)
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

    def _flat_parts(self, means: dict[str, float]) -> Iterator[tuple[str, str]]:
        """Parts whose spread within groups (``rewards/<part>/group_std``) has stayed at about zero.

        Only parts that never varied: one that varied and then converged (every completion right)
        has done its job, and a low reward std already speaks for the whole reward.
        """
        for key in means:
            part = key.removeprefix(PART_PREFIX).removesuffix(GROUP_STD_SUFFIX)
            flat = key == f"{PART_PREFIX}{part}{GROUP_STD_SUFFIX}" and key not in self.varied
            if flat and part not in self.settings.flat_ok:
                yield (
                    f"flat_part/{part}",
                    (
                        f"reward part {part!r} scored every completion of a group alike for {self.settings.window} "
                        "steps, so it gives GRPO no signal while it weighs on the reward: "
                        + FLAT_REMEDY.format(part=part)
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
