"""How many of a sweep's jobs run at once on this machine, and which GPU each one takes.

``hydra.launcher.n_jobs=auto`` decides from the machine: on the CPU, its cores divided by the
``threads`` each job uses; on GPUs, as many jobs per GPU as the memory plan
(``memory.estimate.memory_plan``) says fit, with ``hydra.launcher.memory_margin`` of each GPU kept
free for what the plan doesn't count (the CUDA context, the allocator's fragmentation). A job is
given the GPU with the fewest jobs on it (``GRPO_EXP_GPU``, which the job keeps alone), so a
given ``n_jobs`` spreads over the GPUs as job number modulo their count.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from grpo_exp.errors import UserError

AUTO = "auto"


@dataclass(frozen=True)
class Gpu:
    index: int
    memory_bytes: int


def cpu_jobs(cores: int, threads: int | None) -> int:
    """Jobs that fit the cores when each uses ``threads`` (one when a job takes torch's default, all cores)."""
    if not threads:
        return 1
    return max(1, cores // threads)


def jobs_per_gpu(peak_bytes: int, memory_bytes: int, margin: float) -> int:
    """Jobs of ``peak_bytes`` each that fit one GPU with ``margin`` of its memory kept free (at least one)."""
    usable = memory_bytes * (1.0 - margin)
    return max(1, math.floor(usable / peak_bytes)) if peak_bytes > 0 else 1


def machine_cores() -> int:
    """The cores this process may run on (its affinity, which a container or taskset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


def plan_slots(
    n_jobs: int | None,
    gpus: Sequence[Gpu],
    peak_bytes: int | None,
    margin: float,
    cores: int,
    threads: int | None,
) -> tuple[int, GpuSlots | None]:
    """Jobs at a time, and the GPU slots when the jobs train on GPUs (None on the CPU).

    ``peak_bytes``: the largest job's planned peak (needed for ``auto`` on GPUs)."""
    if not gpus:
        return (n_jobs or cpu_jobs(cores, threads)), None
    if n_jobs is not None:
        per_gpu = math.ceil(n_jobs / len(gpus))
        return n_jobs, GpuSlots({g.index: per_gpu for g in gpus})
    slots = GpuSlots({g.index: jobs_per_gpu(peak_bytes or 0, g.memory_bytes, margin) for g in gpus})
    return slots.capacity, slots
