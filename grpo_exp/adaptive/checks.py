"""Adaptive settings checked before the model loads, and the group sizes the batch rules allow."""

from __future__ import annotations

import dataclasses

from grpo_exp import batch
from grpo_exp.config import ExperimentConfig, HoldFixed
from grpo_exp.errors import UserError


def check(cfg: ExperimentConfig) -> list[int]:
    """A one-line ``UserError`` for adaptive settings that cannot run; the allowed group sizes (empty when off)."""
    a = cfg.adaptive
    if not a.enabled:
        return []
    for key in ("interval", "samples_per_prompt", "generation_batch", "profile_prompts"):
        value = getattr(a, key)
        if value is not None and value < 1:
            raise UserError(f"adaptive.{key}={value} must be at least 1")
    if a.samples_per_prompt < 2:
        raise UserError(f"adaptive.samples_per_prompt={a.samples_per_prompt}: a success rate needs at least 2 samples")
    if a.min_generations < 2:
        raise UserError(
            f"adaptive.min_generations={a.min_generations}: GRPO compares completions within a group, use 4 or more"
        )
    if a.max_generations < a.min_generations:
        raise UserError(
            f"adaptive.max_generations={a.max_generations} is below adaptive.min_generations={a.min_generations}: "
            "raise max_generations or lower min_generations"
        )
    if not 0.0 < a.target_mixed_share < 1.0:
        raise UserError(
            f"adaptive.target_mixed_share={a.target_mixed_share} must lie in (0, 1), e.g. 0.8 "
            "(the wanted share of groups whose completions don't all score alike)"
        )
    if cfg.grpo.max_steps <= 0:
        raise UserError("adaptive.enabled=true trains in stages of adaptive.interval steps: set grpo.max_steps")
    if cfg.grpo.hold_fixed is HoldFixed.none:
        raise UserError(
            "adaptive.enabled=true sizes the batch for each group size: use grpo.hold_fixed=prompts or completions"
        )
    if cfg.resume != "never":
        raise UserError(
            f"resume={cfg.resume}: an adaptive run can't be resumed yet (its stages restart from a profile); "
            "start a new run with resume=never"
        )
    sizes = allowed_groups(cfg)
    if not sizes:
        raise UserError(
            f"no group size in adaptive.min_generations..max_generations = {a.min_generations}..{a.max_generations} "
            f"splits the batch into whole groups (grpo.hold_fixed={cfg.grpo.hold_fixed}): widen the bounds or "
            "use grpo.hold_fixed=prompts"
        )
    return sizes


def allowed_groups(cfg: ExperimentConfig) -> list[int]:
    """Group sizes within the adaptive bounds for which ``grpo.hold_fixed`` derives a batch of whole groups."""
    return [g for g in range(cfg.adaptive.min_generations, cfg.adaptive.max_generations + 1) if _fits(cfg, g)]


def with_group(cfg: ExperimentConfig, group: int) -> ExperimentConfig:
    """A copy of ``cfg`` whose stage uses ``group`` completions per prompt, with its batch derived anew."""
    grpo = dataclasses.replace(cfg.grpo, num_generations=group, per_device_train_batch_size=None)
    stage = dataclasses.replace(cfg, grpo=grpo)
    batch.size_batch(stage)
    return stage


def _fits(cfg: ExperimentConfig, group: int) -> bool:
    try:
        with_group(cfg, group)
    except UserError:
        return False
    return True
