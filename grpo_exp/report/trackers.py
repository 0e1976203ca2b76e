"""The sweep report's interval table in the trackers the sweep's jobs logged to: W&B (a table, offline too) and trackio.

The jobs' runs carry their configuration and seed as config keys (``tracking.wandb_run.run_config``), so the
dashboards group them; this adds the one thing no job run can hold, the comparison across them: a run of job
type ``sweep-report`` in the sweep's project and group, with the table of ``report/intervals.csv`` and the
decision in its summary. What the jobs used decides where it goes: W&B when any job opened a W&B run (offline
when they ran offline, into ``<sweep>/report/wandb/``), trackio when any job logged there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.config.schema import LoggerBackend
from grpo_exp.folder import OFFLINE_RUNS, WANDB_DIR, JobFolder, read_yaml, report_dir
from grpo_exp.report.decision import TABLE_COLUMNS, Decision, table_rows
from grpo_exp.report.seed_verdict import sweep_decision
from grpo_exp.report.sweep import Sweep, load_sweep
from grpo_exp.tracking.sweep_table import SweepTable, log_to_trackio, log_to_wandb

REPORT_RUN_SUFFIX = " report"  # the table's run: the sweep's W&B group, then this


@dataclass(frozen=True)
class SweepTrackers:
    """Where the sweep's jobs logged: W&B's project, entity, group and mode (None: no W&B run), trackio's project."""

    wandb_project: str | None
    entity: str | None
    group: str | None
    mode: str | None
    trackio_project: str | None


def log_intervals(sweep_dir: Path, objective: str | None = None, maximize: bool | None = None) -> list[str]:
    """Log the sweep's interval table (on its own objective unless told, as ``load_sweep``) to the trackers its
    jobs used; one line per tracker saying where it went."""
    sweep = load_sweep(Path(sweep_dir), objective, maximize)
    decision = sweep_decision(sweep)
    found = trackers(sweep)
    if decision is None or (found.mode is None and found.trackio_project is None):
        return []
    lines = []
    if found.wandb_project and found.mode:
        where = report_dir(sweep.path)
        table = sweep_table(sweep, decision, found.wandb_project, found.entity, found.group)
        run_id = log_to_wandb(table, found.mode, where)
        if run_id:
            lines.append(f"W&B table {table.name!r} (run {run_id}, {found.mode}" + _offline_hint(found, where) + ")")
    if found.trackio_project:
        table = sweep_table(sweep, decision, found.trackio_project, None, found.group)
        log_to_trackio(table)
        lines.append(f"trackio table {table.name!r} (project {found.trackio_project})")
    return lines


def trackers(sweep: Sweep) -> SweepTrackers:
    """What the jobs' folders say about their W&B runs (``run_info.json``) and trackers (``config.yaml``)."""
    wandb = [info for job in sweep.jobs if (info := JobFolder(job.path).run_info().get("wandb"))]
    offline = any(JobFolder(job.path).offline_runs() for job in sweep.jobs)
    configs = [c for job in sweep.jobs if isinstance(c := read_yaml(JobFolder(job.path).config), dict)]
    loggers = [c.get("logger") or {} for c in configs]
    trackio = [log for log in loggers if LoggerBackend.trackio.value in _backends(log)]
    return SweepTrackers(
        wandb_project=_most_common(info.get("project") for info in wandb),
        entity=_most_common(log.get("entity") for log in loggers),
        group=_most_common(info.get("group") for info in wandb) or sweep.path.name,
        mode=("offline" if offline else "online") if wandb else None,
        trackio_project=_most_common(log.get("project") for log in trackio),
    )


def sweep_table(sweep: Sweep, decision: Decision, project: str, entity: str | None, group: str | None) -> SweepTable:
    """The decision's table and summary for a tracker's report run."""
    leader = decision.leader
    summary = {
        "objective": sweep.objective,
        "outcome": str(decision.outcome),
        "highest": leader.label,
        "highest_centre": leader.interval.centre,
        "highest_low": leader.interval.low,
        "highest_high": leader.interval.high,
        "confidence": decision.settings.confidence,
        "seeds_needed": decision.seeds_needed,
        "configurations": len(decision.standings),
    }
    name = (group or sweep.path.name) + REPORT_RUN_SUFFIX
    return SweepTable(project, entity, group, name, list(TABLE_COLUMNS), table_rows(decision), summary)


def _backends(logger: dict[str, Any]) -> set[str]:
    return {str(b) for b in logger.get("backends") or []} or {str(logger.get("backend"))}


def _most_common(values: Any) -> Any:
    counted = Counter(v for v in values if v)
    return counted.most_common(1)[0][0] if counted else None


def _offline_hint(found: SweepTrackers, where: Path) -> str:
    return f"; upload with: wandb sync {where / WANDB_DIR / OFFLINE_RUNS}" if found.mode == "offline" else ""
