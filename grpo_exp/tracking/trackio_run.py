"""trackio (Hugging Face's local-first tracker): one run per Hydra job, beside or instead of W&B.

``logger=trackio``, or ``logger.backends=[wandb,trackio]`` for both. The run is named and grouped
as the job's W&B run (``RunIdentity``), in project ``logger.project``, with the swept values at the
top of its config, and receives the keys W&B does (``train/reward``, ``train/kl``, ``eval/reward``,
…) and the health alerts, as trackio alerts. Its store is trackio's local SQLite database, under
``TRACKIO_DIR`` when set (trackio reads it when imported); ``python -m grpo_exp.dashboard <sweep> --local``
serves it.

A resumed job continues its run under the same name and skips the steps the store already holds,
so every step is there once, as in W&B (``wandb_run.continue_history``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_exp.config.schema import LoggerBackend, LoggerSettings
from grpo_exp.tracking.wandb_run import RunIdentity

log = logging.getLogger(__name__)

TRAIN_PREFIX = "train/"
# The trainer's log keys that are bookkeeping, not metrics (W&B's callback drops them too).
_NOT_METRICS = ("total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss")


@dataclass
class TrackioRun:
    """The job's open trackio run; ``logged_up_to``: the last step its store held when it opened."""

    run: Any
    logged_up_to: int

    def log(self, logs: dict[str, Any], step: int) -> None:
        """Log one trainer step under W&B's key names; a step the store has already is skipped."""
        if step <= self.logged_up_to:
            return
        metrics = wandb_keys(logs)
        if metrics:
            self.run.log(metrics, step=step)

    def alert(self, kind: str, step: int, message: str) -> None:
        """A health alert (tracking/monitor.py) into the run's store, where trackio's dashboard and
        ``trackio get alerts`` show it; trackio's own terminal copy is dropped, the job logs the warning."""
        from trackio.alerts import AlertLevel

        with contextlib.redirect_stdout(io.StringIO()):
            self.run.alert(title=kind, text=message, level=AlertLevel.WARN, step=step)

    def callback(self) -> Any:
        """A trainer callback that sends each log line here (transformers is loaded by then)."""
        from transformers import TrainerCallback

        tracked = self

        class TrackioLog(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if state.is_world_process_zero and logs:
                    tracked.log(logs, state.global_step)

        return TrackioLog()


def wandb_keys(logs: dict[str, Any]) -> dict[str, float]:
    """The trainer's log keys as W&B's callback names them: ``eval_x`` -> ``eval/x``, others ``train/x``."""
    from grpo_exp.tracking.metrics import EVAL_PREFIX, TRAINER_EVAL_PREFIX

    renamed = {}
    for key, value in logs.items():
        if key in _NOT_METRICS or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        if key.startswith(TRAINER_EVAL_PREFIX):
            renamed[EVAL_PREFIX + key[len(TRAINER_EVAL_PREFIX) :]] = float(value)
        else:
            renamed[TRAIN_PREFIX + key] = float(value)
    return renamed


@contextlib.contextmanager
def trackio_run(
    settings: LoggerSettings, identity: RunIdentity, config: dict[str, Any], resumed: bool
) -> Iterator[TrackioRun | None]:
    """The job's trackio run (None unless trackio is one of its trackers), finished on the way out;
    named and grouped as its W&B run would be."""
    if LoggerBackend.trackio.value not in settings.trackers():
        yield None
        return
    name, group = settings.name or identity.name, settings.group or identity.group
    import trackio
    from trackio.sqlite_storage import SQLiteStorage

    held = SQLiteStorage.get_max_step_for_run(settings.project, name) if resumed else None
    run = trackio.init(
        project=settings.project,
        name=name,
        group=group,
        config=config,
        resume="allow" if resumed else "never",
        embed=False,
        auto_log_cpu=False,  # a sampler thread competing with training for the cores, as W&B's would
        auto_log_gpu=False,
    )
    try:
        yield TrackioRun(run, -1 if held is None else held)
    finally:
        run.finish()
