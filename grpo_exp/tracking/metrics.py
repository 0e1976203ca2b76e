"""Per-step metrics on disk (``metrics.jsonl``) and the run summary computed from them.

W&B offline files can't be read back, so every job also keeps its own metrics: one JSON object per
logging step with TRL's keys (``reward``, ``reward_std``, ``kl``, ``rewards/<part>/mean``, ...).
Held-out evaluations are rows of their own, keyed as W&B shows them (``eval/reward``,
``eval/reward_std``, ``eval/rewards/<part>/mean``), so they never mix with the training steps.
``summarize`` and ``summarize_eval`` are shared by the job's ``summary.json`` and the sweep report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grpo_exp.folder import read_rows

# A held-out objective of a job without held-out prompts falls back to its training counterpart.
TRAINING_COUNTERPART = {
    "final_eval_reward": "final_reward",
    "best_eval_reward": "peak_reward",
    "first_eval_reward": "first_reward",
}
# The task metric a sweep may rank on (config `objective`), from the reward's task metrics (rewards/task_metrics.py).
EVAL_PASS1 = "eval/pass@1"
# Trainer logs an evaluation with this prefix (``eval_reward``); W&B and metrics.jsonl show ``eval/reward``.
TRAINER_EVAL_PREFIX = "eval_"
EVAL_PREFIX = "eval/"
EVAL_REWARD = EVAL_PREFIX + "reward"
# First and last "tenth" of the logged steps, as the acceptance criterion reads; never fewer than one.
EDGE_FRACTION = 0.1
# What TRL logs for an agent: tool calls per rollout, and the share of calls that raised or timed out.
TOOL_CALLS = "tools/call_frequency"
TOOL_FAILURES = "tools/failure_frequency"
# What TRL logs when vLLM generates (with grpo.vllm_importance_sampling_correction, the default): the ratio
# of the trained policy's probability to vLLM's, per step its min/mean/max, and the per-token log-prob gap.
IS_RATIO = "sampling/importance_sampling_ratio/"
LOGP_DIFFERENCE = "sampling/sampling_logp_difference/mean"
# The row monitor.stop_when_solved writes when it ends a run early (callbacks.SolvedStop): its step.
STOPPED_SOLVED = "stopped_solved"


def is_evaluation(logs: dict[str, Any]) -> bool:
    """Whether a Trainer log is a held-out evaluation (``eval_reward``, ``eval_loss``, ...), not a training step."""
    return any(key.startswith(TRAINER_EVAL_PREFIX) for key in logs)


def metrics_row(step: int, logs: dict[str, Any]) -> dict[str, Any]:
    """One logging step's numbers as a ``metrics.jsonl`` row; an evaluation's keys as W&B names them."""
    if is_evaluation(logs):
        logs = {_eval_name(k): v for k, v in logs.items()}
    return {"step": step, **{k: v for k, v in logs.items() if isinstance(v, int | float)}}


def _eval_name(key: str) -> str:
    return EVAL_PREFIX + key[len(TRAINER_EVAL_PREFIX) :] if key.startswith(TRAINER_EVAL_PREFIX) else key


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The training steps of a ``metrics.jsonl`` (rows that carry a reward), skipping torn lines."""
    return training_rows(read_rows(path)[0])


def read_eval_metrics(path: Path) -> list[dict[str, Any]]:
    """The held-out evaluations of a ``metrics.jsonl`` (rows that carry ``eval/reward``), skipping torn lines."""
    return eval_rows(read_rows(path)[0])


def training_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training steps among ``metrics.jsonl``'s rows: those that carry a reward."""
    return [row for row in rows if "reward" in row]


def last_trained_step(rows: Iterable[dict[str, Any]]) -> int:
    """The last optimizer step logged. Every step's row carries its loss, but with grpo.num_iterations
    above 1 only the steps that generated carry a reward: the last of those may come before the end."""
    return max((int(row["step"]) for row in rows if "loss" in row or "reward" in row), default=0)


def eval_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The held-out evaluations among ``metrics.jsonl``'s rows: those that carry ``eval/reward``."""
    return [row for row in rows if EVAL_REWARD in row]


