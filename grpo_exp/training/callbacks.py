"""Every trainer callback of a job: recording each logged step, the GRPO progress bar, W&B after a
resume, the final evaluation, clean stops, sealed checkpoints and the end of an adaptive stage."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.integrations import WandbCallback
from transformers.trainer_callback import ProgressCallback

from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder
from grpo_exp.tracking import wandb_run
from grpo_exp.tracking.metrics import is_evaluation, metrics_row
from grpo_exp.tracking.monitor import Alert, HealthMonitor
from grpo_exp.tracking.wandb_run import safely
from grpo_exp.training import checkpoints
from grpo_exp.training.stops import StopRequest

log = logging.getLogger("grpo_exp.tracking.monitor")

# A NaN in these means the run has diverged: every later step would be wasted compute.
DIVERGENCE_KEYS = ("loss", "grad_norm")
# What the progress bar shows after each logging step (TRL's log keys, short labels).
BAR_FIELDS = {"reward": "reward", "reward_std": "std", "kl": "kl", "completions/mean_length": "len"}


class JobCallback(TrainerCallback):
    """Writes every log to ``metrics.jsonl`` and reports health alerts as they appear.

    ``finish``: run the monitor's end-of-run checks when training ends (not at the end of an adaptive
    run's intermediate stages, which the next stage continues)."""

    def __init__(self, folder: JobFolder, monitor: HealthMonitor, run: Any | None = None, finish: bool = True) -> None:
        self.folder = folder
        self.monitor = monitor
        self.run = run
        self.finish = finish

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        if state.is_world_process_zero:
            self.folder.append_row(metrics_row(state.global_step, logs))
            if not is_evaluation(logs):  # the health checks watch training; held-out scores are their own rows
                self._report(self.monitor.observe(state.global_step, logs))
        if any(isinstance(logs.get(k), float) and math.isnan(logs[k]) for k in DIVERGENCE_KEYS):
            raise UserError(
                f"training diverged: the loss is NaN at step {state.global_step}; "
                "lower optimizer.lr, keep optimizer.max_grad_norm set, and check the rewards for inf"
            )

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.finish:
            self._report(self.monitor.finish(state.global_step))

    def _report(self, alerts: list[Alert]) -> None:
        for alert in alerts:
            log.warning("step %d: %s", alert.step, alert.message)
            if self.run is not None:
                safely(lambda kind=alert.kind, step=alert.step: self.run.summary.__setitem__(f"alerts/{kind}", step))


class SignalProgress(ProgressCallback):
    """transformers' progress bar, with reward, reward std and KL beside it instead of a dict per step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            shown = {label: f"{logs[key]:.3g}" for key, label in BAR_FIELDS.items() if key in logs}
            if shown:
                self.training_bar.set_postfix(shown, refresh=False)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        """No second bar for the held-out batches: it would break the training bar's line for seconds of work."""


class GuardedWandbCallback(WandbCallback):
    """transformers' W&B logger, whose failures don't stop training, minus the steps W&B holds already.

    A W&B failure (its service process gone, the network, the disk) is one warning
    (``wandb_run.safely``); then W&B is off for the job, TRL's completions tables included.
    A resumed job trains again the steps between its checkpoint and the stop; W&B keeps one value
    per step, so those (up to ``sent_step``) are not sent twice.
    """

    def __init__(self, sent_step: int = 0) -> None:
        super().__init__()
        self.sent_step = sent_step

    def on_train_begin(self, args, state, control, **kwargs):
        self._guarded(args, super().on_train_begin, args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        self._guarded(args, super().on_train_end, args, state, control, **kwargs)

    def on_log(self, args, state, control, **kwargs):
        if state.global_step > self.sent_step:
            self._guarded(args, super().on_log, args, state, control, **kwargs)

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
        if self.request.signum is not None:
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
