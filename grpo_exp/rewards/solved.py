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

from collections.abc import Callable, Iterator, Sequence
from typing import Any

# What each batch logs (through TRL's log_metric; an evaluation's as eval/frac_solved, ...).
SOLVED, SOLVED_GROUPS = "frac_solved", "frac_solved_groups"
FLOAT_NOISE = 1e-9  # a score this close below its ceiling is at it


def at_ceiling(score: float | None, ceiling: float | None) -> bool:
    """Whether ``score`` is its part's best; never for an unscored completion or an unknown ceiling."""
    return score is not None and ceiling is not None and score >= ceiling - FLOAT_NOISE * max(1.0, abs(ceiling))


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
        self.known = all(c is not None for c in self.ceilings.values()) and min(weights.values()) >= 0
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
        solved = self._solved(len(completions))
        scored = [s for s in solved if s is not None]
        groups = [[s for s in solved[a:b] if s is not None] for a, b in group_bounds(prompts)]
        groups = [g for g in groups if g]
        if scored:
            log_metric(SOLVED, sum(scored) / len(scored))
            log_metric(SOLVED_GROUPS, sum(all(g) for g in groups) / len(groups))
        self._batch, self._scores = None, {}

    def _solved(self, count: int) -> list[bool | None]:
        """Per completion: every part that scored it at its ceiling (None: no part scored it)."""
        verdicts: list[bool | None] = []
        for i in range(count):
            scored = [(s[i], self.ceilings[n]) for n, s in self._scores.items() if s[i] is not None]
            verdicts.append(all(at_ceiling(s, c) for s, c in scored) if scored else None)
        return verdicts
