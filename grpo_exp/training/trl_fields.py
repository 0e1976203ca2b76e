"""The ``grpo`` group's fields as the installed GRPOConfig accepts them, across pyproject's supported range.

The group mirrors the GRPOConfig that config/trl_schema.py was generated from (``GENERATED_FROM``, the
newest releases), but the supported range reaches older ones: the vllm extra pins transformers below
5.18, whose TrainingArguments has no ``activation_checkpointing`` (added in 5.23). A field the installed
release lacks is left out while it holds its default (nothing asked for it), and refused in one line
when the user set it, since silently dropping a setting would train something else than asked.
"""

from __future__ import annotations

import dataclasses
import enum
from importlib import metadata
from typing import Any

from grpo_exp.config.trl_schema import GENERATED_FROM, TrlGrpoFields
from grpo_exp.errors import UserError


def accepted(fields: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """``fields`` less the ``grpo`` fields outside ``known`` (the installed GRPOConfig's) that hold their default.

    Raises UserError for the first such field set to anything else. Fields other groups set (not in
    the ``grpo`` group's schema) pass through: those exist in every supported release."""
    defaults = schema_defaults()
    kept = {}
    for name, value in fields.items():
        if name in known or name not in defaults:
            kept[name] = value
        elif value != defaults[name]:
            raise UserError(
                f"grpo.{name}={value!r} needs a newer release than the installed {installed()} (the grpo group "
                f"mirrors {_stack(GENERATED_FROM)}): upgrade them, or leave grpo.{name} at its default "
                f"({defaults[name]!r})"
            )
    return kept


def schema_defaults() -> dict[str, Any]:
    """Each ``grpo`` schema field's default, TRL's own at generation time (enum members as strings)."""
    defaults = {}
    for f in dataclasses.fields(TrlGrpoFields):
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        defaults[f.name] = value.value if isinstance(value, enum.Enum) else value
    return defaults


def installed() -> str:
    return _stack({name: metadata.version(name) for name in GENERATED_FROM})


def _stack(versions: dict[str, str]) -> str:
    return " with ".join(f"{name} {version}" for name, version in versions.items())
