"""What one trainer trains (a ``Stage``), and the schedule that hands out a job's stages in turn.

Apart from schedule.py so that the schedules built elsewhere (rollback.py) share them without an
import cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from transformers import TrainerCallback

from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.training.checkpoints import Checkpoint


@dataclass
class Stage:
    """What one trainer trains: its settings, the checkpoint it continues, its prompts and stage callbacks."""

    settings: ExperimentConfig
    resume_from: Checkpoint | None
    final: bool  # the run's last stage: the monitor's end-of-run checks follow it
    prompts: Any = None  # datasets.Dataset of the kept training prompts; None: all of them
    callbacks: list[TrainerCallback] = field(default_factory=list)
    new_data: bool = False  # its prompts are not the checkpoint's (a curriculum's next level): no position to restore

    @property
    def trained(self) -> bool:
        """Its checkpoint is at its end already (a run that failed after its last checkpoint, resumed)."""
        return self.resume_from is not None and self.resume_from.step >= self.settings.grpo.max_steps


class Schedule(Protocol):
    def next_stage(self, previous: Any) -> Stage | None:
        """The stage after ``previous`` (the trainer that just trained; None before the first), or None: done."""

    def publish(self, run: Any) -> None:
        """Send what the schedule recorded before the W&B run was open to it (``run`` may be None)."""
