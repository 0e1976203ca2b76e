"""Which completions and groups a reward has solved: every part that scored them at its ceiling.

A group whose completions all score alike gives GRPO no gradient, and TRL counts such groups
(``frac_reward_zero_std``) without saying whether they are all wrong (stuck: the article's
homogeneous generations) or all right (converged: success). A part's ceiling (its best score,
registered by the built-in parts, ``reward.parts.<name>.ceiling`` for the user's) tells them apart.

Judged per part rather than on the total: a completion is solved when each part that scored it
(not None) is at its ceiling, which is the total reaching the weighted sum of the ceilings of the
parts that scored it, as TRL sums them, including staged parts that have not started yet. Only
when every weighted part has a ceiling and none weighs negatively (its best would be its floor,
which nothing declares); otherwise nothing is logged and the monitor judges as it did without.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

# What each batch logs (through TRL's log_metric; an evaluation's as eval/frac_solved, ...).
SOLVED, SOLVED_GROUPS = "frac_solved", "frac_solved_groups"
FLOAT_NOISE = 1e-9  # a score this close below its ceiling is at it


def at_ceiling(score: float | None, ceiling: float | None) -> bool:
    """Whether ``score`` is its part's best; never for an unscored completion or an unknown ceiling."""
    return score is not None and ceiling is not None and score >= ceiling - FLOAT_NOISE * max(1.0, abs(ceiling))


def judgeable(ceilings: Sequence[float | None], weights: Sequence[float]) -> bool:
    """Whether solved can be told: every weighted part has a ceiling and none weighs negatively."""
    return all(c is not None for c, w in zip(ceilings, weights, strict=True) if w) and min(weights) >= 0


def completion_solved(scores: Iterable[float | None], ceilings: Iterable[float | None]) -> bool | None:
    """Every part that scored the completion (not None) at its ceiling; None when no part scored it."""
    scored = [(s, c) for s, c in zip(scores, ceilings, strict=True) if s is not None]
    return all(at_ceiling(s, c) for s, c in scored) if scored else None


def group_solved(verdicts: Iterable[bool | None]) -> bool | None:
    """Every scored completion of a group solved; None when none was scored (neither solved nor not)."""
    scored = [v for v in verdicts if v is not None]
    return all(scored) if scored else None


def solved_shares(verdicts: Sequence[bool | None], bounds: Iterable[tuple[int, int]]) -> dict[str, float]:
    """The batch's ``frac_solved`` and ``frac_solved_groups`` (of those with a scored completion), from
    each completion's verdict and the ``(start, end)`` of each group; empty when nothing was scored."""
    scored = [v for v in verdicts if v is not None]
    groups = [g for a, b in bounds if (g := group_solved(verdicts[a:b])) is not None]
    return {SOLVED: sum(scored) / len(scored), SOLVED_GROUPS: sum(groups) / len(groups)} if scored else {}


def group_bounds(prompts: Sequence[Any]) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each group: TRL lays a group's completions side by side, so a run of equal prompts."""
    start = 0
    for end in range(1, len(prompts) + 1):
        if end == len(prompts) or prompts[end] != prompts[start]:
            yield start, end
            start = end


class SolvedTally:
    """Collects one batch's scores part by part (TRL scores a batch one part at a time) and, once every
    part has scored it, logs the share of solved completions and of groups solved whole."""

    def __init__(self, ceilings: dict[str, float | None], weights: dict[str, float]) -> None:
        self.ceilings = {name: c for name, c in ceilings.items() if weights[name] != 0}
        self.known = judgeable([ceilings[n] for n in weights], list(weights.values()))
        self._batch: Any = None  # the completions being scored (TRL hands every part the same list)
        self._scores: dict[str, list[float | None]] = {}

    def report(
        self,
        name: str,
        prompts: list[Any],
        completions: list[Any],
        scores: list[float | None],
        log_metric: Callable[[str, float], None] | None,
    ) -> None:
        if not self.known or name not in self.ceilings or log_metric is None:
            return
        if self._batch is not completions:
            self._batch, self._scores = completions, {}
        self._scores[name] = scores
        if len(self._scores) < len(self.ceilings):
            return
        ceilings = [self.ceilings[n] for n in self._scores]
        verdicts = [completion_solved(row, ceilings) for row in zip(*self._scores.values(), strict=True)]
        for key, share in solved_shares(verdicts, group_bounds(prompts)).items():
            log_metric(key, share)
        self._batch, self._scores = None, {}
