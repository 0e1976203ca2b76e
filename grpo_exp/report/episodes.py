"""An environment's episodes in the sweep report: held-out episode success before and after training, turns per
episode and each tool's calls per episode, as result columns for the jobs that ran an environment (their flat
figures: tracking/episodes.py)."""

from __future__ import annotations

from collections.abc import Iterable

from grpo_exp.report.jobs import JobRecord
from grpo_exp.tracking.episodes import BASE_SUCCESS, CALLS, FINAL_SUCCESS, TURNS

SUCCESS_SPEC, PER_EPISODE_SPEC = "{:.3f}", "{:.2f}"  # success as the eval reward reads, counts as tool calls do


def episode_columns(jobs: Iterable[JobRecord]) -> list[tuple[str, str, str]]:
    """(key, header, format) of the episode columns some job of the sweep filled: success before and after,
    turns, then each tool's calls by name; none for a sweep without an environment."""
    jobs = list(jobs)
    tools = sorted({key for job in jobs for key in job.stats if key.startswith(CALLS + "/")})
    columns = [
        (BASE_SUCCESS, "held-out episode success, base", SUCCESS_SPEC),
        (FINAL_SUCCESS, "held-out episode success, final", SUCCESS_SPEC),
        (TURNS, "turns per episode", PER_EPISODE_SPEC),
        *((key, f"{key.removeprefix(CALLS + '/')} calls per episode", PER_EPISODE_SPEC) for key in tools),
    ]
    return [column for column in columns if any(job.value(column[0]) is not None for job in jobs)]
