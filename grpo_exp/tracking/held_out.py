"""The numbers a job's held-out evaluations log, with their ranges: what a curriculum may wait on.

A curriculum waits on one held-out number (``dataset.curriculum.metric``) to reach ``raise_at``; a
name the evaluations never log, or a threshold outside the number's range, would leave the run at its
first level to the end, with nothing said. So both are checked from the config alone, before the
model loads (``spec`` and ``plan`` call ``check_curriculum_metric``), against the names this module
knows the evaluations log (tests/test_tasks_e2e.py holds them equal to a real run's rows).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.errors import UserError
from grpo_exp.rewards.solved import SOLVED, SOLVED_GROUPS
from grpo_exp.rewards.stages import RUN_METRICS, STAGE_METRIC
from grpo_exp.tasks.curriculum import LEVEL_METRIC
from grpo_exp.tracking.metrics import EVAL_PREFIX, IS_RATIO, LOGP_DIFFERENCE, TOOL_CALLS, TOOL_FAILURES

TASK_METRIC = re.compile(r"^(?P<kind>pass|mean)@(?P<n>\d+)$")  # rewards/task_metrics.py's names
PART_METRIC_FORMS = ("mean", "std", "group_std")  # rewards/<part>/<form>, as compose.py logs them
# What else a held-out evaluation logs, besides the run metrics every step has (TRL's and Trainer's names).
EVAL_EXTRAS = (
    "loss",
    "runtime",
    "samples_per_second",
    "steps_per_second",
    "num_tokens",
    *(f"completions/{k}_{length}" for k in ("mean", "min", "max") for length in ("length", "terminated_length")),
    *(f"clip_ratio/{k}" for k in ("low_mean", "high_mean", "region_mean", "low_min", "high_max")),
)
SHOWN = 6  # logged names listed in a message


@dataclass(frozen=True)
class Span:
    """The values a logged number can take (None: unbounded on that side)."""

    low: float | None
    high: float | None

    def __str__(self) -> str:
        if self.low is None:
            return f"is at most {self.high:g}"
        return f"is at least {self.low:g}" if self.high is None else f"lies in [{self.low:g}, {self.high:g}]"


SHARE = Span(0.0, 1.0)
ANY = Span(None, None)


def held_out_metrics(settings: ExperimentConfig) -> dict[str, Span]:
    """Every number a held-out evaluation of this config logs (metrics.jsonl's ``eval/...`` names), with the
    values it can take where they are known: a part's mean is at most its best score (unless another part
    scales it), the reward at most the weighted sum of those, a task metric a share."""
    names = {*RUN_METRICS, *EVAL_EXTRAS}
    if any(part.start_step > 0 or part.start_when is not None for part in settings.reward.parts.values()):
        names.add(STAGE_METRIC)
    if settings.agent.tools:
        names |= {TOOL_CALLS, TOOL_FAILURES}
    if settings.grpo.use_vllm:
        names |= {LOGP_DIFFERENCE, *(IS_RATIO + k for k in ("min", "mean", "max"))}
    logged = {EVAL_PREFIX + name: ANY for name in names}
    logged |= {EVAL_PREFIX + SOLVED: SHARE, EVAL_PREFIX + SOLVED_GROUPS: SHARE}
    best: list[float | None] = []  # each part's most towards the reward (None: unknown)
    for name, part in settings.reward.parts.items():
        for form in PART_METRIC_FORMS:
            logged[f"{EVAL_PREFIX}rewards/{name}/{form}"] = ANY
        ceiling = None if part.scale_by else _ceiling(part.fn, part.ceiling)
        logged[f"{EVAL_PREFIX}rewards/{name}/mean"] = ANY if ceiling is None else Span(None, ceiling)
        best.append(None if ceiling is None or part.weight < 0 else part.weight * ceiling)
    if best and None not in best:
        logged[EVAL_PREFIX + "reward"] = Span(None, sum(b for b in best if b is not None))
    if settings.reward.task_metrics.part is not None:
        group = _eval_group(settings)
        logged[f"{EVAL_PREFIX}mean@{group}"] = SHARE
        for k in settings.reward.task_metrics.k:
            if k <= group:
                logged[f"{EVAL_PREFIX}pass@{k}"] = SHARE
    return logged


def check_curriculum_metric(settings: ExperimentConfig) -> None:
    """The curriculum's metric is a number held-out evaluations log, and ``raise_at`` lies in its range."""
    curriculum = settings.dataset.curriculum
    if not curriculum.enabled:
        return
    metric, raise_at = curriculum.metric, curriculum.raise_at
    key = f"dataset.curriculum.metric={metric}"
    if not math.isfinite(raise_at):
        raise UserError(
            f"dataset.curriculum.raise_at={raise_at}: give the value of {metric} that raises the level, e.g. 0.7"
        )
    logged = held_out_metrics(settings)
    if metric not in logged:
        raise UserError(f"{key}: {_why_not_logged(settings, metric, logged)}")
    span, where = logged[metric], f"dataset.curriculum.raise_at={raise_at:g}: {metric} {logged[metric]}"
    if span.high is not None and raise_at > span.high:
        raise UserError(
            f"{where}, so it never reaches {raise_at:g} and the run would stay at level {curriculum.start_level}; "
            f"give a value up to {span.high:g}"
        )
    if span.low is not None and raise_at < span.low:
        raise UserError(f"{where}, so every evaluation would raise the level; give a value from {span.low:g}")


