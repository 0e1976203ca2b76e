"""Name -> reward-part function registry.

A reward part is a plain function ``f(completions: list[str], **kwargs) -> list[float | None]``.
``completions`` are always plain strings (the adapter in ``grpo_exp.rewards.compose`` flattens
conversational completions); ``kwargs`` carry the part's ``params`` from the config, every dataset
column as a per-completion list, and TRL's extras (``prompts``, ``trainer_state``, ...).
Return ``None`` for a completion the part does not apply to; TRL then leaves it out of the mean.
"""

from __future__ import annotations

from collections.abc import Callable

from grpo_exp.registry import Registry

RewardFn = Callable[..., list[float | None]]

REWARDS: Registry[RewardFn] = Registry("reward function", hint=" (or give a dotted path such as my_rewards.reward_fn)")
register = REWARDS.register
get = REWARDS.get
names = REWARDS.names
