"""The embedded model's warm-up on a reasoning-gym task: worked replies to the task's training problems.

Problems come from the task's training region only (``held_out_share`` is the dataset's
``eval_fraction``), so no held-out problem is ever seen, in the warm-up or in training. A reply ends
with the answer in ``<answer>`` tags, as the task reward reads it. For a task with a worked form
(``WORKED``: chain_sum's running total, one operation a line) the reply shows the steps first, and
with probability ``error_share`` one step is off by a little, the steps after it following from the
wrong value: a solver that knows the method but slips, so the model starts out right on some fresh
problems and wrong on others, and GRPO has a difference to learn from. A task without a worked form
gets the bare answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.examples import Example
from grpo_exp.tasks.problems import Region, draw

SLIPS = (-2, -1, 1, 2)  # how far a slipped step's result lands from the right one


def task_replies(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    """``count`` replies to the task's training problems, drawn from the stream of ``recipe.seed``."""
    assert recipe.task is not None  # the source checks it before a build
    problems = draw(recipe.task, recipe.task_settings, recipe.seed, count, Region(recipe.held_out_share, False))
    worked = WORKED.get(recipe.task)
    return [
        Example("task", p["question"], worked(p, rng, recipe.error_share) if worked else answered(p["answer"]))
        for p in problems
    ]


def answered(answer: Any, steps: list[str] | None = None) -> str:
    return "\n".join([*(steps or []), f"<answer>{answer}</answer>"])


def chain_sum(problem: dict[str, Any], rng: random.Random, error_share: float) -> str:
    """``4 - 1 - 7``: ``4 - 1 = 3``, ``3 - 7 = -4``, then the answer; one step may slip."""
    terms = problem["metadata"]["expression"].split()
    operations = list(zip(terms[1::2], map(int, terms[2::2]), strict=True))
    slip = rng.randrange(len(operations)) if rng.random() < error_share else None
    total, steps = int(terms[0]), []
    for i, (sign, term) in enumerate(operations):
        result = total + term if sign == "+" else total - term
        if i == slip:
            result += rng.choice(SLIPS)
        steps.append(f"{total} {sign} {term} = {result}")
        total = result
    return answered(total, steps)


# task -> how a worked reply to one of its problems is written (problem, rng, error_share)
WORKED: dict[str, Callable[[dict[str, Any], random.Random, float], str]] = {"chain_sum": chain_sum}
