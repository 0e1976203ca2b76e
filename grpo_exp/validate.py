"""Checks that run before anything heavy is imported, so bad input fails in well under a second.

``validate`` raises a one-line ``UserError`` naming the problem and the fix, sizes the batch, and
returns the warnings worth showing (advice from the article that does not stop a run) with the
reward functions it built, so a job builds them once. Choice fields need no check here: they are
enums in the schema.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from operator import attrgetter

from grpo_exp import batch, data, hardware, models
from grpo_exp.adaptive import checks as adaptive_checks
from grpo_exp.config import ExperimentConfig
from grpo_exp.errors import UserError
from grpo_exp.models import warmup
from grpo_exp.rewards.compose import WeightedReward, build_rewards, required_columns


@dataclass(frozen=True)
class Bound:
    """An allowed interval; ``None`` ends are open-ended, ``*_open`` ends exclude the value."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def __str__(self) -> str:
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        opening = "(" if self.low_open or self.low is None else "["
        closing = ")" if self.high_open or self.high is None else "]"
        return f"{opening}{low}, {high}{closing}"


POSITIVE = Bound(0, low_open=True)
NON_NEGATIVE = Bound(0)
AT_LEAST_ONE = Bound(1)
SHARE = Bound(0, 1)
# Where TRL, the optimiser or common sense bound a value (None values are skipped: "not set").
RANGES: dict[str, Bound] = {
    "seed": NON_NEGATIVE,
    "threads": AT_LEAST_ONE,
    "optimizer.lr": POSITIVE,
    "optimizer.weight_decay": NON_NEGATIVE,
    "optimizer.warmup_steps": NON_NEGATIVE,
    "optimizer.max_grad_norm": NON_NEGATIVE,
    "optimizer.gradient_accumulation_steps": AT_LEAST_ONE,
    "optimizer.adam_beta1": Bound(0, 1, high_open=True),
    "optimizer.adam_beta2": Bound(0, 1, high_open=True),
    "grpo.prompts_per_step": AT_LEAST_ONE,
    "grpo.completions_per_step": Bound(2),
    "grpo.max_completion_length": AT_LEAST_ONE,
    "grpo.temperature": POSITIVE,
    "grpo.top_p": Bound(0, 1, low_open=True),
    "grpo.top_k": NON_NEGATIVE,
    "grpo.min_p": SHARE,
    "grpo.repetition_penalty": POSITIVE,
    "grpo.beta": NON_NEGATIVE,
    "grpo.epsilon": POSITIVE,
    "grpo.epsilon_high": POSITIVE,
    "grpo.delta": POSITIVE,
    "grpo.num_iterations": AT_LEAST_ONE,
    "grpo.num_train_epochs": POSITIVE,
    "grpo.logging_steps": POSITIVE,
    "grpo.save_steps": NON_NEGATIVE,
    "grpo.save_total_limit": AT_LEAST_ONE,
    "grpo.steps_per_generation": AT_LEAST_ONE,
    "grpo.generation_batch_size": AT_LEAST_ONE,
    "grpo.vllm_gpu_memory_utilization": Bound(0, 1, low_open=True),
    "grpo.ref_model_mixup_alpha": SHARE,
    "grpo.ref_model_sync_steps": AT_LEAST_ONE,
    "grpo.top_entropy_quantile": SHARE,
    "grpo.num_completions_to_print": NON_NEGATIVE,
    "dataset.max_prompt_tokens": AT_LEAST_ONE,
    "dataset.num_samples": AT_LEAST_ONE,
    "dataset.eval_fraction": Bound(0, 1, high_open=True),
    "model.lora.r": AT_LEAST_ONE,
    "model.lora.dropout": Bound(0, 1, high_open=True),
    "monitor.kl_threshold": NON_NEGATIVE,
    "monitor.min_reward_std": NON_NEGATIVE,
    "monitor.max_zero_std_fraction": SHARE,
    "monitor.min_improvement": NON_NEGATIVE,
    "monitor.window": AT_LEAST_ONE,
}


@dataclass
class Checked:
    """What validation found: advice to show, and the reward functions it built (the job reuses them)."""

    warnings: list[str]
    rewards: list[WeightedReward]
    weights: list[float]


def validate(cfg: ExperimentConfig) -> Checked:
    """Raise ``UserError`` for a config that cannot run; size the batch; return advice and the rewards."""
    _check_ranges(cfg)
    adaptive_checks.check(cfg)
    warnings = batch.size_batch(cfg)
    warnings += _check_hardware(cfg)
    _check_model(cfg)
    columns = data.check_dataset(cfg.dataset)
    rewards, weights = build_rewards(cfg.reward)
    if columns is not None:
        _check_columns(rewards, columns, cfg.dataset.name or cfg.dataset.path)
    return Checked(warnings, rewards, weights)


def _check_ranges(cfg: ExperimentConfig) -> None:
    for key, bound in RANGES.items():
        value = attrgetter(key)(cfg)
        if value is not None and not bound.admits(value):
            raise UserError(f"{key}={value} is out of range: it must lie in {bound}")
    if cfg.grpo.max_steps == 0 or cfg.grpo.max_steps < -1:
        raise UserError(
            f"grpo.max_steps={cfg.grpo.max_steps}: give a positive step count, or -1 to run grpo.num_train_epochs"
        )


def _check_columns(rewards: list[WeightedReward], columns: set[str], source: str | None) -> None:
    """A reward naming a column the data lacks would fail only at its first call, after the model loads."""
    for reward in rewards:
        lacking = sorted(required_columns(reward) - columns)
        if lacking:
            raise UserError(
                f"reward part {reward.__name__!r} ({reward.spec}) needs the column {lacking[0]!r}, which {source} "
                f"lacks; its columns: {', '.join(sorted(columns))}"
            )


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
        for name in (f.name for f in fields(recipe) if f.name.endswith("_share")):
            share = getattr(recipe, name)
            if not 0 <= share <= 1:
                raise UserError(f"model.recipe.{name} is {share}: a share of the warm-up replies, between 0 and 1")
        if recipe.answer_share + recipe.cover_share > 1:
            raise UserError(
                f"model.recipe.answer_share ({recipe.answer_share}) + cover_share ({recipe.cover_share}) is over 1: "
                "they are shares of the same customer-service replies; lower one of them"
            )
        if recipe.writing_chars < 0:
            raise UserError(
                f"model.recipe.writing_chars is {recipe.writing_chars}: the length warm-up writing replies end "
                "near, in characters; 0 keeps the passages as they are"
            )


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
