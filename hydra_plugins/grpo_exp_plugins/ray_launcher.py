"""``hydra/launcher=planned_ray``, which ``+launcher=ray`` selects: hydra-ray-launcher's Ray tasks, with
the GPUs each job asks of Ray taken from the sweep's memory plan (grpo_exp.sweep.ray_tasks).

Its settings are hydra-ray-launcher's (``hydra.launcher.ray.init``, ``hydra.launcher.ray.remote``),
plus ``memory_margin`` as the parallel launcher's. The plugin is imported only when a sweep launches,
so Hydra's plugin scan works without the ``ray`` extra.

No ``from __future__ import annotations``: Hydra executes this module before it is in ``sys.modules``,
where a dataclass with string annotations can't resolve them.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig

from hydra_plugins.grpo_exp_plugins.launch_setup import LaunchSetup


@dataclass
class PlannedRayLauncherConf:
    _target_: str = "hydra_plugins.grpo_exp_plugins.ray_launcher.PlannedRayLauncher"
    # as hydra-ray-launcher's: keyword arguments of ray.init, and the options of each job's task (ray.remote)
    ray: dict[str, Any] = field(default_factory=lambda: {"init": {"address": None}, "remote": {}})
    memory_margin: float = 0.1  # share of each GPU's memory that num_gpus=auto leaves out of the plan


ConfigStore.instance().store(
    group="hydra/launcher", name="planned_ray", node=PlannedRayLauncherConf, provider="grpo_exp"
)


class PlannedRayLauncher(LaunchSetup, Launcher):
    def __init__(self, ray: DictConfig, memory_margin: float = 0.1) -> None:
        self.configured = ray  # remote.num_gpus may be auto: each launch resolves it into ray_cfg
        self.ray_cfg = ray  # what hydra-ray-launcher reads
        self.memory_margin = memory_margin

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from grpo_exp.sweep.ray_tasks import launch

        self.set_up()
        return launch(self, job_overrides, initial_job_idx)
