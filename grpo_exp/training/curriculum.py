"""A curriculum run (``dataset.curriculum.enabled``): one stage per level of the task's difficulty.

TRL fixes a trainer's prompts when it is built, so each level is a stage: a new trainer over that
level's training and held-out problems (grpo_exp/tasks/curriculum.py), continuing the previous
stage's checkpoint. A stage ends when a held-out evaluation reaches ``raise_at`` (with a checkpoint),
and the next one starts a level up; the last level, or ``max_level``, trains to ``grpo.max_steps``.

The level of each step's problems is logged by the task reward (``curriculum/level``), so
metrics.jsonl, W&B and trackio show it step by step; a resumed run reads it back from metrics.jsonl
as the checkpoint left it, and goes on at that level.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from transformers import TrainerCallback

from grpo_exp.folder import JobFolder
from grpo_exp.spec import JobSpec
from grpo_exp.tasks.curriculum import LEVEL_METRIC, at_level, last_level, level_reached
from grpo_exp.tracking.metrics import EVAL_PREFIX, TRAINER_EVAL_PREFIX
from grpo_exp.training import checkpoints, ranks
from grpo_exp.training.checkpoints import ResumePoint
from grpo_exp.training.stage import Stage
from grpo_exp.training.stops import StopRequest

log = logging.getLogger("grpo_exp.curriculum")


class LevelUp(TrainerCallback):
    """Ends the stage at the first evaluation (after a trained step) whose ``metric`` reaches ``raise_at``."""

    def __init__(self, metric: str, raise_at: float) -> None:
        self.key = TRAINER_EVAL_PREFIX + metric.removeprefix(EVAL_PREFIX)  # how the trainer names it
        self.raise_at = raise_at
        self.passed: float | None = None  # the value that ended the stage

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        value = (metrics or {}).get(self.key)
        if state.global_step > 0 and isinstance(value, int | float) and value >= self.raise_at:
            self.passed = float(value)
            control.should_save = True
            control.should_training_stop = True


class CurriculumStages:
    """A stage per level, from ``start_level`` (or the level a resumed run had reached) up."""

    def __init__(self, spec: JobSpec, folder: JobFolder, point: ResumePoint | None, stop: StopRequest) -> None:
        self.spec, self.folder, self.stop = spec, folder, stop
        self.curriculum = spec.settings.dataset.curriculum
        self.checkpoint = point.checkpoint if point else None
        self.level = self._resumed_level(point.step) if point else self.curriculum.start_level
        self.last = last_level(spec.settings.dataset)
        self.watch: LevelUp | None = None

    def next_stage(self, previous: Any) -> Stage | None:
        settings = self.spec.settings
        if previous is not None:
            if self.watch is None or self.watch.passed is None:  # the last level, or a stage that ended unpassed
                return None
            self._raise(previous.state.global_step, self.watch.passed)
            if previous.state.global_step >= settings.grpo.max_steps or self.stop.signum is not None:
                return None
            self.checkpoint = ranks.decided_by_primary(lambda: checkpoints.latest(self.folder.path))
        final = self.level >= self.last
        self.watch = None if final else LevelUp(self.curriculum.metric, self.curriculum.raise_at)
        stage_settings = dataclasses.replace(settings, dataset=at_level(settings.dataset, self.level))
        return Stage(
            stage_settings, self.checkpoint, final=final, callbacks=[self.watch] if self.watch else [], new_data=True
        )

    def _raise(self, step: int, passed: float) -> None:
        """One level up, recorded at the step that passed (a row of metrics.jsonl), so a resume from that
        step's checkpoint goes on at the new level even when the run ended there."""
        log.info(
            "step %d: %s %.3f reached %g: curriculum level %d -> %d",
            step,
            self.curriculum.metric,
            passed,
            self.curriculum.raise_at,
            self.level,
            self.level + 1,
        )
        self.level += 1
        if self.spec.layout.primary:
            self.folder.append_row({"step": step, LEVEL_METRIC: self.level})

    def publish(self, run: Any) -> None:
        return None

    def _resumed_level(self, step: int) -> int:
        """The level of the last step the checkpoint holds, or the one it was raised to there (metrics.jsonl is
        rewound to the checkpoint)."""
        return level_reached(self.folder.rows(), step, self.curriculum.start_level)
