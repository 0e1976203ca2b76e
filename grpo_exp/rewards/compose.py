"""Turning the ``reward.parts`` config into the named, weighted functions TRL's GRPOTrainer takes.

Each part becomes one TRL reward function, so TRL logs ``rewards/<part>/mean`` for it and sums the
parts with ``reward_weights``. The wrapper also hides the differences between call styles, flattens
chat completions to text, holds a part back until its ``start_step`` (progressive schedules), and
checks what the function returns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from grpo_exp.config import RewardPart, RewardSettings
from grpo_exp.errors import UserError
from grpo_exp.rewards.user import CallStyle, resolve


class WeightedReward:
    """One reward part as TRL calls it; ``__name__`` is the part name TRL logs it under."""

    def __init__(self, name: str, part: RewardPart) -> None:
        self.__name__ = name
        self.spec = part.fn
        self.fn, self.style = resolve(part.fn)
        self.params = dict(part.params)
        self.start_step = part.start_step
        if self.params and self.style is CallStyle.ARTICLE:
            raise UserError(
                f"reward part {name!r}: {part.fn} takes only `completions`, so it can't receive params "
                f"{sorted(self.params)}; give it **kwargs or drop reward.parts.{name}.params"
            )

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        state = kwargs.get("trainer_state")
        if state is not None and state.global_step < self.start_step:
            return [None] * len(completions)
        if self.style is CallStyle.TRL:
            scores = self.fn(prompts=prompts, completions=completions, **kwargs, **self.params)
        elif self.style is CallStyle.ARTICLE:
            scores = self.fn([completion_text(c) for c in completions])
        else:
            texts = [completion_text(c) for c in completions]
            scores = self.fn(texts, prompts=prompts, **{**kwargs, **self.params})
        return self._checked(scores, len(completions))

    def _checked(self, scores: Any, expected: int) -> list[float | None]:
        try:
            values = [None if s is None else float(s) for s in scores]
        except (TypeError, ValueError):
            raise UserError(
                f"reward part {self.__name__!r} ({self.spec}) must return a list of numbers or None, "
                f"got {type(scores).__name__}"
            ) from None
        if len(values) != expected:
            raise UserError(
                f"reward part {self.__name__!r} ({self.spec}) returned {len(values)} scores for {expected} completions"
            )
        return [None if v is not None and math.isnan(v) else v for v in values]


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the contents of TRL's chat messages joined."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    return "".join(completion_text(message) for message in completion)


def build_rewards(settings: RewardSettings) -> tuple[list[WeightedReward], list[float]]:
    """The reward functions and weights for ``GRPOTrainer(reward_funcs=..., args.reward_weights=...)``."""
    if not settings.parts:
        raise UserError("no reward parts configured: pick a reward, e.g. reward=customer_service")
    functions = [WeightedReward(name, part) for name, part in settings.parts.items()]
    weights = [float(part.weight) for part in settings.parts.values()]
    if not all(math.isfinite(w) for w in weights) or not any(weights):
        raise UserError(f"reward weights {weights} must be finite and not all zero")
    return functions, weights
