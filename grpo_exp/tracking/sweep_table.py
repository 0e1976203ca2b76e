"""A sweep's interval table in its trackers: a W&B table (offline too) and a trackio table.

No job run can hold the comparison across a sweep's jobs, so the table goes to a run of its own, of job
type ``sweep-report``, in the sweep's project and group; the decision goes to its summary (W&B) or
config (trackio). Its id follows from its group and name, so a report rebuilt for the same sweep
continues the same run. ``grpo_exp.report.trackers`` decides what goes where.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.tracking.wandb_run import safely, start_afresh

SWEEP_REPORT_JOB_TYPE = "sweep-report"
INTERVALS_KEY = "sweep/intervals"  # the table's key, in W&B and in trackio
REPORT_ID_CHARS = 16  # hex digits of the report run's id (W&B ids: up to 64 characters)


@dataclass(frozen=True)
class SweepTable:
    """A sweep's interval table and its decision, for a run of their own in the sweep's project and group."""

    project: str
    entity: str | None
    group: str | None
    name: str
    columns: list[str]
    rows: list[list[Any]]
    summary: dict[str, Any]  # the decision: a few single values (outcome, highest configuration, ...)

    @property
    def run_id(self) -> str:
        return "report-" + hashlib.sha1(f"{self.group}/{self.name}".encode()).hexdigest()[:REPORT_ID_CHARS]


def log_to_wandb(table: SweepTable, mode: str, directory: Path) -> str | None:
    """Log ``table`` as a W&B table under ``directory`` (``mode``: the jobs' online or offline); the run's id,
    or None when W&B failed (one warning). W&B's service is shut down after it, so an offline run's file
    is whole once this returns (the sweep's jobs have all ended by then)."""

    def log() -> str:
        import wandb

        directory.mkdir(parents=True, exist_ok=True)
        with wandb.init(
            project=table.project,
            entity=table.entity,
            group=table.group,
            name=table.name,
            job_type=SWEEP_REPORT_JOB_TYPE,
            id=table.run_id,
            resume="allow",
            dir=str(directory),
            mode=mode,
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, x_disable_stats=True),
        ) as run:
            run.log({INTERVALS_KEY: wandb.Table(columns=table.columns, data=table.rows)})
            run.summary.update(table.summary)
        wandb.teardown()
        return table.run_id

    start_afresh()  # a job's W&B failure before says nothing about this run
    return safely(log)


def log_to_trackio(table: SweepTable) -> None:
    """Log ``table`` as a trackio table in the store ``TRACKIO_DIR`` names, the decision in the run's config."""
    import pandas as pd
    import trackio

    run = trackio.init(
        project=table.project,
        name=table.name,
        group=table.group,
        config={"job_type": SWEEP_REPORT_JOB_TYPE, **table.summary},
        resume="allow",
        embed=False,
        auto_log_cpu=False,
        auto_log_gpu=False,
    )
    try:
        run.log({INTERVALS_KEY: trackio.Table(dataframe=pd.DataFrame(table.rows, columns=table.columns))})
    finally:
        run.finish()
