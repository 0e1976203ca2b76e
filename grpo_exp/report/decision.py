"""The sweep's decision over seeds: a clear best, configurations that can't be told apart, or not enough seeds.

Each configuration gets its interval over seeds (``intervals.py``); the one with the best centre leads.

- **Clear best**: the leader's interval is clear of every other configuration's.
- **Can't be told apart**: some intervals overlap the leader's; those configurations are named, with the
  seeds per configuration that would separate them were the gap between the centres real.
- **Not enough seeds**: some configuration ran fewer than ``sweep.verdict.enough_seeds`` seeds. Intervals
  over so few are too narrow: two identical configurations come apart by chance far more often than the
  confidence level says (benchmarks/seed_verdicts.py measures how often), so no call is made on them.
- **One seed**: no configuration has two seeds: noise can't be told from difference at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from grpo_exp.config.schema import VerdictSettings
from grpo_exp.report.intervals import Improvement, Interval, interval, probability_of_improvement, seeds_to_separate


class Outcome(StrEnum):
    clear_best = "clear best"
    tied = "can't be told apart"
    too_few = "not enough seeds"
    one_seed = "one seed per configuration"
    only = "only configuration"


@dataclass(frozen=True)
class Standing:
    """One configuration against the leader: its interval, P(leader beats it), and where it stands."""

    label: str
    interval: Interval
    improvement: Improvement | None  # None for the leader itself
    place: str  # BEST, OVERLAPS, BELOW, NO_INTERVAL (its one seed) or BEST_NO_INTERVAL (the leader's)
    seeds_to_separate: int | None = None  # for one that overlaps the leader


@dataclass
class Decision:
    """The configurations ranked by centre (leader first), the outcome, and what would settle it."""

    outcome: Outcome
    standings: list[Standing]
    settings: VerdictSettings
    short: list[str] = field(default_factory=list)  # configurations with fewer than enough_seeds seeds

    @property
    def leader(self) -> Standing:
        return self.standings[0]

    @property
    def tied(self) -> list[Standing]:
        """The leader and every configuration whose interval overlaps its own."""
        return [self.leader, *(s for s in self.standings[1:] if s.place == OVERLAPS)]

    @property
    def seeds_needed(self) -> int | None:
        """Seeds per configuration that would settle it: at least enough_seeds, more for an overlap whose gap
        needs them; None when it is settled (a clear best, one configuration) or an overlap has no gap at all
        (equal centres)."""
        if self.outcome in (Outcome.clear_best, Outcome.only):
            return None
        needs = [s.seeds_to_separate for s in self.tied[1:]]
        if None in needs:
            return None
        return max([self.settings.enough_seeds, *needs])


BEST, OVERLAPS, BELOW = "best", "overlaps the best", "below the best"
# Without an interval on either side there is no comparison: say whose single seed it is.
NO_INTERVAL, BEST_NO_INTERVAL = "one seed: no interval", "the best has one seed: no interval to compare"


def decide(configs: Mapping[str, Sequence[float]], maximize: bool, settings: VerdictSettings) -> Decision | None:
    """The decision over ``configs`` (label -> the objective of each completed seed); None when none has a value."""
    intervals = {label: interval(values, settings) for label, values in configs.items() if len(values)}
    if not intervals:
        return None
    sign = 1.0 if maximize else -1.0
    ranked = sorted(intervals, key=lambda label: -sign * intervals[label].centre)  # stable: sweep order on ties
    top = intervals[ranked[0]]
    standings = [Standing(ranked[0], top, None, BEST)]
    for label in ranked[1:]:
        own = intervals[label]
        improvement = probability_of_improvement(top.values, own.values, settings, maximize)
        if not own.bounded:
            standings.append(Standing(label, own, improvement, NO_INTERVAL))
        elif not top.bounded:
            standings.append(Standing(label, own, improvement, BEST_NO_INTERVAL))
        elif own.overlaps(top):
            standings.append(Standing(label, own, improvement, OVERLAPS, seeds_to_separate(top, own)))
        else:
            standings.append(Standing(label, own, improvement, BELOW))
    short = [label for label in ranked if intervals[label].n < settings.enough_seeds]
    if len(ranked) == 1:
        outcome = Outcome.only
    elif all(intervals[label].n < 2 for label in ranked):
        outcome = Outcome.one_seed
    elif short:
        outcome = Outcome.too_few
    elif any(s.place == OVERLAPS for s in standings):
        outcome = Outcome.tied
    else:
        outcome = Outcome.clear_best
    return Decision(outcome, standings, settings, short)


# The interval table, one row per configuration (report.md, intervals.csv, the W&B and trackio tables).
TABLE_COLUMNS = (
    "configuration",
    "seeds",
    "statistic",
    "centre",
    "low",
    "high",
    "p_best_beats_it",
    "p_low",
    "p_high",
    "vs_best",
    "seeds_to_separate",
)


def table_rows(decision: Decision) -> list[list[str | int | float | None]]:
    """The standings as rows of ``TABLE_COLUMNS``: raw numbers, None where there is none."""
    rows = []
    for s in decision.standings:
        p = s.improvement
        rows.append(
            [
                s.label,
                s.interval.n,
                s.interval.statistic,
                s.interval.centre,
                s.interval.low,
                s.interval.high,
                None if p is None else p.probability,
                None if p is None else p.low,
                None if p is None else p.high,
                s.place,
                s.seeds_to_separate,
            ]
        )
    return rows
