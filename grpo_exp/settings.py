"""The composed config as typed settings: interpolations resolved, reward parts checked, batch derived.

Kept apart from the schema (config.py) so the schema imports nothing of ours and the error
descriptions (config_errors.py) can read it without an import cycle.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from grpo_exp import hardware
from grpo_exp.config import ExperimentConfig, RewardPart
from grpo_exp.config_errors import describe_config_error
from grpo_exp.errors import UserError


def to_settings(cfg: DictConfig) -> ExperimentConfig:
    """The composed config as typed dataclasses, interpolations resolved; a UserError if it can't be."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(f"{missing[0]} is required: add {missing[0]}=<value>")
    try:
        settings = OmegaConf.to_object(cfg)
        assert isinstance(settings, ExperimentConfig)
    except Exception as exc:  # OmegaConf's errors name the key; make them one line
        raise UserError(describe_config_error(exc)) from None
    settings.reward.parts = {name: _reward_part(name, node) for name, node in cfg.reward.parts.items()}
    derive_batch_size(settings)
    return settings


def derive_batch_size(settings: ExperimentConfig) -> None:
    """Set the per-device batch from ``grpo.hold_fixed`` so group sizes compare at equal budgets.

    ``prompts``: every job sees ``prompts_per_step`` prompts per step, whatever its group size;
    ``completions``: every job generates ``completions_per_step`` completions per step.
    """
    grpo, accumulation = settings.grpo, settings.optimizer.gradient_accumulation_steps
    if grpo.hold_fixed == "none":
        return
    group = grpo.num_generations
    if grpo.hold_fixed == "prompts":
        completions = grpo.prompts_per_step * group
    elif grpo.hold_fixed == "completions":
        completions = grpo.completions_per_step
        if completions % group:
            fits = [g for g in range(2, completions + 1) if completions % g == 0]
            raise UserError(
                f"grpo.hold_fixed=completions: {completions} completions per step don't split into groups of "
                f"grpo.num_generations={group}; group sizes that fit: {', '.join(map(str, fits))}"
            )
    else:
        raise UserError(f"grpo.hold_fixed={grpo.hold_fixed} is not one of none, prompts, completions")
    share = accumulation * hardware.world_size()
    if completions % share:
        raise UserError(
            f"grpo.hold_fixed={grpo.hold_fixed}: {completions} completions per step don't split evenly over "
            f"optimizer.gradient_accumulation_steps x processes = {share}"
        )
    grpo.per_device_train_batch_size = completions // share


def _reward_part(name: str, node: Any) -> RewardPart:
    try:
        part = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RewardPart), node))
    except Exception as exc:
        keys = ", ".join(f.name for f in fields(RewardPart))
        raise UserError(f"reward.parts.{name}: {describe_config_error(exc)} (a part has: {keys})") from None
    assert isinstance(part, RewardPart)
    return part
