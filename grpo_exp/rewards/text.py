"""Reward parts for text replies: the building blocks of the article's rewards.

Each function scores plain-text completions; the article's formulas come from combining these
with the weights in conf/reward/*.yaml (customer_service, customer_service_multi, content_creation).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from grpo_exp.rewards.registry import register


@register("regex_match", ceiling=1.0)
def regex_match(completions: list[str], *, pattern: str, **_: Any) -> list[float]:
    """1.0 where ``re.match(pattern, reply)`` succeeds, else 0.0 (the article's format checks)."""
    compiled = re.compile(pattern)
    return [1.0 if compiled.match(c) else 0.0 for c in completions]


@register("answer_coverage", ceiling=1.0)
def answer_coverage(completions: list[str], *, column: str, **columns: Any) -> list[float | None]:
    """Share of the sample's required answers (dataset ``column``) found in the reply.

    The article reads ``required_answers`` from a global; here each prompt carries its own list.
    A sample without required answers is not scored (None) rather than given a free 1.0.
    """
    if column not in columns:
        raise KeyError(f"answer_coverage needs the dataset column {column!r}; columns: {sorted(columns)}")
    scores: list[float | None] = []
    for reply, answers in zip(completions, columns[column], strict=True):
        answers = _as_list(answers)
        scores.append(sum(a in reply for a in answers) / len(answers) if answers else None)
    return scores


@register("contains_all", ceiling=1.0)
def contains_all(completions: list[str], *, words: Sequence[str], **_: Any) -> list[float]:
    """1.0 where the reply contains every one of ``words`` (the article's tone check: 请 and 谢谢)."""
    return [1.0 if all(w in c for w in words) else 0.0 for c in completions]


@register("length_score", ceiling=0.0, length="target")
def length_score(completions: list[str], *, target: int, **_: Any) -> list[float]:
    """``-|target - len(reply)| / target``: 0 at the target length, falling linearly either side."""
    return [-abs(target - len(c)) / target for c in completions]


@register("keyword_share", ceiling=1.0)
def keyword_share(completions: list[str], *, keywords: Sequence[str], **_: Any) -> list[float]:
    """Share of ``keywords`` that appear in the reply."""
    return [sum(k in c for k in keywords) / len(keywords) for c in completions]


def _as_list(value: Any) -> list[str]:
    """Dataset columns arrive as lists, or as one string when a record has a single answer."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


@register("soft_overlong", ceiling=0.0)
def soft_overlong(
    completions: list[str], *, completion_ids: list[list[int]], max_tokens: int, cache: int, **_: Any
) -> list[float]:
    """DAPO's soft overlong punishment, TRL's implementation: 0 up to ``max_tokens - cache`` tokens,
    falling linearly to -1 at ``max_tokens``. A part that pays for saying more (naming answers)
    otherwise grows replies into ``grpo.max_completion_length``, where they are cut."""
    from trl.rewards import get_soft_overlong_punishment

    return get_soft_overlong_punishment(max_tokens, cache)(completion_ids)
