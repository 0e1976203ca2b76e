"""A task and its settings, checked before the model loads; each error names the key as the user wrote it.

reasoning-gym's task configs are dataclasses with typed fields, most with a ``validate()``, but
neither holds on its own: a field typed ``int`` takes 2.5 without a word (and the first problem fails
in ``randrange``), and few sizes are bounded (chain_sum's ``max_digits=100000`` fails only when a
number is printed). So each setting is checked against its field's type, the config's own
``validate()`` runs, and one trial problem is generated under a time limit. Where the task refuses
its settings, the key to blame is the one that fails on its own over the task's defaults.
A composite's entries are checked the same way, each under its own key
(``dataset.task_settings.datasets[0].config.max_terms``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import signal
import threading
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from enum import Enum
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.tasks.problems import COMPOSITE, DRAW_FIELDS, Refused, task_config

SETTINGS = "dataset.task_settings"
COMPOSITE_ENTRY = ("name", "weight", "config")  # the keys of one entry of a composite's datasets
# A first problem that takes longer than this stalls the job: the preset's 2000 training problems would
# take over 16 hours. knight_swap, the slowest task at its defaults, takes 0.6-2 s a problem on 2 busy cores.
TRIAL_LIMIT_S = 30.0


class _TooSlow(BaseException):
    """The trial problem's time ran out. Not an Exception, so a task's own ``except Exception`` lets it through."""


def check_task(task: str | None, settings: Mapping[str, Any]) -> None:
    """One line naming the key and the fix: an unknown task, a setting it does not take, a value of the
    wrong type or one it refuses, settings it can't generate a problem with."""
    if not task:
        raise UserError("dataset=reasoning_gym needs a task: add dataset.task=<name>, e.g. dataset.task=chain_sum")
    _check(str(task), dict(settings), "dataset.task", SETTINGS)


def _check(task: str, settings: dict[str, Any], name_key: str, where: str) -> None:
    """``task`` (written at ``name_key``) with ``settings`` (at ``where``)."""
    from reasoning_gym.factory import DATASETS

    _check_name(task, name_key)
    config_class = DATASETS[task][1]
    fields = {f.name: f for f in dataclasses.fields(config_class) if f.name not in DRAW_FIELDS}
    hints = _hints(config_class)
    for key, value in settings.items():
        if key not in fields:
            raise UserError(f"{where}.{key}: {task} takes no setting {key!r}; its settings: {', '.join(fields)}")
        if task == COMPOSITE:
            continue
        if not _admits(value, hints.get(key, Any)):
            raise UserError(
                f"{where}.{key}={_shown(value)}: {task}'s {key} is {_describe(hints[key])} "
                f"(its default: {_shown(_default(fields[key]))})"
            )
    if task == COMPOSITE:
        _check_composite(settings.get("datasets"), f"{where}.datasets")
    try:
        task_config(task, settings, seed=0, size=1)
    except Refused as refused:
        blamed = _culprits(settings, lambda alone: _refuses(task, alone))
        raise UserError(f"{_written(settings, blamed, where)}: {task} refused: {refused.reason}") from None
    if task != COMPOSITE:  # a composite's tasks had their trial each
        _check_trial(task, settings, where, fields)


