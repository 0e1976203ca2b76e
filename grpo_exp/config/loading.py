"""The composed config as typed settings: interpolations resolved, unknown keys refused, reward parts checked.

Kept apart from the schema (schema.py) so the schema imports nothing of ours and the error
descriptions (config/errors.py) can read it without an import cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_exp.config.errors import describe_config_error, unknown_key_message
from grpo_exp.config.schema import ExperimentConfig, RewardPart
from grpo_exp.errors import UserError


def to_settings(cfg: DictConfig) -> ExperimentConfig:
    """The composed config as typed dataclasses; a one-line UserError if it can't be."""
    for key in unknown_keys(cfg):
        raise UserError(unknown_key_message(key))
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))  # resolves interpolations on its way
    except Exception as exc:  # e.g. ${grpo.nope}: OmegaConf's error names the key; make it one line
        raise UserError(describe_config_error(exc)) from None
    if missing:
        raise UserError(f"{missing[0]} is required: add {missing[0]}=<value>")
    try:
        settings = OmegaConf.to_object(cfg)
        assert isinstance(settings, ExperimentConfig)
    except Exception as exc:  # OmegaConf's errors name the key; make them one line
        raise UserError(describe_config_error(exc)) from None
    settings.reward.parts = {name: _reward_part(name, node) for name, node in cfg.reward.parts.items()}
    return settings


def unknown_keys(node: DictConfig, prefix: str = "") -> Iterator[str]:
    """Keys a ``+key=`` or ``++key=`` override slipped past the schema (OmegaConf would drop them silently)."""
    schema = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(schema):
        return
    names = {f.name for f in dataclasses.fields(schema)}
    for key in node:
        if key not in names:
            yield f"{prefix}{key}"
        elif OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key):
            continue  # nothing of its own to check (an interpolated group is checked where it points)
        elif isinstance(child := node[key], DictConfig):  # a group set to None reads as None
            yield from unknown_keys(child, f"{prefix}{key}.")


def _reward_part(name: str, node: Any) -> RewardPart:
    try:  # resolved while still in the job's config, so a param may name another key: ${grpo.max_completion_length}
        plain = OmegaConf.to_container(node, resolve=True)
        part = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RewardPart), plain))
    except Exception as exc:
        keys = ", ".join(f.name for f in dataclasses.fields(RewardPart))
        raise UserError(f"reward.parts.{name}: {describe_config_error(exc)} (a part has: {keys})") from None
    assert isinstance(part, RewardPart)
    return part
