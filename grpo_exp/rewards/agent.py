"""Reward parts for agents that call tools: the right call, a final reply built on its result, and
the state an environment was left in.

All read TRL's chat messages (registered with ``messages=True``): with tools, a completion is the
model's first turn (``tool_calls`` parsed from its text), the tools' replies (role ``tool``) and the
model's later turns. ``tool_call`` and ``states_fact`` score 1.0 or 0.0, so a part's mean is the share
of replies that did it; ``environment_state`` scores what the environment's ``get_reward`` says.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from grpo_exp.deadline import Expired
from grpo_exp.rewards.registry import register

Messages = Sequence[Mapping[str, Any]]
ENVIRONMENT_PART = "environment_state"  # the part that reads an environment's get_reward
# What an episode that did everything right scores, by convention (the shipped store's get_reward gives 1.0);
# an environment that scores on another scale says so with the part's own ``ceiling`` in reward.parts.
ENVIRONMENT_CEILING = 1.0


@register(ENVIRONMENT_PART, ceiling=ENVIRONMENT_CEILING, messages=True)
def environment_state(
    completions: list[Messages], *, environments: Sequence[Any] | None = None, log_metric: Any = None, **_: Any
) -> list[float | None]:
    """Each rollout's score from its environment's ``get_reward()`` (run in the environment's process,
    ``agents/env_runner.py``): None where the environment has no ``get_reward``, its reset failed or
    ``get_reward`` raised. A ``get_reward`` past ``agent.tool_timeout_s`` leaves the batch unscored as a
    part past its time limit does (``reward.on_timeout``, ``reward.max_timeouts_in_a_row``); one that
    returns no number fails the run. Also logs the episodes' turns and tool calls by name."""
    if not environments:
        return [None] * len(completions)
    from grpo_exp.agents.env_runner import TURNS, RewardHung

    try:
        scores = [env._reward() if env._owns_reward else None for env in environments]
    except RewardHung as exc:
        raise Expired(str(exc)) from None
    if log_metric is not None:
        log_metric(TURNS, sum(_turns(c) for c in completions) / len(completions))
        for key, value in environments[0]._runner.take_metrics(len(environments)).items():
            log_metric(key, value)
    return scores


def _turns(completion: Messages | str) -> int:
    """The model's turns in an episode (one without tool calls is a single turn)."""
    if isinstance(completion, str):
        return 1
    return sum(1 for message in completion if message.get("role") == "assistant")


@register("tool_call", ceiling=1.0, messages=True)
def tool_call(
    completions: list[Messages],
    *,
    tool_column: str,
    expect: Mapping[str, str],
    tools: Sequence[str],
    **columns: Any,
) -> list[float | None]:
    """1.0 where the first tool the model calls is the record's (column ``tool_column``) with valid
    arguments: they bind to the tool's signature (``tools``: the job's ``agent.tools``), each has its
    hinted type and is not empty, and each argument named in ``expect`` (argument -> column) equals
    the record's value. A record without a tool to call is not scored (None)."""
    signatures = _signatures(tuple(tools))
    wanted = columns[tool_column]
    scores: list[float | None] = []
    for i, completion in enumerate(completions):
        if not wanted[i]:
            scores.append(None)
            continue
        call = first_call(completion)
        right = (
            call is not None
            and call[0] == wanted[i]
            and call[0] in signatures
            and _valid(call[1], signatures[call[0]])
            and all(str(call[1].get(arg, "")).strip() == str(columns[column][i]) for arg, column in expect.items())
        )
        scores.append(1.0 if right else 0.0)
    return scores


@register("states_fact", ceiling=1.0, messages=True)
def states_fact(completions: list[Messages], *, column: str, **columns: Any) -> list[float | None]:
    """1.0 where the model's last turn, written after a tool's reply, contains the record's fact
    (column ``column``: what the tool returns and the customer asked for, e.g. a delivery date)."""
    scores: list[float | None] = []
    for completion, fact in zip(completions, columns[column], strict=True):
        if not fact:
            scores.append(None)
            continue
        answer = final_reply(completion)
        scores.append(1.0 if answer is not None and str(fact) in answer else 0.0)
    return scores


def first_call(completion: Messages | str) -> tuple[str, dict[str, Any]] | None:
    """The name and arguments of the first tool call in a completion, or None without one."""
    if isinstance(completion, str):
        return None
    for message in completion:
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            arguments = function.get("arguments")
            return str(function.get("name")), arguments if isinstance(arguments, dict) else {}
    return None


def final_reply(completion: Messages | str) -> str | None:
    """The text of the model's last turn when a tool replied before it; None when no tool did."""
    if isinstance(completion, str):
        return None
    messages = list(completion)
    tool_seen = False
    for message in messages[:-1]:
        tool_seen = tool_seen or message.get("role") == "tool"
    last = messages[-1] if messages else {}
    if not tool_seen or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    return str(last.get("content") or "")


@functools.cache
def _signatures(specs: tuple[str, ...]) -> dict[str, inspect.Signature]:
    """Each tool's signature by name, its annotations evaluated (once per job's tools, not per batch)."""
    from grpo_exp.agents.tools import resolve_tool

    return {(fn := resolve_tool(spec)).__name__: inspect.signature(fn, eval_str=True) for spec in specs}


def _valid(arguments: dict[str, Any], signature: inspect.Signature) -> bool:
    """The arguments bind to the signature, each of its hinted type (where that is a plain type) and not empty."""
    try:
        bound = signature.bind(**arguments)
    except TypeError:
        return False
    for name, value in bound.arguments.items():
        hint = signature.parameters[name].annotation
        if isinstance(hint, type) and not isinstance(value, hint):
            return False
        if value is None or (isinstance(value, str) and not value.strip()):
            return False
    return True
