"""One job's lifecycle, the same for a plain run and an adaptive one: a schedule of stages.

``train`` writes the job folder's first records (``records``), opens the trackers (W&B, trackio),
then for each stage of the schedule (``schedule``: one stage for a plain run, several for an adaptive
one or a rollback) builds a trainer and trains it, continuing the previous stage's checkpoint. It
stops cleanly on a signal (``stops``), saves the model, and always writes ``summary.json`` and the
W&B summary. A run that ends by itself with a reward part that never returned in time is a failed
run (``compose.check_answered``). A resumed job (``checkpoints.ResumePoint``) continues all of these
where its checkpoint left them.
"""

from __future__ import annotations

import functools
import gc
import logging
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grpo_exp.folder import JobFolder
from grpo_exp.rewards.compose import check_answered
from grpo_exp.spec import JobSpec
from grpo_exp.tracking.metrics import read_metrics
from grpo_exp.tracking.outcome import format_outcome
from grpo_exp.tracking.trackio_run import trackio_run
from grpo_exp.tracking.wandb_run import (
    RunIdentity,
    continue_history,
    lost,
    resolve_mode,
    safely,
    summary_record,
    view_hint,
    wandb_run,
)
from grpo_exp.training import checkpoints, ranks
from grpo_exp.training.checkpoints import ResumePoint
from grpo_exp.training.records import JobRecords
from grpo_exp.training.stops import JobStopped, StoppedBeforeTraining, StopRequest

if TYPE_CHECKING:  # transformers loads later, while the W&B run opens
    from grpo_exp.training.callbacks import GuardedWandbCallback

log = logging.getLogger(__name__)


def train(spec: JobSpec, folder: JobFolder, identity: RunIdentity, point: ResumePoint | None = None) -> float:
    """Run the job (or continue it from ``point``); returns its ``objective`` (NaN when there is none).

    Raises ``JobStopped`` after a clean stop (a signal), once the checkpoint, model and summary are saved.
    """
    spec.layout.claim()  # before anything starts CUDA: this job's GPU alone
    records = JobRecords.start(spec, folder, identity, point)
    logger, stop = records.logger, StopRequest()
    with (
        wandb_run(
            logger, records.identity, records.config, folder.path, records.run_id, gpu=spec.layout.gpu
        ) as opening,
        trackio_run(logger, records.identity, records.tracked_config, resumed=point is not None) as tracker,
    ):
        trackers = Trackers(opening, tracker, resolve_mode(logger))
        try:
            with stop.listening():
                trainer = _train_stages(spec, folder, point, stop, records, trackers)
            if stop.signum is None:  # a run that ended by itself: each part scored some of it
                check_answered(spec.rewards)
            if spec.settings.save_model and trainer is not None:
                checkpoints.save_model(trainer, folder, spec.layout.primary)
            records.ended(interrupted=stop.signum is not None)
        except StoppedBeforeTraining:  # the build or load abandoned; stopped below, like any clean stop
            records.ended(interrupted=True)
        except BaseException as exc:
            if full := records.failed(exc):  # the checkpoint the full disk cut is removed
                raise full from exc
            raise
        finally:
            spec.close_helpers()  # with every process a tool or an environment left behind
            summary = records.close()
            trackers.close(summary)
        if stop.signum is not None:
            if trackers.run is not None:
                safely(trackers.run.mark_preempting)
            latest = checkpoints.latest(folder.path)
            raise JobStopped(stop.exit_code, summary["steps"], str(latest.path) if latest else None, stop.handover())
    if spec.layout.primary:
        hint = f"failed during the run ({lost()}); metrics.jsonl holds every step" if lost() else trackers.hint
        print(format_outcome(summary, folder.path, hint), flush=True)
    value = summary.get("objective_value")
    return float(value) if value is not None else float("nan")


