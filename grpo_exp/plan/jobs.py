"""The jobs a ``python -m grpo_exp.plan`` command plans, composed as run.py composes them.

A plan may be for a machine other than this one (``--gpu-memory`` on a CPU machine, 4-bit
weights, several processes), so the job is checked as a spec would be, except for what this
machine's hardware rules out, and its data and rewards are not built: they take no device memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp import hardware
from grpo_exp.config.schema import CONF_DIR, PRIMARY_CONFIG, ExperimentConfig
from grpo_exp.errors import UserError

ACCELERATE_DIR = CONF_DIR.parent / "accelerate"  # the repository's accelerate configs (ddp, zero2, zero3, fsdp)
PLANNED_CAPABILITY = (8, 0)  # a planned GPU: Ampere or later (native bf16)
PLANNED_GPU = "a planned GPU"
_DISTRIBUTED = {"MULTI_GPU": "ddp", "FSDP": "fsdp", "NO": "none"}


@dataclass(frozen=True)
class Launch:
    """How many processes a job trains with and how they shard."""

    processes: int
    sharding: str  # none | ddp | zero2 | zero3 | fsdp


def launch(launcher: str | None, processes: int | None) -> Launch:
    """``--launcher`` (an accelerate config in accelerate/, by name or path) and ``--processes``;
    without them, WORLD_SIZE (a plan started inside a launch) or one process."""
    if launcher is None:
        count = processes or hardware.world_size()
        return Launch(count, "ddp" if count > 1 else "none")
    config = _accelerate_config(launcher)
    count = processes or int(config.get("num_processes", 1))
    kind = config.get("distributed_type", "NO")
    if kind == "DEEPSPEED":
        sharding = f"zero{(config.get('deepspeed_config') or {}).get('zero_stage', 2)}"
    else:
        sharding = _DISTRIBUTED.get(kind, "ddp")
    return Launch(count, sharding if count > 1 or sharding != "ddp" else "none")


def _accelerate_config(launcher: str) -> dict[str, Any]:
    import yaml

    path = Path(launcher)
    if not path.is_file():
        path = ACCELERATE_DIR / f"{launcher}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in ACCELERATE_DIR.glob("*.yaml")))
        raise UserError(f"--launcher {launcher}: no such accelerate config; known: {known} (or a path to one)")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise UserError(f"--launcher {launcher}: {path} is not an accelerate config")
    return config


def composed_jobs(overrides: Sequence[str], multirun: bool) -> Iterator[tuple[list[str], ExperimentConfig]]:
    """Each job's overrides and settings (checked, batch not yet derived), as run.py would compose them."""
    from hydra import initialize_config_dir

    from grpo_exp.config.loading import to_settings
    from grpo_exp.config.schema import register_schema
    from grpo_exp.job.preflight import compose_job, job_overrides

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        jobs = list(job_overrides(PRIMARY_CONFIG, overrides)) if multirun else [list(overrides)]
        for job in jobs:
            settings = to_settings(compose_job(PRIMARY_CONFIG, job))
            check_settings(settings)
            yield job, settings


def check_settings(settings: ExperimentConfig) -> None:
    """The spec's checks that don't depend on this machine (``spec.build_spec`` runs them all)."""
    from grpo_exp import models
    from grpo_exp.config import checks
    from grpo_exp.tracking import held_out

    checks.check(settings)
    held_out.check_curriculum_metric(settings)
    checks.check_model(settings)
    models.resolve(settings.model)


def layout_for(settings: ExperimentConfig, processes: int, planned_gpu: bool) -> tuple[Any, bool]:
    """The layout ``config.layout.decide`` gives the job, with the plan's process count, and whether
    its GPU is simulated: this machine's GPU when it has one (only then is torch asked); a simulated
    GPU with native bf16 when the plan is for a GPU (``planned_gpu``: a memory size was given, or
    the job needs one) and this machine has none; else the CPU."""
    from grpo_exp import hardware
    from grpo_exp.config import layout

    real = settings.device != "cpu" and hardware.driver_present()
    where = layout.decide(settings) if real else None
    simulated = planned_gpu and (where is None or not where.gpu)
    if simulated:
        planned = hardware.Machine(
            "planned",
            cuda_build=True,
            driver=True,
            gpus=1,
            name=PLANNED_GPU,
            capability=PLANNED_CAPABILITY,
            native_bf16=True,
        )
        where = layout.decide(settings, planned)
    elif where is None:
        where = layout.decide(settings, hardware.Machine("", cuda_build=False, driver=False))
    return dataclasses.replace(where, processes=processes), simulated


