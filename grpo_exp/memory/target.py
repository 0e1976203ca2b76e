"""What a plan is for: a GPU or the CPU, its memory, the processes and how they shard, and the
precision and dtypes the job's policy gives it there.

The job's own layout (``config.layout.decide``) decides precision and dtypes; a plan for another
device than the layout's (a GPU job planned from a CPU machine) follows the same policy here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.config.schema import ExperimentConfig

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
FP32 = 4
HALF = 2  # bytes of a bf16 or fp16 value
SIXTEEN_BIT = ("bf16", "fp16")
SIXTEEN_BIT_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
SHARDINGS = ("none", "ddp", "zero2", "zero3", "fsdp")
DEEPSPEED = ("zero2", "zero3")  # DeepSpeed's bf16 mode: 16-bit weights and gradients, fp32 master copies


@dataclass(frozen=True)
class Target:
    """What the plan is for: a GPU or the CPU, its memory, the processes and how they shard."""

    gpu: bool
    memory: int | None  # bytes per device; None: not known (no verdict)
    memory_source: str
    processes: int = 1
    sharding: str = "none"
    precision: str = "fp32"  # the autocast: bf16 | fp16 | fp32
    weight_dtype: str = "float32"  # what the policy's weights are stored in
    reference_dtype: str = "float32"  # the reference model's (a frozen copy: the autocast dtype on a GPU)

    @property
    def device(self) -> str:
        return "GPU" if self.gpu else "CPU"


def job_target(
    settings: ExperimentConfig,
    layout: Any,
    gpu_memory: int | None,
    sharding: str | None = None,
    simulated: bool = False,
) -> Target:
    """The target of a job: its layout's device, or a GPU when a memory size is given or the job
    needs one (4-bit weights). Precision and dtypes are the layout's (``config.layout``'s policy)
    when it decided for the same device, else this module's copy of that policy. ``simulated``:
    the layout's GPU is a planned one, whose memory only ``gpu_memory`` tells."""
    gpu = bool(layout.gpu) or gpu_memory is not None or settings.model.quantization.load_in_4bit
    processes = int(getattr(layout, "processes", 1))
    precision = _value(getattr(layout, "precision", None)) if gpu == bool(layout.gpu) else None
    if precision is None:
        precision = precision_policy(settings, gpu)
        weights = reference = weight_dtype_policy(settings, gpu, precision)
        if gpu and not settings.model.lora.enabled:
            reference = SIXTEEN_BIT_DTYPE.get(precision, "float32")
    else:
        weights = getattr(layout, "weight_dtype", None) or weight_dtype_policy(settings, gpu, precision)
        reference = getattr(layout, "reference_dtype", None) or weights
    if gpu_memory is not None:
        memory, source = gpu_memory, "--gpu-memory"
    elif gpu and (simulated or not layout.gpu):
        memory, source = None, "no GPU here: give --gpu-memory"
    else:
        memory, source = device_memory(layout)
    return Target(
        gpu=gpu,
        memory=memory,
        memory_source=source,
        processes=processes,
        sharding=sharding or sharding_from_env(processes),
        precision=precision,
        weight_dtype=weights,
        reference_dtype=reference,
    )


def _value(value: Any) -> str | None:
    """An enum's value (the layout's ``Precision``), a plain string as is."""
    return None if value is None else str(getattr(value, "value", value))


def precision_policy(settings: ExperimentConfig, gpu: bool) -> str:
    """The autocast a job gets: bf16 on a GPU (native bf16 assumed) unless grpo.bf16/fp16 say
    otherwise; none (fp32) on the CPU."""
    if not gpu or (settings.grpo.bf16 is False and not settings.grpo.fp16):
        return "fp32"
    return "fp16" if settings.grpo.fp16 else "bf16"


def weight_dtype_policy(settings: ExperimentConfig, gpu: bool, precision: str) -> str:
    """What weights are stored in: fp32 master weights for full fine-tuning (16-bit autocast on
    top) unless ``model.master_weights=bfloat16``; LoRA/QLoRA keep the frozen base (a 4-bit base's
    unquantized layers) in the model's 16-bit dtype; the CPU trains in fp32."""
    if not gpu:
        return "float32"
    model = settings.model
    if model.lora.enabled or model.quantization.load_in_4bit:
        if precision not in SIXTEEN_BIT:
            return "float32"
        if model.dtype not in BYTES:  # auto: the autocast dtype
            return SIXTEEN_BIT_DTYPE[precision]
        return "float16" if model.dtype == "bfloat16" and precision == "fp16" else model.dtype
    return str(getattr(model.master_weights, "value", model.master_weights))


def sharding_from_env(processes: int) -> str:
    """The sharding of a job started by accelerate (its launch sets these variables)."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return f"zero{os.environ.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '2')}"
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "fsdp"
    return "ddp" if processes > 1 else "none"


def device_memory(layout: Any) -> tuple[int | None, str]:
    """The memory of the layout's GPU (as the layout read it, without starting CUDA here), or this machine's RAM."""
    if layout.gpu:
        return layout.gpu_memory_bytes, f"GPU {layout.gpu_index} ({layout.gpu_name})"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024, "this machine's RAM"
    except OSError:
        pass
    return None, "unknown"
