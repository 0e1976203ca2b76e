"""A sweep on disk, read into jobs, configurations and objective grids for the report (``grpo_exp.report.compare``).

A sweep folder (``outputs/multirun/<date>/<time>/``) holds ``multirun.yaml`` (the sweeper's settings,
Optuna's ``direction`` among them) and one folder per job, ``0/``, ``1/``, ...; a single run folder
is read as a sweep of one job. A job folder holds ``summary.json`` when the job ended (its status,
error and figures), ``metrics.jsonl`` (one line per logging step; a job killed hard leaves only this),
``config.yaml`` (its alarm thresholds and ``objective``), ``.hydra/overrides.yaml`` (its swept values)
and ``error.txt`` (the traceback of a failed job).

Damaged or missing files become notes on their job (``Job.notes``), never a crash: figures come from
``metrics.jsonl`` when ``summary.json`` is missing or torn, torn lines are skipped and counted, and default
thresholds are assumed without a readable ``config.yaml``. Only a folder with no job at all raises
``NothingToReport``.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from grpo_exp.config import MonitorSettings
from grpo_exp.errors import UserError
from grpo_exp.metrics import METRICS_FILE, SUMMARY_FILE, read_metrics, summarize

REPORT_DIR = "report"
CONFIG_FILE = "config.yaml"
ERROR_FILE = "error.txt"
OVERRIDES_FILE = ".hydra/overrides.yaml"
JOB_FILES = (SUMMARY_FILE, METRICS_FILE, CONFIG_FILE, ERROR_FILE, OVERRIDES_FILE)
DEFAULT_OBJECTIVE = "final_reward"
# Objectives where lower is better, unless told otherwise (--maximize) or the sweeper's direction says.
MINIMIZED = frozenset(
    {"mean_kl", "max_kl", "final_kl", "steps_above_kl_threshold", "frac_reward_zero_std", "wall_time_s"}
)
MULTIRUN_FILE = "multirun.yaml"
# An axis with more distinct values than this (a search such as Optuna's) gets a scatter plot, not a grid.
MAX_GRID_VALUES = 8
DEFAULT_KL_THRESHOLD = MonitorSettings.kl_threshold
DEFAULT_MIN_REWARD_STD = MonitorSettings.min_reward_std
SEED_KEY = "seed"  # repeats of one configuration; averaged, not a configuration of its own
GROUP_SIZE_KEY = "grpo.num_generations"
LR_KEY = "optimizer.lr"
COMPLETED, FAILED, INCOMPLETE = "completed", "failed", "incomplete"
DEFAULT_VALUE = "(default)"  # a key that some jobs of the sweep did not override
# A final reward within this of the run's peak counts as "at its best": homogeneous completions
# there mean every one succeeded, which is not a collapse.
AT_PEAK_TOLERANCE = 0.05


class NothingToReport(UserError):
    """The folder holds no job at all (the CLI exits with code 2)."""


class Cell(NamedTuple):
    """The objective over one point's completed jobs: mean, sample std (None for one job), count."""

    mean: float | None
    std: float | None
    n: int


@dataclass
class Job:
    """One job folder, with whatever of its files could be read; ``notes`` say what could not."""

    name: str
    path: Path
    status: str
    stats: dict[str, Any]  # summary.json over summarize(metrics.jsonl)
    rows: list[dict[str, Any]]
    overrides: dict[str, Any]
    kl_threshold: float = DEFAULT_KL_THRESHOLD
    min_reward_std: float = DEFAULT_MIN_REWARD_STD
    objective: str | None = None  # what the job returned to the sweeper (config key `objective`)
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
        """Steps and values of one logged metric, skipping the steps that lack it."""
        points = [(r["step"], r[key]) for r in self.rows if _finite(r.get(key)) and _finite(r.get("step"))]
        return [step for step, _ in points], [value for _, value in points]

    @property
    def kl_steps(self) -> int | None:
        """Steps with KL above this job's threshold; None when it logged no KL."""
        steps = self.value("steps_above_kl_threshold")
        return None if steps is None else int(steps)

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


