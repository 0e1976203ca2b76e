"""The one rule tying the group size to the batch, checked before the model loads.

TRL generates ``generation_batch_size`` completions at a time (per-device batch x processes x
``steps_per_generation``, which defaults to gradient accumulation) and needs it to hold whole
groups of ``num_generations``; it says so only after the model has loaded. ``size_batch`` derives
the per-device batch from ``grpo.hold_fixed`` (unless the user set one) and applies the same rule,
naming values that would work.
"""

from __future__ import annotations

import math

from grpo_exp.config.schema import ExperimentConfig, HoldFixed
from grpo_exp.errors import UserError

# The article: groups below 4 leave too little diversity for the in-group comparison.
MIN_ADVISED_GROUP = 4
SUGGESTIONS = 3


def size_batch(settings: ExperimentConfig, processes: int) -> list[str]:
    """Set ``grpo.per_device_train_batch_size`` and check the generation batch of ``processes`` training
    processes; returns advice."""
    grpo = settings.grpo
    group = grpo.num_generations
    if group < 2:
        raise UserError(f"grpo.num_generations={group}: GRPO compares completions within a group, use 4-8")
    if grpo.per_device_train_batch_size is None:
        grpo.per_device_train_batch_size = _derived(settings, processes)
    if grpo.per_device_train_batch_size < 1:
        raise UserError(f"grpo.per_device_train_batch_size={grpo.per_device_train_batch_size} must be at least 1")
    completions = generation_batch(settings, processes)
    if completions % group:
        raise UserError(
            f"each generation batch holds {completions} completions (grpo.per_device_train_batch_size x "
            f"processes x optimizer.gradient_accumulation_steps), not a multiple of grpo.num_generations={group}: "
            f"{_fixes(settings, completions)}"
        )
    if group < MIN_ADVISED_GROUP:
        return [
            f"grpo.num_generations={group} is below {MIN_ADVISED_GROUP}: groups this small leave too little "
            "diversity to compare completions (the article advises 4-8)"
        ]
    return []


def generation_batch(settings: ExperimentConfig, processes: int) -> int:
    """Completions TRL generates at once, as GRPOConfig computes it."""
    grpo = settings.grpo
    if grpo.generation_batch_size is not None:
        return grpo.generation_batch_size
    steps = grpo.steps_per_generation or settings.optimizer.gradient_accumulation_steps
    return grpo.per_device_train_batch_size * processes * steps


def _derived(settings: ExperimentConfig, processes: int) -> int:
    """The per-device batch that keeps ``hold_fixed`` equal across group sizes."""
    grpo, hold = settings.grpo, settings.grpo.hold_fixed
    if hold is HoldFixed.none:
        raise UserError(
            "grpo.hold_fixed=none needs grpo.per_device_train_batch_size=<completions per device>, "
            "or let grpo.hold_fixed=prompts derive it"
        )
    group = grpo.num_generations
    completions = grpo.prompts_per_step * group if hold is HoldFixed.prompts else grpo.completions_per_step
    if completions % group:
        fits = [g for g in range(2, completions + 1) if completions % g == 0]
        raise UserError(
            f"grpo.hold_fixed=completions: {completions} completions per step don't split into groups of "
            f"grpo.num_generations={group}; group sizes that fit: {', '.join(map(str, fits))}"
        )
    share = settings.optimizer.gradient_accumulation_steps * processes
    if completions % share:
        raise UserError(
            f"grpo.hold_fixed={hold}: {completions} completions per step don't split evenly over "
            f"optimizer.gradient_accumulation_steps x processes = {share}"
        )
    return completions // share


def _fixes(settings: ExperimentConfig, completions: int) -> str:
    """Nearby values that would work: batch sizes for this group, group sizes for this batch, or hold_fixed."""
    group, batch = settings.grpo.num_generations, settings.grpo.per_device_train_batch_size
    others = completions // batch
    step = group // math.gcd(group, others)
    sizes = [step * k for k in range(1, SUGGESTIONS + 1)]
    divisors = [g for g in range(2, completions + 1) if completions % g == 0]
    groups = ([g for g in divisors if g >= MIN_ADVISED_GROUP] or divisors)[:SUGGESTIONS]
    fix = f"use grpo.per_device_train_batch_size={' or '.join(map(str, sizes))}"
    if groups:
        fix += f", or grpo.num_generations={' or '.join(map(str, groups))}"
    return fix + ", or drop the batch size and let grpo.hold_fixed=prompts size it per group"


def eval_batch(settings: ExperimentConfig, prompts: int, processes: int) -> int:
    """The per-device evaluation batch: whole groups, splitting the ``prompts`` held-out prompts evenly.

    TRL scores held-out prompts per group, and its ``eval/reward`` is the mean of the batches' means,
    so a short last batch would weigh more than its share: of the batch sizes that divide the held-out
    set evenly, the one nearest ``grpo.per_device_eval_batch_size`` (ties: the larger, fewer batches).
    """
    group, world = settings.grpo.num_generations_eval or settings.grpo.num_generations, processes
    wanted = settings.grpo.per_device_eval_batch_size * world / group  # prompts per evaluation batch, all devices
    even = [k for k in range(1, prompts + 1) if prompts % k == 0 and k * group % world == 0]
    if not even:  # the devices can't share any even split: whole groups per device, as close as they come
        share = group // math.gcd(group, world)
        return math.ceil(settings.grpo.per_device_eval_batch_size / share) * share
    chosen = min(even, key=lambda k: (abs(k - wanted), -k))
    return chosen * group // world
