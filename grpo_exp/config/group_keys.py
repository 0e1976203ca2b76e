"""Keys that only count under one choice of their group, refused where they would be silently ignored.

A dataset's ``task`` is read by reasoning-gym's loader alone: ``python run.py dataset.task=chain_sum``
without ``dataset=reasoning_gym`` trained the customer-service prompts as if the key were not there.
The schema marks such fields (``schema.used_with``: the sibling key that picks the loader, and the
values that read the field); a marked key set away from its default while the sibling picks another
loader is one line naming the group options that read it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from grpo_exp.config.schema import CONF_DIR, USED_WITH, ExperimentConfig
from grpo_exp.errors import UserError


def check_group_keys(settings: ExperimentConfig) -> None:
    """A one-line ``UserError`` for the first key that no part of this job reads."""
    _check(settings, "")


def _check(node: Any, prefix: str) -> None:
    for spec in dataclasses.fields(node):
        value, key = getattr(node, spec.name), f"{prefix}{spec.name}"
        if USED_WITH in spec.metadata:
            selector, choices = spec.metadata[USED_WITH]
            chosen = getattr(node, selector)
            changed = _changed(key, value, _default(spec))
            if str(chosen) not in choices and changed is not None:
                group = prefix.rstrip(".")
                readers = _options(group, selector, choices)
                raise UserError(
                    f"{changed} has no effect here: only {prefix}{selector}={'|'.join(choices)} reads it, and this "
                    f"run's {prefix}{selector} is {chosen}; choose {' or '.join(readers)}, or leave the key out"
                )
        elif dataclasses.is_dataclass(value):
            _check(value, f"{key}.")


def _changed(key: str, value: Any, default: Any) -> str | None:
    """``key=value`` of the first leaf that differs from its default (None: none does)."""
    if dataclasses.is_dataclass(value) and dataclasses.is_dataclass(default):
        for spec in dataclasses.fields(value):
            found = _changed(f"{key}.{spec.name}", getattr(value, spec.name), getattr(default, spec.name))
            if found is not None:
                return found
        return None
    if value == default:
        return None
    return key if isinstance(value, dict | list) else f"{key}={value}"


def _default(spec: dataclasses.Field[Any]) -> Any:
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def _options(group: str, selector: str, choices: tuple[str, ...], conf_dir: Path = CONF_DIR) -> list[str]:
    """The group's options (conf/<group>/*.yaml) whose ``selector`` is one of ``choices``: what to choose instead."""
    import yaml

    found = [
        f"{group}={path.stem}"
        for path in sorted((conf_dir / group).glob("*.yaml"))
        if str((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get(selector)) in choices
    ]
    return found or [f"{group}.{selector}={choices[0]}"]
