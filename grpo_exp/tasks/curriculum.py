"""A task's difficulty by level, from reasoning-gym's own curriculum for it.

reasoning-gym defines, for most tasks, levels of its range settings (chain_sum: terms per problem
and digits per term, both rising with the level). ``dataset.curriculum`` turns them on: a run
starts at ``start_level`` and is raised one level when a held-out evaluation reaches ``raise_at``
(training/curriculum.py); the level's settings replace the user's ``task_settings`` for the keys the
curriculum sets and keep the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from grpo_exp.config.schema import DatasetSettings
from grpo_exp.errors import UserError
from grpo_exp.tasks.problems import DRAW_FIELDS

LEVEL_KEY = "curriculum_level"  # a problem's level, in its entry's metadata (the reward logs it per step)
LEVEL_METRIC = "curriculum/level"  # what the reward logs: the level of the batch's problems


def check_curriculum(data: DatasetSettings) -> None:
    """One line when the task has no curriculum or a level lies outside it."""
    from reasoning_gym.factory import has_curriculum

    if not has_curriculum(str(data.task)):
        raise UserError(f"dataset.curriculum.enabled: reasoning-gym has no curriculum for {data.task}; turn it off")
    top, last = _task_last_level(str(data.task)), last_level(data)
    for key, level in (("start_level", data.curriculum.start_level), ("max_level", data.curriculum.max_level)):
        if level is not None and not 0 <= level <= top:
            raise UserError(f"dataset.curriculum.{key}={level}: {data.task}'s levels run from 0 to {top}")
    if data.curriculum.start_level > last:
        raise UserError(f"dataset.curriculum.start_level={data.curriculum.start_level} is above max_level={last}")


def last_level(data: DatasetSettings) -> int:
    """The highest level the run may reach: ``max_level``, else the task's last."""
    top = _task_last_level(str(data.task))
    return top if data.curriculum.max_level is None else data.curriculum.max_level


def _task_last_level(task: str) -> int:
    from reasoning_gym.factory import create_curriculum

    return max(len(attribute.levels) for attribute in create_curriculum(task).attributes.values()) - 1


def task_settings(data: DatasetSettings) -> dict[str, Any]:
    """The task settings problems are drawn with: the user's, with the current level's where a curriculum runs."""
    if not data.curriculum.enabled:
        return dict(data.task_settings)
    from reasoning_gym.factory import create_curriculum

    curriculum = create_curriculum(str(data.task))
    curriculum.set_global_level(data.curriculum.start_level)
    config = curriculum.generate_configuration(defaults=dict(data.task_settings))
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in DRAW_FIELDS}


def level_reached(rows: Iterable[dict[str, Any]], step: int | None, start_level: int) -> int:
    """The level a run had reached at ``step`` (None: its last step), from its ``metrics.jsonl`` rows: that of
    the last step up to there, or the one a raise at that step moved it to; ``start_level`` before any."""
    levels = [r[LEVEL_METRIC] for r in rows if LEVEL_METRIC in r and (step is None or r.get("step", 0) <= step)]
    return round(levels[-1]) if levels else start_level


def at_level(data: DatasetSettings, level: int) -> DatasetSettings:
    """The dataset settings of a stage at ``level``: the curriculum's start moves there."""
    return dataclasses.replace(data, curriculum=dataclasses.replace(data.curriculum, start_level=level))
