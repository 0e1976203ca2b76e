"""Cheap answers about the machine, without importing torch (validation must stay under a second).

These are probes; the job's decision from them is made once, in ``config.layout.decide``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
CPU_BUILD_SUFFIX = "+cpu"  # how a CPU-only torch wheel spells its version


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
