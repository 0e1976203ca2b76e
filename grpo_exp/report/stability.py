"""How stable each configuration of a sweep was, judged against the sweep's other configurations.

One absolute line fails on the tiny model: every configuration passes the article's KL 0.1, and a
run whose reward never moved passes every check. So a flat run is called dead (no learning
signal, not stable), and the live configurations are ranked on three signs of instability, each
placed across the sweep (0 the steadiest, 1 the least steady, ties share) and the places averaged:
the reward's drop from its peak, the reward std's fall before success (homogeneous generations),
and the largest KL relative to the sweep's median. Ties keep the sweep's order (best objective first).
Places hide sizes, so one absolute line comes first: a configuration whose KL passed the monitor's
collapse limit (``collapse_kl_multiple`` x ``kl_threshold``, what a run calls a collapse) ranks
after every one that stayed under it, however steady its reward (a KL of 4 next to the others'
0.3 was ranked most stable). The article's KL alarm stays a flag of its own (compare.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from grpo_exp.report.jobs import AT_PEAK_TOLERANCE, JobRecord

# The signs of instability, lower is more stable: (name in the report, value of one job).
SIGNS: dict[str, Callable[[JobRecord], float | None]] = {
    "drop from peak": lambda job: _difference(job.value("peak_reward"), job.value("final_reward")),
    "reward-std fall": lambda job: _std_fall(job),
    "max KL": lambda job: job.value("max_kl"),
}

# What each KL figure of the report is: the stability line's is a mean over the configuration's jobs, the
# KL excursion line's the highest of them.
MEAN_MAX_KL = "mean max KL"
HIGHEST_KL = "highest KL"
# How each sign reads in the report.
SIGN_LABELS = {"drop from peak": "drop", "reward-std fall": "std fall", "max KL": MEAN_MAX_KL}


@dataclass
class Stability:
    """One configuration: its jobs, whether all of them were dead, its signs and its mean rank in the sweep."""

    label: str
    jobs: list[JobRecord]
    dead: bool
    signs: dict[str, float]  # mean over the configuration's live jobs; a sign none of them logged is absent
    score: float | None = None  # mean of its places over the signs (0 = steadiest on each); None when dead
    kl_ran_away: bool = False  # a live job's KL passed its collapse limit: ranked after those that stayed under


def rank_stability(configs: dict[str, list[JobRecord]]) -> list[Stability]:
    """The configurations (label -> finished jobs) most stable first, dead ones last."""
    assessed = []
    for label, jobs in configs.items():
        live = [job for job in jobs if not job.dead]
        signs = {name: _mean([sign(job) for job in live]) for name, sign in SIGNS.items()}
        measured = {k: v for k, v in signs.items() if v is not None}
        assessed.append(Stability(label, jobs, not live, measured, kl_ran_away=any(job.kl_ran_away for job in live)))
    live = [s for s in assessed if not s.dead]
    for s in live:
        places = [_place(s.signs[name], [o.signs[name] for o in live if name in o.signs]) for name in s.signs]
        s.score = _mean(places)
    return sorted(assessed, key=lambda s: (s.dead, s.kl_ran_away, s.score if s.score is not None else 0.0))


def median_max_kl(ranked: list[Stability]) -> float | None:
    """The sweep's median of the live configurations' max KL: what "relative KL" is relative to."""
    values = [s.signs["max KL"] for s in ranked if not s.dead and "max KL" in s.signs]
    return statistics.median(values) if values else None


def describe(stability: Stability, median_kl: float | None) -> str:
    """Its signs as the Stability line shows them: "drop 0.000, std fall 0.000, mean max KL 0.200 over 2 jobs,
    1.0× the sweep's median", and "past the collapse limit" where its KL ran away."""
    parts = [f"{SIGN_LABELS[name]} {value:.3f}" for name, value in stability.signs.items()]
    if "max KL" in stability.signs:
        live = sum(1 for job in stability.jobs if not job.dead)
        parts[-1] += f" over {live} jobs" if live > 1 else ""
        if median_kl:
            parts[-1] += f", {stability.signs['max KL'] / median_kl:.1f}× the sweep's median"
    if stability.kl_ran_away:
        limits = sorted({job.kl_collapse_limit for job in stability.jobs if job.kl_ran_away})
        parts.append(f"KL past the collapse limit {', '.join(f'{limit:g}' for limit in limits)}")
    return ", ".join(parts) or "nothing logged to judge"


def _std_fall(job: JobRecord) -> float | None:
    """How far the reward std fell from the start to the end, while the reward was still short of its peak.

    At the peak, alike completions mean all succeeded (no fall counted); before it they mean
    GRPO has nothing left to compare."""
    first, final = job.value("first_reward_std"), job.value("final_reward_std")
    reward, peak = job.value("final_reward"), job.value("peak_reward")
    if None in (first, final, reward, peak):
        return None
    return max(0.0, first - final) if reward < peak - AT_PEAK_TOLERANCE else 0.0


def _difference(high: float | None, low: float | None) -> float | None:
    return None if high is None or low is None else max(0.0, high - low)


def _place(value: float, values: list[float]) -> float:
    """Where ``value`` lies among ``values``: 0 the lowest, 1 the highest, ties (and a lone value) share the middle.

    On a 0-1 scale, so a sign only some configurations logged (KL) weighs like the others."""
    if len(values) < 2:
        return 0.5
    below, equal = sum(v < value for v in values), sum(v == value for v in values)
    return (below + (equal - 1) / 2) / (len(values) - 1)


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
