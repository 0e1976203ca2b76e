"""The sweep's decision over seeds, as the report says it: the verdict's first bullets, the table of
configurations with their intervals (report.md and ``intervals.csv``), and the job table's order.

The statistics are ``intervals.py``'s and the decision ``decision.py``'s; this module words them.
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from grpo_exp.config.schema import VerdictSettings
from grpo_exp.report.decision import BELOW, TABLE_COLUMNS, Decision, Outcome, Standing, decide, table_rows
from grpo_exp.report.intervals import Improvement, Interval
from grpo_exp.report.jobs import JobRecord
from grpo_exp.report.sweep import Group, Sweep, format_value
from grpo_exp.report.text import MAX_LISTED, NONE_CELL, jobs_text, md_row, names_text


def sweep_decision(sweep: Sweep) -> Decision | None:
    """Each configuration's objective over its distinct completed seeds, judged (``decision.py``); None without a
    result."""
    configs = {sweep.config_label(group): list(seed_outcomes(sweep, group).values()) for group in sweep.configs()}
    return decide(configs, sweep.maximize, sweep.verdict)


def seed_outcomes(sweep: Sweep, group: Group) -> dict[Any, float]:
    """A configuration's objective per distinct seed of its completed jobs: a seed run twice is one seed, not
    two (its reruns say nothing about seed-to-seed spread), scored by the mean of its runs. A job whose seed is
    unknown counts as a seed of its own."""
    runs: dict[Any, list[float]] = {}
    for job in group.jobs:
        if (value := sweep.outcome(job)) is not None:
            runs.setdefault(_seed(job), []).append(value)
    return {seed: statistics.fmean(values) for seed, values in runs.items()}


def repeated_seeds(sweep: Sweep, group: Group) -> dict[Any, int]:
    """The seeds a configuration completed more than once, with how many times."""
    counts = Counter(_seed(job) for job in group.jobs if sweep.outcome(job) is not None)
    return {seed: n for seed, n in counts.items() if n > 1}


def _seed(job: JobRecord) -> Any:
    return ("job", job.name) if job.seed is None else format_value(job.seed)


def decision_lines(sweep: Sweep, decision: Decision | None, note: str = "") -> list[str]:
    """The verdict's first bullet: the decision, in the words of its outcome; ``note`` ends it (the leader's
    stability rank). A bullet naming the seeds run more than once follows it."""
    if decision is None:
        return [f"- **No result:** no job completed with a {sweep.objective}."]
    leader, settings = decision.leader, decision.settings
    jobs = jobs_text(_config_jobs(sweep, leader.label))
    named = f"`{leader.label}` ({sweep.objective} {_estimate(leader.interval, settings)}, {jobs})"
    outcome = decision.outcome
    if outcome == Outcome.only and len(sweep.configs()) > 1:  # the others failed, stopped early or lack the objective
        line = _only_one(sweep, leader.label, named)
    elif outcome == Outcome.only:
        line = f"- **Only configuration:** {named}."
    elif outcome == Outcome.one_seed:
        line = (
            f"- **One seed per configuration:** `{leader.label}` scored highest ({sweep.objective} "
            f"{leader.interval.centre:.3f}, {jobs}), but with one seed per configuration the report can't tell "
            f"noise from difference. Run each on at least {settings.enough_seeds} seeds "
            f"(`seed={','.join(map(str, range(settings.enough_seeds)))}`) to tell."
        )
    elif outcome == Outcome.clear_best:
        runner_up = decision.standings[1]
        line = (
            f"- **Clear best:** {named}: its {_level(settings)} interval is clear of every other configuration's "
            f"(P(it beats the runner-up `{runner_up.label}`) = {_improvement(runner_up.improvement)})."
        )
    elif outcome == Outcome.tied:
        line = (
            f"- **Can't be told apart:** {names_text(s.label for s in decision.tied)} "
            f"({_seed_counts(decision.tied)}). The highest is {named}; its interval overlaps "
            f"{_overlaps(decision, settings)}. {_settle(decision)}{_below(decision)}"
        )
    else:
        short = [s for s in decision.standings if s.label in decision.short]
        whole = len(short) == len(decision.standings) > 2
        few = f"all {len(short)} configurations" if whole else names_text(s.label for s in short)
        overlap = f"; its interval overlaps {_overlaps(decision, settings)}" if len(decision.tied) > 1 else ""
        line = (
            f"- **Not enough seeds to tell:** {few} ran fewer than {settings.enough_seeds} seeds "
            f"({_seed_counts(short)}), and intervals over so few come apart by chance. The highest is {named}"
            f"{overlap}. About {decision.seeds_needed or settings.enough_seeds} seeds per configuration would "
            "settle it."
        )
    return [line + note, *_repeats_line(sweep)]


def _only_one(sweep: Sweep, label: str, named: str) -> str:
    """The one configuration with a result, and why the others have none: they did not complete (failed,
    stopped early, killed: listed below), or completed without the objective."""
    others = [g for g in sweep.configs() if sweep.config_label(g) != label]
    completed = [sweep.config_label(g) for g in others if any(job.finished for job in g.jobs)]
    if not completed:
        return f"- **Only configuration that completed:** {named}; the others did not, see below."
    without = f"completed without a `{sweep.objective}`"
    if len(completed) == len(others):
        why = f"the others {without}" if len(others) > 1 else f"{names_text(completed)} {without}"
    else:
        why = f"{names_text(completed)} {without}; the others did not complete, see below"
    return f"- **Only configuration with a `{sweep.objective}`:** {named}; {why}."


def _repeats_line(sweep: Sweep) -> list[str]:
    """Seeds a configuration ran more than once: counted once, at the mean of their runs; say so."""
    repeats = []
    for group in sweep.configs():
        if twice := repeated_seeds(sweep, group):
            seeds = sorted(twice, key=lambda seed: (len(str(seed)), str(seed)))  # 2 before 10
            runs = ", ".join(f"seed {seed} in {twice[seed]} jobs" for seed in seeds[:MAX_LISTED])
            more = f" and {len(twice) - MAX_LISTED} more" if len(twice) > MAX_LISTED else ""
            repeats.append(f"`{sweep.config_label(group)}` ran {runs}{more}")
    if not repeats:
        return []
    return [
        f"- **Repeated seeds:** {'; '.join(repeats)}. A seed counts once, at the mean of its runs: reruns of one "
        "seed say nothing about how seeds differ."
    ]


def _estimate(interval: Interval, settings: VerdictSettings) -> str:
    """\"IQM 0.812 [0.701, 0.903] over 4 seeds\" (the interval at the confidence level), or one seed's value."""
    if interval.n == 1:
        return f"{interval.centre:.3f}, one seed"
    return f"{interval.statistic} {interval.centre:.3f} {_bounds(interval.low, interval.high)} over {interval.n} seeds"