@dataclass
class Group:
    """Jobs that share the values of some keys (a configuration, or a heatmap cell)."""

    values: tuple[Any, ...]
    jobs: list[Job]


@dataclass
class Sweep:
    """The jobs ranked best first by the objective, and the keys whose values differ between them."""

    path: Path
    jobs: list[Job]
    swept: list[str]
    objective: str = DEFAULT_OBJECTIVE
    maximize: bool = True

    @property
    def config_keys(self) -> list[str]:
        """Swept keys that make a configuration: all but the seed."""
        return [k for k in self.swept if k != SEED_KEY]

    @property
    def repeats(self) -> str:
        """What the jobs of one configuration differ by, for "mean ± std over ..." wording."""
        return "seeds" if SEED_KEY in self.swept else "jobs"

    def configs(self) -> list[Group]:
        return group_jobs(self.jobs, self.config_keys)

    def label(self, job: Job, keys: list[str] | None = None, short: bool = False) -> str:
        keys = self.swept if keys is None else keys
        names = _short_names(keys) if short else keys
        return ", ".join(
            f"{n}={format_value(job.overrides.get(k, DEFAULT_VALUE))}" for n, k in zip(names, keys, strict=True)
        )

    def stat(self, jobs: Iterable[Job]) -> Cell:
        """The objective over the completed jobs among ``jobs``; failed and partial runs would skew it."""
        values = [v for job in jobs if job.finished and (v := job.value(self.objective)) is not None]
        mean = statistics.fmean(values) if values else None
        return Cell(mean, statistics.stdev(values) if len(values) > 1 else None, len(values))


# ---------------------------------------------------------------------------------------- reading


def load_sweep(sweep_dir: Path, objective: str | None = None, maximize: bool | None = None) -> Sweep:
    """Every job under ``sweep_dir`` (or the run in it), ranked; NothingToReport when there is none.

    By default the ranking follows the sweep itself: the objective its jobs returned to the sweeper
    (config key ``objective``, else final_reward), in the sweeper's direction (Optuna's
    ``direction``), else lower-is-better for KL-like objectives and higher-is-better for the rest.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise NothingToReport(f"{sweep_dir} is not a folder")
    dirs = find_job_dirs(sweep_dir)
    if not dirs:
        raise NothingToReport(f"no job folders in {sweep_dir}{_where_jobs_are(sweep_dir)}")
    jobs = [load_job(d) for d in dirs]
    own = _common({job.objective for job in jobs}) or DEFAULT_OBJECTIVE
    objective = objective or own
    if maximize is None and objective == own:  # the sweeper's direction was given for its objective only
        maximize = _sweeper_maximizes(sweep_dir)
    if maximize is None:
        maximize = objective not in MINIMIZED
    known = sorted({k for job in jobs for k, v in job.stats.items() if v is None or job.value(k) is not None})
    if objective not in known:
        raise UserError(f"unknown objective {objective!r}: use one of {', '.join(known)}")
    sweep = Sweep(sweep_dir, jobs, swept_keys(jobs), objective, maximize)
    sweep.jobs.sort(key=lambda job: _rank(sweep, job))
    return sweep


def find_job_dirs(sweep_dir: Path) -> list[Path]:
    """Job subfolders in Hydra's order (0, 1, ..., 10); the folder itself when it is a single run."""
    children = [p for p in sweep_dir.iterdir() if p.is_dir() and _is_job(p) and not _is_ours(p)]
    if children:
        return sorted(children, key=lambda p: (0, int(p.name), "") if p.name.isdigit() else (1, 0, p.name))
    return [sweep_dir] if _is_job(sweep_dir) else []


