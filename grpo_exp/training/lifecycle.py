"""One job's lifecycle, the same for a plain run and an adaptive one: a schedule of stages.

``train`` writes the job folder's records (``config.yaml``, ``run_info.json``), opens the W&B run,
then for each stage of the schedule (``schedule``: one stage for a plain run, several for an
adaptive one) builds a trainer and trains it, continuing the previous stage's checkpoint. It stops
cleanly on a signal (``stops``), saves the model, and always writes ``summary.json`` and the W&B
summary. A resumed job (``checkpoints.ResumePoint``) continues all of these where its checkpoint left them.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from concurrent.futures import Future
from typing import Any

from omegaconf import OmegaConf

from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.errors import describe_failure
from grpo_exp.folder import JobFolder
from grpo_exp.spec import JobSpec
from grpo_exp.tracking import provenance
from grpo_exp.tracking.collapse import rollback_records
from grpo_exp.tracking.metrics import (
    eval_rows,
    objective_value,
    read_metrics,
    stopped_solved_at,
    summarize,
    summarize_eval,
)
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.tracking.outcome import format_outcome
from grpo_exp.tracking.trackio_run import trackio_run
from grpo_exp.tracking.wandb_run import (
    RunIdentity,
    continue_history,
    lost,
    resolve_mode,
    safely,
    scalar,
    summary_record,
    view_hint,
    wandb_run,
)
from grpo_exp.training import checkpoints, ranks
from grpo_exp.training.checkpoints import ResumePoint
from grpo_exp.training.stops import JobStopped, StoppedBeforeTraining, StopRequest

log = logging.getLogger(__name__)


def train(spec: JobSpec, folder: JobFolder, identity: RunIdentity, point: ResumePoint | None = None) -> float:
    """Run the job (or continue it from ``point``); returns its ``objective`` (NaN when there is none).

    Raises ``JobStopped`` after a clean stop (a signal), once the checkpoint, model and summary are saved.
    """
    started = time.perf_counter()
    spec.layout.claim()  # before anything starts CUDA: this job's GPU alone
    settings, primary = spec.settings, spec.layout.primary  # with several processes, one logs and writes files
    folder.path.mkdir(parents=True, exist_ok=True)
    resolved = dataclasses.asdict(settings)  # as run: derived values (e.g. the batch size) included
    monitor = HealthMonitor(settings.monitor)
    outcome: dict[str, Any] = {"status": "failed"}
    if point:
        outcome["resumed_from"] = point.step
        if point.checkpoint:
            monitor.load_state_dict(point.checkpoint.state.get("monitor", {}))
        if primary:
            folder.rewind(point.step)
        known = point.run_info.get("wandb", {})
        identity = dataclasses.replace(identity, name=known.get("name", identity.name), group=known.get("group"))
    record = provenance.record(settings.seed, provenance.device_name(spec.layout))
    info = _run_info(point, record, spec)
    if primary:
        folder.write_config(OmegaConf.to_yaml(resolved))
        folder.write_run_info(info)  # before the model loads: a job killed then still has its record
    plan = _memory_plan(spec) if primary else None  # the other ranks neither write it nor log to W&B
    if plan is not None:
        folder.write_plan(plan)
    logger = settings.logger if primary else dataclasses.replace(settings.logger, backend="none")
    mode = resolve_mode(logger)
    stop = StopRequest()
    hint = None
    config = {**resolved, "provenance": record, "plan": plan}
    run_id = info.get("wandb", {}).get("id")
    tracked_config = {"grpo_exp": config, **identity.overrides}  # as W&B's: the swept values on top
    with (
        wandb_run(logger, identity, config, folder.path, run_id, gpu=spec.layout.gpu) as opening,
        trackio_run(logger, identity, tracked_config, resumed=point is not None) as tracker,
    ):
        # transformers and trl load here, while the W&B run opens in the background
        from grpo_exp.training.schedule import schedule_for
        from grpo_exp.training.trainer import build_trainer

        schedule = schedule_for(spec, folder, point, stop, monitor)
        run, trainer = None, None
        try:
            with stop.listening():
                sent = None
                while (stage := schedule.next_stage(trainer)) is not None:
                    if trainer is not None:  # the previous stage's model goes before the next one loads
                        trainer = None
                        gc.collect()
                    trainer = build_trainer(spec, stage, folder, monitor, stop, tracked=opening is not None)
                    if tracker is not None:
                        trainer.add_callback(tracker.callback())
                    if sent is None:  # W&B opened while the model loaded
                        run, sent, hint = _join_wandb(opening, info, folder, mode, point)
                        _pin_revision(info, trainer.model)
                        if primary:
                            folder.write_run_info(info)
                        outcome["startup_s"] = round(time.perf_counter() - started, 2)
                    schedule.publish(run)
                    _follow(trainer, run, sent)
                    if signum := ranks.largest(stop.signum or 0):  # every rank, or none, trains the stage
                        stop.adopt(signum)
                        break  # stopped while the stage was being built: nothing to train
                    stop.defer()
                    trainer.train(resume_from_checkpoint=str(stage.resume_from.path) if stage.resume_from else None)
            if settings.save_model and trainer is not None:
                trainer.save_model(str(folder.model))
            outcome["status"] = "completed" if stop.signum is None else "interrupted"
        except StoppedBeforeTraining:  # the build or load abandoned; stopped below, like any clean stop
            outcome["status"] = "interrupted"
        except BaseException as exc:
            outcome["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            full = checkpoints.full_disk(exc, folder) if primary else None  # frees the cut checkpoint first
            outcome["error"] = str(full) if full else describe_failure(exc)
            if full:
                raise full from exc
            raise
        finally:
            outcome["wall_time_s"] = round(time.perf_counter() - started, 2)
            if lost():  # however the job ended
                outcome["wandb_lost"] = lost()
            summary = _summary(settings, folder, monitor, identity, outcome, write=primary)
            run = run or _opened(opening)
            if run is not None:
                safely(lambda: run.summary.update(summary_record(summary)))
        if stop.signum is not None:
            if run is not None:
                safely(run.mark_preempting)
            latest = checkpoints.latest(folder.path)
            raise JobStopped(stop.exit_code, summary["steps"], str(latest.path) if latest else None, stop.handover())
    if primary:
        if lost():
            hint = f"failed during the run ({lost()}); metrics.jsonl holds every step"
        print(format_outcome(summary, folder.path, hint), flush=True)
    value = summary.get("objective_value")
    return float(value) if value is not None else float("nan")


def _join_wandb(
    opening: Future | None,
    info: dict[str, Any],
    folder: JobFolder,
    mode: str,
    point: ResumePoint | None,
) -> tuple[Any, int, str | None]:
    """Wait for the W&B run opening in the background; note its id for ``run_info.json`` and, after
    a resume, join its history to the stopped run's. Returns the run, the last step W&B holds, and
    how to see the run (None/0/None when tracking is off)."""
    run = safely(opening.result) if opening is not None else None
    if run is None:
        return None, 0, None
    info["wandb"] = {"id": run.id, "name": run.name, "group": run.group, "project": run.project}
    sent = 0
    if point:
        rows = read_metrics(folder.metrics)
        sent = safely(lambda: continue_history(run, mode, folder.path, point.step, rows), default=0) or 0
    return run, sent, view_hint(run, mode, folder.path)


def _follow(trainer: Any, run: Any, sent_step: int) -> None:
    """Hand the opened W&B run to the trainer: alerts go to its summary, a W&B failure is one warning
    (``GuardedWandbCallback``), and after a resume the steps W&B holds already (up to ``sent_step``)
    are not sent twice."""
    from transformers.integrations import WandbCallback

    from grpo_exp.training.callbacks import GuardedWandbCallback, JobCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, JobCallback):
            callback.run = run
    if trainer.pop_callback(WandbCallback) is not None:
        trainer.add_callback(GuardedWandbCallback(sent_step))


def _pin_revision(info: dict[str, Any], model: Any) -> None:
    """A hub model's commit, known once it has loaded: with it, run_info.json names the exact weights."""
    revision = getattr(getattr(model, "config", None), "_commit_hash", None)
    if revision:
        (info["resumes"][-1] if info.get("resumes") else info)["model"]["revision"] = revision


