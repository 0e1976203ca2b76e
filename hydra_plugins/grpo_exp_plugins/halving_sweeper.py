"""``hydra/sweeper=halving``: Hydra's basic sweeper, with successive halving when
``sweep.halving.enabled=true`` (grpo_exp.sweep.halving). Hydra's default sweeper stays the basic one:
the command's preflight adds ``hydra/sweeper=halving`` to a sweep with halving on
(grpo_exp.job.command._sweep_overrides), and a sweep may also select it itself.

No ``from __future__ import annotations``: Hydra executes this module before it is in ``sys.modules``,
where a dataclass with string annotations can't resolve them.
"""

from dataclasses import dataclass
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf


@dataclass
class HalvingSweeperConf:
    _target_: str = "hydra_plugins.grpo_exp_plugins.halving_sweeper.HalvingSweeper"
    max_batch_size: int | None = None  # as the basic sweeper's
    params: dict[str, str] | None = None  # as the basic sweeper's: what to sweep, e.g. from +sweep=...


ConfigStore.instance().store(group="hydra/sweeper", name="halving", node=HalvingSweeperConf, provider="grpo_exp")


class HalvingSweeper(BasicSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        if not self.config.sweep.halving.enabled:
            return super().sweep(arguments)
        from pathlib import Path

        from grpo_exp.sweep import halving

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        jobs = [job for batch in self.split_arguments(overrides, None) for job in batch]
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")  # as the basic sweeper: the sweep's record
        return [halving.run(jobs, sweep_dir, self.config, self.launcher.launch)]
