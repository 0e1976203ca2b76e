"""Name -> reward-part function registry, with each part's ceiling.

A reward part is a plain function ``f(completions: list[str], **kwargs) -> list[float | None]``.
``completions`` are plain strings (the adapter in ``grpo_exp.rewards.compose`` flattens
conversational completions), except for a part registered with ``messages=True``, which gets TRL's
messages as they are (an agent's tool calls and the tools' replies live there). ``kwargs`` carry
the part's ``params`` from the config, every dataset column as a per-completion list, and TRL's
extras (``prompts``, ``trainer_state``, ...).
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
LENGTH_PARAMS: dict[str, str] = {}  # part name -> its param that is the reply length (characters) it pays for
MESSAGE_PARTS: set[str] = set()  # parts that read TRL's chat messages (tool calls), not flattened text
get = REWARDS.get
names = REWARDS.names


def register(
    name: str, ceiling: float | None = None, length: str | None = None, messages: bool = False
) -> Callable[[RewardFn], RewardFn]:
    """Decorator adding a reward part under ``name``, with the best score it gives (None: unbounded),
    for a part that pays for a reply's length, the param holding that length in characters (the probe
    checks it fits in ``grpo.max_completion_length``), and whether it reads chat messages (``messages``)."""
    add = REWARDS.register(name)

    def add_with_ceiling(fn: RewardFn) -> RewardFn:
        added = add(fn)
        if ceiling is not None:
            CEILINGS[name] = float(ceiling)
        if length is not None:
            LENGTH_PARAMS[name] = length
        if messages:
            MESSAGE_PARTS.add(name)
        return added

    return add_with_ceiling


def asked_length(name: str, params: dict) -> int | None:
    """The reply length in characters a registered part pays for, from its params (None: it names none)."""
    value = params.get(LENGTH_PARAMS.get(name, ""))
    return int(value) if isinstance(value, int | float) else None


def ceiling(name: str) -> float | None:
    """The registered part's best score, or None when it declares none."""
    return CEILINGS.get(name)
