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

A decoder layer's activations are measured on that layer (``memory.activations``, cached per
shape), and the prompts are as long as the data's longest (``memory.prompts``); everything else is
arithmetic on the config. Where the byte counts come from is said next to each constant; the CPU
figures are measured by ``benchmarks/plan.py``, and the GPU ones held against published runs
(both in ``benchmarks/plan.md``). The module is long on purpose: each constant sits next to the
one phase item that uses it.

The verdict has three values. "fits": the peak is within ``FITS_SHARE`` of the device;
"tight": above that but within the device (the plan's own error on published runs and the
allocator's spread can take it over); "does not fit": above the device.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grpo_exp.config import batch
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.memory.activations import Activations, activations
from grpo_exp.memory.architectures import Architecture, adapted, architecture, lora_parameters
from grpo_exp.memory.prompts import longest_prompt
from grpo_exp.memory.remedies import MemoryRemedy, find_remedies
from grpo_exp.memory.target import BYTES, DEEPSPEED, FP32, HALF, SIXTEEN_BIT, Target, job_target

if TYPE_CHECKING:
    from grpo_exp.spec import JobSpec

GIB = 1 << 30
MIB = 1 << 20
# Memory outside PyTorch's allocator, per process: the CUDA context, cuBLAS/cuDNN workspaces and
# the loaded kernels (commonly 0.5-1 GiB on recent cards and drivers); a process that talks to
# others over NCCL also holds its communicators and their buffers: one DDP process on a 3-GPU
# node held 1.85 GiB outside PyTorch in all (trl issue 2972).
CUDA_RUNTIME = 768 * MIB
NCCL_RUNTIME = int(1.85 * GIB)
# PyTorch's caching allocator reserves more than the live tensors (blocks split for one size and
# freed, which a later, larger request can't use). Published GRPO runs show 0.75 % to 17 % of the
# reserved memory unused; the plan adds the middle of that spread, and the verdict's margin
# (FITS_SHARE) covers its top.
ALLOCATOR_SLACK = 0.08
# "fits" only up to this share of the device: a job planned at 90 % of its card ran out of memory
# after a few steps (issue 30), the allocator's slack reaches 17 % where the plan counts 8 %, and
# the plan's error on published runs reaches about 10 %.
FITS_SHARE = 0.85
FITS, TIGHT, NO_FIT = "fits", "tight", "does not fit"
# A CPU job's whole process is what it takes of the machine's RAM: the libraries it imports
# (torch, transformers, TRL, peft, datasets, the trainer: the resident set after importing them,
# measured by benchmarks/plan.py --libraries), and the Python heap of the trainer, the data and the
# tokenizer beyond them (the tiny job's peak minus its tensors and its libraries).
CPU_LIBRARIES = 509 * MIB
CPU_HEAP = 56 * MIB
# vLLM's CUDA graphs take memory beyond grpo.vllm_gpu_memory_utilization (vLLM issue 7553:
# about 1.7 GiB on a 7B model); sleep mode frees only what vLLM allocated in its own pool (the
# weights and the KV cache), so the graphs stay in every phase.
VLLM_CUDA_GRAPHS = int(1.7 * GIB)

# 4-bit NF4 (bitsandbytes): half a byte per weight, plus one fp32 absmax per block of 64 weights,
# or with double quantization an 8-bit absmax per block and one fp32 per 256 blocks.
NF4_BYTES = 0.5 + 4 / 64
NF4_DOUBLE_QUANT_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
# 8-bit optimizers (bitsandbytes): a byte per state value, plus one fp32 absmax per block of 256.
STATE_8BIT_BYTES = 1 + 4 / 256
# Optimizer states per trainable parameter, by a word in optimizer.name; Adam's two otherwise.
OPTIMIZER_STATES = {"sgd": 0, "adafactor": 0, "lion": 1}
ADAM_STATES = 2

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
# torch's foreach AdamW (transformers' adamw_torch on a GPU) takes the square root of every
# second-moment state at once (``_foreach_sqrt``): a temporary the size of all the states' one.
# Fused AdamW (adamw_torch_fused, transformers' default optim on torch >= 2.8), apex's and
# bitsandbytes' (8-bit, paged) step each tensor in one kernel, in place.
IN_PLACE_STEP = ("fused", "8bit", "bnb", "paged", "apex")
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
    remedies: tuple[MemoryRemedy, ...] = field(default=())
    inputs: dict[str, Any] = field(default_factory=dict)  # what the plan read: prompt length, activations

    @property
    def peak(self) -> Phase:
        return max(self.phases, key=lambda p: p.total)

    @property
    def peak_bytes(self) -> int:
        return self.peak.total

    @property
    def verdict(self) -> str | None:
        """fits | tight | does not fit (module docstring); None when the device's memory isn't known."""
        memory = self.target.memory
        if memory is None:
            return None
        if self.peak_bytes <= FITS_SHARE * memory:
            return FITS
        return TIGHT if self.peak_bytes <= memory else NO_FIT

    @property
    def fits(self) -> bool | None:
        """True only for "fits": a tight plan is not promised to run."""
        return None if self.verdict is None else self.verdict == FITS

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
            "verdict": self.verdict,
            "fits": self.fits,
            "fits_share": FITS_SHARE,
            "items": dict(self.peak.items),
            "phases": {p.name: {"total_bytes": p.total, "items": dict(p.items)} for p in self.phases},
            "inputs": dict(self.inputs),
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


def plan_architecture(settings: ExperimentConfig, arch: Architecture, target: Target) -> MemoryPlan:
    sizes = _Sizes.of(settings, arch, target)
    resident = _resident(sizes)
    phases = [
        Phase("generation", resident | _vllm(sizes, generating=True) | _generation(sizes, sizes.generation_batch)),
        Phase("loss/backward", resident | _vllm(sizes) | _accumulated(sizes) | _loss(sizes)),
        Phase("optimizer step", resident | _vllm(sizes) | _gradients(sizes) | _step(sizes)),
    ]
    if _evaluates(settings):
        evaluation = _generation(sizes, settings.grpo.per_device_eval_batch_size)
        phases.append(Phase("evaluation", resident | _vllm(sizes, generating=True) | evaluation))
    phases = [_with_runtime(sizes, Phase(p.name, {k: int(v) for k, v in p.items.items() if v})) for p in phases]
    inputs = {
        "prompt_tokens": sizes.prompt,
        "prompt_source": sizes.prompt_source,
        "activations": sizes.acts.to_dict(),
        "adapter_dtype": sizes.adapter_dtype if sizes.lora else None,
    }
    notes = tuple(dict.fromkeys(sizes.notes))  # once each, though several phases may add one
    return MemoryPlan(settings.model.name_or_path, arch, sizes.trainable, target, tuple(phases), notes, inputs=inputs)


@dataclass
class _Sizes:
    """The numbers every phase reads, worked out once."""

    settings: ExperimentConfig
    arch: Architecture
    target: Target
    trainable: int
    weight_bytes: int  # bytes per stored (unquantized) weight
    act_bytes: int  # bytes per activation (the autocast's, else the weights')
    trainable_bytes: int  # bytes per trainable weight (and its gradient, its Adam states)
    adapter_dtype: str  # a LoRA adapter's dtype as TRL trains it
    shards: int  # how many ways weights are split (ZeRO-3, FSDP)
    state_shards: int  # how many ways gradients and optimizer states are split
    generation_batch: int  # completions generated at once per device
    prompt: int  # padded prompt tokens
    prompt_source: str
    acts: Activations  # per-token bytes of a decoder layer and of the rest
    notes: list[str]

    @classmethod
    def of(cls, settings: ExperimentConfig, arch: Architecture, target: Target) -> _Sizes:
        lora = settings.model.lora
        trainable = lora_parameters(arch, lora.r, lora.target_modules) if lora.enabled else arch.parameters
        weight_bytes = BYTES[target.weight_dtype]
        if target.sharding in DEEPSPEED:
            weight_bytes = HALF
        act_bytes = HALF if target.precision in SIXTEEN_BIT else weight_bytes
        adapter = adapter_dtype(settings, target)
        trainable_bytes = BYTES[adapter] if lora.enabled else weight_bytes
        n = max(1, target.processes)
        shards = n if target.sharding in ("zero3", "fsdp") else 1
        state_shards = n if target.sharding in ("zero2", "zero3", "fsdp") else 1
        generation = batch.generation_batch(settings, n) // n
        notes = []
        if target.sharding in DEEPSPEED:
            notes.append(
                "DeepSpeed bf16: 16-bit weights and gradients on the GPU, fp32 master weights and states sharded"
            )
        agent = settings.agent
        environments = [agent.environment] if agent.environment else list(agent.environments.values())
        prompt = longest_prompt(settings.dataset, settings.model, agent.tools, environments)
        notes.append(f"prompts: {prompt.tokens} tokens, the {prompt.source}")
        acts = activations(arch.config, residual_mode(weight_bytes, target))
        if not acts.source.startswith("cached"):
            notes.append(f"activations: {acts.source}")
        return cls(
            settings,
            arch,
            target,
            trainable,
            weight_bytes,
            act_bytes,
            trainable_bytes,
            adapter,
            shards,
            state_shards,
            generation,
            prompt.tokens,
            prompt.source,
            acts,
            notes,
        )

    @property
    def lora(self) -> bool:
        return self.settings.model.lora.enabled

    @property
    def four_bit(self) -> bool:
        return self.settings.model.quantization.load_in_4bit

    @property
    def completion(self) -> int:
        return self.settings.grpo.max_completion_length

    @property
    def vllm(self) -> bool:
        return self.target.gpu and self.settings.grpo.use_vllm

    @property
    def residual_bytes(self) -> int:
        return HALF if self.acts.mode == "16-bit" else FP32

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


def residual_mode(weight_bytes: int, target: Target) -> str:
    """What the residual stream is in (``activations.MODES``): 16-bit weights (a LoRA or QLoRA base,
    bf16 master weights, DeepSpeed's 16-bit copy) give a 16-bit one; fp32 weights an fp32 one,
    with 16-bit matmuls under autocast."""
    if weight_bytes == HALF:
        return "16-bit"
    return "autocast" if target.precision in SIXTEEN_BIT else "float32"


def adapter_dtype(settings: ExperimentConfig, target: Target) -> str:
    """A LoRA adapter's dtype as it trains (``config.layout``'s policy, for the plan's launch): TRL
    1.16 casts a quantized model's trainable parameters to bf16, and the job casts them back to
    fp32 under fp16 autocast, whose grad scaler can't unscale bf16 gradients; under ZeRO-3 TRL keeps
    a LoRA adapter in the base's dtype; any other adapter is fp32."""
    if settings.model.quantization.load_in_4bit:
        return "bfloat16" if target.precision == "bf16" else "float32"
    if target.gpu and target.sharding == "zero3":
        return target.weight_dtype
    return "float32"


def _resident(s: _Sizes) -> dict[str, int]:
    """What stays on the device through the whole step (after the first optimizer step)."""
    arch, settings = s.arch, s.settings
    if s.four_bit:
        per = NF4_DOUBLE_QUANT_BYTES if settings.model.quantization.double_quant else NF4_BYTES
        # the layers bitsandbytes doesn't quantize (embeddings, lm_head, norms) stay in the compute
        # dtype, as TRL's own QLoRA leaves them (the job doesn't upcast them to fp32)
        base = arch.linear_parameters * per + (arch.parameters - arch.linear_parameters) * s.weight_bytes
    else:
        base = arch.parameters * s.weight_bytes
    items: dict[str, int] = {}
    if s.lora:
        items["weights (frozen base)"] = int(base) // s.shards
        items[f"LoRA adapter ({s.adapter_dtype})"] = s.trainable * s.trainable_bytes // s.shards
    else:
        items["weights"] = int(base) // s.shards
    if s.target.sharding in DEEPSPEED:
        items["fp32 master weights"] = s.trainable * FP32 // s.state_shards
    items["optimizer states"] = _optimizer_states(s)
    if settings.grpo.beta != 0 and not s.lora:  # with LoRA, TRL's reference is the base with the adapter off
        per = HALF if s.target.sharding in DEEPSPEED else BYTES[s.target.reference_dtype]
        items["reference model"] = arch.parameters * per // s.shards
    if s.target.sharding == "ddp" and s.target.processes > 1:
        items["DDP gradient buckets"] = s.trainable * s.trainable_bytes  # allocated once, kept
    if not s.target.gpu:
        items["libraries (torch, transformers, TRL)"] = CPU_LIBRARIES
        items["runtime (CPU heap)"] = CPU_HEAP
    return items


def _vllm(s: _Sizes, generating: bool = False) -> dict[str, int]:
    """vLLM in the training process (colocate): its share of the GPU, which sleep mode frees while
    the policy trains, and its CUDA graphs beyond that share, in every phase."""
    if not s.vllm or s.settings.grpo.vllm_mode != "colocate":
        return {}
    if s.target.memory is None:
        if generating:
            s.notes.append("vLLM colocate takes grpo.vllm_gpu_memory_utilization of the GPU: give --gpu-memory")
        return {"vLLM CUDA graphs": VLLM_CUDA_GRAPHS}
    share = int(s.settings.grpo.vllm_gpu_memory_utilization * s.target.memory)
    items = {"vLLM CUDA graphs": VLLM_CUDA_GRAPHS}
    if generating or not s.settings.grpo.vllm_enable_sleep_mode:
        items["vLLM (colocate share)"] = share
    return items


def _with_runtime(s: _Sizes, phase: Phase) -> Phase:
    """A GPU phase's tensors plus the allocator's slack on them and the memory outside PyTorch."""
    if not s.target.gpu:
        return phase
    items = dict(phase.items)
    tensors = sum(v for k, v in items.items() if not k.startswith("vLLM"))  # vLLM's share is its own pool
    items[f"allocator slack ({ALLOCATOR_SLACK:.0%})"] = int(ALLOCATOR_SLACK * tensors)
    several = s.target.processes > 1
    items["runtime (CUDA context, NCCL)" if several else "runtime (CUDA context)"] = (
        NCCL_RUNTIME if several else CUDA_RUNTIME
    )
    return Phase(phase.name, items)


def _optimizer_states(s: _Sizes) -> int:
    name = s.settings.optimizer.name.lower()
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
    if s.settings.optimizer.gradient_accumulation_steps > 1:
        return {"gradients (accumulating)": s.trainable * s.trainable_bytes // s.state_shards}
    return {}


def _generation(s: _Sizes, completions: int) -> dict[str, int]:
    """Sampling ``completions`` at once with transformers' generate (or inside vLLM's share)."""
    arch = s.arch
    items: dict[str, int] = {}
    if s.target.sharding == "zero3" and s.settings.grpo.ds3_gather_for_generation:
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
    arch, settings = s.arch, s.settings
    completions = settings.grpo.per_device_train_batch_size
    tokens = completions * (s.prompt + s.completion)
    layer = _layer_activations(s)
    other = s.acts.outside
    # TRL's fused head scores every position on the CPU, only the completions' with Triton (GPU)
    scored = completions * (s.completion if s.target.gpu else s.prompt + s.completion - 1)
    tile = min(scored, TOKEN_CHUNK) * min(arch.vocab, VOCAB_CHUNK)
    head = tile * s.act_bytes + scored * arch.hidden * (FP32 + s.act_bytes)
    if not s.target.gpu:
        head += int(CPU_TILE_TEMPORARIES * tile * FP32)
    if settings.grpo.gradient_checkpointing:
        # each layer's input is kept; the backward then meets the head's tiles first and one
        # recomputed layer at a time after them: whichever is larger counts
        recomputed = tokens * (other + layer)
        items = {"activations (checkpointed)": tokens * arch.layers * arch.hidden * s.residual_bytes}
        items["recomputed layer" if recomputed > head else "log-prob head (chunked logits)"] = max(recomputed, head)
    else:
        items = {"activations": tokens * (arch.layers * layer + other), "log-prob head (chunked logits)": head}
    if not s.lora:
        items[f"lm-head gradient ({'fp32' if s.trainable_bytes == FP32 else '16-bit'})"] = (
            arch.vocab * arch.hidden * s.trainable_bytes
        )
    items["autocast weight copies"] = s.autocast_copies
    if s.shards > 1:
        items["gathered layers"] = arch.layer_parameters * HALF * GATHERED_LAYERS
    return items


def _layer_activations(s: _Sizes) -> float:
    """Bytes one decoder layer saves per token (measured on the layer, ``memory.activations``),
    plus a LoRA adapter's."""
    arch = s.arch
    key = FP32 if s.acts.mode == "float32" else HALF
    total = s.acts.layer
    lora = s.settings.model.lora
    if lora.enabled:
        wrapped = adapted(arch, lora.target_modules)  # averaged over the layers
        if lora.dropout > 0:
            total += LORA_DROPOUT_BYTES[key] * sum(layer.inputs * n for layer, n in wrapped) / arch.layers
        total += LORA_RANK_BYTES[key] * lora.r * sum(n for _, n in wrapped) / arch.layers
    return total


def _step(s: _Sizes) -> dict[str, int]:
    """The optimizer's temporaries: torch's foreach AdamW (adamw_torch on a GPU) makes one of all
    the states' size (``IN_PLACE_STEP`` make none); on the CPU it steps tensor by tensor."""
    name = s.settings.optimizer.name.lower()
    if any(word in name for word in IN_PLACE_STEP) or s.target.sharding in DEEPSPEED or not name.startswith("adam"):
        return {}
    if s.target.gpu:
        return {"optimizer step temporaries (foreach)": s.trainable * s.trainable_bytes // s.state_shards}
    largest = min(s.arch.largest_tensor, s.trainable)
    return {"optimizer step temporaries": CPU_STEP_TEMPORARIES * largest * s.trainable_bytes}


def _evaluates(settings: ExperimentConfig) -> bool:
    held_out = settings.dataset.eval_path is not None or settings.dataset.eval_fraction > 0
    strategy = getattr(settings.grpo.eval_strategy, "value", settings.grpo.eval_strategy)
    return held_out and strategy != "no"
