"""Run a sweep's jobs side by side, each in a process of its own (``+launcher=parallel``).

A shared worker pool (joblib's loky) breaks when one worker dies, and every job still in it fails
with it. Here each job is a fresh interpreter (``spawn``) that only this launcher waits for: a job
killed by a signal, the out-of-memory killer's included, is marked failed in its folder with that
cause, and the others train on to their end. The sweep's exit status and resume line then name it
(``sweep.outcome``).

The parent starts no CUDA: its jobs' layouts (decided by the preflight, ``config.layout``) count
the GPUs and give their memory, and their specs give the threads, memory plans and host memory that
``n_jobs=auto`` packs by (``sweep.packing``); each job that trains on a GPU is handed one as
``GRPO_EXP_GPU`` and keeps it alone when it starts (``Layout.claim``). Every job's layout counts, not the first's: one
sweep's jobs may differ (``device=cpu,cuda``), and a job on the CPU takes no GPU slot.
Hydra only looks for launchers in its ``hydra_plugins`` namespace, so the class Hydra instantiates
is ``hydra_plugins.grpo_exp_plugins.parallel_launcher.ParallelLauncher``; it calls ``launch`` here.
"""

from __future__ import annotations

import copy
import logging
import math
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict, read_write

from grpo_exp import hardware
from grpo_exp.sweep import packing

log = logging.getLogger("grpo_exp")

# The kernel's count of processes its out-of-memory killer ended in this cgroup (cgroup v2, then v1).
_OOM_COUNTERS = ("memory.events", "memory.oom_control")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
OOM_CAUSE = "out of memory: the kernel's out-of-memory killer ended it (SIGKILL)"


@dataclass
class _Running:
    """One job's process, the pipe its result comes back on, and what it was given."""

    number: int
    overrides: list[str]
    folder: Path
    gpu: int | None
    process: Any = None  # multiprocessing's SpawnProcess
    results: Connection | None = None
    oom_kills: int | None = None  # the cgroup's count when the job started
    result: JobReturn | None = None


def launch(
    config: DictConfig,
    hydra_context: HydraContext,
    task_function: TaskFunction,
    job_overrides: Sequence[Sequence[str]],
    initial_job_idx: int,
    n_jobs: Any,
    memory_margin: float,
) -> list[JobReturn]:
    """Run every job, at most ``n_jobs`` at a time; the returns in job order, as Hydra expects them."""
    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    numbered = [(initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides)]
    configs = {n: job_config(hydra_context, config, n, o) for n, o in numbered}
    packed, on_gpu = _slots(n_jobs, memory_margin, configs)
    at_once, slots = packed.at_once, packed.slots
    log.info("launching %d jobs, %s; into %s", len(numbered), packed.describe(), sweep_dir)
    for number, overrides in numbered:
        log.info("\t#%d : %s", number, " ".join(filter_overrides(overrides)))

    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of the parent's torch state
    state = Singleton.get_state()
    pending = deque(numbered)
    running: list[_Running] = []
    returns: dict[int, JobReturn] = {}
    try:
        while pending or running:
            while pending and len(running) < at_once:
                number, overrides = pending.popleft()
                gpu = slots.take() if slots and number in on_gpu else None
                job = _Running(number, overrides, _folder(configs[number]), gpu)
                _start(job, context, (number, overrides, hydra_context, config, task_function, state))
                running.append(job)
            _wait_for_any(running)
            for job in [j for j in running if not j.process.is_alive()]:
                job.process.join()
                _read_result(job)
                running.remove(job)
                if slots and job.gpu is not None:
                    slots.give_back(job.gpu)
                returns[job.number] = job.result or _lost(job, configs[job.number])
    except KeyboardInterrupt:  # Ctrl-C reached the jobs too: each stops at a checkpoint; wait for them
        for job in running:
            job.process.join()
        raise
    return [returns[number] for number, _ in numbered]


def job_config(hydra_context: HydraContext, config: DictConfig, number: int, overrides: list[str]) -> DictConfig:
    """Job ``number``'s config as Hydra's launchers compose it: the sweep's config with the job's overrides."""
    sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{number}"
        sweep_config.hydra.job.num = number
    return sweep_config


