"""Loading reward functions that users write themselves, in either of the two common shapes.

``fn`` in a reward part is a registry name, ``module.function`` / ``module:function`` (imported
with the current directory on the path), or ``path/to/file.py:function``. A function may take
TRL's arguments (``prompts``, ``completions``, ``**kwargs``) or only ``completions``, as the
article's examples do.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.rewards import registry


class CallStyle(Enum):
    """How a reward function wants to be called."""

    BUILTIN = "builtin"  # registry part: plain-text completions + params + dataset columns
    TRL = "trl"  # f(prompts=..., completions=..., **kwargs) with TRL's raw completions
    ARTICLE = "article"  # f(completions) with plain-text completions, nothing else


def resolve(spec: str) -> tuple[Callable[..., Any], CallStyle]:
    """The function named by ``spec`` and how to call it; a one-line UserError when it can't be found."""
    if ":" not in spec and "." not in spec:
        return registry.get(spec), CallStyle.BUILTIN
    module_name, _, attr = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    module = _load_module(module_name, spec)
    fn = getattr(module, attr, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise UserError(f"reward {spec!r}: {module_name} has no function {attr!r} (functions there: {found})")
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


def _load_module(name: str, spec: str) -> ModuleType:
    try:
        if name.endswith(".py"):
            return _load_file(Path(name))
        cwd = str(Path.cwd())
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
        return importlib.import_module(name)
    except UserError:
        raise
    except ModuleNotFoundError as exc:
        raise UserError(
            f"reward {spec!r}: cannot import {exc.name!r}; run from the folder that holds it "
            f"or give a file path such as path/to/{name.split('.')[-1]}.py:{spec.split(':')[-1].split('.')[-1]}"
        ) from None
    except Exception as exc:
        raise UserError(f"reward {spec!r}: importing {name} failed: {type(exc).__name__}: {exc}") from None


def _load_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise UserError(f"reward file {path} does not exist (relative paths start at {Path.cwd()})")
    module_name = f"grpo_exp_user_reward_{path.stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
