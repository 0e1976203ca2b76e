"""``hydra/launcher=parallel``, which ``+launcher=parallel`` selects: each job of a sweep in a process of
its own (grpo_exp.sweep.launcher).

No ``from __future__ import annotations``: Hydra executes this module before it is in ``sys.modules``,
where a dataclass with string annotations can't resolve them.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher

from hydra_plugins.grpo_exp_plugins.launch_setup import LaunchSetup


@dataclass
class ParallelLauncherConf:
    _target_: str = "hydra_plugins.grpo_exp_plugins.parallel_launcher.ParallelLauncher"
    n_jobs: Any = "auto"  # jobs at a time, or auto: the tightest of the cores, host memory, GPU memory (packing.py)
    memory_margin: float = 0.1  # share of each GPU's memory, and of the free host memory, auto leaves out of the plan


ConfigStore.instance().store(group="hydra/launcher", name="parallel", node=ParallelLauncherConf, provider="grpo_exp")


class ParallelLauncher(LaunchSetup, Launcher):
    def __init__(self, n_jobs: Any = "auto", memory_margin: float = 0.1) -> None:
        self.n_jobs = n_jobs
        self.memory_margin = memory_margin

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from grpo_exp.sweep.launcher import launch

        config, hydra_context, task_function = self.set_up()
        return launch(
            config, hydra_context, task_function, job_overrides, initial_job_idx, self.n_jobs, self.memory_margin
        )
