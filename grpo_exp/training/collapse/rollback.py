"""Runs that steady themselves: ``monitor.on_collapse=rollback`` (and ``stop``).

Built on resume. ``CollapseWatch`` judges each logged step (``detector``) and asks for a
checkpoint every ``monitor.healthy_every`` healthy steps, keeping the newest one from before the
trouble out of the trainer's rotation. At a collapse it ends the stage; ``RollbackStages`` then
deletes the checkpoints after the last healthy one, rewinds ``metrics.jsonl`` to it (the steps after
are trained again and logged once, in their final form), restores the health monitor's state, writes
the rollback as a ``rollback/*`` row and trains a new stage from that checkpoint with the remedy:
the learning rate times ``monitor.remedy.lr_factor`` (compounding over rollbacks) warmed up again over
``monitor.remedy.warmup_steps``, and the group size ``monitor.remedy.num_generations`` when set.

Each stage resumes its checkpoint as any resume does (transformers' ``resume_from_checkpoint``): the
weights, or a LoRA run's adapter, with the optimizer's and scheduler's states. Launches where that
can't work are refused before the model loads: DeepSpeed (``config.layout``: a second engine in
the process keeps the first one's memory) and schedules that follow a metric (``config.checks``).

A run killed after a rollback resumes as any run does; the rollback rows left in ``metrics.jsonl``
re-apply the remedy (``LearningRateRemedy``) and count towards ``monitor.max_rollbacks``. Past that count the
next collapse ends the run with one line, as ``on_collapse=stop`` ends it at the first.

Under torchrun or accelerate, rank 0 alone decides each stage's start (``ranks.decided_by_primary``):
it checks the budget, picks the checkpoint, deletes the newer ones and rewrites ``metrics.jsonl``,
then hands every rank the checkpoint, the rollback records and the rows the detector replays. No rank
reads a file another is rewriting (after a resume too: rank 0 has rewound it), so every rank trains
the same stage with the same remedy and judges, and saves, at the same steps.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_exp.config import checks
from grpo_exp.config.schema import OnCollapse
from grpo_exp.errors import UserError
from grpo_exp.folder import SEAL_FILE, JobFolder
from grpo_exp.spec import JobSpec
from grpo_exp.tracking.metrics import is_evaluation
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.tracking.wandb_run import safely
from grpo_exp.training import checkpoints, ranks
from grpo_exp.training.checkpoints import Checkpoint, ResumePoint
from grpo_exp.training.collapse.detector import (
    ROLLBACK_PREFIX,
    Collapse,
    CollapseDetector,
    replayed,
    rollback_records,
)
from grpo_exp.training.stage import Stage
from grpo_exp.training.stops import StopRequest

log = logging.getLogger("grpo_exp.tracking.monitor")


class Collapsed(UserError):
    """The run collapsed and may not roll back (``on_collapse=stop``, or ``max_rollbacks`` spent)."""


class CollapseWatch(TrainerCallback):
    """Judges each training step; asks for healthy checkpoints; at a collapse ends the stage (rollback)
    or the run (stop). ``history``: the earlier training rows its detector replays (``StageStart``)."""

    def __init__(self, spec: JobSpec, history: list[dict[str, Any]], since: int) -> None:
        self.settings = spec.settings.monitor
        self.detector = CollapseDetector(self.settings)
        self.detector.replay(history)
        self.last_save = since  # the step the stage starts from holds a checkpoint (or is step 0)
        # checkpoints to go back to, oldest first: the stage's own (a rollback's target or the resumed
        # one), then the healthy ones it asks for; the stage's own must outlive the rotation until a
        # newer one can stand in for it, or a collapse early in the stage finds nothing to go back to
        self.saved: list[int] = [since] if since else []
        self.collapse: Collapse | None = None
        self.rolls_back = self.settings.on_collapse is OnCollapse.rollback and spec.settings.grpo.save_steps > 0

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or is_evaluation(logs) or self.collapse is not None:
            return
        step = state.global_step
        self.collapse = self.detector.observe(step, logs)
        if self.collapse is not None:
            if self.settings.on_collapse is OnCollapse.stop:
                raise Collapsed(f"training collapsed: {self.collapse.message} (monitor.on_collapse=stop); {FIX}")
            control.should_training_stop = True
            control.should_save = False  # a checkpoint of the collapsed policy is of no use
        elif self.rolls_back and self.detector.healthy and step - self.last_save >= self.settings.healthy_every:
            control.should_save = True
        if control.should_save:  # the save comes next, and the rotation of older checkpoints with it
            self._protect(args, state)

    def on_save(self, args, state, control, **kwargs):
        self.last_save = state.global_step
        if self.detector.healthy:
            self.saved.append(state.global_step)

    def _protect(self, args: Any, state: Any) -> None:
        """Keep the newest healthy checkpoint that the fall under way, or one starting now, could not
        have touched out of the rotation the coming save makes (transformers never deletes
        ``best_model_checkpoint``): a collapse goes back to before the step its fall began."""
        falling = self.detector.down_since
        began = state.global_step if falling is None else falling
        kept = [s for s in self.saved if s <= self.detector.last_clean(began)] or self.saved[:1]
        if kept:
            state.best_model_checkpoint = str(JobFolder(Path(args.output_dir)).checkpoint(kept[-1]))


class LearningRateRemedy(TrainerCallback):
    """Applies the rollbacks' remedy once the trainer has restored its optimizer and scheduler: the
    learning rate scaled by the rollbacks' factor, warmed up again from the last rollback's step.

    The scheduler's state holds the learning rate it started with, so the remedy is applied to it at
    every start (a resume included) from the rollback records rather than through the config."""

    def __init__(self, factor: float, since: int, warmup_steps: int) -> None:
        self.factor, self.since, self.warmup = factor, since, warmup_steps

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate may wrap it
        if scheduler is None or not hasattr(scheduler, "lr_lambdas"):
            raise UserError(
                f"monitor.on_collapse=rollback changes the learning rate of a LambdaLR schedule; "
                f"{type(scheduler).__name__} is not one: use optimizer.scheduler=linear or cosine"
            )
        since, warmup = self.since, self.warmup
        scheduler.base_lrs = [args.learning_rate * self.factor for _ in scheduler.base_lrs]
        scheduler.lr_lambdas = [
            (lambda step, f=f: f(step) * min(1.0, (step - since + 1) / warmup) if warmup else f(step))
            for f in scheduler.lr_lambdas
        ]
        recompute(scheduler)


# torch's two warnings about a scheduler stepped before its optimizer (torch/optim/lr_scheduler.py)
STEP_ORDER_WARNINGS = r"(Detected call of `lr_scheduler\.step\(\)` before|Seems like `optimizer\.step\(\)` has been)"


def recompute(scheduler: Any) -> None:
    """Set every param group's learning rate, and ``get_last_lr()``, from the scheduler's current
    ``base_lrs`` and ``lr_lambdas`` at the step it is at, through its public ``step``: one step back,
    one step on, so its position in the schedule is unchanged.

    ``step`` warns when it runs before the first ``optimizer.step()`` of a fresh scheduler: a
    schedule stepped too early skips its first value. Stepping back first skips nothing."""
    scheduler.last_epoch -= 1
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=STEP_ORDER_WARNINGS, category=UserWarning)
        scheduler.step()


FIX = "lower optimizer.lr, raise grpo.num_generations, or simplify the reward"


@dataclass(frozen=True)
class StageStart:
    """What rank 0 decided a stage starts from, the same on every rank."""

    checkpoint: Checkpoint | None  # None: step 0
    records: list[dict[str, Any]]  # the rollbacks on record, oldest first: the remedy applies them
    history: list[dict[str, Any]]  # the training rows up to ``checkpoint`` (``detector.replayed``)
    rollback: dict[str, Any] | None = None  # the rollback that led here, if one did


class RollbackStages:
    """A plain run that goes back to its last healthy checkpoint at a collapse (``on_collapse=rollback``),
    or one that only watches (``stop``): one stage, then one more per rollback."""

    def __init__(
        self, spec: JobSpec, folder: JobFolder, monitor: HealthMonitor, point: ResumePoint | None, stop: StopRequest
    ) -> None:
        self.spec, self.folder, self.monitor, self.stop = spec, folder, monitor, stop
        self.start = point.checkpoint if point else None
        self.watch: CollapseWatch | None = None
        self.pending: list[dict[str, Any]] = []  # rollbacks for W&B, sent once the run is open

    def next_stage(self, previous: Any) -> Stage | None:
        collapse = None
        if previous is not None:
            collapse = self.watch.collapse if self.watch else None
            if collapse is None or self.stop.signum is not None:
                return None
        start = ranks.decided_by_primary(lambda: self._decide(collapse))
        if collapse is not None and start.rollback is not None:
            self._rolled_back(collapse, start)
        self.start, records = start.checkpoint, start.records
        settings, remedy = self.spec.settings, self.spec.settings.monitor.remedy
        if records and remedy.num_generations:
            settings = checks.with_group(settings, remedy.num_generations, self.spec.layout.processes)
        since = self.start.step if self.start else 0
        self.watch = CollapseWatch(self.spec, start.history, since)
        callbacks: list[TrainerCallback] = [self.watch]
        if records:
            factor = math.prod(remedy.lr_factor for _ in records)
            callbacks.append(LearningRateRemedy(factor, records[-1]["to_step"], remedy.warmup_steps))
        return Stage(settings, self.start, final=True, callbacks=callbacks)

    def publish(self, run: Any) -> None:
        """Each rollback as a W&B alert, a step marker and a summary entry."""
        if run is None:
            return
        for record in self.pending:
            marker = {ROLLBACK_PREFIX + k: record[k] for k in ("to_step", "from_step")}
            safely(lambda m=marker: run.log(m))
            safely(lambda r=record: run.summary.update({f"{ROLLBACK_PREFIX}{r['index']}": r}))
            safely(
                lambda r=record: run.alert(
                    title=f"rollback {r['index']}: {r['cause']}",
                    text=f"back to step {r['to_step']} from step {r['from_step']}: {r['message']}; {r['change']}",
                )
            )
        self.pending.clear()

    def _decide(self, collapse: Collapse | None) -> StageStart:
        """Where the next stage starts, read from the job folder (rank 0 alone: it writes it too); after
        ``collapse``, back to the newest whole checkpoint at or before the last healthy step, recorded."""
        rows = self.folder.rows()
        if collapse is None:
            return StageStart(self.start, rollback_records(rows), replayed(rows))
        done = rollback_records(rows)
        self._check_budget(collapse, done)
        target = self._target(collapse, done)
        record = self._record(collapse, target.step, len(done) + 1)
        self._rewind(target, done, record)
        rows = self.folder.rows()
        return StageStart(target, rollback_records(rows), replayed(rows), record)

    def _rolled_back(self, collapse: Collapse, start: StageStart) -> None:
        """On every rank: the health monitor as the checkpoint left it, the rollback said and kept for W&B."""
        target, record = start.checkpoint, start.rollback
        self.monitor.load_state_dict(target.state.get("monitor", {}))
        log.warning(
            "step %d: %s; rollback %d of %d: back to step %d, %s",
            collapse.step,
            collapse.message,
            record["index"],
            self.spec.settings.monitor.max_rollbacks,
            target.step,
            record["change"],
        )
        self.pending.append(record)

    def _check_budget(self, collapse: Collapse, done: list[dict[str, Any]]) -> None:
        """Past ``monitor.max_rollbacks`` a collapse ends the run, as ``on_collapse=stop`` does."""
        most = self.spec.settings.monitor.max_rollbacks
        if len(done) >= most:
            raise Collapsed(
                f"training collapsed again: {collapse.message}; {len(done)} rollback(s) taken, "
                f"monitor.max_rollbacks={most} reached; {FIX}"
            )

    def _target(self, collapse: Collapse, done: list[dict[str, Any]]) -> Checkpoint:
        """The newest whole checkpoint at or before the last healthy step.

        A run that collapses again from the checkpoint its last rollback went back to, before a newer
        healthy one was kept, goes back one checkpoint further where one is kept: that checkpoint led
        to a collapse even with the remedy."""
        whole = [
            (step, path)
            for step, path in self.folder.checkpoints()  # newest first
            if step <= collapse.healthy_step and checkpoints.problem(path) is None
        ]
        if done and len(whole) > 1 and whole[0][0] == done[-1]["to_step"]:
            whole = whole[1:]
        if not whole:
            raise Collapsed(
                f"training collapsed ({collapse.message}) and no checkpoint from before step "
                f"{collapse.healthy_step + 1} exists to go back to; lower monitor.healthy_every, or {FIX}"
            )
        step, path = whole[0]
        return Checkpoint(path, step, json.loads((path / SEAL_FILE).read_text(encoding="utf-8")))

    def _rewind(self, target: Checkpoint, done: list[dict[str, Any]], record: dict[str, Any]) -> None:
        """Drop what came after ``target``: newer checkpoints, and ``metrics.jsonl``'s later rows (the
        steps are trained again and logged once); then the rollback's row. Rank 0's alone (``_decide``)."""
        for step, path in self.folder.checkpoints():
            if step > target.step:
                shutil.rmtree(path, ignore_errors=True)
        self.folder.rewind(target.step)
        # an earlier rollback's row that the rewind dropped (it went back less far) stays on record here
        for row in [*(r for r in done if r["to_step"] > target.step), record]:
            self.folder.append_row({"step": target.step, **{ROLLBACK_PREFIX + k: v for k, v in row.items()}})

    def _record(self, collapse: Collapse, to_step: int, index: int) -> dict[str, Any]:
        remedy, lr = self.spec.settings.monitor.remedy, self.spec.settings.optimizer.lr
        new_lr = lr * remedy.lr_factor**index
        change = f"optimizer.lr {lr * remedy.lr_factor ** (index - 1):.3g} -> {new_lr:.3g}"
        if remedy.warmup_steps:
            change += f", warmed up over {remedy.warmup_steps} steps"
        if remedy.num_generations:
            change += f", grpo.num_generations {self.spec.settings.grpo.num_generations} -> {remedy.num_generations}"
        return {
            "index": index,
            "to_step": to_step,
            "from_step": collapse.step,
            "cause": collapse.cause,
            "message": collapse.message,
            "change": change,
            "lr": new_lr,
        }