def summarize_eval(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """First, final and best held-out reward (None without evaluations), and how many evaluations ran.

    ``base_eval_*``: the evaluation before the first step (``grpo.eval_on_start``, step 0), the
    base model's score, so a run reads as held-out before -> after; None when there was none."""
    rewards, stds = _series(rows, EVAL_REWARD), _series(rows, EVAL_PREFIX + "reward_std")
    per_part = sorted(
        {k for row in rows for k in row if k.startswith(EVAL_PREFIX + "rewards/") and k.endswith("/mean")}
    )
    base = [row for row in rows if row.get("step") == 0][:1]
    base_reward = _series(base, EVAL_REWARD)
    return {
        "evaluations": len(rows),
        "base_eval_reward": base_reward[0] if base_reward else None,
        "base_eval_parts": {k.split("/")[2]: values[0] for k in per_part if (values := _series(base, k))},
        "first_eval_reward": rewards[0] if rewards else None,
        "final_eval_reward": final_eval_reward(rows),
        "best_eval_reward": max(rewards, default=None),
        "final_eval_reward_std": stds[-1] if stds else None,
        "eval_parts": {k.split("/")[2]: values[-1] for k in per_part if (values := _series(rows, k))},
        **_task_metrics(rows, base),
    }


def final_eval_reward(rows: list[dict[str, Any]]) -> float | None:
    """The last evaluation's reward, NaN when it scored NaN (weights gone to NaN): never an earlier one, which
    would pass a broken job off as the score it had before (the base model's, at worst). None without one."""
    if not rows:
        return None
    value = rows[-1].get(EVAL_REWARD)
    return float(value) if isinstance(value, int | float) else math.nan


def _task_metrics(rows: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    """The held-out task metrics (``eval/mean@n``, ``eval/pass@k``): base model's and final, and pass@1's
    first, final and best, which a sweep may rank on; nothing for a job without them."""
    keys = sorted({k for row in rows for k in row if k.startswith((EVAL_PREFIX + "mean@", EVAL_PREFIX + "pass@"))})
    if not keys:
        return {}
    passes = _series(rows, EVAL_PASS1)
    return {
        "base_eval_task": {k.removeprefix(EVAL_PREFIX): values[0] for k in keys if (values := _series(base, k))},
        "eval_task": {k.removeprefix(EVAL_PREFIX): values[-1] for k in keys if (values := _series(rows, k))},
        "first_eval_pass@1": passes[0] if passes else None,
        "final_eval_pass@1": passes[-1] if passes else None,
        "best_eval_pass@1": max(passes, default=None),
    }


def stopped_solved_at(rows: Iterable[dict[str, Any]]) -> int | None:
    """The step at which monitor.stop_when_solved ended the run (None: it ran its course)."""
    steps = [int(row["step"]) for row in rows if STOPPED_SOLVED in row and "step" in row]
    return steps[-1] if steps else None


def objective_value(summary: dict[str, Any], objective: str) -> tuple[str, float | None]:
    """The objective a job reports and its value: a held-out one falls back to training without an eval set."""
    if summary.get(objective) is None and objective in TRAINING_COUNTERPART and not summary.get("evaluations"):
        objective = TRAINING_COUNTERPART[objective]
    value = summary.get(objective)
    return objective, float(value) if isinstance(value, int | float) else None


def summarize(logged: list[dict[str, Any]], kl_threshold: float) -> dict[str, Any]:
    """First/last/peak mean reward, reward std, KL and their excursions over a run's ``metrics.jsonl``
    rows (its training steps; the held-out evaluations are ``summarize_eval``'s)."""
    rows = training_rows(logged)
    rewards = _series(rows, "reward")
    kls = _series(rows, "kl")
    edge = max(1, math.ceil(len(rewards) * EDGE_FRACTION))
    per_part = sorted({k for row in rows for k in row if k.startswith("rewards/") and k.endswith("/mean")})
    return {
        "steps": last_trained_step(logged),
        "logged_steps": len(rows),
        "first_reward": _mean(rewards[:edge]),
        "final_reward": _mean(rewards[-edge:]),
        "peak_reward": max(rewards, default=None),
        "first_reward_std": _mean(_series(rows, "reward_std")[:edge]),
        "final_reward_std": _mean(_series(rows, "reward_std")[-edge:]),
        "mean_kl": _mean(kls),
        "max_kl": max(kls, default=None),
        "final_kl": _mean(kls[-edge:]),
        "steps_above_kl_threshold": sum(k > kl_threshold for k in kls) if kls else None,  # no KL logged: unknown
        "frac_reward_zero_std": _mean(_series(rows, "frac_reward_zero_std")),
        "parts": {k.split("/")[1]: _mean(_series(rows, k)[-edge:]) for k in per_part},
        **({"stage": int(stages[-1])} if (stages := _series(rows, "stage")) else {}),  # staged rewards only
        **_tool_use(rows, edge),
        **_sampling_mismatch(rows),
    }


def _tool_use(rows: list[dict[str, Any]], edge: int) -> dict[str, Any]:
    """An agent's tool calls per rollout and the share that failed, over the last tenth of steps (TRL's
    ``tools/call_frequency`` and ``tools/failure_frequency``), and for an environment's episodes their
    turns and each tool's calls per episode; nothing for a job without tools."""
    calls = _series(rows, TOOL_CALLS)
    if not calls:
        return {}
    use: dict[str, Any] = {
        "tool_call_frequency": _mean(calls[-edge:]),
        "tool_failure_frequency": _mean(_series(rows, TOOL_FAILURES)[-edge:]),
    }
    from grpo_exp.agents.env_runner import CALLS_PREFIX, TURNS  # the names an environment's episodes log
    from grpo_exp.tracking import episodes

    if turns := _series(rows, TURNS):
        names = sorted({k[len(CALLS_PREFIX) :] for row in rows for k in row if k.startswith(CALLS_PREFIX)})
        use[episodes.TURNS] = _mean(turns[-edge:])
        use[episodes.CALLS] = {n: _mean(_series(rows, CALLS_PREFIX + n)[-edge:]) for n in names}
    return use


def _sampling_mismatch(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """How far vLLM's sampling drifted from the trained policy over the run (vLLM on the CPU generates in
    bf16, training in fp32): TRL's importance-sampling ratio at its lowest and highest step, and the mean
    per-token log-prob gap; nothing for a job whose completions transformers generated."""
    highs = _series(rows, IS_RATIO + "max")
    if not highs:
        return {}
    return {
        "min_is_ratio": min(_series(rows, IS_RATIO + "min"), default=None),
        "max_is_ratio": max(highs),
        "mean_logp_difference": _mean(_series(rows, LOGP_DIFFERENCE)),
    }


def _series(rows: Iterable[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if isinstance(r.get(key), int | float) and math.isfinite(r[key])]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
