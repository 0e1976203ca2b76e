"""``+launcher=ray``: each job of a sweep a Ray task (hydra-ray-launcher), asking Ray for its GPUs.

Ray gives a task GPUs only when it asks for them (``num_gpus``), and then sets its
``CUDA_VISIBLE_DEVICES``; a task that asks for none sees every GPU, so each concurrent job trained
on the first. ``hydra.launcher.ray.remote.num_gpus=auto`` (conf/launcher/ray.yaml) asks for the share
of a GPU that the memory plan gives a job, as the parallel launcher's ``n_jobs=auto`` packs them:
1 / (the jobs that fit one GPU with ``hydra.launcher.memory_margin`` of it kept free), and 0 when the
jobs train on the CPU. Ray's options are one set for every job, so the largest job's plan decides.
The plan is this machine's: for a cluster whose GPUs are on other nodes, give a number (1).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf, open_dict

from grpo_exp.sweep import packing
from grpo_exp.sweep.launcher import GpuPlan, gpu_plan, job_config

log = logging.getLogger("grpo_exp")


def launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
    """hydra-ray-launcher's launch, with ``num_gpus=auto`` resolved for these jobs (``launcher``: a
    ``PlannedRayLauncher``, which hydra-ray-launcher reads as its own)."""
    from hydra_plugins.hydra_ray_launcher import _core

    launcher.ray_cfg = planned_options(launcher, job_overrides, initial_job_idx)
    return _core.launch(launcher=launcher, job_overrides=job_overrides, initial_job_idx=initial_job_idx)


def planned_options(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> DictConfig:
    """The launcher's ``ray`` settings with ``remote.num_gpus`` a number: as given, or from the jobs' plan."""
    ray = OmegaConf.create(OmegaConf.to_container(launcher.configured, resolve=True))  # a copy: each launch plans anew
    if str(ray.remote.get("num_gpus")) != packing.AUTO:
        return ray
    configs = {
        initial_job_idx + i: job_config(launcher.hydra_context, launcher.config, initial_job_idx + i, list(o))
        for i, o in enumerate(job_overrides)
    }
    plan = gpu_plan(configs, with_peak=True)
    with open_dict(ray):
        ray.remote.num_gpus = num_gpus(plan, launcher.memory_margin)
    if plan.gpus:
        log.info(
            "Ray: each job asks for num_gpus=%.4g (%d job(s) to a GPU by the memory plan)",
            ray.remote.num_gpus,
            plan.jobs_per_gpu(launcher.memory_margin),
        )
    else:
        log.info("Ray: the jobs train on the CPU here, so they ask for num_gpus=0")
    return ray


def num_gpus(plan: GpuPlan, margin: float) -> float:
    """A job's share of a GPU: 1 / the jobs that fit one (Ray keeps 4 decimals, rounding down, so that
    many still fit), 0 when no job trains on a GPU."""
    return 1 / plan.jobs_per_gpu(margin) if plan.gpus else 0
