"""The embedded model's math warm-up: replies to the shipped word problems (gsm8k_sample.jsonl).

GRPO learns only from differences inside a group, so the warm-up teaches a mix the math reward
can tell apart. Each reply is a problem's worked reasoning (GSM8K's calculator notes ``<<…>>``
dropped, to keep replies short), then:

- with probability ``format_share`` the final line the format part asks for, ``#### <number>``;
  otherwise one of the other endings people write (``The answer is 18.``, ``Answer: 18``, a bare
  number, ``#### 18 in all``, or no final line at all), and now and then no reasoning before it;
- with probability ``correct_share`` the number is the reference; otherwise a near miss (off by a
  little, doubled, or an earlier step's result), written into the last reasoning step as well, so
  a reply's reasoning and its answer agree.

The warm-up replies cover every shipped problem, held-out ones included: the model has seen each
reference in some of its replies, so what GRPO can raise on them is recall of that number, not
arithmetic (docs/rewards.md, "Verifiable math", says what it reaches).
"""

from __future__ import annotations

import random
import re
from typing import Any

from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.examples import Example
from grpo_exp.shipped import read_records, shipped_file

PROBLEMS = "gsm8k_sample.jsonl"
MARKER = "####"
EXACT = MARKER + " {n}"
# Endings that state the answer in another form than the exact final line (None: reasoning only).
OTHER_ENDINGS = ("The answer is {n}.", "So the answer is {n}.", "Answer: {n}", "{n}", MARKER + " {n} in all", None)
NO_REASONING_SHARE = 0.1  # share of replies that skip the reasoning and give only their final line
CALCULATOR = re.compile(r"<<[^>]*>>")


def math_replies(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    """``count`` replies to problems drawn from the shipped sample, mixed as the module docstring says."""
    problems = read_records(shipped_file(PROBLEMS))
    return [_reply(rng.choice(problems), rng, recipe) for _ in range(count)]


def _reply(problem: dict[str, Any], rng: random.Random, recipe: TinyRecipe) -> Example:
    worked, _, reference = problem["answer"].rpartition(MARKER)
    steps = [CALCULATOR.sub("", line).strip() for line in worked.strip().splitlines()]
    reference = reference.strip()
    number = reference if rng.random() < recipe.correct_share else _near_miss(reference, steps, rng)
    if number != reference:
        steps[-1] = _restated(steps[-1], reference, number)
    ending = EXACT if rng.random() < recipe.format_share else rng.choice(OTHER_ENDINGS)
    lines = [] if ending is not None and rng.random() < NO_REASONING_SHARE else steps
    if ending is not None:
        lines = [*lines, ending.format(n=number)]
    return Example("math", problem["question"], "\n".join(lines))


def _near_miss(reference: str, steps: list[str], rng: random.Random) -> str:
    """A wrong number a weak solver might give: off by a little, doubled, or an earlier step's result."""
    value = float(reference.replace(",", ""))
    earlier = [m for step in steps[:-1] for m in re.findall(r"= (-?[\d,]*\.?\d+)", step)]
    choices = [value + rng.choice([-1, 1]) * rng.randint(1, 10), value * 2]
    if earlier:
        choices.append(float(rng.choice(earlier).replace(",", "")))
    wrong = rng.choice(choices)
    if wrong == value:
        wrong = value + 1
    return _written(wrong, commas="," in reference)


def _written(value: float, commas: bool) -> str:
    """A number as the sample writes it: no trailing .0, thousands grouped where the reference groups them."""
    if value != int(value):
        return f"{value:g}"
    return f"{int(value):,}" if commas else str(int(value))


def _restated(step: str, reference: str, number: str) -> str:
    """The last reasoning step with its result replaced by ``number`` (unchanged when it doesn't show it)."""
    before, found, after = step.rpartition(f"= {reference}")
    return f"{before}= {number}{after}" if found else step