def load_job(path: Path) -> Job:
    """One job folder; whatever is missing or damaged becomes a note, never an exception."""
    notes: list[str] = []
    config = _read_yaml(path / CONFIG_FILE)
    if not isinstance(config, dict):
        config = {}
        notes.append(
            f"no readable {CONFIG_FILE}: KL threshold {DEFAULT_KL_THRESHOLD:g} and "
            f"minimum reward std {DEFAULT_MIN_REWARD_STD:g} assumed"
        )
    monitor = config.get("monitor") if isinstance(config.get("monitor"), dict) else {}
    kl_threshold = float(monitor.get("kl_threshold", DEFAULT_KL_THRESHOLD))
    rows = [row for row in read_metrics(path / METRICS_FILE) if _finite(row.get("step"))]
    if torn := _torn_lines(path / METRICS_FILE):
        notes.append(f"{torn} torn line(s) in {METRICS_FILE} skipped")
    summary = _read_json(path / SUMMARY_FILE)
    if summary is None and (path / SUMMARY_FILE).exists():
        notes.append(f"{SUMMARY_FILE} is unreadable: figures come from {METRICS_FILE}")
    stats = summarize(rows, kl_threshold) | {k: v for k, v in (summary or {}).items() if v is not None}
    overrides = _read_overrides(path)
    if overrides is None:
        overrides = (summary or {}).get("overrides") or {}
        source = f"taken from {SUMMARY_FILE}" if overrides else "unknown"
        notes.append(f"no {OVERRIDES_FILE}: its swept values are {source}")
    status = _status(path, summary)
    error = (summary or {}).get("error") or (_last_line(path / ERROR_FILE) if status == FAILED else None)
    return Job(
        name=path.name,
        path=path,
        status=status,
        stats=stats,
        rows=rows,
        overrides=overrides,
        kl_threshold=kl_threshold,
        min_reward_std=float(monitor.get("min_reward_std", DEFAULT_MIN_REWARD_STD)),
        objective=config.get("objective") if isinstance(config.get("objective"), str) else None,
        error=error,
        notes=notes,
    )


def swept_keys(jobs: list[Job]) -> list[str]:
    """Override keys whose value differs between jobs (a key some jobs lack counts), in override order."""
    keys = list(dict.fromkeys(k for job in jobs for k in job.overrides))
    return [k for k in keys if len({format_value(job.overrides.get(k, DEFAULT_VALUE)) for job in jobs}) > 1]


def group_jobs(jobs: Iterable[Job], keys: list[str]) -> list[Group]:
    """Jobs grouped by their values of ``keys``, groups in order of first appearance."""
    groups: dict[tuple[str, ...], Group] = {}
    for job in jobs:
        values = tuple(job.overrides.get(k, DEFAULT_VALUE) for k in keys)
        groups.setdefault(tuple(map(format_value, values)), Group(values, [])).jobs.append(job)
    return list(groups.values())


def format_value(value: Any) -> str:
    """An override value as the table shows it (``1e-3`` parses to 0.001 and shows as ``0.001``)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def _common(values: set[str | None]) -> str | None:
    return values.pop() if len(values) == 1 else None


def _sweeper_maximizes(sweep_dir: Path) -> bool | None:
    """The direction an optimizing sweeper (Optuna) was given, from multirun.yaml; None for a grid."""
    saved = _read_yaml(sweep_dir / MULTIRUN_FILE)
    sweeper = saved.get("hydra", {}).get("sweeper", {}) if isinstance(saved, dict) else {}
    direction = sweeper.get("direction") if isinstance(sweeper, dict) else None
    return {"maximize": True, "minimize": False}.get(str(direction).lower()) if direction else None


def _is_job(path: Path) -> bool:
    return any((path / name).is_file() for name in JOB_FILES)


def _is_ours(path: Path) -> bool:
    """A run's own subfolders (.hydra holds a config.yaml too) and the report are not jobs."""
    return path.name.startswith(".") or path.name == REPORT_DIR


def _where_jobs_are(path: Path) -> str:
    """A hint when the folder holds sweeps (a date folder) rather than jobs."""
    inner = sorted(p for p in path.iterdir() if p.is_dir() and find_job_dirs(p))
    if inner:
        return f": it holds sweeps or runs, pass one of them, e.g. {inner[-1]}"
    return ": expected a sweep folder (0/, 1/, ... from `python run.py -m`) or a run folder with summary.json"


