"""Task metrics beside the reward: how many problems the model solves, not how much reward it collects.

A reward can saturate while the task's accuracy falls (a format part paying for the form of a wrong
answer); these numbers come from one part alone (``reward.task_metrics.part``, e.g. the task's
verifier), a completion counting as solved only at that part's ceiling. Per group of ``n``
completions of one prompt with ``c`` solved:

- ``mean@n``: c / n, the expected accuracy of one sample (pass@1 averaged over the n samples);
- ``pass@k`` for each configured k <= n: the chance that at least one of k samples solves it,
  estimated without bias from the n drawn (Chen et al. 2021, the Codex paper):
  1 - C(n - c, k) / C(n, k).

Each is averaged over the batch's groups and logged through TRL's ``log_metric``: a training step's
as ``mean@8``, ``pass@1``, …; a held-out evaluation's as ``eval/mean@8``, ``eval/pass@1``, with n
there ``grpo.num_generations_eval`` (TRL's samples per held-out prompt).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from grpo_exp.rewards.solved import at_ceiling, group_bounds


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` solved the problem (k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def group_metrics(solved: Sequence[bool], ks: Sequence[int]) -> dict[str, float]:
    """``mean@n`` and ``pass@k`` (each k <= n) of one prompt's ``n`` completions."""
    n, c = len(solved), sum(solved)
    return {f"mean@{n}": c / n, **{f"pass@{k}": pass_at_k(n, c, k) for k in ks if k <= n}}


def log_task_metrics(
    prompts: Sequence[Any],
    scores: Sequence[float | None],
    ceiling: float,
    ks: Sequence[int],
    log_metric: Callable[[str, float], None],
) -> None:
    """Log each group's task metrics (completions scored None are left out of their group)."""
    for start, end in group_bounds(prompts):
        solved = [at_ceiling(s, ceiling) for s in scores[start:end] if s is not None]
        if solved:
            for key, value in group_metrics(solved, ks).items():
                log_metric(key, value)
