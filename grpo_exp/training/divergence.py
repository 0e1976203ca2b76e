"""What a diverged run logged, and the knob that helps: the message a NaN loss or gradient ends a job with.

A NaN is not always a too-high learning rate. On an H200 in bf16 (issue 59) the default run's
gradients went NaN with the policy still at the reference (KL 0.0008): the attention kernel, not
the step size; a lower learning rate only moved the step it happened at. What tells the two apart is
whether the policy had moved before the NaN: a learning rate too high for the model drives the KL
up, or the raw gradient norm far past the clipping, first. So the message names the first
non-finite value (its key and step), the KL and gradient norm before it, and the layout, then
points to the reward functions, the 16-bit compute or the learning rate, whichever fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from grpo_exp.config.layout import Layout, Precision

# A NaN in these ends the job: every later step would be wasted compute. (An inf gradient norm is no
# divergence: under fp16 autocast the grad scaler skips such steps by design.)
STOPPING_KEYS = ("loss", "grad_norm")
# Where a non-finite value can first appear in a step, in the order GRPO computes them: the scores,
# the KL to the reference, the loss, then the gradients.
REWARD_KEY, REWARD_PREFIX, KL_KEY, GRAD_KEY = "reward", "rewards/", "kl", "grad_norm"
STEP_ORDER = (REWARD_KEY, KL_KEY, "loss", GRAD_KEY)
# Below this KL (per token, to the reference) the policy has not moved far enough for its learning
# rate to be the cause: the article's drift threshold (monitor.kl_threshold's default), which the tiny
# model passes only after a few dozen healthy steps. Issue 59's kernel NaNs came at KL 0.0008.
MOVED_KL = 0.1
# A raw gradient norm this many times optimizer.max_grad_norm: the clipping cuts most of every update,
# the loss surface has turned steep, which is how a too-high learning rate shows before it diverges.
STEEP_GRAD_MULTIPLE = 10.0


@dataclass(frozen=True)
class NonFinite:
    step: int
    key: str
    value: float


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _keys_in_order(logs: dict[str, Any]) -> list[str]:
    """The row's keys a divergence can start in, in the order a step computes them."""
    rewards = sorted(k for k in logs if k.startswith(REWARD_PREFIX))
    return [REWARD_KEY, *rewards, *STEP_ORDER[1:]]


class DivergenceWatch:
    """Fed every training row; ``diverged`` returns the one-line message once a stopping key is NaN."""

    def __init__(self, layout: Layout | None = None, max_grad_norm: float | None = None) -> None:
        self.layout = layout
        self.max_grad_norm = max_grad_norm
        self.first: NonFinite | None = None  # the first non-finite value of the run
        self.kl: float | None = None  # the last finite KL
        self.grad_norm: float | None = None  # the last finite gradient norm before this row

    def diverged(self, step: int, logs: dict[str, Any]) -> str | None:
        """The message when this row ends the job (a NaN loss or gradient norm), else None."""
        if self.first is None:
            found = next((k for k in _keys_in_order(logs) if _non_finite(logs.get(k))), None)
            if found is not None:
                self.first = NonFinite(step, found, logs[found])
        if isinstance(logs.get(KL_KEY), float) and math.isfinite(logs[KL_KEY]):
            self.kl = logs[KL_KEY]
        stops = any(isinstance(logs.get(k), float) and math.isnan(logs[k]) for k in STOPPING_KEYS)
        message = self._message(step) if stops else None
        if isinstance(logs.get(GRAD_KEY), float) and math.isfinite(logs[GRAD_KEY]):
            self.grad_norm = logs[GRAD_KEY]
        return message

    def moved(self) -> bool:
        """Whether the policy had left the reference before the NaN (KL or a steep gradient says so)."""
        steep = bool(self.max_grad_norm) and (self.grad_norm or 0.0) >= STEEP_GRAD_MULTIPLE * self.max_grad_norm
        return (self.kl or 0.0) >= MOVED_KL or steep

    def _message(self, step: int) -> str:
        first = self.first
        assert first is not None  # a stopping key is NaN in this row
        kl = "not logged" if self.kl is None else f"{self.kl:.2g}"
        grad = "none yet" if self.grad_norm is None else f"{self.grad_norm:.3g}"
        found = f"training diverged at step {step}: {first.key} is {first.value}" + (
            f" from step {first.step}" if first.step != step else ""
        )
        context = f"last finite KL {kl}, gradient norm {grad}"
        if self.layout is not None:
            attention = self.layout.attention or "sdpa"
            context += f"; {self.layout.precision.value} compute, {attention} attention"
        return f"{found} ({context}); {self._advice(first)}"

    def _advice(self, first: NonFinite) -> str:
        if first.key == REWARD_KEY or first.key.startswith(REWARD_PREFIX):
            return f"a reward function returned {first.value}: make every reward part return finite scores"
        if self.moved():
            return "the policy had moved: lower optimizer.lr, keep optimizer.max_grad_norm set, and check the rewards"
        layout = self.layout
        if layout is not None and layout.precision is not Precision.fp32:
            fix = "" if layout.attention == "eager" else "model.attn_implementation=eager, or "
            return (
                f"the policy had barely moved (KL under {MOVED_KL}), so not the learning rate: a "
                f"{layout.precision.value} kernel is the likely source; set {fix}grpo.bf16=false (fp32 compute)"
            )
        return (
            f"the policy had barely moved (KL under {MOVED_KL}), so not the learning rate: check the prompts and "
            "rewards for inf, and try model.attn_implementation=eager to rule out the attention kernel"
        )
