"""The embedded model's warm-up on a reasoning-gym task: worked replies to the task's training problems.

Problems come from the task's training region only (``held_out_share`` is the dataset's
``eval_fraction``), so no held-out problem is ever seen, in the warm-up or in training. A reply ends
with the answer in ``<answer>`` tags, as the task reward reads it. For a task with a worked form
(``WORKED``: chain_sum's running total, one operation a line) the reply shows the steps first, and
with probability ``error_share`` one step is off by a little, the steps after it following from the
wrong value: a solver that knows the method but slips, so the model starts out right on some fresh
problems and wrong on others, and GRPO has a difference to learn from. A task without a worked form
gets the bare answer. ``habit_corpus`` writes the optional habit phase that follows the warm-up: the
same kind of problems, most of them answered at once.
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
    return _written(_training_problems(recipe, recipe.seed, count), rng, recipe, at_once_share=0.0)


def habit_corpus(recipe: TinyRecipe) -> list[Example]:
    """The habit phase's replies: the warm-up's kind of problems, ``habit_share`` of them answered at once.

    A short phase after the warm-up, as a chat tune that favours short answers comes after
    pre-training: the model keeps the method it learned and picks up a habit of skipping it, a choice
    made at the reply's first token, the same on every problem, which GRPO can unlearn where the
    working pays (benchmarks/arithmetic.md).
    """
    problems = _training_problems(recipe, recipe.seed + 1, recipe.corpus_size)
    return _written(problems, random.Random(recipe.seed + 1), recipe, recipe.habit_share)


def _training_problems(recipe: TinyRecipe, seed: int, count: int) -> list[dict[str, Any]]:
    assert recipe.task is not None  # the source checks it before a build
    return draw(recipe.task, recipe.task_settings, seed, count, Region(recipe.held_out_share, False))


def _written(
    problems: list[dict[str, Any]], rng: random.Random, recipe: TinyRecipe, at_once_share: float
) -> list[Example]:
    """Each problem worked (where the task has a worked form) or, for ``at_once_share`` of them, answered at once."""
    worked = WORKED.get(recipe.task or "")
    return [
        Example(
            "task",
            p["question"],
            worked(p, rng, recipe.error_share)
            if worked and not (at_once_share and rng.random() < at_once_share)
            else answered(p["answer"]),
        )
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