def _train_stages(
    spec: JobSpec,
    folder: JobFolder,
    point: ResumePoint | None,
    stop: StopRequest,
    records: JobRecords,
    trackers: Trackers,
) -> Any:
    """Build and train each stage of the job's schedule in turn; returns the last stage's trainer."""
    # transformers and trl load here, while the W&B run opens in the background
    from grpo_exp.training.schedule import schedule_for
    from grpo_exp.training.trainer import build_trainer

    _freeze_libraries()
    schedule = schedule_for(spec, folder, point, stop, records.monitor)
    trainer = None
    while (stage := schedule.next_stage(trainer)) is not None:
        if trainer is not None:  # the previous stage's model goes before the next one loads
            trainer = None
            gc.collect()
        trainer = build_trainer(spec, stage, folder, records.monitor, stop, tracked=trackers.opening is not None)
        if not trackers.joined:  # W&B opened while the model loaded
            trackers.join(records.info, folder, point)
            records.loaded(trainer.model)
        schedule.publish(trackers.run)
        trackers.follow(trainer)
        if signum := ranks.largest(stop.signum or 0):  # every rank, or none, trains the stage
            stop.adopt(signum)
            break  # stopped while the stage was being built: nothing to train
        if stage.trained:  # no step to train: transformers would train one before it checks max_steps
            trainer.load_trained(str(stage.resume_from.path))
            continue
        stop.defer()
        trainer.train(resume_from_checkpoint=str(stage.resume_from.path) if stage.resume_from else None)
    return trainer


@dataclass
class Trackers:
    """The job's trackers: W&B's run (opening in the background until the first stage has loaded) and trackio's."""

    opening: Future | None
    trackio: Any
    mode: str  # W&B's: online, offline or disabled
    run: Any = None  # the W&B run, once joined
    sent: int | None = None  # the last step W&B holds, as of the current stage's start (None: not joined yet)
    hint: str | None = None  # how to see the run, for the job's closing lines
    guard: GuardedWandbCallback | None = None  # the current stage's

    @property
    def joined(self) -> bool:
        return self.sent is not None

    def join(self, info: dict[str, Any], folder: JobFolder, point: ResumePoint | None) -> None:
        """Wait for the W&B run opening in the background; note its id for ``run_info.json`` and, after
        a resume, join its history to the stopped run's."""
        self.run = safely(self.opening.result) if self.opening is not None else None
        self.sent = 0
        if self.run is None:
            return
        run = self.run
        info["wandb"] = {"id": run.id, "name": run.name, "group": run.group, "project": run.project}
        if point:
            rows = read_metrics(folder.metrics)
            self.sent = safely(lambda: continue_history(run, self.mode, folder.path, point.step, rows), default=0) or 0
        self.hint = view_hint(run, self.mode, folder.path)

    def follow(self, trainer: Any) -> None:
        """Hand the trackers to a stage's trainer: alerts go to the W&B run's summary and trackio, a W&B failure is one
        warning (``GuardedWandbCallback``), the steps W&B holds already are not sent twice (after a resume,
        and after a rollback: the previous stage sent them up to its collapse), and trackio gets its callback."""
        from transformers.integrations import WandbCallback

        from grpo_exp.training.callbacks import GuardedWandbCallback, JobCallback

        for callback in trainer.callback_handler.callbacks:
            if isinstance(callback, JobCallback):
                callback.run, callback.trackio = self.run, self.trackio
        if self.guard is not None:
            self.sent = max(self.sent or 0, self.guard.held)
        if trainer.pop_callback(WandbCallback) is not None:
            self.guard = GuardedWandbCallback(self.sent or 0)
            trainer.add_callback(self.guard)
        if self.trackio is not None:
            trainer.add_callback(self.trackio.callback())

    def close(self, summary: dict[str, Any]) -> None:
        """The summary into W&B's run, once it has opened (whether or not training got to join it)."""
        if self.run is None and self.opening is not None and self.opening.exception() is None and not lost():
            self.run = self.opening.result()
        if self.run is not None:
            safely(lambda: self.run.summary.update(summary_record(summary)))


@functools.cache  # once per process: in a sweep, a later job would pin the previous job's garbage
def _freeze_libraries() -> None:
    """Keep the cyclic collector's full passes off what the training imports made (torch,
    transformers, TRL: it lives as long as the process), as ``run_job`` does for start-up's objects;
    a plain TRL script walks them on every full pass (benchmarks/startup.md)."""
    gc.freeze()
