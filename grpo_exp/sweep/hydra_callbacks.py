"""Hydra callbacks: the sweep report (and optionally its W&B view) as soon as a multirun ends, then its exit status."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from grpo_exp.errors import UserError

log = logging.getLogger("grpo_exp")


class SweepReport(Callback):
    """Compare the sweep's jobs (table, plots, verdict) into ``<sweep dir>/report/``; with ``log_table``, log its
    interval table to the trackers the jobs used (``grpo_exp.report.trackers``)."""

    def __init__(self, log_table: bool = True) -> None:
        self.log_table = log_table

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from grpo_exp.report.compare import console_summary, write_report

        try:
            report = write_report(Path(config.hydra.sweep.dir))
        except UserError as exc:  # a report is a courtesy; it never fails the sweep
            log.warning("no sweep report: %s", exc)
            return
        print(console_summary(report), flush=True)  # the verdict is the sweep's result: on stdout, as the report's
        log.info("sweep report: %s", report)
        if self.log_table:
            from grpo_exp.report.trackers import log_intervals

            for line in log_intervals(Path(config.hydra.sweep.dir)):
                log.info("sweep intervals: %s", line)


class SweepDashboard(Callback):
    """The sweep's W&B view when a multirun ends (``python -m grpo_exp.dashboard``, see docs/tracking.md).

    ``mode``: ``off``; ``spec`` writes ``<sweep dir>/report/wandb_view.json`` only; ``save`` also
    saves the view on W&B when logged in. Like the report, it never fails the sweep: an unknown
    mode is said once, when the sweep starts, and no view is made.
    """

    MODES = ("off", "spec", "save")

    def __init__(self, mode: str = "off") -> None:
        self.mode = mode

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.mode not in self.MODES:
            log.warning(
                "hydra.callbacks.sweep_dashboard.mode=%s is not one of %s: no W&B view for this sweep",
                self.mode,
                ", ".join(self.MODES),
            )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self.mode not in self.MODES[1:]:
            return
        from grpo_exp.dashboard.publish import publish

        try:
            result = publish(Path(config.hydra.sweep.dir), online=self.mode == "save")
        except UserError as exc:
            log.warning("no W&B view: %s", exc)
            return
        log.info("W&B view: %s", result.url or f"{result.spec_path} ({result.why_not_saved})")


class SweepExit(Callback):
    """The sweep's exit status once every job has run: 1, with the line that names the jobs to
    re-run and the ``resume=auto`` command, when any did not complete (``sweep.outcome``).

    Hydra calls the end of a multirun on its callbacks last-listed first: listed first in
    ``conf/config.yaml``, this one exits after the report and the dashboard are written.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from grpo_exp.sweep.outcome import read_outcome

        outcome = read_outcome(Path(config.hydra.sweep.dir))
        line = outcome.line()
        if line is not None:  # on stderr, as a script reads a failed command's reason (Hydra logs to stdout)
            print(line, file=sys.stderr)
            sys.exit(outcome.exit_code)
