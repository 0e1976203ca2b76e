"""The config's own rules, checked before anything heavy is imported: one range table, then the
rules that tie keys together. Each failure is a one-line ``UserError`` naming the key and the fix.

Choice fields need no check here: they are enums in the schema. What needs the rest of the project
(the model source, the data's columns, the reward functions) is checked where the job spec is
built (``grpo_exp.spec``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from grpo_exp.config import batch, task_checks
from grpo_exp.config.schema import ExperimentConfig, HoldFixed, MasterWeights, TinyRecipe
from grpo_exp.errors import UserError

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True)
class Bound:
    """An allowed interval; ``None`` ends are open-ended, ``*_open`` ends exclude the value.

    ``why``: the message for a value outside it, formatted with ``key``, ``value`` and ``bound``
    (by default "is out of range: it must lie in ...")."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    why: str = "{key}={value} is out of range: it must lie in {bound}"

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
COUNT = Bound(1, why="{key}={value} must be at least 1")
WARMUP_SHARE = Bound(0, 1, why="{key} is {value}: a share of the warm-up replies, between 0 and 1")

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
    "dataset.eval_samples": AT_LEAST_ONE,
    "dataset.curriculum.start_level": NON_NEGATIVE,
    "dataset.curriculum.max_level": NON_NEGATIVE,
    "model.lora.r": AT_LEAST_ONE,
    "model.lora.dropout": Bound(0, 1, high_open=True),
    "monitor.kl_threshold": NON_NEGATIVE,
    "monitor.min_reward_std": NON_NEGATIVE,
    "monitor.max_zero_std_fraction": SHARE,
    "monitor.min_improvement": NON_NEGATIVE,
    "monitor.max_logp_difference": NON_NEGATIVE,
    "monitor.window": AT_LEAST_ONE,
    "monitor.solved_window": COUNT,
    "grpo.max_sampling_rounds": NON_NEGATIVE,
    "monitor.max_rollbacks": NON_NEGATIVE,
    "monitor.collapse_drop": Bound(0, 1, low_open=True, high_open=True),
    "monitor.collapse_window": AT_LEAST_ONE,
    "monitor.collapse_kl_multiple": Bound(1),
    "monitor.healthy_every": AT_LEAST_ONE,
    "monitor.remedy.lr_factor": Bound(0, 1, low_open=True),
    "monitor.remedy.warmup_steps": NON_NEGATIVE,
    "monitor.remedy.num_generations": Bound(
        2, why="monitor.remedy.num_generations={value}: GRPO compares completions within a group, use 4 or more"
    ),
    "sweep.verdict.confidence": Bound(0, 1, low_open=True, high_open=True),
    "sweep.verdict.resamples": COUNT,
    "sweep.verdict.enough_seeds": Bound(2, why="sweep.verdict.enough_seeds={value}: an interval needs 2 seeds or more"),
    "sweep.verdict.interquartile_from": Bound(
        4, why="sweep.verdict.interquartile_from={value}: the interquartile mean drops a quarter at each end, use 4+"
    ),
    "sweep.verdict.seed": NON_NEGATIVE,
    "probe.prompts": COUNT,
    "probe.generation_batch": COUNT,
    "reward.timeout_s": NON_NEGATIVE,
    "reward.max_timeouts_in_a_row": COUNT,
    "agent.tool_timeout_s": NON_NEGATIVE,
    "agent.tool_reply_max_chars": NON_NEGATIVE,
    "adaptive.interval": COUNT,
    "adaptive.samples_per_prompt": Bound(
        2, why="adaptive.samples_per_prompt={value}: a success rate needs at least 2 samples"
    ),
    "adaptive.generation_batch": COUNT,
    "adaptive.profile_prompts": COUNT,
    "adaptive.min_generations": Bound(
        2, why="adaptive.min_generations={value}: GRPO compares completions within a group, use 4 or more"
    ),
    "adaptive.target_mixed_share": Bound(
        0,
        1,
        low_open=True,
        high_open=True,
        why="adaptive.target_mixed_share={value} must lie in (0, 1), e.g. 0.8 "
        "(the wanted share of groups whose completions don't all score alike)",
    ),
    "model.recipe.writing_chars": Bound(
        0,
        why="model.recipe.writing_chars is {value}: the length warm-up writing replies end near, "
        "in characters; 0 keeps the passages as they are",
    ),
    "model.recipe.sft_steps": AT_LEAST_ONE,
    "model.recipe.sft_warmup_steps": NON_NEGATIVE,
    **{f"model.recipe.{f.name}": WARMUP_SHARE for f in dataclasses.fields(TinyRecipe) if f.name.endswith("_share")},
}
# Sections whose keys only count while they are in use: an adaptive block that is off, or a model
# without a warm-up recipe, is not checked.
IN_USE: dict[str, Callable[[ExperimentConfig], bool]] = {
    "adaptive.": lambda settings: settings.adaptive.enabled,
    "model.recipe.": lambda settings: settings.model.recipe is not None,
}