def _check_name(task: str, key: str) -> None:
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:
        close = difflib.get_close_matches(task, DATASETS, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        names = ", ".join(sorted(DATASETS))
        raise UserError(f"{key}={task}: no such reasoning-gym task; {hint}the {len(DATASETS)} tasks: {names}")


def _check_composite(datasets: Any, where: str) -> None:
    """A composite's ``datasets``: a list of {name, weight, config}, each task once, each checked as a task."""
    if not isinstance(datasets, list) or not datasets:
        raise UserError(
            f"dataset.task=composite needs {where}: a list of {{name, weight, config}}, "
            "e.g. [{name: chain_sum, weight: 1, config: {max_terms: 3}}]"
        )
    seen: dict[str, int] = {}
    for i, item in enumerate(datasets):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping) or set(item) - set(COMPOSITE_ENTRY):
            raise UserError(f"{at}: {_shown(item)} is not {{name, weight, config}}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise UserError(f"{at}.name is missing: give a reasoning-gym task, e.g. name: chain_sum")
        if name in seen:
            raise UserError(
                f"{at}.name={name}: {name} is also {where}[{seen[name]}]; a composite takes each task once "
                "(give it one entry, with the weights added)"
            )
        seen[name] = i
        weight = item.get("weight", 1.0)
        if not _admits(weight, float) or weight <= 0:
            raise UserError(f"{at}.weight={_shown(weight)}: give a positive number, the task's share of the draws")
        config = item.get("config") or {}
        if not isinstance(config, Mapping):
            raise UserError(f"{at}.config={_shown(config)}: give the task's settings as a mapping, e.g. {{}}")
        _check(name, dict(config), f"{at}.name", f"{at}.config")


def _check_trial(task: str, settings: dict[str, Any], where: str, fields: Mapping[str, dataclasses.Field]) -> None:
    """One problem from the settings, within ``TRIAL_LIMIT_S``: a setting that fails or stalls is named now."""
    failure = _trial(task, settings)
    if failure is None:
        return
    blamed = _culprits(settings, lambda alone: _trial(task, alone) is not None)
    defaults = ", ".join(f"{key}: {_shown(_default(fields[key]))}" for key in blamed)
    fix = f"choose a value closer to the default ({defaults})" if blamed else "choose other settings"
    raise UserError(f"{_written(settings, blamed, where)}: {task} can't generate a problem with it ({failure}); {fix}")


def _trial(task: str, settings: Mapping[str, Any]) -> str | None:
    """Why ``task`` can't generate its first problem with ``settings`` in time (None: it can)."""
    from reasoning_gym.factory import DATASETS

    try:
        config = task_config(task, settings, seed=0, size=1)
    except Refused as refused:
        return refused.reason
    try:
        with _time_limit(TRIAL_LIMIT_S):
            DATASETS[task][0](config=config)[0]
    except _TooSlow:
        return f"no problem within {TRIAL_LIMIT_S:g} s"
    except Exception as exc:  # whatever the task's generator raises, said in the one line
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    return None


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """``_TooSlow`` after ``seconds``, by SIGALRM; no limit off the main thread or while another timer runs."""
    if (
        not hasattr(signal, "SIGALRM")
        or threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _refuses(task: str, settings: Mapping[str, Any]) -> bool:
    try:
        task_config(task, settings, seed=0, size=1)
    except Refused:
        return True
    return False


def _culprits(settings: Mapping[str, Any], fails: Callable[[dict[str, Any]], bool]) -> list[str]:
    """The settings to blame: the first that ``fails`` on its own over the task's defaults, else all of
    them (they fail together; none when the defaults do)."""
    if len(settings) < 2:  # no one else to blame, and a trial that stalled isn't run again
        return list(settings)
    alone = next((key for key in settings if fails({key: settings[key]})), None)
    return [alone] if alone is not None else list(settings)


def _written(settings: Mapping[str, Any], keys: list[str], where: str) -> str:
    """``keys`` as the user wrote them: ``dataset.task_settings.max_digits=100000``."""
    if not keys:
        return f"{where} (the task's defaults)"
    return ", ".join(f"{where}.{key}={_shown(settings[key])}" for key in keys)


def _hints(config_class: type) -> dict[str, Any]:
    """The config's field types; none where reasoning-gym's annotations don't resolve (then values aren't judged)."""
    try:
        return typing.get_type_hints(config_class)
    except Exception:  # a forward reference that doesn't resolve: the task's own validate() still runs
        return {}


def _admits(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the field type ``hint``; a type a config file can't write (a date, a nested
    config) admits anything, left to the task's own checks."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_admits(value, arm) for arm in args)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in args
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return value in {member.value for member in hint}
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        if origin is tuple and len(args) > 1 and Ellipsis not in args:  # a fixed-length tuple
            return len(value) == len(args) and all(_admits(v, arm) for v, arm in zip(value, args, strict=True))
        items = [arm for arm in args if arm is not Ellipsis]
        return all(_admits(v, items[0]) for v in value) if items else True
    return True


def _describe(hint: Any) -> str:
    """``hint`` as a user reads it: "a whole number", "a list of strings", …"""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        arms = [arm for arm in args if arm is not type(None)]
        described = " or ".join(_describe(arm) for arm in arms)
        return f"{described} or null" if len(arms) < len(args) else described
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "one of " + ", ".join(str(member.value) for member in hint)
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        items = [arm for arm in args if arm is not Ellipsis]
        return f"a list of {_plural(items[0])}" if items else "a list"
    names = {bool: "true or false", int: "a whole number", float: "a finite number", str: "a string"}
    return names.get(hint, str(hint))


def _plural(hint: Any) -> str:
    plurals = {bool: "true/false values", int: "whole numbers", float: "finite numbers", str: "strings"}
    return plurals.get(hint, f"items each {_describe(hint)}")


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _shown(value: Any) -> str:
    """A value as written in the config: strings bare, containers as their items."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_shown(v)}" for k, v in value.items()) + "}"
    return "null" if value is None else str(value)
