"""Cheap answers about the machine, without importing torch (validation must stay under a second)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def cuda_available() -> bool:
    """Whether a CUDA GPU is usable; exact once torch is loaded, a driver check before that."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    has_driver = _NVIDIA_GPUS.is_dir() and any(_NVIDIA_GPUS.iterdir())
    return has_driver or shutil.which("nvidia-smi") is not None


def installed(package: str) -> bool:
    """Whether ``package`` can be imported, without importing it."""
    return importlib.util.find_spec(package) is not None


def world_size() -> int:
    """Processes in this training job: set by accelerate/torchrun, 1 for a plain run."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_primary_process() -> bool:
    """The process that logs and writes the job's files (rank 0 under accelerate/torchrun)."""
    return os.environ.get("RANK", "0") == "0"
