"""What a job writes about itself: ``config.yaml``, ``run_info.json`` and ``plan.json`` when it starts,
``summary.json`` however it ends.

Under torchrun or accelerate every rank keeps the records (they decide what it reports), and rank 0
alone writes them. A resumed job continues the records its checkpoint left: ``metrics.jsonl`` is
rewound to the checkpoint's step, the health monitor's windows are restored, and the W&B run to
continue is the one ``run_info.json`` names.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from grpo_exp.config.schema import LoggerSettings
from grpo_exp.errors import DiskFull, describe_failure
from grpo_exp.folder import COMPLETED, FAILED, INTERRUPTED, JobFolder
from grpo_exp.spec import JobSpec
from grpo_exp.tracking import provenance
from grpo_exp.tracking.metrics import eval_rows, objective_value, stopped_solved_at, summarize, summarize_eval
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.tracking.wandb_run import RunIdentity, lost, run_config, scalar
from grpo_exp.training import checkpoints
from grpo_exp.training.checkpoints import ResumePoint
from grpo_exp.training.collapse.detector import rollback_records

log = logging.getLogger("grpo_exp.training.lifecycle")


@dataclass
class JobRecords:
    """One job's records while it runs; ``start`` writes the first ones, ``close`` the summary."""

    spec: JobSpec
    folder: JobFolder
    identity: RunIdentity  # the W&B run's name and group (a resumed job keeps its own)
    monitor: HealthMonitor
    info: dict[str, Any]  # run_info.json
    config: dict[str, Any]  # what the trackers record: the resolved config, provenance, memory plan
    started: float = field(default_factory=time.perf_counter)
    outcome: dict[str, Any] = field(default_factory=lambda: {"status": FAILED})  # summary.json's first keys

    @classmethod
    def start(cls, spec: JobSpec, folder: JobFolder, identity: RunIdentity, point: ResumePoint | None) -> JobRecords:
        """The records of a new job, or of one continued from ``point``; written before the model loads,
        so a job killed then still has its record."""
        started = time.perf_counter()
        settings, primary = spec.settings, spec.layout.primary
        folder.path.mkdir(parents=True, exist_ok=True)
        resolved = dataclasses.asdict(settings)  # as run: derived values (e.g. the batch size) included
        monitor = HealthMonitor(settings.monitor)
        outcome: dict[str, Any] = {"status": FAILED}
        if point:
            outcome["resumed_from"] = point.step
            if point.checkpoint:
                monitor.load_state_dict(point.checkpoint.state.get("monitor", {}))
            if primary:  # a rollback schedule hands the other ranks the rows they need (collapse/rollback.py)
                folder.rewind(point.step)
            known = point.run_info.get("wandb", {})
            identity = dataclasses.replace(identity, name=known.get("name", identity.name), group=known.get("group"))
        record = provenance.record(settings.seed, provenance.device_name(spec.layout))
        info = _run_info(point, record, spec)
        if primary:
            folder.write_config(OmegaConf.to_yaml(resolved))
            folder.write_run_info(info)
        plan = memory_plan(spec) if primary else None  # the other ranks neither write it nor log it
        if plan is not None:
            folder.write_plan(plan)
        config = {**resolved, "provenance": record, "plan": plan}
        return cls(spec, folder, identity, monitor, info, config, started, outcome)

    @property
    def logger(self) -> LoggerSettings:
        """Where metrics go: the job's trackers on rank 0, none on the others."""
        logger = self.spec.settings.logger
        return logger if self.spec.layout.primary else dataclasses.replace(logger, backend="none")

    @property
    def run_id(self) -> str | None:
        """The W&B run a resumed job continues."""
        return self.info.get("wandb", {}).get("id")

    @property
    def tracked_config(self) -> dict[str, Any]:
        """The config as W&B's run holds it, the swept values, seed and configuration on top (what trackio records)."""
        return run_config(self.identity, self.config)

    def loaded(self, model: Any) -> None:
        """Once the model has loaded: a hub model's commit pinned, the start-up time noted."""
        revision = getattr(getattr(model, "config", None), "_commit_hash", None)
        if revision:
            (self.info["resumes"][-1] if self.info.get("resumes") else self.info)["model"]["revision"] = revision
        if self.spec.layout.primary:
            self.folder.write_run_info(self.info)
        self.outcome["startup_s"] = round(time.perf_counter() - self.started, 2)

    def ended(self, interrupted: bool) -> None:
        self.outcome["status"] = INTERRUPTED if interrupted else COMPLETED

    def failed(self, exc: BaseException) -> DiskFull | None:
        """Note the failure; on a full disk, the checkpoint it cut is removed and the ``DiskFull`` returned."""
        self.outcome["status"] = INTERRUPTED if isinstance(exc, KeyboardInterrupt) else FAILED
        full = checkpoints.full_disk(exc, self.folder) if self.spec.layout.primary else None
        self.outcome["error"] = str(full) if full else describe_failure(exc)
        return full

    def close(self) -> dict[str, Any]:
        """``summary.json`` from ``metrics.jsonl`` and the outcome, however the job ended."""
        self.outcome["wall_time_s"] = round(time.perf_counter() - self.started, 2)
        if lost():
            self.outcome["wandb_lost"] = lost()
        settings, rows = self.spec.settings, self.folder.rows()
        training = summarize(rows, settings.monitor.kl_threshold)
        evaluation = summarize_eval(eval_rows(rows))
        objective, value = objective_value(evaluation | training, settings.objective)
        summary = {
            "name": self.identity.name,
            **self.outcome,
            **training,
            **evaluation,
            "stopped_solved_at": stopped_solved_at(rows),  # monitor.stop_when_solved ended it there; still completed
            "objective": objective,  # what the job returned to the sweeper: a held-out one falls back without eval
            "objective_value": value,
            "alerts": [{"kind": a.kind, "step": a.step, "message": a.message} for a in self.monitor.alerts],
            **({"rollbacks": rolled} if (rolled := rollback_records(rows)) else {}),  # monitor.on_collapse=rollback
            "overrides": {k: v if scalar(v) else str(v) for k, v in self.identity.overrides.items()},
        }
        if self.spec.layout.primary:
            try:
                self.folder.write_summary(summary)
            except OSError as exc:  # a disk still full: the summary before stays whole
                if self.outcome["status"] == COMPLETED:
                    raise
                log.warning("%s not written (%s): the job's failure comes next", self.folder.summary_file.name, exc)
        return summary


def _run_info(point: ResumePoint | None, record: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """``run_info.json``: the first start's record, model and layout, the W&B run to continue, each resume's."""
    model, layout = dataclasses.asdict(spec.model), spec.layout.record()
    first = {"provenance": record, "model": model, "layout": layout, "resumes": []}
    info = dict(point.run_info) if point and point.run_info else first
    if point:
        info.setdefault("resumes", []).append({"from_step": point.step, **record, "model": model, "layout": layout})
    return info


def memory_plan(spec: JobSpec) -> dict[str, Any] | None:
    """The job's memory plan for plan.json and the W&B config; a failure is a warning, never the job's end."""
    try:
        from grpo_exp.memory.estimate import memory_plan as plan

        return plan(spec, remedies=False).to_dict()
    except Exception as exc:
        log.warning("no memory plan: %s", describe_failure(exc))
        return None