def _status(path: Path, summary: dict[str, Any] | None) -> str:
    if summary is None:
        return INCOMPLETE  # killed hard (OOM killer, SLURM timeout) or still running
    return str(summary.get("status") or (FAILED if (path / ERROR_FILE).is_file() else COMPLETED))


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _torn_lines(path: Path) -> int:
    """Lines of metrics.jsonl that aren't JSON (read_metrics skips them; the report says so)."""
    if not path.is_file():
        return 0
    torn = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            json.loads(line)
        except json.JSONDecodeError:
            torn += bool(line.strip())
    return torn


def _last_line(path: Path) -> str | None:
    """A traceback's last line names the exception: the one-line error of a job without summary."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return None
    return next((line for line in reversed(lines) if line), None)


def _read_overrides(path: Path) -> dict[str, Any] | None:
    lines = _read_yaml(path / OVERRIDES_FILE)
    if not isinstance(lines, list):
        return None
    pairs = (_parse_override(str(line)) for line in lines)
    return {key: value for key, value in pairs if not key.startswith("hydra.")}


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


def _rank(sweep: Sweep, job: Job) -> tuple[bool, bool, float]:
    """Completed jobs first, then by the objective (best first), jobs without a value last."""
    value = job.value(sweep.objective)
    signed = 0.0 if value is None else (-value if sweep.maximize else value)
    return (not job.finished, value is None, signed)


def _short_names(keys: list[str]) -> list[str]:
    """``lr`` for ``optimizer.lr`` in plot labels, unless two swept keys would then look alike."""
    short = [k.rsplit(".", 1)[-1] for k in keys]
    return short if len(set(short)) == len(short) else keys


# ---------------------------------------------------------------------------------------- grids


def objective_grid(
    sweep: Sweep, x_key: str, y_key: str | None = None
) -> tuple[list[Any], list[Any], dict[tuple[int, int], Cell]]:
    """Sorted x values, sorted y values and {(x index, y index): Cell} of the objective.

    With seeds repeated a cell holds their mean and sample std; failed and incomplete jobs are left
    out of the numbers (a cell with none completed has mean None). Without ``y_key`` y is [None].
    """
    groups = group_jobs(sweep.jobs, [x_key] if y_key is None else [x_key, y_key])
    xs = _sorted_values(g.values[0] for g in groups)
    ys = [None] if y_key is None else _sorted_values(g.values[1] for g in groups)
    cells = {}
    for group in groups:
        y = 0 if y_key is None else _index(ys, group.values[1])
        cells[(_index(xs, group.values[0]), y)] = sweep.stat(group.jobs)
    return xs, ys, cells


def grid_axes(sweep: Sweep) -> list[str]:
    """Group size × learning rate when both are swept, else the one swept key worth plotting against."""
    keys = sweep.config_keys
    if GROUP_SIZE_KEY in keys and LR_KEY in keys:
        return [GROUP_SIZE_KEY, LR_KEY]
    one = [k for k in (GROUP_SIZE_KEY, LR_KEY) if k in keys] or (keys if len(keys) == 1 else [])
    return one[:1]


def is_grid(sweep: Sweep, keys: list[str]) -> bool:
    """Few enough values on every axis for a table or heatmap; a search's scattered values are not."""
    return all(len(group_jobs(sweep.jobs, [key])) <= MAX_GRID_VALUES for key in keys)


def _sorted_values(values: Iterable[Any]) -> list[Any]:
    """Unique values, numbers in numeric order before anything else (e.g. ``(default)``)."""
    unique = {format_value(v): v for v in values}
    return sorted(unique.values(), key=lambda v: (0, v, "") if _finite(v) else (1, 0, format_value(v)))


def _index(values: list[Any], value: Any) -> int:
    return [format_value(v) for v in values].index(format_value(value))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
