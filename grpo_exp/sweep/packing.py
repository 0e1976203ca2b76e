"""How many of a sweep's jobs run at once on this machine, and which GPU each one takes.

``hydra.launcher.n_jobs=auto`` takes the fewest jobs that every bound allows, the same bounds on the
CPU and on GPUs (``plan_slots``), and says which one decided:

- the cores: ``cores // threads`` of the job with the most torch threads (a job without ``threads``
  runs torch's default, every core, so one at a time);
- host memory: the largest job's process (a CPU job's whole memory plan; a GPU job's libraries, its
  CUDA runtime on the host and its weights as they load, ``host_bytes``) into the memory available
  now, ``hydra.launcher.memory_margin`` of it kept free;
- GPU memory, per GPU: the largest GPU job's planned peak (``memory.estimate.memory_plan``), which
  counts each process's own CUDA context (``memory.estimate.CUDA_RUNTIME``) per job, with the margin
  of each GPU kept free for the plan's error.

A job is given the GPU with the fewest jobs on it (``GRPO_EXP_GPU``, which the job keeps alone), so a
given ``n_jobs`` spreads over the GPUs as job number modulo their count.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grpo_exp.errors import UserError

if TYPE_CHECKING:
    from grpo_exp.config.schema import ExperimentConfig

AUTO = "auto"
GIVEN = "hydra.launcher.n_jobs"  # the bound named when n_jobs is a number: the user's
GIB = 1 << 30
MIB = 1 << 20
# What starting CUDA adds to a process's host memory, beyond the libraries a CPU job imports (the
# driver, the CUDA runtime, cuBLAS and cuDNN mapped in): torch 2.2 + CUDA 11.8 on an RTX 3090, lazy
# module loading, peaked at 2,056,600 kB resident against 322,040 kB without CUDA (pytorch issue
# 113326, /usr/bin/time -v), so 1,734,560 kB. Counted once per GPU job, so library pages processes
# share are counted in each: the host bound errs on the safe side.
CUDA_HOST_RUNTIME = 1_734_560 * 1024
_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")  # cgroup v2: memory.max (a limit or "max") and memory.current


@dataclass(frozen=True)
class Gpu:
    index: int
    memory_bytes: int


@dataclass(frozen=True)
class Host:
    """What the packing reads of the machine (this one, or one given to ``python -m grpo_exp.plan``)."""

    cores: int
    host_memory_bytes: int | None  # available to new processes now; None: unknown (the bound is skipped)
    gpus: tuple[Gpu, ...] = ()


@dataclass(frozen=True)
class Needs:
    """What the sweep's most demanding jobs take of a machine (each figure its own largest job's)."""

    threads: int | None  # the most torch threads a job runs; None: some job runs torch's default, every core
    host_bytes: int | None  # the most host memory a job's process takes (None: not planned)
    gpu_bytes: int | None  # the largest GPU job's planned peak, its CUDA context included (None: no GPU job)


@dataclass(frozen=True)
class Ceiling:
    """How many jobs one resource allows at a time, and why."""

    jobs: int
    name: str  # "the cores" | "host memory" | "GPU memory" | GIVEN
    why: str  # the figures it came from


@dataclass
class GpuSlots:
    """The jobs each GPU may hold (``room``: GPU index -> jobs) and those running on it now."""

    room: dict[int, int]
    running: dict[int, int] = field(default_factory=dict)  # GPU index -> jobs on it

    @property
    def capacity(self) -> int:
        return sum(self.room.values())

    def take(self) -> int:
        """The GPU for the next job: of those with room, the one with the fewest jobs (lowest index among equals)."""
        free = [g for g in self.room if self.running.get(g, 0) < self.room[g]]
        if not free:
            raise RuntimeError("no GPU slot free: start a job only when one ended")
        index = min(free, key=lambda g: (self.running.get(g, 0), g))
        self.running[index] = self.running.get(index, 0) + 1
        return index

    def give_back(self, index: int) -> None:
        self.running[index] -= 1


@dataclass
class Packing:
    """Jobs at a time, the bound that decided it, and the GPU slots (None when every job trains on the CPU)."""

    at_once: int
    bound: Ceiling
    slots: GpuSlots | None

    def where(self) -> str:
        if self.slots is None:
            return "on the CPU"
        gpus = list(self.slots.room)
        return f"on GPU{'s' if len(gpus) > 1 else ''} {', '.join(map(str, gpus))}"

    def describe(self) -> str:
        """``16 at a time on GPU 0: the cores (16 cores / 1 thread a job)``."""
        return f"{self.at_once} at a time {self.where()}: {self.bound.name} ({self.bound.why})"


def cores_bound(cores: int, threads: int | None) -> Ceiling:
    """Jobs that fit the cores when each runs ``threads`` (one when a job takes torch's default, all cores)."""
    if not threads:
        return Ceiling(1, "the cores", "threads=null: each job runs torch's default, every core")
    plural = "s" if threads > 1 else ""
    return Ceiling(max(1, cores // threads), "the cores", f"{cores} cores / {threads} thread{plural} a job")


def host_bound(available: int, job_bytes: int, margin: float) -> Ceiling:
    """Jobs whose processes of ``job_bytes`` each fit the host memory available, ``margin`` of it kept free."""
    jobs = max(1, math.floor(available * (1.0 - margin) / job_bytes)) if job_bytes > 0 else 1
    why = f"{format_size(job_bytes)} a job in {format_size(available)} available, {margin:.0%} kept free"
    return Ceiling(jobs, "host memory", why)


def jobs_per_gpu(peak_bytes: int, memory_bytes: int, margin: float) -> int:
    """Jobs of ``peak_bytes`` each that fit one GPU with ``margin`` of its memory kept free (at least one)."""
    usable = memory_bytes * (1.0 - margin)
    return max(1, math.floor(usable / peak_bytes)) if peak_bytes > 0 else 1


def gpu_bound(gpus: Sequence[Gpu], peak_bytes: int, margin: float) -> tuple[Ceiling, GpuSlots]:
    """Jobs of ``peak_bytes`` (the plan's peak: a CUDA context each) that fit each GPU, and their slots."""
    slots = GpuSlots({g.index: jobs_per_gpu(peak_bytes, g.memory_bytes, margin) for g in gpus})
    per_gpu = ", ".join(sorted({str(n) for n in slots.room.values()}))
    memory = ", ".join(sorted({format_size(g.memory_bytes) for g in gpus}))
    why = (
        f"{per_gpu} a GPU: {format_size(peak_bytes)} a job, its CUDA context included, "
        f"in {memory}, {margin:.0%} kept free"
    )
    return Ceiling(slots.capacity, "GPU memory", why), slots


def plan_slots(n_jobs: int | None, machine: Host, needs: Needs, margin: float) -> Packing:
    """Jobs at a time (``n_jobs``, or for ``auto`` the tightest bound), and the GPU slots when jobs train on GPUs.

    Bounds tie in the order cores, host memory, GPU memory: the first of equals is named."""
    if n_jobs is not None:
        given = Ceiling(n_jobs, GIVEN, "given")
        if not machine.gpus:
            return Packing(n_jobs, given, None)
        per_gpu = math.ceil(n_jobs / len(machine.gpus))
        return Packing(n_jobs, given, GpuSlots({g.index: per_gpu for g in machine.gpus}))
    bounds = [cores_bound(machine.cores, needs.threads)]
    if machine.host_memory_bytes and needs.host_bytes:
        bounds.append(host_bound(machine.host_memory_bytes, needs.host_bytes, margin))
    slots = None
    if machine.gpus:
        gpu, slots = gpu_bound(machine.gpus, needs.gpu_bytes or 0, margin)
        bounds.append(gpu)
    tightest = min(bounds, key=lambda b: b.jobs)  # min keeps the first of equals
    return Packing(tightest.jobs, tightest, slots)


def most_threads(threads: Sequence[int | None]) -> int | None:
    """The most torch threads any job runs; None (every core) when any job keeps torch's default."""
    if any(not t for t in threads):
        return None
    return max(threads, default=None)  # type: ignore[type-var]


def host_bytes(settings: ExperimentConfig, on_gpu: bool, weight_dtype: str, peak_bytes: int) -> int:
    """The host memory one job's process takes: on the CPU its whole plan (``peak_bytes``, the libraries
    included); on a GPU the libraries, the CUDA runtime's host side, and the weights, which load on the
    CPU before the trainer moves them (a 4-bit base's pass through in 16-bit shards: counted whole)."""
    if not on_gpu:
        return peak_bytes
    from grpo_exp.memory.architectures import architecture
    from grpo_exp.memory.estimate import CPU_HEAP, CPU_LIBRARIES
    from grpo_exp.memory.target import BYTES

    weights = architecture(settings.model).parameters * BYTES[weight_dtype]
    return CPU_LIBRARIES + CPU_HEAP + CUDA_HOST_RUNTIME + weights


def machine_cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def machine_host_memory() -> int | None:
    """Host memory new processes can take now: the kernel's MemAvailable, within this cgroup's limit
    (a container's); None where neither can be read (not Linux)."""
    available = None
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        if limit != "max":
            left = int(limit) - int((_CGROUP / "memory.current").read_text())
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def format_size(value: int) -> str:
    return f"{value / GIB:.1f} GiB" if value >= GIB else f"{value / MIB:.0f} MiB"


def parse_n_jobs(value: object) -> int | None:
    """``n_jobs`` as a number, None for ``auto``; a one-line error for anything else."""
    if str(value) == AUTO:
        return None
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise UserError(f"hydra.launcher.n_jobs={value}: give a number of jobs at a time (1, 2, …) or auto")
    return number