# transformers' lr_scheduler_type values that follow a metric, not the step count: no LambdaLR for a
# rollback's remedy to scale (every other value builds one; tests/test_rollback.py checks both)
METRIC_SCHEDULERS = ("reduce_lr_on_plateau", "greedy")


def check(settings: ExperimentConfig) -> None:
    """Raise ``UserError`` for the first value out of its range or keys that can't go together."""
    skipped = tuple(prefix for prefix, used in IN_USE.items() if not used(settings))
    for key, bound in RANGES.items():
        if key.startswith(skipped):
            continue
        value = attrgetter(key)(settings)
        if value is not None and not bound.admits(value):
            raise UserError(bound.why.format(key=key, value=value, bound=bound))
    if settings.grpo.max_steps == 0 or settings.grpo.max_steps < -1:
        raise UserError(
            f"grpo.max_steps={settings.grpo.max_steps}: give a positive step count, or -1 to run grpo.num_train_epochs"
        )
    if settings.adaptive.enabled:
        _check_adaptive(settings)
    if settings.monitor.on_collapse != "warn":
        _check_rollback(settings)
    if settings.dataset.curriculum.enabled:
        _check_curriculum(settings)
    if settings.dataset.source == "reasoning_gym":
        task_checks.check_sizes(settings)


def _check_curriculum(settings: ExperimentConfig) -> None:
    """A curriculum raises a generated task's level in stages of its own, judged on held-out evaluations."""
    if settings.dataset.source != "reasoning_gym":
        raise UserError("dataset.curriculum raises a generated task's difficulty: it needs dataset=reasoning_gym")
    if not settings.dataset.eval_fraction or settings.grpo.eval_strategy == "no":
        raise UserError(
            "dataset.curriculum is judged on held-out evaluations: keep dataset.eval_fraction above 0 and "
            "grpo.eval_strategy=steps"
        )
    if settings.adaptive.enabled or settings.monitor.on_collapse == "rollback":
        raise UserError(
            "dataset.curriculum trains in stages of its own: turn off adaptive.enabled and monitor.on_collapse=rollback"
        )


def _check_rollback(settings: ExperimentConfig) -> None:
    """A rollback resumes a checkpoint of one plain run, and scales its step schedule (``LearningRateRemedy``)."""
    if settings.monitor.on_collapse == "rollback" and settings.grpo.save_steps <= 0:
        raise UserError(
            "monitor.on_collapse=rollback goes back to a checkpoint: set grpo.save_steps above 0 (or use warn or stop)"
        )
    scheduler = str(settings.optimizer.scheduler)
    if settings.monitor.on_collapse == "rollback" and scheduler in METRIC_SCHEDULERS:
        raise UserError(
            f"monitor.on_collapse=rollback scales a learning rate schedule of steps; optimizer.scheduler={scheduler} "
            "follows a metric instead: use optimizer.scheduler=constant, linear or cosine (or on_collapse=stop)"
        )
    if settings.adaptive.enabled:
        raise UserError(
            f"monitor.on_collapse={settings.monitor.on_collapse} watches a plain run; "
            "with adaptive.enabled=true use warn"
        )


