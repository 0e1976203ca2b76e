"""The article's remedies for out-of-memory (its problem 3), in its order, each re-planned.

Each remedy is applied alone to the job as composed and planned again, so its figure is the peak
the job would have with that one change. Remedies that can't apply (already on, GPU-only on a CPU
plan, a batch that no longer holds whole groups) and those that don't lower the peak (it lies in a
phase they don't touch) are left out.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from grpo_exp.config.batch import MIN_ADVISED_GROUP
from grpo_exp.config.schema import ExperimentConfig, MasterWeights
from grpo_exp.errors import UserError
from grpo_exp.memory.target import Target, weight_dtype_policy

# accelerate/zero3.yaml's process count: where a ZeRO-3 remedy shards when the job has one process.
ZERO3_PROCESSES = 8
# The article's low-memory batch: 2 completions per device, the rest by accumulation.
ARTICLE_BATCH = 2
SHORTEST_COMPLETION = 16  # tokens: below this a completion says little


@dataclass(frozen=True)
class MemoryRemedy:
    name: str
    change: str  # the overrides (or launch) that apply it
    peak_bytes: int
    fits: bool | None
    verdict: str | None = None  # fits | tight | does not fit

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# A remedy: (settings, target) -> (what changes, new settings, new target), or None where it can't apply.
Change = tuple[str, ExperimentConfig, Target]
RemedyFn = Callable[[ExperimentConfig, Target], Change | None]


def _smaller_batch(settings: ExperimentConfig, target: Target) -> Change | None:
    derived = copy.deepcopy(settings)
    from grpo_exp.config import batch

    batch.size_batch(derived, max(1, target.processes))
    size = derived.grpo.per_device_train_batch_size
    smaller = ARTICLE_BATCH if size > ARTICLE_BATCH and size % ARTICLE_BATCH == 0 else 1
    if size <= smaller:
        return None
    accumulation = settings.optimizer.gradient_accumulation_steps * size // smaller
    derived.grpo.per_device_train_batch_size = smaller
    derived.optimizer.gradient_accumulation_steps = accumulation
    change = f"grpo.per_device_train_batch_size={smaller} optimizer.gradient_accumulation_steps={accumulation}"
    return change, derived, target


def _checkpointing(settings: ExperimentConfig, target: Target) -> Change | None:
    if settings.grpo.gradient_checkpointing:
        return None
    new = copy.deepcopy(settings)
    new.grpo.gradient_checkpointing = True
    return "grpo.gradient_checkpointing=true", new, target


def _lora(settings: ExperimentConfig, target: Target) -> Change | None:
    if settings.model.lora.enabled:
        return None
    new = copy.deepcopy(settings)
    new.model.lora.enabled = True
    new.model.master_weights = MasterWeights.float32  # bf16 master weights are for full fine-tuning only
    return "model.lora.enabled=true", new, _retarget(new, target)


def _four_bit(settings: ExperimentConfig, target: Target) -> Change | None:
    if settings.model.quantization.load_in_4bit or not target.gpu:
        return None
    new = copy.deepcopy(settings)
    new.model.lora.enabled = True
    new.model.master_weights = MasterWeights.float32
    new.model.quantization.load_in_4bit = True
    return "model.quantization.load_in_4bit=true model.lora.enabled=true", new, _retarget(new, target)


def _eight_bit_optimizer(settings: ExperimentConfig, target: Target) -> Change | None:
    if "8bit" in settings.optimizer.name or not target.gpu:
        return None
    new = copy.deepcopy(settings)
    new.optimizer.name = "paged_adamw_8bit"
    return "optimizer.name=paged_adamw_8bit", new, target


def _fewer_tokens(settings: ExperimentConfig, target: Target) -> Change | None:
    grpo = settings.grpo
    group = max(MIN_ADVISED_GROUP, grpo.num_generations // 2) if grpo.num_generations > MIN_ADVISED_GROUP else None
    length = max(SHORTEST_COMPLETION, grpo.max_completion_length // 2)
    if group is None and length >= grpo.max_completion_length:
        return None
    new = copy.deepcopy(settings)
    words = []
    if group is not None:
        new.grpo.num_generations = group
        size = grpo.per_device_train_batch_size
        if size is not None:  # the same prompts per device, fewer completions each
            if size * group % grpo.num_generations:
                return None
            new.grpo.per_device_train_batch_size = size * group // grpo.num_generations
            words.append(f"grpo.per_device_train_batch_size={new.grpo.per_device_train_batch_size}")
        words.insert(0, f"grpo.num_generations={group}")
    if length < grpo.max_completion_length:
        new.grpo.max_completion_length = length
        words.append(f"grpo.max_completion_length={length}")
    return " ".join(words), new, target


def _zero3(settings: ExperimentConfig, target: Target) -> Change | None:
    """Shard across the job's processes, or accelerate/zero3.yaml's when it has one; each device
    keeps the job's per-device batch (so a step holds more completions)."""
    if target.sharding == "zero3" or not target.gpu:
        return None
    processes = target.processes if target.processes > 1 else ZERO3_PROCESSES
    derived = copy.deepcopy(settings)
    from grpo_exp.config import batch

    batch.size_batch(derived, max(1, target.processes))
    size = derived.grpo.per_device_train_batch_size
    launch = (
        f"accelerate launch --config_file accelerate/zero3.yaml --num_processes {processes} run.py ... "
        f"grpo.per_device_train_batch_size={size}"
    )
    return launch, derived, dataclasses.replace(target, processes=processes, sharding="zero3")


def _retarget(settings: ExperimentConfig, target: Target) -> Target:
    """LoRA and 4-bit change what the weights are stored in (the policy's 16-bit base)."""
    return dataclasses.replace(target, weight_dtype=weight_dtype_policy(settings, target.gpu, target.precision))


REMEDIES: tuple[tuple[str, RemedyFn], ...] = (
    ("smaller per-device batch + gradient accumulation", _smaller_batch),
    ("gradient checkpointing", _checkpointing),
    ("LoRA", _lora),
    ("4-bit QLoRA", _four_bit),
    ("8-bit optimizer", _eight_bit_optimizer),
    ("fewer generations / shorter completions", _fewer_tokens),
    ("DeepSpeed ZeRO-3", _zero3),
)


class _Plan(Protocol):
    peak_bytes: int
    fits: bool | None
    verdict: str | None


def find_remedies(
    settings: ExperimentConfig, target: Target, peak: int, plan_settings: Callable[[ExperimentConfig, Target], _Plan]
) -> list[MemoryRemedy]:
    """The remedies that lower ``peak``, in the article's order, each with the peak it gives
    (``plan_settings``: memory.plan_settings, which plans a changed job again)."""
    found = []
    for name, remedy in REMEDIES:
        try:
            change = remedy(settings, target)
            if change is None:
                continue
            words, new_settings, new_target = change
            plan = plan_settings(new_settings, new_target)
        except UserError:  # the change doesn't make a valid job here (e.g. its batch can't hold whole groups)
            continue
        if plan.peak_bytes < peak:
            found.append(MemoryRemedy(name, words, plan.peak_bytes, plan.fits, plan.verdict))
    return found
