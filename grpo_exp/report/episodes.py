"""An environment's episodes in the sweep report: held-out episode success before and after training, turns per
episode and each tool's calls per episode, as result columns for the jobs that ran an environment.

summary.json nests them (``episode_tool_calls`` by tool name, the held-out part means in ``base_eval_parts`` and
``eval_parts`` under the reward part's own name), so ``episode_figures`` lays them out flat, as the table and
report.csv read a job's figures, and ``episode_columns`` names the columns a sweep's jobs filled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from grpo_exp.rewards.agent import ENVIRONMENT_PART

if TYPE_CHECKING:  # jobs.py lays a job's figures out with episode_figures
    from grpo_exp.report.jobs import JobRecord

BASE_SUCCESS = "base_episode_success"  # the environment part's held-out mean before the first step
FINAL_SUCCESS = "final_episode_success"  # ... and at the last evaluation
TURNS = "episode_turns"  # summary.json's: the model's turns per episode over the last tenth of steps
CALLS = "episode_tool_calls"  # summary.json's: tool name -> calls per episode over the last tenth of steps
SUCCESS_SPEC, PER_EPISODE_SPEC = "{:.3f}", "{:.2f}"  # success as the eval reward reads, counts as tool calls do


def environment_part(config: dict[str, Any]) -> str | None:
    """The name of the job's reward part that scores its environment's final state (``fn: environment_state``);
    None for a job without one."""
    parts = _mapping(_mapping(config, "reward"), "parts")
    return next(
        (name for name, part in parts.items() if isinstance(part, dict) and part.get("fn") == ENVIRONMENT_PART), None
    )


def episode_figures(stats: dict[str, Any], part: str | None) -> dict[str, float]:
    """The held-out episode success (``part``'s held-out mean: base model, last evaluation) and each tool's calls
    per episode (``episode_tool_calls/<tool>``), as flat keys; nothing a job lacks. A final evaluation that scored
    NaN has no success to show: its part's last number would be an earlier evaluation's."""
    figures: dict[str, float] = {}
    base, final = _mapping(stats, "base_eval_parts"), _mapping(stats, "eval_parts")
    if part is not None and _number(base.get(part)):
        figures[BASE_SUCCESS] = base[part]
    if part is not None and _number(final.get(part)) and _number(stats.get("final_eval_reward")):
        figures[FINAL_SUCCESS] = final[part]
    figures |= {f"{CALLS}/{tool}": value for tool, value in _mapping(stats, CALLS).items() if _number(value)}
    return figures


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


def _mapping(record: dict[str, Any], key: str) -> dict[str, Any]:
    """A nested record of summary.json or config.yaml, empty where it is missing or damaged."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