def check_model(settings: ExperimentConfig) -> None:
    """The model keys that must go together (after the hardware's say: 4-bit on a CPU is the first problem)."""
    if settings.model.quantization.load_in_4bit and not settings.model.lora.enabled:
        raise UserError("4-bit weights can't be trained directly: add model.lora.enabled=true (QLoRA)")
    if settings.model.master_weights is MasterWeights.bfloat16 and settings.model.lora.enabled:
        raise UserError(
            "model.master_weights=bfloat16 is for full fine-tuning (a LoRA adapter is small and trains in float32): "
            "remove it, or set model.lora.enabled=false"
        )
    recipe = settings.model.recipe
    if recipe is not None and recipe.answer_share + recipe.cover_share > 1:
        raise UserError(
            f"model.recipe.answer_share ({recipe.answer_share}) + cover_share ({recipe.cover_share}) is over 1: "
            "they are shares of the same customer-service replies; lower one of them"
        )


def _check_adaptive(settings: ExperimentConfig) -> None:
    a = settings.adaptive
    if a.max_generations < a.min_generations:
        raise UserError(
            f"adaptive.max_generations={a.max_generations} is below adaptive.min_generations={a.min_generations}: "
            "raise max_generations or lower min_generations"
        )
    if settings.grpo.max_steps <= 0:
        raise UserError("adaptive.enabled=true trains in stages of adaptive.interval steps: set grpo.max_steps")
    if settings.grpo.hold_fixed is HoldFixed.none:
        raise UserError(
            "adaptive.enabled=true sizes the batch for each group size: use grpo.hold_fixed=prompts or completions"
        )


def allowed_groups(settings: ExperimentConfig, processes: int) -> list[int]:
    """Group sizes within the adaptive bounds for which ``grpo.hold_fixed`` derives a batch of whole groups."""
    return [
        g
        for g in range(settings.adaptive.min_generations, settings.adaptive.max_generations + 1)
        if _fits(settings, g, processes)
    ]


def check_groups(settings: ExperimentConfig, processes: int) -> tuple[int, ...]:
    """The adaptive run's allowed group sizes (empty when it is off); a one-line error when there are none."""
    if not settings.adaptive.enabled:
        return ()
    sizes = allowed_groups(settings, processes)
    if not sizes:
        a = settings.adaptive
        raise UserError(
            f"no group size in adaptive.min_generations..max_generations = {a.min_generations}..{a.max_generations} "
            f"splits the batch into whole groups (grpo.hold_fixed={settings.grpo.hold_fixed}): widen the bounds or "
            "use grpo.hold_fixed=prompts"
        )
    return tuple(sizes)


def with_group(settings: ExperimentConfig, group: int, processes: int) -> ExperimentConfig:
    """A copy of ``settings`` whose stage uses ``group`` completions per prompt, with its batch derived anew."""
    grpo = dataclasses.replace(settings.grpo, num_generations=group, per_device_train_batch_size=None)
    stage = dataclasses.replace(settings, grpo=grpo)
    batch.size_batch(stage, processes)
    return stage


def _fits(settings: ExperimentConfig, group: int, processes: int) -> bool:
    try:
        with_group(settings, group, processes)
    except UserError:
        return False
    return True


def check_halving(cfg: DictConfig) -> None:
    """A one-line error for a composed sweep config that successive halving can't run with."""
    halving, max_steps = cfg.sweep.halving, int(cfg.grpo.max_steps)
    eta, min_steps, scheduler = int(halving.eta), halving.min_steps, str(cfg.optimizer.scheduler)
    if cfg.adaptive.enabled or str(cfg.monitor.on_collapse) != "warn":
        raise UserError(
            "sweep.halving with adaptive.enabled=true or monitor.on_collapse="
            f"{cfg.monitor.on_collapse}: those runs end their stages on their own; use one or the other"
        )
    if eta < 2:
        raise UserError(f"sweep.halving.eta={eta}: keep the best 1/eta at each rung, so eta must be 2 or more (3)")
    if max_steps <= 0:
        raise UserError("sweep.halving needs grpo.max_steps: the last rung ends there")
    if min_steps is not None and not 0 < min_steps <= max_steps // eta:
        raise UserError(
            f"sweep.halving.min_steps={min_steps} must lie between 0 and grpo.max_steps/eta={max_steps // eta}, "
            "or no rung ends before the last (null: max/eta²)"
        )
    if scheduler != "constant":
        raise UserError(
            f"sweep.halving with optimizer.scheduler={scheduler}: a rung's ranking would mix learning rates that "
            "the rest of the schedule changes; use optimizer.scheduler=constant (its warm-up is kept)"
        )
