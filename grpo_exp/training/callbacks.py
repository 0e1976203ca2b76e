"""Every trainer callback of a job: recording each logged step, the GRPO progress bar, W&B after a
resume, the final evaluation, clean stops (shared by every rank), sealed checkpoints, the end of an
adaptive stage and the early end of a solved run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback
from transformers.integrations import WandbCallback
from transformers.trainer_callback import ProgressCallback

from grpo_exp.config.schema import MonitorSettings, OnCollapse
from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder
from grpo_exp.rewards.solved import SOLVED
from grpo_exp.tracking import wandb_run
from grpo_exp.tracking.metrics import STOPPED_SOLVED, TRAINER_EVAL_PREFIX, is_evaluation, metrics_row
from grpo_exp.tracking.monitor import Alert, HealthMonitor
from grpo_exp.tracking.wandb_run import safely
from grpo_exp.training import checkpoints, ranks
from grpo_exp.training.divergence import DivergenceWatch
from grpo_exp.training.stops import StopRequest

if TYPE_CHECKING:
    from grpo_exp.config.layout import Layout

log = logging.getLogger("grpo_exp.tracking.monitor")

# What the progress bar shows after each logging step (TRL's log keys, short labels).
BAR_FIELDS = {"reward": "reward", "reward_std": "std", "kl": "kl", "completions/mean_length": "len"}


class JobCallback(TrainerCallback):
    """Writes every log to ``metrics.jsonl``, reports health alerts as they appear, and ends a diverged
    run with what it found (``divergence.DivergenceWatch``; ``layout``: what the message names).

    ``finish``: run the monitor's end-of-run checks when training ends (not at the end of an adaptive
    run's intermediate stages, which the next stage continues)."""

    def __init__(
        self,
        folder: JobFolder,
        monitor: HealthMonitor,
        run: Any | None = None,
        finish: bool = True,
        layout: Layout | None = None,
    ) -> None:
        self.folder = folder
        self.monitor = monitor
        self.run = run
        self.trackio: Any | None = None  # the job's TrackioRun, when trackio is one of its trackers
        self.finish = finish
        self.layout = layout
        self.watch: DivergenceWatch | None = None  # made at the first log, when the trainer's args are known

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        if state.is_world_process_zero:
            self.folder.append_row(metrics_row(state.global_step, logs))
            if not is_evaluation(logs):  # the health checks watch training; held-out scores are their own rows
                self._report(self.monitor.observe(state.global_step, logs))
        if is_evaluation(logs):
            return
        if self.watch is None:
            self.watch = DivergenceWatch(self.layout, getattr(args, "max_grad_norm", None))
        diverged = self.watch.diverged(state.global_step, logs)
        rolls_back = self.monitor.settings.on_collapse is OnCollapse.rollback  # rollback.CollapseWatch acts on it
        if diverged and not rolls_back:
            raise UserError(diverged)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.finish:
            self._report(self.monitor.finish(state.global_step))

    def _report(self, alerts: list[Alert]) -> None:
        for alert in alerts:
            log.warning("step %d: %s", alert.step, alert.message)
            if self.run is not None:
                safely(lambda kind=alert.kind, step=alert.step: self.run.summary.__setitem__(f"alerts/{kind}", step))
            if self.trackio is not None:
                self.trackio.alert(alert.kind, alert.step, alert.message)


class SignalProgress(ProgressCallback):
    """transformers' progress bar, with reward, reward std and KL beside it instead of a dict per step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            numbers = {key: v for key, v in logs.items() if isinstance(v, int | float)}  # an all-NaN mean is None
            shown = {label: f"{numbers[key]:.3g}" for key, label in BAR_FIELDS.items() if key in numbers}
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        """No second bar for the held-out batches: it would break the training bar's line for seconds of work."""