@dataclass
class SweepNeeds:
    """What a planned sweep's jobs take of a machine, gathered job by job (``sweep.packing.Needs``)."""

    threads: list[int | None] = dataclasses.field(default_factory=list)
    host_bytes: int = 0  # the most host memory one job's process takes
    gpu_bytes: int | None = None  # the largest planned GPU peak (None: no job trains on a GPU)
    gpu_memory: int | None = None  # the planned GPU's memory (--gpu-memory, or this machine's)
    gpus_here: int = 0  # this machine's GPUs, when a job's layout is this machine's
    simulated: bool = False  # a job's GPU is a planned one

    def add(self, settings: ExperimentConfig, layout: Any, target: Any, peak_bytes: int, simulated: bool) -> None:
        from grpo_exp.sweep import packing

        self.threads.append(settings.threads)
        self.host_bytes = max(
            self.host_bytes, packing.host_bytes(settings, layout.gpu, layout.weight_dtype, peak_bytes)
        )
        if layout.gpu:
            self.gpu_bytes = max(self.gpu_bytes or 0, peak_bytes)
            self.gpu_memory = self.gpu_memory or target.memory
            self.simulated = self.simulated or simulated
            if not simulated:
                self.gpus_here = max(self.gpus_here, layout.gpus_visible)

    def needs(self) -> Any:
        from grpo_exp.sweep import packing

        return packing.Needs(packing.most_threads(self.threads), self.host_bytes, self.gpu_bytes)

    def machine(self, cores: int | None, host_memory: int | None, gpus: int | None, planned: bool) -> Any:
        """The machine the sweep is packed on. ``planned`` (a machine flag was given): the one given,
        ``--cores`` (else this machine's), ``--gpus`` of ``--gpu-memory`` each (one unless given), and
        ``--host-memory`` (else not counted: this machine's free memory says nothing of that one's);
        otherwise this machine."""
        from grpo_exp.sweep import packing

        if host_memory is None and not planned:
            host_memory = packing.machine_host_memory()
        on_gpus: tuple[packing.Gpu, ...] = ()
        if self.gpu_bytes is not None:
            if self.gpu_memory is None:
                raise UserError(f"--gpus {gpus}: give each GPU's memory too, e.g. --gpu-memory 80GB")
            count = gpus or (1 if self.simulated else max(1, self.gpus_here))
            on_gpus = tuple(packing.Gpu(i, self.gpu_memory) for i in range(count))
        return packing.Host(cores or packing.machine_cores(), host_memory, on_gpus)


@dataclass(frozen=True)
class SweepPacking:
    """How many of a planned sweep's jobs ``+launcher=parallel`` runs at a time, and why (None: the
    sweep runs under another launcher, whose jobs' settings, ``threads`` included, differ)."""

    jobs: int
    packing: Any  # sweep.packing.Packing, or None
    host_counted: bool  # the machine's host memory was known (given, or this machine's)

    def line(self) -> str:
        if self.packing is None:
            return f"launch: {self.jobs} jobs; add +launcher=parallel to plan how many run at a time"
        from grpo_exp.sweep import packing

        auto = self.packing.bound.name != packing.GIVEN
        unknown = "; host memory not counted (--host-memory)" if auto and not self.host_counted else ""
        return f"launch (+launcher=parallel): {self.jobs} jobs, {self.packing.describe()}{unknown}"

    def to_dict(self) -> dict[str, Any]:
        if self.packing is None:
            return {"jobs": self.jobs, "parallel_launcher": False}
        bound, slots = self.packing.bound, self.packing.slots
        return {
            "jobs": self.jobs,
            "parallel_launcher": True,
            "at_once": self.packing.at_once,
            "bound": bound.name,
            "why": bound.why,
            "gpus": {str(g): room for g, room in slots.room.items()} if slots else {},  # GPU -> jobs it may hold
            "host_memory_counted": self.host_counted,
        }


def sweep_packing(jobs: Sequence[list[str]], machine: Any, needs: SweepNeeds) -> SweepPacking:
    """The parallel launcher's packing of the sweep's jobs on ``machine``, with the sweep's ``n_jobs``
    and ``memory_margin``; no packing when the sweep runs under another launcher."""
    from hydra import initialize_config_dir

    from grpo_exp.config.schema import register_schema
    from grpo_exp.job.preflight import compose_job
    from grpo_exp.sweep import packing
    from hydra_plugins.grpo_exp_plugins.parallel_launcher import ParallelLauncherConf

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        launcher = compose_job(PRIMARY_CONFIG, jobs[0], with_hydra=True).hydra.launcher
    counted = machine.host_memory_bytes is not None
    if str(launcher.get("_target_", "")) != ParallelLauncherConf._target_:
        return SweepPacking(len(jobs), None, counted)
    n_jobs = packing.parse_n_jobs(launcher.n_jobs)
    return SweepPacking(len(jobs), packing.plan_slots(n_jobs, machine, needs.needs(), launcher.memory_margin), counted)
