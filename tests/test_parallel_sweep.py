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
from grpo_exp.config.schema import CONF_DIR, register_schema
from grpo_exp.errors import UserError
from grpo_exp.job import preflight
from grpo_exp.job.preflight import job_spec
from grpo_exp.memory.estimate import memory_plan
from grpo_exp.sweep import launcher, packing
from tests.conftest import ROOT
from tests.machines import GIB, H100_X4

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


def test_auto_on_the_cpu_divides_the_cores_by_the_threads_per_job():
    assert packing.plan_slots(None, [], None, 0.1, cores=16, threads=4) == (4, None)
    assert packing.plan_slots(None, [], None, 0.1, cores=2, threads=1) == (2, None)
    assert packing.plan_slots(None, [], None, 0.1, cores=16, threads=None)[0] == 1  # each job takes every core
    assert packing.plan_slots(3, [], None, 0.1, cores=16, threads=1) == (3, None)


def test_auto_on_gpus_packs_as_many_jobs_as_the_plan_fits_with_its_margin():
    gpus = [packing.Gpu(0, 80 * GIB), packing.Gpu(1, 80 * GIB)]
    at_once, slots = packing.plan_slots(None, gpus, 20 * GIB, 0.1, cores=16, threads=1)
    assert slots.room == {0: 3, 1: 3} and at_once == 6  # 4 x 20 GiB would fill the card, past its 10 % margin
    taken = [slots.take() for _ in range(at_once)]
    assert sorted(taken) == [0, 0, 0, 1, 1, 1] and taken[:2] == [0, 1]  # spread before stacked
    with pytest.raises(RuntimeError):
        slots.take()
    slots.give_back(1)
    assert slots.take() == 1  # a job that ends frees its GPU's slot
    # A job larger than a GPU still runs, one per GPU (its own plan says what to change)
    assert packing.plan_slots(None, gpus, 100 * GIB, 0.1, cores=16, threads=1)[1].room == {0: 1, 1: 1}


def test_a_given_n_jobs_goes_round_the_gpus_by_job_number():
    gpus = [packing.Gpu(i, 24 * GIB) for i in range(3)]
    at_once, slots = packing.plan_slots(4, gpus, None, 0.1, cores=16, threads=1)
    assert at_once == 4
    assert [slots.take() for _ in range(4)] == [0, 1, 2, 0]


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_a_bad_n_jobs_is_one_line(value):
    with pytest.raises(UserError, match=f"hydra.launcher.n_jobs={value}: give a number of jobs at a time"):
        packing.parse_n_jobs(value)


def test_auto_packs_the_sweeps_largest_job_onto_each_simulated_gpu(monkeypatch):
    """The parent decides from the jobs' own specs and memory plans, starting no CUDA."""
    h100s = dataclasses.replace(H100_X4, memory_bytes=80 * GIB)
    monkeypatch.setattr(hardware, "machine", lambda index=0: h100s)
    monkeypatch.setattr(preflight, "_SPECS", {})  # specs another test built on this CPU are not these
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        configs = {
            n: compose("config", ["model=qwen2_5_0_5b_instruct", f"grpo.num_generations={g}"], return_hydra_config=True)
            for n, g in enumerate((4, 16))
        }
        HydraConfig.instance().set_config(configs[0])  # as in the sweep's parent
        at_once, slots = launcher._slots("auto", 0.1, configs, configs[0])[:2]
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
    monkeypatch.setattr(hardware, "machine", lambda index=0: dataclasses.replace(H100_X4, memory_bytes=80 * GIB))
    monkeypatch.setattr(preflight, "_SPECS", {})
    configs = sweep_configs(*(["model=qwen2_5_0_5b_instruct", f"device={d}"] for d in devices))
    planned = launcher._slots("auto", 0.1, configs, configs[0])
    at_once, slots = planned[:2]
    assert slots is not None and set(slots.room) == {0, 1, 2, 3} and at_once == slots.capacity
    gpu_job = devices.index("auto")
    assert planned[2] == {gpu_job}  # the job on the CPU is handed no GPU


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
