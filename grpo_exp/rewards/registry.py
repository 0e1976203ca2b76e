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
PARAM_CHECKS: dict[str, Callable[[dict], None]] = {}  # part name -> what refuses bad params before the model loads
get = REWARDS.get
names = REWARDS.names


def register(
    name: str,
    ceiling: float | None = None,
    length: str | None = None,
    messages: bool = False,
    check: Callable[[dict], None] | None = None,
) -> Callable[[RewardFn], RewardFn]:
    """Decorator adding a reward part under ``name``, with the best score it gives (None: unbounded),
    for a part that pays for a reply's length, the param holding that length in characters (the probe
    checks it fits in ``grpo.max_completion_length``), whether it reads chat messages (``messages``),
    and ``check(params)``, which raises a one-line UserError for params the part would refuse: it runs
    when the job is validated, so a bad value stops the job before the model loads."""
    add = REWARDS.register(name)

    def add_with_ceiling(fn: RewardFn) -> RewardFn:
        added = add(fn)
        if ceiling is not None:
            CEILINGS[name] = float(ceiling)
        if length is not None:
            LENGTH_PARAMS[name] = length
        if messages:
            MESSAGE_PARTS.add(name)
        if check is not None:
            PARAM_CHECKS[name] = check
        return added

    return add_with_ceiling


def asked_length(name: str, params: dict) -> int | None:
    """The reply length in characters a registered part pays for, from its params (None: it names none)."""
    value = params.get(LENGTH_PARAMS.get(name, ""))
    return int(value) if isinstance(value, int | float) else None


def check_params(name: str, params: dict) -> None:
    """Refuse (UserError) params the registered part ``name`` would refuse when called; see ``register``."""
    check = PARAM_CHECKS.get(name)
    if check is not None:
        check(params)


def ceiling(name: str) -> float | None:
    """The registered part's best score, or None when it declares none."""
    return CEILINGS.get(name)
