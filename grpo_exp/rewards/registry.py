"""Name -> reward-part function registry, with each part's ceiling.

A reward part is a plain function ``f(completions: list[str], **kwargs) -> list[float | None]``.
``completions`` are always plain strings (the adapter in ``grpo_exp.rewards.compose`` flattens
conversational completions); ``kwargs`` carry the part's ``params`` from the config, every dataset
column as a per-completion list, and TRL's extras (``prompts``, ``trainer_state``, ...).
Return ``None`` for a completion the part does not apply to; TRL then leaves it out of the mean.

A part registers its ceiling, the best score it gives (1.0 for a check that passes, 0.0 for a
penalty that isn't triggered): a group whose completions all score it is converged, not stuck,
and the monitor and the probe tell the two apart by it.
"""

from __future__ import annotations

from collections.abc import Callable

from grpo_exp.registry import Registry

RewardFn = Callable[..., list[float | None]]

REWARDS: Registry[RewardFn] = Registry("reward function", hint=" (or give a dotted path such as my_rewards.reward_fn)")
CEILINGS: dict[str, float] = {}  # part name -> its best score, as registered
get = REWARDS.get
names = REWARDS.names


def register(name: str, ceiling: float | None = None) -> Callable[[RewardFn], RewardFn]:
    """Decorator adding a reward part under ``name``, with the best score it gives (None: unbounded)."""
    add = REWARDS.register(name)

    def add_with_ceiling(fn: RewardFn) -> RewardFn:
        added = add(fn)
        if ceiling is not None:
            CEILINGS[name] = float(ceiling)
        return added

    return add_with_ceiling


def ceiling(name: str) -> float | None:
    """The registered part's best score, or None when it declares none."""
    return CEILINGS.get(name)
