"""One job folder of a sweep, read into a ``JobRecord``: whatever is missing or damaged becomes a note.

A job folder holds ``summary.json`` when the job ended (its status, error and figures),
``metrics.jsonl`` (one line per logging step; a job killed hard leaves only this), ``config.yaml``
(its alarm thresholds and ``objective``), ``.hydra/overrides.yaml`` (its swept values) and
``error.txt`` (the traceback of a failed job). Figures come from ``metrics.jsonl`` when
``summary.json`` is missing or torn, torn lines are skipped and counted, and default thresholds are
assumed without a readable ``config.yaml``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_exp.config.schema import MonitorSettings, VerdictSettings
from grpo_exp.folder import (
    COMPLETED,
    CONFIG_FILE,
    FAILED,
    INCOMPLETE,
    METRICS_FILE,
    OVERRIDES_FILE,
    SUMMARY_FILE,
    JobFolder,
    read_rows,
    read_yaml,
)
from grpo_exp.tracking.episodes import environment_part, episode_figures
from grpo_exp.tracking.metrics import EVAL_PREFIX, EVAL_REWARD, eval_rows, summarize, summarize_eval, training_rows
from grpo_exp.tracking.wandb_run import SEED_KEY

DEFAULT_KL_THRESHOLD = MonitorSettings.kl_threshold
DEFAULT_MIN_REWARD_STD = MonitorSettings.min_reward_std
DEFAULT_MIN_IMPROVEMENT = MonitorSettings.min_improvement
DEFAULT_COLLAPSE_KL_MULTIPLE = MonitorSettings.collapse_kl_multiple
# Overrides that say how a job was run, not what it is: never a swept value.
BOOKKEEPING = ("resume", "sweep.halving.rung_steps")
# A final reward within this of the run's peak counts as "at its best": homogeneous completions
# there mean every one succeeded, which is not a collapse.
AT_PEAK_TOLERANCE = 0.05
# Torn lines of metrics.jsonl named in a job's note; a damaged file can have thousands.
TORN_LINES_LISTED = 5


@dataclass
class JobRecord:
    """One job folder, with whatever of its files could be read; ``notes`` say what could not."""

    name: str
    path: Path
    status: str
    stats: dict[str, Any]  # summary.json over summarize(metrics.jsonl)
    rows: list[dict[str, Any]]  # the training steps
    overrides: dict[str, Any]
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # the held-out evaluations (eval/...)
    kl_threshold: float = DEFAULT_KL_THRESHOLD
    min_reward_std: float = DEFAULT_MIN_REWARD_STD
    min_improvement: float = DEFAULT_MIN_IMPROVEMENT
    collapse_kl_multiple: float = DEFAULT_COLLAPSE_KL_MULTIPLE
    objective: str | None = None  # what the job returned to the sweeper (config key `objective`)
    seed: Any = None  # the seed it ran with (its override, else its config's); None when neither says
    verdict: VerdictSettings | None = None  # its sweep.verdict settings; None without a readable config.yaml
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status == COMPLETED

    def value(self, key: str) -> float | None:
        """A numeric result, or None when the job has none (or a non-number) for it."""
        v = self.stats.get(key)
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        return float(v) if ok else None

    def series(self, key: str) -> tuple[list[float], list[float]]:
        """Steps and values of one logged metric (a held-out one, ``eval/...``, from the evaluations), skipping the
        steps that lack it."""
        rows = self.evaluations if key.startswith(EVAL_PREFIX) else self.rows
        points = [(r["step"], r[key]) for r in rows if finite(r.get(key)) and finite(r.get("step"))]
        return [step for step, _ in points], [value for _, value in points]

    @property
    def kl_steps(self) -> int | None:
        """Steps with KL above this job's threshold; None when it logged no KL."""
        steps = self.value("steps_above_kl_threshold")
        return None if steps is None else int(steps)

    @property
    def kl_collapse_limit(self) -> float:
        """The KL the run's monitor calls a collapse (``collapse_kl_multiple`` x ``kl_threshold``)."""
        return self.collapse_kl_multiple * self.kl_threshold

    @property
    def kl_ran_away(self) -> bool:
        """Its KL passed the collapse limit at some step: far from the reference model, however its reward held."""
        max_kl = self.value("max_kl")
        return max_kl is not None and max_kl > self.kl_collapse_limit

    @property
    def collapsed(self) -> bool | None:
        """Reward std fell below the floor while the reward was still short of its peak.

        Homogeneous completions before success leave GRPO nothing to compare, the article's warning;
        None when the job logged too little to tell.
        """
        std, final, peak = self.value("final_reward_std"), self.value("final_reward"), self.value("peak_reward")
        if std is None or final is None or peak is None:
            return None
        return std < self.min_reward_std and final < peak - AT_PEAK_TOLERANCE

    @property
    def dead(self) -> bool | None:
        """The reward never varied: no group ever spread (reward std below the floor at every step) and the
        mean reward moved less than ``monitor.min_improvement``. GRPO had no signal; flat is not stable.

        None when the job logged no reward std."""
        stds, rewards = self.series("reward_std")[1], self.series("reward")[1]
        if not stds:
            stds = [v for v in (self.value("first_reward_std"), self.value("final_reward_std")) if v is not None]
            rewards = [v for v in (self.value("first_reward"), self.value("peak_reward")) if v is not None]
        if not stds or not rewards:
            return None
        return max(stds) < self.min_reward_std and max(rewards) - min(rewards) < self.min_improvement


