"""``+launcher=parallel``: each job a process of its own, so one that dies fails alone; ``n_jobs=auto``."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig

from grpo_exp import hardware
from grpo_exp.config.loading import to_settings
from grpo_exp.config.schema import CONF_DIR, register_schema
from grpo_exp.errors import UserError
from grpo_exp.job import preflight
from grpo_exp.job.preflight import job_spec
from grpo_exp.memory.estimate import CPU_HEAP, CPU_LIBRARIES, CUDA_RUNTIME, memory_plan
from grpo_exp.sweep import launcher, packing
from tests.conftest import ROOT
from tests.machines import GIB, H100_X4, H200

STEPS = 8
KILL_AFTER_STEP = 3
WAIT_S = 600


def sweep_command(sweep_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "run.py", "-m", f"hydra.sweep.dir={sweep_dir}", "logger.mode=offline", *overrides]


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}


def trained_steps(job: Path) -> list[int]:
    if not (job / "metrics.jsonl").is_file():
        return []
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "reward" in r]


def job_pid(job: Path) -> int:
    """The job's process, as its folder lock names it (``pid N on host``)."""
    return int(re.match(r"pid (\d+)", (job / ".job.lock").read_text()).group(1))


@pytest.mark.e2e  # a real sweep killed and resumed: about 2 minutes
def test_a_killed_job_fails_alone_and_resume_completes_it(tmp_path):
    sweep_dir = tmp_path / "sweep"
    command = sweep_command(
        sweep_dir, "+launcher=parallel", "hydra.launcher.n_jobs=2", "seed=1,2", f"grpo.max_steps={STEPS}"
    )
    sweep = subprocess.Popen(
        command, cwd=ROOT, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    victim, survivor = sweep_dir / "0", sweep_dir / "1"
    deadline = time.monotonic() + WAIT_S
    while len(trained_steps(victim)) < KILL_AFTER_STEP:
        if sweep.poll() is not None or time.monotonic() > deadline:
            sweep.kill()
            pytest.fail(f"job 0 never reached step {KILL_AFTER_STEP}: {sweep.communicate()[1][-3000:]}")
        time.sleep(0.5)
    os.kill(job_pid(victim), signal.SIGKILL)  # as the out-of-memory killer does
    _, stderr = sweep.communicate(timeout=WAIT_S)

    assert sweep.returncode == 1, stderr[-3000:]
    assert trained_steps(survivor) == list(range(1, STEPS + 1))
    assert json.loads((survivor / "summary.json").read_text())["status"] == "completed"
    summary = json.loads((victim / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] in ("killed by SIGKILL", launcher.OOM_CAUSE)
    line = next(line for line in stderr.splitlines() if "re-run only these with:" in line)
    assert line.startswith("sweep: job 0 failed (killed by SIGKILL)") and "job 1" not in line

    resume = line.split("re-run only these with: ", 1)[1].split()
    again = subprocess.run(
        [sys.executable, *resume[1:]], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=WAIT_S
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert trained_steps(victim) == list(range(1, STEPS + 1))  # every step once
    assert json.loads((victim / "summary.json").read_text())["status"] == "completed"


def cpu_machine(cores: int, host: int | None = None) -> packing.Host:
    return packing.Host(cores, host)


def test_auto_on_the_cpu_divides_the_cores_by_the_threads_per_job():
    def at_once(cores: int, threads: int | None) -> int:
        return packing.plan_slots(None, cpu_machine(cores), packing.Needs(threads, None, None), 0.1).at_once

    assert at_once(16, 4) == 4
    assert at_once(2, 1) == 2
    assert at_once(16, None) == 1  # each job runs torch's default threads: every core
    given = packing.plan_slots(3, cpu_machine(16), packing.Needs(1, None, None), 0.1)
    assert (given.at_once, given.slots, given.bound.name) == (3, None, packing.GIVEN)


def test_auto_on_gpus_packs_as_many_jobs_as_the_plan_fits_with_its_margin():
    gpus = (packing.Gpu(0, 80 * GIB), packing.Gpu(1, 80 * GIB))
    packed = packing.plan_slots(None, packing.Host(16, None, gpus), packing.Needs(1, None, 20 * GIB), 0.1)
    slots = packed.slots
    assert slots.room == {0: 3, 1: 3} and packed.at_once == 6  # 4 x 20 GiB would fill the card, past its 10 % margin
    assert packed.bound.name == "GPU memory"
    taken = [slots.take() for _ in range(packed.at_once)]
    assert sorted(taken) == [0, 0, 0, 1, 1, 1] and taken[:2] == [0, 1]  # spread before stacked
    with pytest.raises(RuntimeError):
        slots.take()
    slots.give_back(1)
    assert slots.take() == 1  # a job that ends frees its GPU's slot
    # A job larger than a GPU still runs, one per GPU (its own plan says what to change)
    larger = packing.plan_slots(None, packing.Host(16, None, gpus), packing.Needs(1, None, 100 * GIB), 0.1)
    assert larger.slots.room == {0: 1, 1: 1}


def test_on_a_gpu_the_cores_bound_a_small_jobs_sweep_and_the_line_names_them():
    """Issue 59: on an H200 the default's sweep ran "156 at a time" on 16 cores, by GPU memory alone."""
    h200 = packing.Host(16, None, (packing.Gpu(0, H200.memory_bytes),))
    small = 826 * 1024**2  # the default job's planned peak on a GPU
    packed = packing.plan_slots(None, h200, packing.Needs(1, None, small), 0.1)
    assert packed.at_once == 16 and packed.bound.name == "the cores"
    assert packed.slots.room == {0: 156}  # GPU memory alone would allow this many
    assert packed.describe() == "16 at a time on GPU 0: the cores (16 cores / 1 thread a job)"
    assert packing.plan_slots(None, h200, packing.Needs(4, None, small), 0.1).at_once == 4  # 16 cores / 4 threads
    assert packing.plan_slots(None, h200, packing.Needs(None, None, small), 0.1).at_once == 1  # every core each


@pytest.mark.parametrize("gpus", [(), (packing.Gpu(0, 80 * GIB),)], ids=["cpu", "gpu"])
def test_host_memory_bounds_the_jobs_on_the_cpu_and_on_gpus(gpus):
    needs = packing.Needs(1, 3 * GIB, GIB if gpus else None)
    packed = packing.plan_slots(None, packing.Host(64, 10 * GIB, gpus), needs, 0.1)
    assert packed.at_once == 3 and packed.bound.name == "host memory"  # 3 x 3 GiB in 9 GiB (10 GiB less 10 %)
    where = "on GPU 0" if gpus else "on the CPU"
    assert packed.describe().startswith(f"3 at a time {where}: host memory (3.0 GiB a job in 10.0 GiB available")
    fewer_cores = packing.plan_slots(None, packing.Host(2, 10 * GIB, gpus), needs, 0.1)
    assert (fewer_cores.at_once, fewer_cores.bound.name) == (2, "the cores")
    unknown = packing.plan_slots(None, packing.Host(64, None, gpus), needs, 0.1)
    assert unknown.at_once > 3  # a machine whose free memory can't be read is not bounded by it


def test_a_gpu_jobs_host_memory_counts_the_cuda_runtime_and_its_weights_as_they_load():
    settings = to_settings(launcher._task_config(sweep_configs(["model=qwen2_5_0_5b_instruct"])[0]))
    on_cpu = packing.host_bytes(settings, False, "float32", 5 * GIB)
    on_gpu = packing.host_bytes(settings, True, "float32", 5 * GIB)
    assert on_cpu == 5 * GIB  # a CPU job's plan is its whole process
    weights = 494_032_768 * 4  # Qwen2.5-0.5B's parameters, loaded in fp32 on the host first
    assert on_gpu == CPU_LIBRARIES + CPU_HEAP + packing.CUDA_HOST_RUNTIME + weights
    assert packing.host_bytes(settings, True, "bfloat16", 5 * GIB) == on_gpu - weights // 2


def test_each_job_counts_its_own_cuda_context_on_the_gpu(monkeypatch):
    """A job of a few MiB of tensors still holds a whole CUDA context: a card holds at most its memory
    over the context jobs, not a share of it for all of them."""
    small_gpu = dataclasses.replace(H200, memory_bytes=8 * GIB)
    configs = machine_sweep(monkeypatch, small_gpu, cores=64, host=None, jobs=[[], ["seed=2"]])
    packed, on_gpu = launcher._slots("auto", 0.1, configs)
    assert on_gpu == {0, 1} and packed.bound.name == "GPU memory"
    assert packed.at_once == packed.slots.room[0] <= int(0.9 * 8 * GIB // CUDA_RUNTIME)
    plan = memory_plan(job_spec(launcher._task_config(configs[0])), 8 * GIB, remedies=False)
    assert plan.peak.items["runtime (CUDA context)"] == CUDA_RUNTIME and plan.peak_bytes < CUDA_RUNTIME + 100 * 1024**2
    assert packed.at_once == int(0.9 * 8 * GIB // plan.peak_bytes)
    assert "its CUDA context included" in packed.describe()


def machine_sweep(monkeypatch, machine, cores: int, host: int | None, jobs: list[list[str]]) -> dict:
    """The sweep's configs on a made-up machine: its GPUs (torch's report), cores and free host memory."""
    monkeypatch.setattr(hardware, "machine", lambda index=0: machine)
    monkeypatch.setattr(preflight, "_SPECS", {})  # specs another test built on this CPU are not these
    monkeypatch.setattr(packing, "machine_cores", lambda: cores)
    monkeypatch.setattr(packing, "machine_host_memory", lambda: host)
    return sweep_configs(*(["+launcher=parallel", *job] for job in jobs))


def test_the_launch_packs_by_each_jobs_own_threads(monkeypatch):
    """+launcher=parallel gives every job threads=1; a job that sets more takes that many cores."""
    configs = machine_sweep(monkeypatch, H200, cores=16, host=None, jobs=[[], ["threads=4"]])
    assert [c.threads for c in configs.values()] == [1, 4]
    packed, _ = launcher._slots("auto", 0.1, configs)
    assert packed.at_once == 4 and packed.describe().startswith("4 at a time on GPU 0: the cores (16 cores / 4 threads")


def test_the_launch_is_bounded_by_this_machines_free_host_memory(monkeypatch):
    configs = machine_sweep(monkeypatch, H200, cores=16, host=6 * GIB, jobs=[[], ["seed=2"]])
    packed, _ = launcher._slots("auto", 0.1, configs)
    spec = job_spec(launcher._task_config(configs[0]))
    job = packing.host_bytes(spec.settings, True, spec.layout.weight_dtype, 0)
    assert packed.bound.name == "host memory" and packed.at_once == int(0.9 * 6 * GIB // job)


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_a_bad_n_jobs_is_one_line(value):
    with pytest.raises(UserError, match=f"hydra.launcher.n_jobs={value}: give a number of jobs at a time"):
        packing.parse_n_jobs(value)


def test_auto_packs_the_sweeps_largest_job_onto_each_simulated_gpu(monkeypatch):
    """The parent decides from the jobs' own specs and memory plans, starting no CUDA."""
    h100s = dataclasses.replace(H100_X4, memory_bytes=80 * GIB)
    monkeypatch.setattr(hardware, "machine", lambda index=0: h100s)
    monkeypatch.setattr(preflight, "_SPECS", {})  # specs another test built on this CPU are not these
    monkeypatch.setattr(packing, "machine_cores", lambda: 256)  # neither the cores nor host memory bound here
    monkeypatch.setattr(packing, "machine_host_memory", lambda: None)
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        configs = {
            n: compose(
                "config",
                ["+launcher=parallel", "model=qwen2_5_0_5b_instruct", f"grpo.num_generations={g}"],
                return_hydra_config=True,
            )
            for n, g in enumerate((4, 16))
        }
        HydraConfig.instance().set_config(configs[0])  # as in the sweep's parent
        packed, _ = launcher._slots("auto", 0.1, configs)
        at_once, slots = packed.at_once, packed.slots
        largest = job_spec(compose("config", ["model=qwen2_5_0_5b_instruct", "grpo.num_generations=16"]))
    peak = memory_plan(largest, 80 * GIB, remedies=False).peak_bytes
    assert set(slots.room) == {0, 1, 2, 3}
    assert all(room == int(0.9 * 80 * GIB // peak) for room in slots.room.values())
    assert at_once == 4 * slots.room[0] > 4
    assert "torch" not in sys.modules or not sys.modules["torch"].cuda.is_initialized()


def sweep_configs(*jobs: list[str]) -> dict:
    """The jobs' sweep configs as the parent composes them (HydraConfig set as in the sweep's parent)."""
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        configs = {n: compose("config", overrides, return_hydra_config=True) for n, overrides in enumerate(jobs)}
    HydraConfig.instance().set_config(configs[0])
    return configs


@pytest.mark.parametrize("devices", [("cpu", "auto"), ("auto", "cpu")])
def test_every_jobs_layout_decides_the_slots_and_a_cpu_job_takes_no_gpu(monkeypatch, devices):
    """Issue 39, item 6: the slots came from job 0's layout alone; a sweep over device=cpu,auto then
    ran its GPU job as a CPU one would, with no GPU of its own (GRPO_EXP_GPU unset: GPU 0 for all)."""
    h100s = dataclasses.replace(H100_X4, memory_bytes=80 * GIB)
    configs = machine_sweep(
        monkeypatch, h100s, 256, None, [["model=qwen2_5_0_5b_instruct", f"device={d}"] for d in devices]
    )
    packed, on_gpu = launcher._slots("auto", 0.1, configs)
    slots = packed.slots
    assert slots is not None and set(slots.room) == {0, 1, 2, 3} and packed.at_once == slots.capacity
    gpu_job = devices.index("auto")
    assert on_gpu == {gpu_job}  # the job on the CPU is handed no GPU


def test_hydra_finds_both_launchers_and_not_their_shared_setup():
    """The launchers share ``LaunchSetup``, a mixin: Hydra's plugin scan registers Launcher subclasses,
    and the mixin must not become a third launcher."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    names = {plugin.__name__ for plugin in Plugins.instance().discover(Launcher)}
    assert {"ParallelLauncher", "PlannedRayLauncher"} <= names
    assert "LaunchSetup" not in names


def test_a_launch_before_hydras_setup_names_the_launcher():
    from hydra_plugins.grpo_exp_plugins.parallel_launcher import ParallelLauncher

    with pytest.raises(RuntimeError, match=r"ParallelLauncher\.launch before Hydra's setup"):
        ParallelLauncher().launch([["seed=1"]], 0)