class GuardedWandbCallback(WandbCallback):
    """transformers' W&B logger, whose failures don't stop training, minus the steps W&B holds already.

    A W&B failure (its service process gone, the network, the disk) is one warning
    (``wandb_run.safely``); then W&B is off for the job, TRL's completions tables included.
    A resumed job trains again the steps between its checkpoint and the stop, a rolled-back one those
    between its checkpoint and the collapse; W&B keeps one value per step, so those (up to
    ``sent_step``) are not sent twice. ``held``: the last step W&B holds, this stage's included, which
    the next stage's callback starts from (``lifecycle.Trackers.follow``).
    """

    def __init__(self, sent_step: int = 0) -> None:
        super().__init__()
        self.sent_step = self.held = sent_step

    def on_train_begin(self, args, state, control, **kwargs):
        self._guarded(args, super().on_train_begin, args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        self._guarded(args, super().on_train_end, args, state, control, **kwargs)

    def on_log(self, args, state, control, **kwargs):
        if state.global_step > self.sent_step:  # a step's evaluation comes after its training row: both go
            self._guarded(args, super().on_log, args, state, control, **kwargs)
            self.held = max(self.held, state.global_step)

    def on_save(self, args, state, control, **kwargs):
        self._guarded(args, super().on_save, args, state, control, **kwargs)

    def on_predict(self, args, state, control, metrics, **kwargs):
        self._guarded(args, super().on_predict, args, state, control, metrics, **kwargs)

    @staticmethod
    def _guarded(args: Any, hook: Any, *hook_args: Any, **hook_kwargs: Any) -> None:
        safely(lambda: hook(*hook_args, **hook_kwargs))
        if wandb_run.lost() and "wandb" in (args.report_to or []):
            args.report_to = [backend for backend in args.report_to if backend != "wandb"]  # TRL's tables too


class FinalEvaluation(TrainerCallback):
    """Scores the held-out prompts after the last step too, so every run with them ends on an evaluation.

    Trainer evaluates only every ``eval_steps`` (or never, with ``grpo.eval_strategy=no``); a run
    whose length isn't a multiple would end without its final held-out reward."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_evaluate = True


class StopCallback(TrainerCallback):
    """Turns a pending stop request (``stops.StopRequest``) into 'save a checkpoint, then stop' at the step's end."""

    def __init__(self, request: StopRequest) -> None:
        self.request = request

    def on_step_end(self, args, state, control, **kwargs):
        signum = ranks.largest(self.request.signum or 0)  # every rank stops at the step any rank was signalled in
        if signum:
            self.request.adopt(signum)
            control.should_save = True
            control.should_training_stop = True


class CheckpointSeal(TrainerCallback):
    """Seals each checkpoint the trainer finishes (``checkpoints.seal``) with the monitor's state."""

    def __init__(self, monitor: HealthMonitor) -> None:
        self.monitor = monitor

    def on_step_end(self, args, state, control, **kwargs):
        # The last step is always checkpointed, so a finished run can be extended (grpo.max_steps).
        if args.save_strategy != "no" and state.global_step >= state.max_steps > 0:
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        ranks.barrier()  # every rank's part of the checkpoint (its RNG state, its DeepSpeed shards) is written
        if state.is_world_process_zero:
            path = JobFolder(Path(args.output_dir)).checkpoint(state.global_step)
            checkpoints.seal(path, state.global_step, {"monitor": self.monitor.state_dict()})


class StageBounds(TrainerCallback):
    """Ends an adaptive stage at its last step with a checkpoint, which the next stage resumes from.

    The trainer state restored from the previous stage's checkpoint still names that stage's batch
    size; it is set to this stage's, so each checkpoint records the batch it was trained with.
    """

    def __init__(self, end: int) -> None:
        self.end = end

    def on_train_begin(self, args, state, control, **kwargs):
        state.train_batch_size = args.train_batch_size

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.end:
            control.should_save = True
            control.should_training_stop = True


class RungEnd(TrainerCallback):
    """Ends a rung of successive halving at its step with a checkpoint and an evaluation; the run's
    schedule (``grpo.max_steps``) stays that of the whole run, which a promoted job resumes."""

    def __init__(self, end: int) -> None:
        self.end = end

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.end:
            control.should_save = True
            control.should_evaluate = args.eval_strategy != "no"  # "no": the run holds no prompts out
            control.should_training_stop = True


class SolvedStop(TrainerCallback):
    """Ends a run whose reward has stayed at its ceiling (``monitor.stop_when_solved``), so the steps left
    are saved; with a checkpoint (unless the run keeps none), and the run counts as completed.

    Judged on the held-out evaluations when the job has them, else on the training steps: a check is
    solved when every completion it scored is at the reward's ceiling (``frac_solved`` 1, rewards/solved.py),
    and the run ends once every check from one at least ``window`` steps back is solved (held-out: two
    evaluations or more, the base model's at step 0 included). The step goes to ``metrics.jsonl`` as a
    row of its own, which the summary reports as ``stopped_solved_at``. A reward with a part of unknown
    ceiling logs no ``frac_solved``, so it never stops early. Off (``stop_when_solved: false``), it does nothing.
    """

    def __init__(self, folder: JobFolder, settings: MonitorSettings, held_out: bool) -> None:
        self.folder = folder
        self.enabled, self.window = settings.stop_when_solved, settings.solved_window
        self.key = TRAINER_EVAL_PREFIX + SOLVED if held_out else SOLVED
        self.since: int | None = None  # the first step of the current run of solved checks

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.enabled or not logs or not isinstance(logs.get(self.key), int | float):
            return
        if logs[self.key] < 1.0:
            self.since = None
            return
        self.since = state.global_step if self.since is None else self.since
        if state.global_step - self.since >= self.window and state.global_step < state.max_steps:
            control.should_save = args.save_strategy != "no" or control.should_save
            control.should_training_stop = True
            if state.is_world_process_zero:
                self.folder.append_row({"step": state.global_step, STOPPED_SOLVED: state.global_step})
                log.info(
                    "step %d: the reward has stayed at its ceiling since step %d (monitor.stop_when_solved): "
                    "stopping, %d of %d steps saved",
                    state.global_step,
                    self.since,
                    state.max_steps - state.global_step,
                    state.max_steps,
                )