def _folder(sweep_config: DictConfig) -> Path:
    return Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)


@dataclass(frozen=True)
class GpuPlan:
    """What a sweep's jobs need of this machine, from every job's spec (layout and memory plan)."""

    on_gpu: frozenset[int]  # the jobs whose layout trains on a GPU; the others train on the CPU
    gpus: tuple[packing.Gpu, ...]  # the GPUs they share (none when every job trains on the CPU)
    peak_bytes: int | None  # the largest planned GPU peak among them (None when not asked for, or no GPU job)
    host_bytes: int | None = None  # the most host memory one job's process takes (None when not asked for)
    threads: int | None = None  # the most torch threads a job runs (None: some job runs torch's default)

    def jobs_per_gpu(self, margin: float) -> int:
        """How many of the jobs fit one GPU with ``margin`` of its memory kept free (``n_jobs=auto``'s packing)."""
        return packing.jobs_per_gpu(self.peak_bytes or 0, self.gpus[0].memory_bytes, margin)

    def needs(self) -> packing.Needs:
        return packing.Needs(self.threads, self.host_bytes, self.peak_bytes)


def gpu_plan(configs: dict[int, DictConfig], with_peak: bool) -> GpuPlan:
    """The GPUs the jobs of ``configs`` (number -> sweep config) train on, from their own layouts, which the
    preflight decided, and the most threads a job runs; ``with_peak``: also their memory plans' largest
    GPU peak and the most host memory a job takes (each plan takes a moment)."""
    from grpo_exp.job.preflight import job_spec

    specs = {n: job_spec(_task_config(c)) for n, c in configs.items()}
    threads = packing.most_threads([spec.settings.threads for spec in specs.values()])
    on_gpu = frozenset(n for n, spec in specs.items() if spec.layout.gpu)
    gpus: tuple[packing.Gpu, ...] = ()
    memory = 0
    if on_gpu:
        layout = specs[min(on_gpu)].layout  # the GPUs of one machine are taken to be alike
        memory = layout.gpu_memory_bytes or 0
        gpus = tuple(packing.Gpu(i, memory) for i in range(layout.gpus_visible))
    if not with_peak:
        return GpuPlan(on_gpu, gpus, None, None, threads)
    peaks = {n: _peak(spec, memory if n in on_gpu else None) for n, spec in specs.items()}
    host = max(
        packing.host_bytes(spec.settings, n in on_gpu, spec.layout.weight_dtype, peaks[n]) for n, spec in specs.items()
    )
    peak = max((peaks[n] for n in on_gpu), default=None)
    return GpuPlan(on_gpu, gpus, peak, host, threads)


def _slots(n_jobs: Any, margin: float, configs: dict[int, DictConfig]) -> tuple[packing.Packing, frozenset[int]]:
    """Jobs at a time with the bound that decided, the GPU slots, and the jobs that take one, from
    ``n_jobs`` (a number or ``auto``), this machine, and every job's spec (``gpu_plan``)."""
    wanted = packing.parse_n_jobs(n_jobs)
    plan = gpu_plan(configs, with_peak=wanted is None)
    machine = packing.Host(packing.machine_cores(), packing.machine_host_memory(), plan.gpus)
    return packing.plan_slots(wanted, machine, plan.needs(), margin), plan.on_gpu


def _task_config(sweep_config: DictConfig) -> DictConfig:
    """The job's config as its task function gets it: without Hydra's node (as Hydra's run_job does)."""
    cfg = copy.deepcopy(sweep_config)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return cfg


def _peak(spec: Any, gpu_memory: int | None) -> int:
    """The job's planned peak on its device: a GPU's of ``gpu_memory``, or on the CPU its whole process."""
    from grpo_exp.memory.estimate import memory_plan

    return memory_plan(spec, gpu_memory, remedies=False).peak_bytes