def _why_not_logged(settings: ExperimentConfig, metric: str, logged: dict[str, Span]) -> str:
    """Why held-out evaluations never log ``metric``, and the fix."""
    name = metric.removeprefix(EVAL_PREFIX)
    if name == LEVEL_METRIC:
        return "the level can't wait on itself; wait on a held-out score, e.g. eval/pass@1"
    never = "held-out evaluations never log it, so the level would never rise"
    if not metric.startswith(EVAL_PREFIX):
        if EVAL_PREFIX + metric in logged:
            return f"the level is judged on held-out evaluations: use dataset.curriculum.metric={EVAL_PREFIX}{metric}"
        return f"{never}; the curriculum waits on a held-out number, eval/<name>"
    task = TASK_METRIC.match(name)
    if task is not None:
        wanted, ks, group = int(task["n"]), settings.reward.task_metrics.k, _eval_group(settings)
        if settings.reward.task_metrics.part is None:
            return (
                f"{never}: it is a task metric, and reward.task_metrics.part is null; set it to the part that "
                "verifies answers (reward=reasoning_gym has accuracy)"
            )
        if task["kind"] == "mean":
            return (
                f"{never}: held-out groups have {group} completions (grpo.num_generations_eval), "
                f"so they log eval/mean@{group}"
            )
        if wanted not in ks:
            fixed = ",".join(map(str, sorted({*ks, wanted})))
            return f"{never}: reward.task_metrics.k={list(ks)} has no {wanted}; add it: reward.task_metrics.k=[{fixed}]"
        return (
            f"{never}: pass@{wanted} needs {wanted} completions per held-out problem and "
            f"grpo.num_generations_eval gives {group}; raise it to {wanted}, or wait on a smaller k"
        )
    close = difflib.get_close_matches(metric, list(logged), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    shown = sorted(logged, key=lambda m: (logged[m] is ANY, m))[:SHOWN]
    return f"{never}; {hint}they log {', '.join(shown)}, …"


def _eval_group(settings: ExperimentConfig) -> int:
    """Completions per held-out prompt: TRL's ``num_generations_eval``, else ``num_generations``."""
    return int(settings.grpo.num_generations_eval or settings.grpo.num_generations)


def _ceiling(fn: str, declared: float | None) -> float | None:
    """A part's best score: its own ``ceiling``, else the registry's for a built-in part."""
    if declared is not None:
        return declared if math.isfinite(declared) else None
    from grpo_exp.rewards import registry  # the package import registers the built-in parts and their ceilings

    return registry.ceiling(fn)
