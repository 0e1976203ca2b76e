"""reasoning-gym's tasks as prompt sets: checked before the model loads, drawn on demand, scored by their verifier.

A task (``dataset.task``, any name in ``reasoning_gym.factory.DATASETS``; ``composite`` mixes several
with weights) generates problems from a seed; ``dataset.task_settings`` are its own config keys
(``min_terms``, ``max_digits``, ...). Training and held-out problems come from disjoint regions of
the task's problem space: a problem is held out when the hash of its question falls below
``dataset.eval_fraction``, so no held-out question is ever trained on, whatever the seeds, sizes or
difficulty, and the embedded model's warm-up keeps out of the same region. The held-out problems
are distinct; training problems may repeat where the space is small.

Each problem's reasoning-gym entry (question, answer, metadata) travels in the ``task_entry``
column as JSON, so the reward can hand it back to the task's own ``score_answer``, which runs
isolated (``grpo_exp/tasks/verifier.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from grpo_exp.errors import UserError

log = logging.getLogger(__name__)

TASK_ENTRY = "task_entry"  # the dataset column holding a problem's reasoning-gym entry, as JSON
COMPOSITE = "composite"  # reasoning-gym's weighted mix of tasks: task_settings.datasets = [{name, weight, config}]
# Settings the draw owns: every task's config has them, and grpo-exp sets them from dataset.* keys.
DRAW_FIELDS = frozenset({"seed", "size"})
CHUNK = 500  # problems generated per reasoning-gym dataset object; item i of chunk c is the stream's c*CHUNK+i
# Draws per problem asked before a region counts as exhausted (a small space's held-out region runs out
# of distinct problems): what was found is used, with a warning.
DRAWS_PER_PROBLEM = 50
# A draw that takes longer shows a progress line: chain_sum's 2000 problems take half a second, knight_swap's
# (about 0.6 s each) 20 minutes, which would otherwise pass in silence before the first step.
PROGRESS_AFTER_S = 5.0
HASH_DIGITS = 12  # hex digits of a question's SHA-256 that place it in the problem space


@dataclass(frozen=True)
class Region:
    """The held-out region (questions hashed below ``share``) or the rest of the problem space."""

    share: float
    held_out: bool

    def holds(self, question: str) -> bool:
        return (_position(question) < self.share) == self.held_out


def _position(question: str) -> float:
    """Where a question falls in [0, 1): the same on every machine and in every process."""
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()[:HASH_DIGITS]
    return int(digest, 16) / 16**HASH_DIGITS


def task_names() -> list[str]:
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


class Refused(UserError):
    """A task's config refused its settings (its own ``validate`` or constructor); ``reason`` says why."""

    def __init__(self, task: str, reason: str) -> None:
        super().__init__(f"dataset.task_settings for {task} refused: {reason}")
        self.reason = reason


def task_config(task: str, settings: Mapping[str, Any], seed: int, size: int) -> Any:
    """The task's config object from settings checked before (``tasks/checks.py``), validated by the task itself."""
    from reasoning_gym.factory import DATASETS

    settings = dict(settings)
    if task == COMPOSITE:
        settings["datasets"] = _composite_specs(settings["datasets"])
    try:
        config = DATASETS[task][1](**settings, seed=seed, size=size)
        if hasattr(config, "validate"):
            config.validate()
    except (AssertionError, ValueError, TypeError) as exc:
        raise Refused(task, str(exc) or type(exc).__name__) from None
    return config


def _composite_specs(datasets: list[Mapping[str, Any]]) -> list[Any]:
    """A composite's ``datasets`` (a list of {name, weight, config}) as reasoning-gym's specs."""
    from reasoning_gym.composite import DatasetSpec

    return [
        DatasetSpec(
            name=str(item["name"]), weight=float(item.get("weight", 1.0)), config=dict(item.get("config") or {})
        )
        for item in datasets
    ]


def draw(task: str, settings: Mapping[str, Any], seed: int, count: int, region: Region) -> list[dict[str, Any]]:
    """``count`` problems of ``region`` (distinct ones for the held-out region), in the stream's order from ``seed``;
    a progress line on stderr once the draw has taken ``PROGRESS_AFTER_S``."""
    from tqdm import tqdm

    kind = "held-out" if region.held_out else "training"
    with tqdm(total=count, desc=f"drawing {task}'s {kind} problems", unit="problem", delay=PROGRESS_AFTER_S) as bar:
        return _draw(task, settings, seed, count, region, bar.update)


def _draw(
    task: str, settings: Mapping[str, Any], seed: int, count: int, region: Region, found_one: Callable[[], Any]
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    seen: set[str] = set()
    limit = max(count, 1) * DRAWS_PER_PROBLEM
    for tried, entry in enumerate(_stream(task, dict(settings), seed)):
        if len(found) == count:
            return found
        if tried >= limit:
            kind = "distinct held-out" if region.held_out else "training"
            if not found:
                raise UserError(
                    f"{task} with these settings gave no {kind} problem in {limit} draws: its problem space is too "
                    "small for dataset.eval_fraction; widen dataset.task_settings or change eval_fraction"
                )
            log.warning("%s has only %d %s problems at these settings (of %d asked)", task, len(found), kind, count)
            return found
        question = entry["question"]
        if region.holds(question) and not (region.held_out and question in seen):
            seen.add(question)
            found.append(entry)
            found_one()
    raise AssertionError("the stream is endless")


def _stream(task: str, settings: dict[str, Any], seed: int) -> Iterator[dict[str, Any]]:
    """The task's problems from ``seed`` on, without end."""
    from reasoning_gym.factory import DATASETS

    dataset_class = DATASETS[task][0]
    for chunk in itertools.count():
        yield from dataset_class(config=task_config(task, settings, seed=seed + chunk * CHUNK, size=CHUNK))


def entry_json(entry: Mapping[str, Any]) -> str:
    """A problem's entry as the ``task_entry`` column holds it (metadata values JSON lacks become text)."""
    return json.dumps(entry, default=str, ensure_ascii=False)
