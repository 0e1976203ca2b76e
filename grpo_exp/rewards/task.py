"""Reward parts for reasoning-gym's tasks: the task's own verifier on the reply's answer, and the answer's form.

The answer is what the reply's last ``<answer>…</answer>`` holds (reasoning-gym's convention, and
what its prompts ask real models for); the verifier is the task's ``score_answer``, given back the
problem's entry from the ``task_entry`` column (grpo_exp/tasks/problems.py). Some verifiers run the
answer as Python, so every one runs isolated, one process per answer, out of the trainer's
(grpo_exp/tasks/verifier.py). Most tasks score 1.0 or 0.0; some give partial credit, and the task
metrics (grpo_exp/rewards/task_metrics.py) count a problem solved only at the part's ceiling, 1.0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.rewards.registry import register


def _check_tag(params: dict) -> None:
    tag = params.get("tag")
    if not isinstance(tag, str) or not re.fullmatch(r"[A-Za-z_][\w-]*", tag):
        raise UserError(f"task reward params: tag={tag!r} must name an XML-like tag, e.g. tag: answer")


def tagged_answer(reply: str, tag: str) -> str | None:
    """The stripped contents of the reply's last ``<tag>…</tag>``; None without one."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", reply, flags=re.DOTALL)
    return found[-1].strip() if found else None


def _check_accuracy_params(params: dict) -> None:
    from grpo_exp.tasks.verifier import check_isolation

    _check_tag(params)
    timeout_s = params.get("timeout_s")
    if type(timeout_s) not in (int, float) or not 0 < timeout_s < math.inf:
        raise UserError(
            f"task_accuracy: timeout_s must be seconds above 0 (a verifier may run the answer), got {timeout_s!r}"
        )
    check_isolation(params.get("isolation"))


@register("task_accuracy", ceiling=1.0, check=_check_accuracy_params)
def task_accuracy(
    completions: list[str],
    *,
    task_entry: list[str],
    tag: str,
    timeout_s: float,
    isolation: str,
    log_metric: Callable[[str, float], None] | None = None,
    **_: Any,
) -> list[float]:
    """The task's own score for the reply's answer (0.0 for a reply without one), from its verifier run
    isolated (grpo_exp/tasks/verifier.py): an answer whose verifying exits, is stopped or outlives
    ``timeout_s`` scores 0.0, with a warning. Under a curriculum it also logs the level of the batch's
    problems (``curriculum/level``), so each step shows what it trained on."""
    from grpo_exp.tasks.curriculum import LEVEL_KEY, LEVEL_METRIC
    from grpo_exp.tasks.verifier import shared_verifier

    problems = [json.loads(entry) for entry in task_entry]
    levels = [p["metadata"][LEVEL_KEY] for p in problems if LEVEL_KEY in p["metadata"]]
    if levels and log_metric is not None:
        log_metric(LEVEL_METRIC, sum(levels) / len(levels))
    answers = [tagged_answer(reply, tag) for reply in completions]
    return shared_verifier(isolation).score(problems, answers, timeout_s)


@register("task_format", ceiling=1.0, check=_check_tag)
def task_format(completions: list[str], *, tag: str, **_: Any) -> list[float]:
    """1.0 for a reply that ends with its one ``<tag>…</tag>`` (reasoning may come before it), else 0.0."""
    closing = f"</{tag}>"
    return [
        1.0 if reply.count(f"<{tag}>") == 1 and reply.rstrip().endswith(closing) and tagged_answer(reply, tag) else 0.0
        for reply in completions
    ]
