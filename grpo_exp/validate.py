"""Checks that run before anything heavy is imported, so bad input fails in well under a second.

``validate`` raises a one-line ``UserError`` naming the problem and the fix, and returns the
warnings worth showing (advice from the article that does not stop a run).
"""

from __future__ import annotations

import math

from grpo_exp import data, hardware, models
from grpo_exp.config import ExperimentConfig
from grpo_exp.errors import UserError
from grpo_exp.metrics import OBJECTIVES
from grpo_exp.models import warmup
from grpo_exp.rewards.compose import build_rewards

# Values TRL 1.16 accepts for these GRPOConfig fields.
LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "vespo", "luspo")
SCALE_REWARDS = ("group", "batch", "none")
VLLM_MODES = ("colocate", "server")
DEVICES = ("auto", "cpu", "cuda")
LOGGER_MODES = ("auto", "online", "offline", "disabled")
LOGGER_BACKENDS = ("wandb", "none")
# The article: groups below 4 leave too little diversity for the in-group comparison.
MIN_ADVISED_GROUP = 4
SUGGESTIONS = 3


def validate(cfg: ExperimentConfig) -> list[str]:
    """Raise ``UserError`` for a config that cannot run; return advice for one that can."""
    _check_choices(cfg)
    warnings = _check_batch(cfg)
    warnings += _check_hardware(cfg)
    _check_model(cfg)
    data.check_dataset(cfg.dataset)
    build_rewards(cfg.reward)
    return warnings


def _check_choices(cfg: ExperimentConfig) -> None:
    for key, value, allowed in (
        ("grpo.loss_type", cfg.grpo.loss_type, LOSS_TYPES),
        ("grpo.scale_rewards", cfg.grpo.scale_rewards, SCALE_REWARDS),
        ("grpo.vllm_mode", cfg.grpo.vllm_mode, VLLM_MODES),
        ("device", cfg.device, DEVICES),
        ("logger.mode", cfg.logger.mode, LOGGER_MODES),
        ("logger.backend", cfg.logger.backend, LOGGER_BACKENDS),
        ("objective", cfg.objective, OBJECTIVES),
    ):
        if value not in allowed:
            raise UserError(f"{key}={value} is not one of {', '.join(allowed)}")
    for key, value in (
        ("optimizer.lr", cfg.optimizer.lr),
        ("grpo.temperature", cfg.grpo.temperature),
        ("grpo.max_completion_length", cfg.grpo.max_completion_length),
        ("grpo.per_device_train_batch_size", cfg.grpo.per_device_train_batch_size),
        ("optimizer.gradient_accumulation_steps", cfg.optimizer.gradient_accumulation_steps),
    ):
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{key}={value} must be a positive number")
    if cfg.grpo.beta < 0:
        raise UserError(f"grpo.beta={cfg.grpo.beta} must be >= 0 (0 turns the KL penalty and its metric off)")
    if cfg.grpo.max_steps <= 0 and cfg.grpo.num_train_epochs <= 0:
        raise UserError("set grpo.max_steps > 0 or grpo.num_train_epochs > 0, or nothing trains")


def _check_batch(cfg: ExperimentConfig) -> list[str]:
    group = cfg.grpo.num_generations
    if group < 2:
        raise UserError(f"grpo.num_generations={group}: GRPO compares completions within a group, use 4-8")
    per_step = cfg.grpo.per_device_train_batch_size * cfg.optimizer.gradient_accumulation_steps
    completions = per_step * hardware.world_size()
    if completions % group:
        raise UserError(
            f"each generation batch holds grpo.per_device_train_batch_size x "
            f"optimizer.gradient_accumulation_steps x processes = {completions} completions, not a multiple "
            f"of grpo.num_generations={group}: {_batch_fixes(cfg, completions)}"
        )
    if group < MIN_ADVISED_GROUP:
        return [
            f"grpo.num_generations={group} is below {MIN_ADVISED_GROUP}: groups this small leave too little "
            "diversity to compare completions (the article advises 4-8)"
        ]
    return []


def _batch_fixes(cfg: ExperimentConfig, completions: int) -> str:
    """Nearby values that would work: batch sizes for this group size, group sizes for this batch."""
    group = cfg.grpo.num_generations
    others = completions // cfg.grpo.per_device_train_batch_size
    step = group // math.gcd(group, others)
    sizes = [step * k for k in range(1, SUGGESTIONS + 1)]
    divisors = [g for g in range(2, completions + 1) if completions % g == 0]
    groups = ([g for g in divisors if g >= MIN_ADVISED_GROUP] or divisors)[:SUGGESTIONS]
    fix = f"use grpo.per_device_train_batch_size={' or '.join(map(str, sizes))}"
    if groups:
        fix += f", or grpo.num_generations={' or '.join(map(str, groups))}"
    return fix


def _check_model(cfg: ExperimentConfig) -> None:
    models.SOURCES.get(cfg.model.source)
    if cfg.model.quantization.load_in_4bit and not cfg.model.lora.enabled:
        raise UserError("4-bit weights can't be trained directly: add model.lora.enabled=true (QLoRA)")
    recipe = cfg.model.recipe
    if cfg.model.source == "tiny" and recipe is not None:
        unknown = sorted(set(recipe.scenarios) - set(warmup.scenarios()))
        if unknown:
            raise UserError(f"model.recipe.scenarios: unknown {unknown}; known: {', '.join(warmup.scenarios())}")
        if not any(recipe.scenarios.values()):
            raise UserError("model.recipe.scenarios gives every scenario a share of 0: nothing to warm up on")


def _check_hardware(cfg: ExperimentConfig) -> list[str]:
    gpu = cfg.device != "cpu" and hardware.cuda_available()
    if cfg.device == "cuda" and not gpu:
        raise UserError("device=cuda but no CUDA GPU is visible: use device=auto or device=cpu")
    quant = cfg.model.quantization
    if quant.load_in_4bit and not gpu:
        raise UserError("4-bit loading (bitsandbytes) needs a CUDA GPU: set model.quantization.load_in_4bit=false")
    if quant.load_in_4bit and not hardware.installed("bitsandbytes"):
        raise UserError("model.quantization.load_in_4bit=true needs bitsandbytes: pip install -e '.[quant]'")
    if cfg.grpo.use_vllm and not gpu:
        return ["grpo.use_vllm=true needs a GPU: generating with transformers on this CPU instead"]
    if cfg.grpo.use_vllm and not hardware.installed("vllm"):
        raise UserError("grpo.use_vllm=true needs vLLM: pip install -e '.[vllm]' (or set grpo.use_vllm=false)")
    return []
