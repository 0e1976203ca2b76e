"""Answers about the machine: cheap probes without torch, and what torch itself reports (``machine``).

The probes serve checks that must not import torch (``--help``, a bad config's one-line error). The
job's device and precision are decided once, in ``config.layout.decide``, from ``machine()``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
CPU_BUILD_SUFFIX = "+cpu"  # how a CPU-only torch wheel spells its version
BF16_MIN_CAPABILITY = (8, 0)  # NVIDIA GPUs compute bf16 in hardware from Ampere on; older ones emulate it


def cuda_available() -> bool:
    """Whether a CUDA GPU is usable; exact once torch is loaded, a driver check before that.

    A CPU-only torch build can't use a GPU whatever the driver says, and its version tells so
    without importing it."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") or _cpu_only_torch():
        return False
    has_driver = _NVIDIA_GPUS.is_dir() and any(_NVIDIA_GPUS.iterdir())
    return has_driver or shutil.which("nvidia-smi") is not None


def _cpu_only_torch() -> bool:
    try:
        return metadata.version("torch").endswith(CPU_BUILD_SUFFIX)
    except metadata.PackageNotFoundError:
        return False


def installed(package: str) -> bool:
    """Whether ``package`` can be imported, without importing it."""
    return importlib.util.find_spec(package) is not None


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


def driver_present() -> bool:
    """Whether an NVIDIA driver is installed, whatever torch can do with it."""
    return (_NVIDIA_GPUS.is_dir() and any(_NVIDIA_GPUS.iterdir())) or shutil.which("nvidia-smi") is not None


@dataclass(frozen=True)
class Machine:
    """What torch reports about the GPUs this process can use (simulated in tests)."""

    torch_version: str
    cuda_build: bool  # torch was built with CUDA (a ``+cpu`` wheel was not)
    driver: bool  # an NVIDIA driver is installed
    gpus: int = 0  # CUDA devices visible to this process
    name: str | None = None  # the training GPU's name
    capability: tuple[int, int] | None = None  # its compute capability
    native_bf16: bool = False  # bf16 in hardware (Ampere, compute capability 8.0, and later)
    memory_bytes: int | None = None
    kept_first: bool = False  # this process sees the first of several GPUs alone (``machine(only_first=True)``)


def machine(index: int = 0, only_first: bool = False) -> Machine:
    """torch's own answer, for the GPU ``index`` this process would train on.

    ``only_first``: a plain run on a machine with several GPUs is given the first one alone
    (``CUDA_VISIBLE_DEVICES``), set before CUDA starts; ``Machine.gpus`` still counts them all, so the
    job can say how to use them. Counting uses NVML and starts no CUDA context.
    """
    import torch

    found = Machine(torch.__version__, torch.version.cuda is not None, driver_present())
    gpus = torch.cuda.device_count() if found.cuda_build else 0
    if not gpus:
        return found
    kept_first = False
    if only_first and gpus > 1:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = visible.split(",")[0] if visible else "0"
        kept_first = torch.cuda.device_count() == 1  # not once CUDA has started: it read the variable then
    props = torch.cuda.get_device_properties(index)
    return Machine(
        found.torch_version,
        True,
        found.driver,
        gpus=gpus,
        name=props.name,
        capability=(props.major, props.minor),
        native_bf16=(props.major, props.minor) >= BF16_MIN_CAPABILITY,
        memory_bytes=props.total_memory,
        kept_first=kept_first,
    )
