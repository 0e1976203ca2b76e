"""Where a job trains, decided once: the device, the precision and the processes.

Everything after the job spec reads this ``Layout``; nothing asks the machine again. The answer
comes from cheap probes (``hardware``), before torch is imported, so a job that can't have what
it asks for (``device=cuda`` without a GPU, 4-bit loading on the CPU) fails in its preflight.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_exp import hardware
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.errors import UserError


@dataclass(frozen=True)
class Layout:
    """The job's device, precision and processes."""

    gpu: bool
    bf16: bool  # mixed precision (TRL's ``bf16``): grpo.bf16 when set, else on with a GPU
    processes: int  # training processes (WORLD_SIZE under torchrun/accelerate)
    rank: int

    @property
    def primary(self) -> bool:
        """The process that logs and writes the job's files."""
        return self.rank == 0


def decide(cfg: ExperimentConfig) -> Layout:
    """The layout ``cfg`` trains with on this machine; a one-line ``UserError`` when it can't have it."""
    gpu = cfg.device != "cpu" and hardware.cuda_available()
    if cfg.device == "cuda" and not gpu:
        raise UserError("device=cuda but no CUDA GPU is visible: use device=auto or device=cpu")
    bf16 = gpu if cfg.grpo.bf16 is None else cfg.grpo.bf16
    return Layout(gpu=gpu, bf16=bf16, processes=hardware.world_size(), rank=hardware.rank())


def check_hardware(cfg: ExperimentConfig, layout: Layout) -> list[str]:
    """What the layout rules out (an error) or changes (advice to show)."""
    quant = cfg.model.quantization
    if quant.load_in_4bit and not layout.gpu:
        raise UserError("4-bit loading (bitsandbytes) needs a CUDA GPU: set model.quantization.load_in_4bit=false")
    if quant.load_in_4bit and not hardware.installed("bitsandbytes"):
        raise UserError("model.quantization.load_in_4bit=true needs bitsandbytes: pip install -e '.[quant]'")
    if cfg.grpo.use_vllm and not layout.gpu:
        return ["grpo.use_vllm=true needs a GPU: generating with transformers on this CPU instead"]
    if cfg.grpo.use_vllm and not hardware.installed("vllm"):
        raise UserError("grpo.use_vllm=true needs vLLM: pip install -e '.[vllm]' (or set grpo.use_vllm=false)")
    return []
