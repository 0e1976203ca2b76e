"""The memory a GRPO job needs per device, by phase, from its settings and its model's shape.

Pure arithmetic: no weights, no torch. A step of TRL's GRPOTrainer goes through phases that hold
different things, and the plan's peak is the largest of them:

- ``generation``: the policy samples a generation batch of completions (KV cache, next-token
  logits) while weights, the reference model and the optimizer states stay resident;
- ``loss/backward``: one micro-batch of ``per_device_train_batch_size`` completions goes forward
  with grad (activations, TRL's chunked log-prob head) and back; its peak is where the backward
  starts, at the head, before the layers' gradients exist (unless they accumulate);
- ``optimizer step``: gradients and states together, plus the optimizer's temporaries;
- ``evaluation``: the held-out prompts' generation, in batches of ``per_device_eval_batch_size``.

Where the byte counts come from is said next to each constant; the CPU figures are measured by
``benchmarks/plan.py`` (results in ``benchmarks/plan.md``). The GPU ones follow the same code
paths (TRL 1.16, transformers 5, torch 2.13) but were not measured on a GPU here. The module is
long on purpose: each constant sits next to the one phase item that uses it.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_exp.config import batch
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.memory.architectures import Architecture, adapted, architecture, lora_parameters
from grpo_exp.memory.remedies import Remedy, find_remedies
from grpo_exp.memory.target import BYTES, DEEPSPEED, FP32, HALF, SIXTEEN_BIT, Target, job_target

if TYPE_CHECKING:
    from grpo_exp.spec import JobSpec

GIB = 1 << 30
MIB = 1 << 20
# Runtime overhead per process beyond the tensors. On a GPU: the CUDA context, cuBLAS/cuDNN
# workspaces and the caching allocator's slack (commonly 0.5-1 GiB on recent cards and drivers).
CUDA_OVERHEAD = 768 * MIB
# On the CPU: the Python heap of the trainer, the data, the tokenizer and what loads lazily,
# beyond the imports (the tiny job's measured peak minus its tensors: 54 MiB, benchmarks/plan.md).
CPU_OVERHEAD = 56 * MIB

# 4-bit NF4 (bitsandbytes): half a byte per weight, plus one fp32 absmax per block of 64 weights,
# or with double quantization an 8-bit absmax per block and one fp32 per 256 blocks.
NF4_BYTES = 0.5 + 4 / 64
NF4_DOUBLE_QUANT_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
# 8-bit optimizers (bitsandbytes): a byte per state value, plus one fp32 absmax per block of 256.
STATE_8BIT_BYTES = 1 + 4 / 256
# Optimizer states per trainable parameter, by a word in optimizer.name; Adam's two otherwise.
OPTIMIZER_STATES = {"sgd": 0, "adafactor": 0, "lion": 1}
ADAM_STATES = 2

# Activations a decoder layer saves for the backward pass, bytes per token, as
# (per hidden unit, per MLP unit, per key/value channel, per head, constant). Measured on
# transformers' Qwen2 layers (SDPA attention) with torch's saved-tensor hooks, in fp32 and under
# bf16 autocast (where RMSNorm still works in fp32): benchmarks/plan.md.
LAYER_ACTIVATIONS = {
    FP32: (32, 16, 8, 4, 8),
    HALF: (30, 8, 4, 4, 8),
}
# Outside the layers (the embedding's output, the final norm), bytes per token per hidden unit.
MODEL_ACTIVATIONS_PER_HIDDEN = 9
# A LoRA adapter with dropout saves its dropped input and mask: bytes per input element of each
# adapted layer (fp32 adapter; under autocast its matmul input is 16-bit), and per rank unit.
LORA_DROPOUT_BYTES = {FP32: 6, HALF: 4}
LORA_RANK_BYTES = {FP32: 13, HALF: 7}

# TRL 1.16's fused log-prob head (trl/kernels/chunked_logprob.py) projects tiles of at most
# TOKEN_CHUNK tokens x VOCAB_CHUNK vocabulary entries, never the whole logits.
TOKEN_CHUNK = 4096
VOCAB_CHUNK = 32768
# Without Triton (the CPU) the tile is folded with torch ops, which make temporaries of the tile's
# size: the backward holds 7 fp32 ones and a bool mask at once (measured: 8.3 tile-sized copies in
# all with the tile itself, benchmarks/plan.md).
CPU_TILE_TEMPORARIES = 7.25
KEY_AND_VALUE = 2  # the KV cache holds both, per layer, per key/value head
# transformers' sampling keeps the next-token scores in fp32: the logits, the processed scores
# and the probabilities, each (batch x vocabulary).
SAMPLING_COPIES = 3
# While the prompt is encoded (prefill), one layer's MLP is the biggest transient: gate, up and
# their product (MLP units), plus a few hidden-sized tensors.
PREFILL_MLP_COPIES = 3
PREFILL_HIDDEN_COPIES = 4
# The CPU optimizer steps one tensor at a time; Adam's update makes two temporaries of it.
CPU_STEP_TEMPORARIES = 2
# ZeRO-3 and FSDP gather a layer's 16-bit weights to run it, and prefetch the next one.
GATHERED_LAYERS = 2


@dataclass(frozen=True)
class Phase:
    name: str
    items: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True)
class MemoryPlan:
    """The phases of one job's step on one device, the peak, and what to change when it doesn't fit."""

    model: str
    architecture: Architecture
    trainable: int
    target: Target
    phases: tuple[Phase, ...]
    notes: tuple[str, ...] = ()
    remedies: tuple[Remedy, ...] = field(default=())

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def peak_bytes(self) -> int:
        return self.peak.total

    @property
    def fits(self) -> bool | None:
        return None if self.target.memory is None else self.peak_bytes <= self.target.memory

    def to_dict(self) -> dict[str, Any]:
        arch = self.architecture
        return {
            "model": self.model,
            "architecture": {
                "model_type": arch.model_type,
                "parameters": arch.parameters,
                "layers": arch.layers,
                "hidden_size": arch.hidden,
                "vocab_size": arch.vocab,
                "source": arch.source,
            },
            "trainable_parameters": self.trainable,
            "target": dataclasses.asdict(self.target) | {"device": self.target.device},
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak.name,
            "memory_bytes": self.target.memory,
            "fits": self.fits,
            "items": dict(self.peak.items),
            "phases": {p.name: {"total_bytes": p.total, "items": dict(p.items)} for p in self.phases},
            "remedies": [r.to_dict() for r in self.remedies],
            "notes": list(self.notes),
        }


def memory_plan(
    spec: JobSpec, gpu_memory: int | None = None, *, sharding: str | None = None, remedies: bool = True
) -> MemoryPlan:
    """The plan of a job spec on the device it trains on (or on a GPU of ``gpu_memory`` bytes)."""
    target = job_target(spec.settings, spec.layout, gpu_memory, sharding)
    return memory_plan_of_settings(spec.settings, target, remedies=remedies)


def memory_plan_of_settings(settings: ExperimentConfig, target: Target, *, remedies: bool = True) -> MemoryPlan:
    """The plan of composed settings on ``target``, with the article's remedies when it doesn't fit."""
    plan = plan_settings(settings, target)
    if remedies and plan.fits is False:
        found = find_remedies(settings, target, plan.peak_bytes, plan_settings)
        plan = dataclasses.replace(plan, remedies=tuple(found))
    return plan


def plan_settings(settings: ExperimentConfig, target: Target) -> MemoryPlan:
    """The plan of composed settings on ``target``: the per-device batch is derived for its process
    count first, on a copy (a spec's settings, already derived, keep theirs); a one-line
    ``UserError`` when the batch can't hold whole groups there."""
    settings = copy.deepcopy(settings)
    batch.size_batch(settings, max(1, target.processes))
    return plan_architecture(settings, architecture(settings.model), target)


def plan_architecture(cfg: ExperimentConfig, arch: Architecture, target: Target) -> MemoryPlan:
    sizes = _Sizes.of(cfg, arch, target)
    resident = _resident(sizes)
    phases = [
        Phase("generation", resident | _generation(sizes, sizes.generation_batch)),
        Phase("loss/backward", resident | _accumulated(sizes) | _loss(sizes)),
        Phase("optimizer step", resident | _gradients(sizes) | _step(sizes)),
    ]
    if _evaluates(cfg):
        phases.append(Phase("evaluation", resident | _generation(sizes, cfg.grpo.per_device_eval_batch_size)))
    phases = [Phase(p.name, {k: int(v) for k, v in p.items.items() if v}) for p in phases]
    return MemoryPlan(cfg.model.name_or_path, arch, sizes.trainable, target, tuple(phases), tuple(sizes.notes))


@dataclass
class _Sizes:
    """The numbers every phase reads, worked out once."""

    cfg: ExperimentConfig
    arch: Architecture
    target: Target
    trainable: int
    weight_bytes: int  # bytes per stored weight
    act_bytes: int  # bytes per activation (the autocast's, else the weights')
    trainable_bytes: int  # bytes per trainable weight (and its gradient, its Adam states)
    shards: int  # how many ways weights are split (ZeRO-3, FSDP)
    state_shards: int  # how many ways gradients and optimizer states are split
    generation_batch: int  # completions generated at once per device
    notes: list[str]

    @classmethod
    def of(cls, cfg: ExperimentConfig, arch: Architecture, target: Target) -> _Sizes:
        lora = cfg.model.lora
        trainable = lora_parameters(arch, lora.r, lora.target_modules) if lora.enabled else arch.parameters
        weight_bytes = BYTES[target.weight_dtype]
        if target.sharding in DEEPSPEED:
            weight_bytes = HALF
        act_bytes = HALF if target.precision in SIXTEEN_BIT else weight_bytes
        trainable_bytes = weight_bytes if not lora.enabled or target.sharding in DEEPSPEED else FP32
        n = max(1, target.processes)
        shards = n if target.sharding in ("zero3", "fsdp") else 1
        state_shards = n if target.sharding in ("zero2", "zero3", "fsdp") else 1
        generation = batch.generation_batch(cfg, n) // n
        notes = []
        if target.sharding in DEEPSPEED:
            notes.append(
                "DeepSpeed bf16: 16-bit weights and gradients on the GPU, fp32 master weights and states sharded"
            )
        return cls(
            cfg,
            arch,
            target,
            trainable,
            weight_bytes,
            act_bytes,
            trainable_bytes,
            shards,
            state_shards,
            generation,
            notes,
        )

    @property
    def lora(self) -> bool:
        return self.cfg.model.lora.enabled

    @property
    def four_bit(self) -> bool:
        return self.cfg.model.quantization.load_in_4bit

    @property
    def prompt(self) -> int:
        return self.cfg.dataset.max_prompt_tokens

    @property
    def completion(self) -> int:
        return self.cfg.grpo.max_completion_length

    @property
    def vllm(self) -> bool:
        return self.target.gpu and self.cfg.grpo.use_vllm

    @property
    def autocast_copies(self) -> int:
        """Autocast caches a 16-bit copy of each fp32 weight that requires grad, for the forward
        (and, with grad, until the backward has used it)."""
        if (
            self.target.precision in SIXTEEN_BIT
            and self.trainable_bytes == FP32
            and self.target.sharding not in DEEPSPEED
        ):
            return self.trainable * HALF // self.shards
        return 0


def _resident(s: _Sizes) -> dict[str, int]:
    """What stays on the device through the whole step (after the first optimizer step)."""
    arch, cfg = s.arch, s.cfg
    if s.four_bit:
        per = NF4_DOUBLE_QUANT_BYTES if cfg.model.quantization.double_quant else NF4_BYTES
        # peft's prepare_model_for_kbit_training casts every layer it doesn't quantize to fp32
        base = arch.linear_parameters * per + (arch.parameters - arch.linear_parameters) * FP32
    else:
        base = arch.parameters * s.weight_bytes
    items: dict[str, int] = {}
    if s.lora:
        items["weights (frozen base)"] = int(base) // s.shards
        items["LoRA adapter"] = s.trainable * s.trainable_bytes // s.shards
    else:
        items["weights"] = int(base) // s.shards
    if s.target.sharding in DEEPSPEED:
        items["fp32 master weights"] = s.trainable * FP32 // s.state_shards
    items["optimizer states"] = _optimizer_states(s)
    if cfg.grpo.beta != 0 and not s.lora:  # with LoRA, TRL's reference is the base with the adapter off
        per = HALF if s.target.sharding in DEEPSPEED else BYTES[s.target.reference_dtype]
        items["reference model"] = arch.parameters * per // s.shards
    if s.target.sharding == "ddp" and s.target.processes > 1:
        items["DDP gradient buckets"] = s.trainable * s.trainable_bytes  # allocated once, kept
    if s.vllm and cfg.grpo.vllm_mode == "colocate":
        if s.target.memory is None:
            s.notes.append("vLLM colocate takes grpo.vllm_gpu_memory_utilization of the GPU: give --gpu-memory")
        else:
            items["vLLM (colocate)"] = int(cfg.grpo.vllm_gpu_memory_utilization * s.target.memory)
    items["runtime (CUDA context)" if s.target.gpu else "runtime (CPU heap)"] = (
        CUDA_OVERHEAD if s.target.gpu else CPU_OVERHEAD
    )
    return items


def _optimizer_states(s: _Sizes) -> int:
    name = s.cfg.optimizer.name.lower()
    states = next((n for word, n in OPTIMIZER_STATES.items() if word in name), ADAM_STATES)
    if "8bit" in name:
        per = STATE_8BIT_BYTES
    elif s.target.sharding in DEEPSPEED:
        per = FP32  # DeepSpeed's optimizer keeps fp32 states
    else:
        per = s.trainable_bytes  # torch's AdamW keeps its states in the parameter's dtype
    return int(states * s.trainable * per) // s.state_shards


def _gradients(s: _Sizes) -> dict[str, int]:
    return {"gradients": s.trainable * s.trainable_bytes // s.state_shards}


def _accumulated(s: _Sizes) -> dict[str, int]:
    """The backward starts at the head, with every activation alive and no gradient yet; by its end
    the activations are freed and the gradients allocated (the optimizer step holds those). With
    gradient accumulation, the micro-batches after the first find the gradients there already."""
    if s.cfg.optimizer.gradient_accumulation_steps > 1:
        return {"gradients (accumulating)": s.trainable * s.trainable_bytes // s.state_shards}
    return {}


def _generation(s: _Sizes, completions: int) -> dict[str, int]:
    """Sampling ``completions`` at once with transformers' generate (or inside vLLM's share)."""
    arch = s.arch
    items: dict[str, int] = {}
    if s.target.sharding == "zero3" and s.cfg.grpo.ds3_gather_for_generation:
        items["weights gathered for generation"] = arch.parameters * HALF * (s.shards - 1) // s.shards
    elif s.shards > 1:
        items["gathered layers"] = arch.layer_parameters * HALF * GATHERED_LAYERS
    if s.vllm:
        return items  # the KV cache lives in vLLM's share (or on the vLLM server)
    length = s.prompt + s.completion
    items["KV cache"] = completions * length * arch.layers * arch.kv_heads * arch.head_dim * KEY_AND_VALUE * s.act_bytes
    items["sampling logits"] = completions * arch.vocab * FP32 * SAMPLING_COPIES
    width = PREFILL_MLP_COPIES * arch.intermediate + PREFILL_HIDDEN_COPIES * arch.hidden
    items["prefill"] = completions * s.prompt * width * s.act_bytes
    items["autocast weight copies"] = s.autocast_copies
    return items


def _loss(s: _Sizes) -> dict[str, int]:
    """One micro-batch forward with grad and back."""
    arch, cfg = s.arch, s.cfg
    completions = cfg.grpo.per_device_train_batch_size
    tokens = completions * (s.prompt + s.completion)
    layer = _layer_activations(s)
    other = MODEL_ACTIVATIONS_PER_HIDDEN * arch.hidden
    # TRL's fused head scores every position on the CPU, only the completions' with Triton (GPU)
    scored = completions * (s.completion if s.target.gpu else s.prompt + s.completion - 1)
    tile = min(scored, TOKEN_CHUNK) * min(arch.vocab, VOCAB_CHUNK)
    head = tile * s.act_bytes + scored * arch.hidden * (FP32 + s.act_bytes)
    if not s.target.gpu:
        head += int(CPU_TILE_TEMPORARIES * tile * FP32)
    if cfg.grpo.gradient_checkpointing:
        # each layer's input is kept; the backward then meets the head's tiles first and one
        # recomputed layer at a time after them: whichever is larger counts
        residual = FP32 if s.weight_bytes == FP32 or s.four_bit else HALF
        recomputed = tokens * (other + layer)
        items = {"activations (checkpointed)": tokens * arch.layers * arch.hidden * residual}
        items["recomputed layer" if recomputed > head else "log-prob head (chunked logits)"] = max(recomputed, head)
    else:
        items = {"activations": tokens * (arch.layers * layer + other), "log-prob head (chunked logits)": head}
    if not s.lora:
        items["lm-head gradient (fp32)"] = arch.vocab * arch.hidden * FP32
    items["autocast weight copies"] = s.autocast_copies
    if s.shards > 1:
        items["gathered layers"] = arch.layer_parameters * HALF * GATHERED_LAYERS
    return items


def _layer_activations(s: _Sizes) -> int:
    """Bytes one decoder layer saves per token (``LAYER_ACTIVATIONS``, plus LoRA's)."""
    arch = s.arch
    key = FP32 if s.act_bytes == FP32 else HALF
    per_h, per_i, per_kv, per_head, const = LAYER_ACTIVATIONS[key]
    kv = arch.kv_heads * arch.head_dim
    total = per_h * arch.hidden + per_i * arch.intermediate + per_kv * kv + per_head * arch.heads + const
    lora = s.cfg.model.lora
    if lora.enabled:
        wrapped = adapted(arch, lora.target_modules)  # averaged over the layers
        if lora.dropout > 0:
            total += LORA_DROPOUT_BYTES[key] * sum(layer.inputs * n for layer, n in wrapped) // arch.layers
        total += LORA_RANK_BYTES[key] * lora.r * sum(n for _, n in wrapped) // arch.layers
    return total


def _step(s: _Sizes) -> dict[str, int]:
    """The optimizer's temporaries: torch's foreach AdamW (the GPU default) makes one of all the
    states' size (the denominator); on the CPU it steps tensor by tensor."""
    name = s.cfg.optimizer.name.lower()
    if "8bit" in name or s.target.sharding in DEEPSPEED or not name.startswith("adam"):
        return {}
    if s.target.gpu:
        return {"optimizer step temporaries": s.trainable * s.trainable_bytes // s.state_shards}
    largest = min(s.arch.largest_tensor, s.trainable)
    return {"optimizer step temporaries": CPU_STEP_TEMPORARIES * largest * s.trainable_bytes}


def _evaluates(cfg: ExperimentConfig) -> bool:
    held_out = cfg.dataset.eval_path is not None or cfg.dataset.eval_fraction > 0
    strategy = getattr(cfg.grpo.eval_strategy, "value", cfg.grpo.eval_strategy)
    return held_out and strategy != "no"
