"""An environment's episodes as flat figures of a job: held-out episode success before and after training, and each
tool's calls per episode, for the sweep report's columns and report.csv.

summary.json nests them: ``episode_tool_calls`` maps a tool's name to its calls per episode, and the held-out
success is the environment part's mean in ``base_eval_parts`` and ``eval_parts``, under the name the job's config
gives that part (``state`` in +recipe=support_env). ``episode_figures`` lays them out under flat keys.
"""

from __future__ import annotations

import math
from typing import Any

BASE_SUCCESS = "base_episode_success"  # the environment part's held-out mean before the first step
FINAL_SUCCESS = "final_episode_success"  # ... and at the last evaluation
TURNS = "episode_turns"  # summary.json's: the model's turns per episode over the last tenth of steps
CALLS = "episode_tool_calls"  # summary.json's: tool name -> calls per episode over the last tenth of steps


def environment_part(config: dict[str, Any]) -> str | None:
    """The name of the job's reward part that scores its environment's final state (``fn: environment_state``);
    None for a job without one."""
    from grpo_exp.rewards.agent import ENVIRONMENT_PART

    parts = _mapping(_mapping(config, "reward"), "parts")
    return next((name for name, part in parts.items() if _mapping(parts, name).get("fn") == ENVIRONMENT_PART), None)


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


def _mapping(record: dict[str, Any], key: str) -> dict[str, Any]:
    """A nested record of summary.json or config.yaml, empty where it is missing or damaged."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
