"""A sweep whose jobs run as Ray tasks (`+launcher=ray`): the GPUs each task asks of Ray, and a two-job
sweep end to end on a local Ray instance.

Needs the `ray` extra (pip install -e '.[ray]'); without it the tests are skipped, saying so.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.types import HydraContext
from omegaconf import OmegaConf

from grpo_exp import hardware
from grpo_exp.config.schema import CONF_DIR, register_schema
from grpo_exp.job import preflight
from tests.conftest import ROOT
from tests.machines import CPU_ONLY, GIB, H100_X4

pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the Ray launcher needs pip install -e '.[ray]'")

STEPS = 2
H100_80GB = dataclasses.replace(H100_X4, memory_bytes=80 * GIB)
SMALL_GPUS = dataclasses.replace(H100_X4, memory_bytes=2 * GIB)  # no 0.5B job fits two to a GPU


def ray_task_options(monkeypatch, machine: hardware.Machine, *jobs: list[str]) -> list[dict[str, Any]]:
    """The options each job's Ray task is created with, through the launcher Hydra instantiates for
    ``+launcher=ray``; Ray itself is not started (its start and the tasks' creation are recorded)."""
    from hydra_plugins.hydra_ray_launcher import _core

    monkeypatch.setattr(hardware, "machine", lambda index=0: machine)
    monkeypatch.setattr(preflight, "_SPECS", {})  # specs another test built on this CPU are not these
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(_core, "start_ray", lambda init: None)
    monkeypatch.setattr(
        _core, "launch_job_on_ray", lambda context, remote, *rest: asked.append(OmegaConf.to_container(remote))
    )
    monkeypatch.setattr(_core.ray, "get", lambda task: task)
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        config = compose("config", jobs[0], return_hydra_config=True)
        context = HydraContext(config_loader=GlobalHydra.instance().config_loader(), callbacks=None)
        HydraConfig.instance().set_config(config)  # as in the sweep's parent
        launcher = Plugins.instance().instantiate_launcher(
            hydra_context=context, task_function=lambda cfg: None, config=config
        )
        launcher.launch(jobs, 0)
    return asked


def qwen_jobs(*overrides: str) -> list[list[str]]:
    return [["+launcher=ray", "model=qwen2_5_0_5b_instruct", f"grpo.num_generations={g}", *overrides] for g in (4, 8)]


def test_each_ray_job_asks_for_a_whole_gpu_when_the_plan_fits_one_job_per_gpu(monkeypatch):
    """Issue 39, item 5: with num_gpus 0 Ray left CUDA_VISIBLE_DEVICES alone and every job took GPU 0."""
    options = ray_task_options(monkeypatch, SMALL_GPUS, *qwen_jobs())
    assert [o["num_gpus"] for o in options] == [1, 1]  # Ray then gives each its own GPU


def test_ray_jobs_share_a_gpu_as_the_parallel_launchers_auto_packs_them(monkeypatch):
    from grpo_exp.sweep import launcher

    options = ray_task_options(monkeypatch, H100_80GB, *qwen_jobs())
    monkeypatch.setattr(preflight, "_SPECS", {})
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        configs = {n: compose("config", job, return_hydra_config=True) for n, job in enumerate(qwen_jobs())}
    fit = launcher._slots("auto", 0.1, configs)[0].slots.room[0]  # n_jobs=auto: jobs on one GPU by memory
    assert fit > 1 and [o["num_gpus"] for o in options] == [1 / fit] * 2


def test_ray_jobs_on_a_cpu_only_machine_ask_for_no_gpu(monkeypatch):
    assert [o["num_gpus"] for o in ray_task_options(monkeypatch, CPU_ONLY, *qwen_jobs())] == [0, 0]


def test_a_num_gpus_given_is_what_ray_is_asked_for(monkeypatch):
    jobs = qwen_jobs("hydra.launcher.ray.remote.num_gpus=0.5")
    assert [o["num_gpus"] for o in ray_task_options(monkeypatch, H100_80GB, *jobs)] == [0.5, 0.5]


@pytest.mark.e2e  # a real two-job Ray sweep (over a minute): make test-e2e
def test_ray_runs_a_two_job_sweep_with_a_wandb_run_each_and_the_report(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY", "RAY_ADDRESS")}
    command = [
        sys.executable,
        "run.py",
        "-m",
        "+launcher=ray",
        "grpo.num_generations=4,6",
        f"grpo.max_steps={STEPS}",
        "logger.mode=offline",
        "save_model=false",
        f"hydra.sweep.dir={tmp_path}",
    ]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Ray Launcher is launching 2 jobs" in output and "(_run_job pid=" in output, "the jobs ran as Ray tasks"
    assert "the jobs train on the CPU here, so they ask for num_gpus=0" in output  # num_gpus=auto, planned
    for job in ("0", "1"):
        summary = json.loads((tmp_path / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == STEPS
        runs = {path.resolve() for path in (tmp_path / job / "wandb").glob("offline-run-*")}
        assert len(runs) == 1, f"job {job}: one W&B run"
    report = (tmp_path / "report" / "report.md").read_text()
    assert "2 job(s): 2 completed" in report
