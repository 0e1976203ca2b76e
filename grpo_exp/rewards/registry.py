"""Name -> reward-part function registry.

A reward part is a plain function ``f(completions: list[str], **kwargs) -> list[float | None]``.
``completions`` are always plain strings (the adapter in ``grpo_exp.rewards.compose`` flattens
conversational completions); ``kwargs`` carry the part's ``params`` from the config, every dataset
column as a per-completion list, and TRL's extras (``prompts``, ``trainer_state``, ...).
Return ``None`` for a completion the part does not apply to; TRL then leaves it out of the mean.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grpo_exp.errors import UserError

RewardFn = Callable[..., list[float | None]]

_REGISTRY: dict[str, RewardFn] = {}


def register(name: str) -> Callable[[RewardFn], RewardFn]:
    """Register a reward part under ``name``; a second function with the same name is a bug."""

    def add(fn: RewardFn) -> RewardFn:
        if name in _REGISTRY:
            raise ValueError(f"reward part {name!r} is registered twice")
        _REGISTRY[name] = fn
        return fn

    return add


def get(name: str) -> RewardFn:
    """The registered function called ``name``, or a one-line error listing the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UserError(
            f"unknown reward function {name!r}; known: {', '.join(names())} "
            "(or give a dotted path such as my_rewards.reward_fn)"
        ) from None


def names() -> list[str]:
    """Every registered reward part, sorted."""
    return sorted(_REGISTRY)


def registered() -> dict[str, Any]:
    """A copy of the registry, for listings and tests."""
    return dict(_REGISTRY)
