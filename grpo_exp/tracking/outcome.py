"""The block a job prints when it ends: how it went, where it is, and what to do next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The task metrics' keys in summary.json's eval_task (rewards/task_metrics.py): pass@k and mean@n.
PASS, MEAN = "pass@", "mean@"


def format_outcome(summary: dict[str, Any], job_dir: Path, wandb_hint: str | None) -> str:
    """A few aligned lines from ``summary.json``: status, steps, reward, KL, tools, episodes, alerts, folder, W&B."""
    rows = [("status", summary.get("status", "?")), ("steps", _steps(summary))]
    if summary.get("first_reward") is not None:
        rows.append(
            (
                "reward",
                f"{summary['first_reward']:.3f} -> {summary['final_reward']:.3f} "
                f"(first -> last tenth of steps; peak {summary['peak_reward']:.3f})",
            )
        )
    if summary.get("final_eval_reward") is not None:
        rows.append(("eval", _held_out(summary)))
    if summary.get("eval_task"):  # a task's reward: held-out pass@k (reward.task_metrics)
        rows.append(("pass@k", _task_metrics(summary)))
    if summary.get("mean_kl") is not None:
        rows.append(
            (
                "KL",
                f"mean {summary['mean_kl']:.3f}, max {summary['max_kl']:.3f} "
                f"({summary['steps_above_kl_threshold']} steps above the alarm)",
            )
        )
    if summary.get("tool_call_frequency") is not None:  # an agent's tools
        rows.append(
            (
                "tools",
                f"{summary['tool_call_frequency']:.2f} calls per rollout, "
                f"{summary['tool_failure_frequency']:.0%} of them failed (last tenth of steps)",
            )
        )
    if summary.get("episode_turns") is not None:  # an environment's episodes (agents/env_runner.py)
        rows.append(("episodes", _episodes(summary)))
    alerts = summary.get("alerts") or []
    rows.append(("alerts", ", ".join(f"{a['kind']} (step {a['step']})" for a in alerts) or "none"))
    for r in summary.get("rollbacks") or []:  # monitor.on_collapse=rollback
        went = f"{r['cause']} at step {r['from_step']} -> back to step {r['to_step']}"
        rows.append(("rollback", f"{went}; {r['change']}"))
    rows.append(("folder", str(job_dir)))
    if wandb_hint:
        rows.append(("W&B", wandb_hint))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"  {label:<{width}}  {value}" for label, value in rows)


def _held_out(summary: dict[str, Any]) -> str:
    """Held-out reward before -> after training when the base model was scored (step 0), else first -> last.
    A final evaluation that scored NaN shows as nan (the first finite one may be missing: none)."""
    final, count, base = _number(summary["final_eval_reward"]), summary["evaluations"], summary.get("base_eval_reward")
    if base is not None and count > 1:
        return f"{base:.3f} -> {final} (held-out reward, base model -> after training; {count} evaluations)"
    first = _number(summary.get("first_eval_reward"))
    return f"{first} -> {final} (held-out reward, first -> last of {count} evaluations)"


def _episodes(summary: dict[str, Any]) -> str:
    """Turns per episode and each tool's calls per episode, by name, over the last tenth of steps."""
    calls = [f"{tool} {n:.2f}" for tool, n in (summary.get("episode_tool_calls") or {}).items() if n is not None]
    by_tool = f"; calls {', '.join(calls)}" if calls else "; no tool called"
    return f"{summary['episode_turns']:.2f} turns{by_tool} per episode (last tenth of steps)"


def _number(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"


def _task_metrics(summary: dict[str, Any]) -> str:
    """Held-out pass@k for each k (base model -> after training when the base model was scored), and n."""
    final, base = summary["eval_task"], summary.get("base_eval_task") or {}
    from_base = bool(base) and summary.get("evaluations", 0) > 1
    values = []
    for k in sorted(int(key.removeprefix(PASS)) for key in final if key.startswith(PASS)):
        key = f"{PASS}{k}"
        start = f"{base[key]:.3f} -> " if from_base and key in base else ""
        values.append(f"{key} {start}{final[key]:.3f}")
    samples = [key.removeprefix(MEAN) for key in final if key.startswith(MEAN)]
    n = f"{samples[0]} completions per problem; " if samples else ""
    return f"{', '.join(values)} (held-out, {n}{'base model -> after training' if from_base else 'last evaluation'})"


def _steps(summary: dict[str, Any]) -> str:
    text = str(summary.get("steps", 0))
    if summary.get("resumed_from"):
        text += f" (resumed from step {summary['resumed_from']})"
    if summary.get("stopped_solved_at") is not None:
        text += " (stopped early: the reward stayed at its ceiling, monitor.stop_when_solved)"
    return text
