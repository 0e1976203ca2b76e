"""Hydra callbacks: the sweep report is written as soon as a multirun ends."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from grpo_exp.errors import UserError

log = logging.getLogger("grpo_exp")


class SweepReport(Callback):
    """Compare the sweep's jobs (table, plots, verdict) into ``<sweep dir>/report/``."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from grpo_exp.report.compare import write_report

        try:
            report = write_report(Path(config.hydra.sweep.dir))
        except UserError as exc:  # a report is a courtesy; it never fails the sweep
            log.warning("no sweep report: %s", exc)
            return
        log.info("sweep report: %s", report)