def load_job(path: Path) -> JobRecord:
    """One job folder; whatever is missing or damaged becomes a note, never an exception."""
    folder = JobFolder(path)
    notes: list[str] = []
    config = read_yaml(folder.config)
    if not isinstance(config, dict):
        config = {}
        notes.append(
            f"no readable {CONFIG_FILE}: KL threshold {DEFAULT_KL_THRESHOLD:g} and "
            f"minimum reward std {DEFAULT_MIN_REWARD_STD:g} assumed"
        )
    monitor = config.get("monitor") if isinstance(config.get("monitor"), dict) else {}
    kl_threshold = float(monitor.get("kl_threshold", DEFAULT_KL_THRESHOLD))
    logged, torn = read_rows(folder.metrics)
    stepped = [row for row in logged if finite(row.get("step"))]
    rows = training_rows(stepped)
    if torn:
        where = ", ".join(map(str, torn[:TORN_LINES_LISTED])) + (", ..." if len(torn) > TORN_LINES_LISTED else "")
        notes.append(f"{len(torn)} torn line(s) in {METRICS_FILE} skipped (line{'s' * (len(torn) > 1)} {where})")
    summary = folder.summary()
    if summary is None and folder.summary_file.exists():
        notes.append(f"{SUMMARY_FILE} is unreadable: figures come from {METRICS_FILE}")
    evaluations = eval_rows(logged)
    held_out = summarize_eval(evaluations)
    stats = summarize(stepped, kl_threshold) | held_out | {k: v for k, v in (summary or {}).items() if v is not None}
    overrides = _read_overrides(folder)
    if overrides is None:
        overrides = (summary or {}).get("overrides") or {}
        source = f"taken from {SUMMARY_FILE}" if overrides else "unknown"
        notes.append(f"no {OVERRIDES_FILE}: its swept values are {source}")
    status = _status(folder, summary)
    error = (summary or {}).get("error") or (_last_line(folder.error) if status == FAILED else None)
    if evaluations and not finite(evaluations[-1].get(EVAL_REWARD)):
        # A summary written before the NaN was kept holds an earlier evaluation's reward: the last one counts.
        stats["final_eval_reward"] = math.nan
        if status == COMPLETED:
            status = FAILED
            error = f"its final evaluation (step {evaluations[-1].get('step')}) scored NaN"
    stats |= episode_figures(stats, environment_part(config))  # an environment's episodes, as flat columns
    return JobRecord(
        name=path.name,
        path=path,
        status=status,
        stats=stats,
        rows=rows,
        overrides=overrides,
        evaluations=evaluations,
        kl_threshold=kl_threshold,
        min_reward_std=float(monitor.get("min_reward_std", DEFAULT_MIN_REWARD_STD)),
        min_improvement=float(monitor.get("min_improvement", DEFAULT_MIN_IMPROVEMENT)),
        collapse_kl_multiple=float(monitor.get("collapse_kl_multiple", DEFAULT_COLLAPSE_KL_MULTIPLE)),
        objective=config.get("objective") if isinstance(config.get("objective"), str) else None,
        seed=overrides.get(SEED_KEY, config.get(SEED_KEY)),
        verdict=_verdict(config),
        error=error,
        notes=notes,
    )


def _verdict(config: dict[str, Any]) -> VerdictSettings | None:
    """The job's ``sweep.verdict`` settings; the schema's default for a key its config lacks (a job run before
    the key existed), None without a config."""
    if not config:
        return None
    sweep = config.get("sweep") if isinstance(config.get("sweep"), dict) else {}
    given = sweep.get("verdict") if isinstance(sweep.get("verdict"), dict) else {}
    names = {f.name for f in dataclasses.fields(VerdictSettings)}
    return VerdictSettings(**{k: v for k, v in given.items() if k in names})


def _status(folder: JobFolder, summary: dict[str, Any] | None) -> str:
    if summary is None:
        return INCOMPLETE  # killed hard (OOM killer, SLURM timeout) or still running
    return str(summary.get("status") or (FAILED if folder.error.is_file() else COMPLETED))


def _last_line(path: Path) -> str | None:
    """A traceback's last line names the exception: the one-line error of a job without summary."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return None
    return next((line for line in reversed(lines) if line), None)


def _read_overrides(folder: JobFolder) -> dict[str, Any] | None:
    lines = read_yaml(folder.overrides)
    if not isinstance(lines, list):
        return None
    pairs = (_parse_override(str(line)) for line in lines)
    return {key: value for key, value in pairs if not key.startswith("hydra.") and key not in BOOKKEEPING}


@functools.cache
def _override_parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _parse_override(text: str) -> tuple[str, Any]:
    """Hydra's parser types the value as the job saw it (``1e-3`` is a float); a plain split if it can't."""
    from hydra.errors import HydraException

    try:
        override = _override_parser().parse_override(text)
        return override.key_or_group, override.value()
    except HydraException:
        key, _, value = text.lstrip("+~").partition("=")
        return key, value


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
