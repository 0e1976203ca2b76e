"""Loading reward functions that users write themselves, in either of the two common shapes.

``fn`` in a reward part is a registry name or the user's function (``grpo_exp.user_code``). A function may take
TRL's arguments (``prompts``, ``completions``, ``**kwargs``) or only ``completions``, as the
article's examples do.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.rewards import registry
from grpo_exp.user_code import is_user_spec, load_function


class CallStyle(Enum):
    """How a reward function wants to be called."""

    BUILTIN = "builtin"  # registry part: plain-text completions + params + dataset columns
    TRL = "trl"  # f(prompts=..., completions=..., **kwargs) with TRL's raw completions
    ARTICLE = "article"  # f(completions) with plain-text completions, nothing else


def resolve(spec: str) -> tuple[Callable[..., Any], CallStyle]:
    """The function named by ``spec`` and how to call it; a one-line UserError when it can't be found."""
    if not is_user_spec(spec):
        return registry.get(spec), CallStyle.BUILTIN
    fn = load_function(spec, "reward")
    return fn, call_style(fn, spec)


def call_style(fn: Callable[..., Any], spec: str) -> CallStyle:
    """TRL's style when the function takes ``prompts`` or ``**kwargs``, the article's when only ``completions``."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params) or any(p.name == "prompts" for p in params):
        return CallStyle.TRL
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if len(required) <= 1 and positional:
        return CallStyle.ARTICLE
    raise UserError(
        f"reward {spec!r} must take `completions` (the article's style) or "
        "`prompts, completions, **kwargs` (TRL's style)"
    )
