"""Stateful environments an agent acts in, as TRL's GRPOTrainer takes them (``environment_factory``).

An environment is a class: ``reset(**row)`` starts a rollout (TRL passes the dataset row; a string it
returns is appended to the last user message), its public methods are the tools the model may call,
and an optional ``get_reward()`` scores the rollout from the state the model left (read by the
``environment_state`` reward part, ``rewards/agent.py``). ``agent.environment`` names one (a
registered name such as ``support_store``, or the user's ``path/to/file.py:Class`` / ``module:Class``);
``agent.environments`` maps names to several, picked per row by the dataset's ``environment`` column.

TRL shows the model each method's JSON schema (transformers' ``get_json_schema``: type hints and a
Google-style docstring), so a class the schema can't be built from is refused here, in one line, before
the model loads. The class itself never runs in the trainer: ``agents/env_runner.py`` hands TRL a
stand-in class with the same methods whose calls run in a helper process.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

from grpo_exp.agents.store import SupportStore
from grpo_exp.agents.tools import check_tool
from grpo_exp.errors import UserError
from grpo_exp.registry import Registry
from grpo_exp.user_code import is_user_spec, load_class

ENVIRONMENTS: Registry[type] = Registry("environment", hint=" (or give your own as path/to/file.py:Class)")
ENVIRONMENTS.register("support_store")(SupportStore)
RESERVED = ("reset", "get_reward")  # methods TRL calls itself; every other public method is a tool


def resolve_environment(spec: str) -> type:
    """The class ``spec`` names: a registered environment, or the user's class."""
    if is_user_spec(spec):
        return load_class(spec, "environment")
    return ENVIRONMENTS.get(spec)


def tool_methods(cls: type) -> list[tuple[str, Any]]:
    """The methods TRL exposes as tools, found as TRL finds them: functions on the class, not ``_``-named."""
    return [
        (name, fn)
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in RESERVED and not name.startswith("_")
    ]


def class_tools(cls: type) -> list[Any]:
    """The class's tools bound to the class itself, as TRL's schema reads them (no ``self``), without
    making an instance: for checking and counting them before anything of the user's runs."""
    return [types.MethodType(fn, cls) for _, fn in tool_methods(cls)]


def check_environment(cls: Any, spec: str) -> None:
    """What TRL needs of an environment: a class, a ``reset``, tools it can build a schema for, and a
    ``get_reward`` (when there is one) that takes no arguments."""
    if not inspect.isclass(cls):
        raise UserError(
            f"environment {spec!r} is a {type(cls).__name__}, not a class: give a class with reset() and tool methods"
        )
    if not inspect.isfunction(getattr(cls, "reset", None)):
        raise UserError(
            f"environment {spec!r} ({cls.__name__}) has no reset method: add def reset(self, **row) -> str | None, "
            "which starts each rollout"
        )
    for tool in class_tools(cls):
        name = tool.__name__
        check_tool(tool, f"{spec}:{name}" if not is_user_spec(spec) else f"{spec}.{name}")
    reward = getattr(cls, "get_reward", None)
    if reward is not None:
        if not inspect.isfunction(reward):
            raise UserError(f"environment {spec!r} ({cls.__name__}): get_reward must be a method, def get_reward(self)")
        required = [
            p.name
            for p in list(inspect.signature(reward).parameters.values())[1:]
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if required:
            raise UserError(
                f"environment {spec!r} ({cls.__name__}): get_reward takes {', '.join(required)}, but it is called "
                "with no arguments; read what it needs from the environment's state"
            )
        returns = _return_type(reward)
        if inspect.isclass(returns) and not issubclass(returns, int | float | type(None)):
            raise UserError(
                f"environment {spec!r} ({cls.__name__}): get_reward returns {returns.__name__}, not a number: "
                "make it return a float (the rollout's score)"
            )


def _return_type(fn: Any) -> Any:
    """``fn``'s return annotation, evaluated; None where there is none or it can't be evaluated (a
    returned value is still checked when it is called)."""
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:  # a forward reference to a name the module lacks, an invalid annotation
        return None