def _start(job: _Running, context: Any, payload: tuple[Any, ...]) -> None:
    import cloudpickle  # the task function lives in run.py's __main__, which plain pickle can't name

    job.results, send = context.Pipe(duplex=False)
    job.process = context.Process(
        target=_job_process, args=(cloudpickle.dumps(payload), send, job.gpu), name=f"job-{job.number}"
    )
    job.oom_kills = _oom_kills()
    job.process.start()
    send.close()  # the child holds its end now


def _wait_for_any(running: list[_Running]) -> None:
    """Block until a job ends or sends its result; results are read as they come (a full pipe would stall its job)."""
    pipes = {job.results: job for job in running if job.results is not None and not job.results.closed}
    for ready in wait([*(job.process.sentinel for job in running), *pipes]):
        if ready in pipes:
            _read_result(pipes[ready])  # type: ignore[index]


def _read_result(job: _Running) -> None:
    """Take the job's result if it sent one (a process killed before sending leaves an empty, closed pipe)."""
    if job.results is None or job.results.closed:
        return
    try:
        if job.results.poll():
            job.result = _loads(job.results.recv_bytes())
    except EOFError:
        pass
    job.results.close()


def _loads(data: bytes) -> JobReturn:
    import cloudpickle

    return cloudpickle.loads(data)


def _job_process(payload: bytes, results: Connection, gpu: int | None) -> None:
    """A job's own process: its GPU first (before anything can start CUDA), then Hydra's job."""
    if gpu is not None:
        os.environ[hardware.GPU_ENV] = str(gpu)
    import cloudpickle

    number, overrides, hydra_context, config, task_function, state = cloudpickle.loads(payload)
    setup_globals()
    Singleton.set_state(state)
    from hydra.core.hydra_config import HydraConfig

    sweep_config = job_config(hydra_context, config, number, overrides)
    HydraConfig.instance().set_config(sweep_config)
    returned = run_job(
        hydra_context=hydra_context,
        config=sweep_config,
        task_function=task_function,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    if returned.status == JobStatus.FAILED:  # an exception's traceback may not pickle; its line does
        returned.return_value = RuntimeError(str(returned._return_value))
    results.send_bytes(cloudpickle.dumps(returned))


def _lost(job: _Running, sweep_config: DictConfig) -> JobReturn:
    """A job that ended without a result: killed, or exited (a stop at a checkpoint says so itself)."""
    from grpo_exp.folder import COMPLETED, FAILED, JobFolder

    code = job.process.exitcode or 0
    folder = JobFolder(job.folder)
    if code < 0:
        cause = _signal_cause(-code, job.oom_kills)
        summary = folder.summary() or {}
        if summary.get("status") != COMPLETED:
            folder.write_summary(summary | {"status": FAILED, "error": cause})
        log.error("job %d %s (its folder: %s)", job.number, cause, job.folder)
    else:
        log.error("job %d exited with status %d (its folder: %s)", job.number, code, job.folder)
    task_name = str(sweep_config.hydra.job.name)
    return JobReturn(job.overrides, None, None, str(job.folder), task_name, JobStatus.COMPLETED, math.nan)


def _signal_cause(signum: int, oom_before: int | None) -> str:
    """``killed by SIGKILL``, or the out-of-memory killer when the kernel counted a kill meanwhile."""
    try:
        name = signal.Signals(signum).name
    except ValueError:  # a number with no name on this system
        name = f"signal {signum}"
    after = _oom_kills()
    if signum == signal.SIGKILL and oom_before is not None and after is not None and after > oom_before:
        return OOM_CAUSE
    return f"killed by {name}"


def _oom_kills() -> int | None:
    """How many processes the kernel's OOM killer ended in this process's cgroup (None: not readable)."""
    try:
        relative = Path("/proc/self/cgroup").read_text().splitlines()[0].split(":", 2)[2].lstrip("/")
    except (OSError, IndexError):
        return None
    for name in _OOM_COUNTERS:
        for folder in (_CGROUP_ROOT / relative, _CGROUP_ROOT / "memory" / relative, _CGROUP_ROOT):
            try:
                text = (folder / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return None