def _bounds(low: float | None, high: float | None, spec: str = "{:.3f}") -> str:
    return "" if low is None or high is None else f"[{spec.format(low)}, {spec.format(high)}]"


def _level(settings: VerdictSettings) -> str:
    return f"{settings.confidence:.0%}"


def _improvement(improvement: Improvement | None) -> str:
    if improvement is None:
        return NONE_CELL
    bounds = _bounds(improvement.low, improvement.high, "{:.2f}")
    return f"{improvement.probability:.2f}" + (f" {bounds}" if bounds else "")


def _overlaps(decision: Decision, settings: VerdictSettings) -> str:
    """The configurations whose interval overlaps the leader's, with P(leader beats each)."""
    rivals = decision.tied[1:]
    listed = [
        f"`{s.label}`'s ({_estimate(s.interval, settings)}; P(the highest beats it) = {_improvement(s.improvement)})"
        for s in rivals[:MAX_LISTED]
    ]
    more = len(rivals) - MAX_LISTED
    return "; ".join(listed) + (f"; and {more} more" if more > 0 else "")


def _settle(decision: Decision) -> str:
    needed = decision.seeds_needed
    if needed is None:
        return "Their centres are equal (to float precision): no number of seeds would part them."
    return f"Were the gap real, about {needed} seeds per configuration would tell them apart."


def _below(decision: Decision) -> str:
    below = [s.label for s in decision.standings if s.place == BELOW]
    return f" Below them, clear of the highest: {names_text(below)}." if below else ""


def _seed_counts(standings: list[Standing]) -> str:
    counts = sorted({s.interval.n for s in standings})
    if len(counts) == 1:
        return f"{counts[0]} seed{'s' if counts[0] > 1 else ''} each"
    return ", ".join(f"`{s.label}` {s.interval.n}" for s in standings[:MAX_LISTED]) + " seeds"


def _config_jobs(sweep: Sweep, label: str) -> list[JobRecord]:
    """The completed jobs of the configuration with this label."""
    group = next(g for g in sweep.configs() if sweep.config_label(g) == label)
    return [job for job in group.jobs if job.finished]


def write_intervals_csv(decision: Decision, path: Path) -> None:
    """One row per configuration, best first: its seeds, centre, interval, P(best beats it) and place."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(TABLE_COLUMNS)
        writer.writerows([["" if v is None else v for v in row] for row in table_rows(decision)])


def intervals_section(sweep: Sweep, decision: Decision | None) -> list[str]:
    """Each configuration's objective over its seeds with its interval, and P(the best beats it), best first."""
    if decision is None or (decision.outcome == Outcome.only and decision.leader.interval.n < 2):
        return []
    settings = decision.settings
    level = _level(settings)
    statistic = (
        f"interquartile mean from {settings.interquartile_from} seeds, else mean"
        if any(s.interval.n >= settings.interquartile_from for s in decision.standings)
        else "mean"
    )
    headers = ["configuration", "seeds", f"{sweep.objective} ({statistic})", f"{level} interval"]
    headers += ["P(best beats it)", "vs the best"]
    lines = [
        "",
        f"## Configurations over seeds ({decision.outcome})",
        "",
        f"Bootstrap {level} intervals over each configuration's completed seeds (scipy.stats.bootstrap, "
        f"{settings.resamples} resamples, seed {settings.seed}); P(best beats it): the chance that a seed of the "
        "best beats a seed of this one, ties half, with its interval.",
        "",
        md_row(headers),
        md_row(["---"] * len(headers)),
    ]
    for s in decision.standings:
        i = s.interval
        place = s.place + (f" (about {s.seeds_to_separate} seeds would part them)" if s.seeds_to_separate else "")
        row = [f"`{s.label}`", str(i.n), f"{i.centre:.3f}", _bounds(i.low, i.high) or NONE_CELL]
        lines.append(md_row([*row, _improvement(s.improvement), place]))
    return lines


def job_order(sweep: Sweep, decision: Decision | None) -> list[JobRecord]:
    """The jobs best first; when seeds repeat, a configuration's jobs together, in the decision's order."""
    groups = sweep.configs()
    if decision is None or all(len(group.jobs) < 2 for group in groups):
        return sweep.jobs
    rank = {s.label: i for i, s in enumerate(decision.standings)}
    place = {id(job): rank.get(sweep.config_label(g), len(rank)) for g in groups for job in g.jobs}
    return sorted(sweep.jobs, key=lambda job: place[id(job)])  # stable: each configuration's jobs best first