def _opened(opening: Future | None) -> Any:
    """The W&B run, once its opening has ended; None when tracking is off or it failed to open."""
    return opening.result() if opening is not None and opening.exception() is None and not lost() else None


def _summary(
    settings: ExperimentConfig,
    folder: JobFolder,
    monitor: HealthMonitor,
    identity: RunIdentity,
    outcome: dict,
    write: bool,
) -> dict[str, Any]:
    rows = folder.rows()
    training = summarize(rows, settings.monitor.kl_threshold)
    evaluation = summarize_eval(eval_rows(rows))
    objective, value = objective_value(evaluation | training, settings.objective)
    summary = {
        "name": identity.name,
        **outcome,
        **training,
        **evaluation,
        "stopped_solved_at": stopped_solved_at(rows),  # monitor.stop_when_solved ended it there; still completed
        "objective": objective,  # what the job returned to the sweeper: a held-out one falls back without eval
        "objective_value": value,
        "alerts": [{"kind": a.kind, "step": a.step, "message": a.message} for a in monitor.alerts],
        **({"rollbacks": rolled} if (rolled := rollback_records(rows)) else {}),  # monitor.on_collapse=rollback
        "overrides": {k: v if scalar(v) else str(v) for k, v in identity.overrides.items()},
    }
    if write:
        try:
            folder.write_summary(summary)
        except OSError as exc:  # a disk still full: the summary before stays whole
            if outcome["status"] == "completed":
                raise
            log.warning("%s not written (%s): the job's failure comes next", folder.summary_file.name, exc)
    return summary


def _run_info(point: ResumePoint | None, record: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """``run_info.json``: the first start's record, model and layout, the W&B run to continue, each resume's."""
    model, layout = dataclasses.asdict(spec.model), spec.layout.record()
    first = {"provenance": record, "model": model, "layout": layout, "resumes": []}
    info = dict(point.run_info) if point and point.run_info else first
    if point:
        info.setdefault("resumes", []).append({"from_step": point.step, **record, "model": model, "layout": layout})
    return info


def _memory_plan(spec: JobSpec) -> dict[str, Any] | None:
    """The job's memory plan for plan.json and the W&B config; a failure is a warning, never the job's end."""
    try:
        from grpo_exp.memory.estimate import memory_plan

        return memory_plan(spec, remedies=False).to_dict()
    except Exception as exc:
        log.warning("no memory plan: %s", describe_failure(exc))
        return None
