"""Loading the functions users write themselves: reward parts and agent tools (and agents' environment classes).

A spec names a function as ``module.function``, ``module:function`` (imported with the current
directory on the path) or ``path/to/file.py:function``. Every failure is one line that names the
spec and what to change.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo_exp.errors import UserError


def is_user_spec(spec: str) -> bool:
    """Whether ``spec`` names the user's function (a path or dotted name), not a registered one."""
    return ":" in spec or "." in spec


def load_function(spec: str, what: str) -> Callable[..., Any]:
    """The function ``spec`` names; ``what`` ("reward", "tool") starts each error."""
    module_name, _, attr = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    module = _load_module(module_name, spec, what)
    fn = getattr(module, attr, None)
    if not callable(fn):
        found = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise UserError(f"{what} {spec!r}: {module_name} has no function {attr!r} (functions there: {found})")
    return fn


def load_class(spec: str, what: str) -> type:
    """The class ``spec`` names (an agent's environment); ``what`` starts each error."""
    module_name, _, attr = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    module = _load_module(module_name, spec, what)
    cls = getattr(module, attr, None)
    if not inspect.isclass(cls):
        defined = [n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__]
        found = sorted(n for n in defined if not n.startswith("_"))
        problem = f"has no class {attr!r}" if cls is None else f"holds a {type(cls).__name__} as {attr!r}, not a class"
        raise UserError(f"{what} {spec!r}: {module_name} {problem} (classes there: {found})")
    return cls


def _load_module(name: str, spec: str, what: str) -> ModuleType:
    try:
        if name.endswith(".py"):
            return _load_file(Path(name), what)
        cwd = str(Path.cwd())
        if cwd not in sys.path:
            sys.path.insert(0, cwd)
        return importlib.import_module(name)
    except UserError:
        raise
    except ModuleNotFoundError as exc:
        raise UserError(
            f"{what} {spec!r}: cannot import {exc.name!r}; run from the folder that holds it "
            f"or give a file path such as path/to/{name.split('.')[-1]}.py:{spec.split(':')[-1].split('.')[-1]}"
        ) from None
    except SystemExit as exc:  # sys.exit() at import would end the run silently, even with status 0
        raise UserError(f"{what} {spec!r}: importing {name} called sys.exit({exc.code!r}); remove that call") from None
    except Exception as exc:
        raise UserError(f"{what} {spec!r}: importing {name} failed: {type(exc).__name__}: {exc}") from None


def _load_file(path: Path, what: str) -> ModuleType:
    if not path.is_file():
        raise UserError(f"{what} file {path} does not exist (relative paths start at {Path.cwd()})")
    module_name = f"grpo_exp_user_{what}_{path.stem}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:  # a half-run module is not kept for the next load to return
        del sys.modules[module_name]
        raise
    return module
