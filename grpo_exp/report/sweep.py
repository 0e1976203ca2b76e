"""A sweep on disk, read into jobs (jobs.py), configurations and objective grids for the report.

A sweep folder (``outputs/multirun/<date>/<time>/``) holds ``multirun.yaml`` (the sweeper's settings,
Optuna's ``direction`` among them) and one folder per job, ``0/``, ``1/``, ...; a single run folder
is read as a sweep of one job. Grouping and statistics run on pandas tables of the jobs' overrides
and outcomes. Only a folder with no job at all raises ``NothingToReport``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from grpo_exp.config.schema import VerdictSettings
from grpo_exp.errors import UserError
from grpo_exp.folder import SUMMARY_FILE, JobFolder, multirun_file, read_yaml, sweep_jobs
from grpo_exp.report.jobs import JobRecord, finite, load_job
from grpo_exp.tracking.metrics import TRAINING_COUNTERPART
from grpo_exp.tracking.wandb_run import SEED_KEY, value_text  # repeats of one configuration: averaged

if TYPE_CHECKING:  # pandas loads when a report is computed, not when the module is imported
    import pandas as pd

DEFAULT_OBJECTIVE = "final_eval_reward"  # the held-out reward; a sweep without one ranks on final_reward
# Objectives where lower is better, unless told otherwise (--maximize) or the sweeper's direction says.
MINIMIZED = frozenset(
    {"mean_kl", "max_kl", "final_kl", "steps_above_kl_threshold", "frac_reward_zero_std", "wall_time_s"}
)
# An axis with more distinct values than this (a search such as Optuna's) gets a scatter plot, not a grid.
MAX_GRID_VALUES = 8
GROUP_SIZE_KEY = "grpo.num_generations"
LR_KEY = "optimizer.lr"
DEFAULT_VALUE = "(default)"  # a key that some jobs of the sweep did not override


class NothingToReport(UserError):
    """The folder holds no job at all (the CLI exits with code 2)."""


class Cell(NamedTuple):
    """The objective over one point's completed jobs: mean, sample std (None for one job), count."""

    mean: float | None
    std: float | None
    n: int


@dataclass
class Group:
    """Jobs that share the values of some keys (a configuration, or a heatmap cell)."""

    values: tuple[Any, ...]
    jobs: list[JobRecord]


@dataclass
class Sweep:
    """The jobs ranked best first by the objective, and the keys whose values differ between them."""

    path: Path
    jobs: list[JobRecord]
    swept: list[str]
    objective: str = DEFAULT_OBJECTIVE
    maximize: bool = True
    basis: str = ""  # what the objective measures, for the report's header (held-out or training reward)

    @property
    def config_keys(self) -> list[str]:
        """Swept keys that make a configuration: all but the seed."""
        return [k for k in self.swept if k != SEED_KEY]

    @property
    def repeats(self) -> str:
        """What the jobs of one configuration differ by, for "mean ± std over ..." wording."""
        return "seeds" if SEED_KEY in self.swept else "jobs"

    @property
    def verdict(self) -> VerdictSettings:
        """How configurations are judged over seeds: the jobs' ``sweep.verdict`` (the first job that has a config)."""
        return next((job.verdict for job in self.jobs if job.verdict is not None), VerdictSettings())

    def configs(self) -> list[Group]:
        return group_jobs(self.jobs, self.config_keys)

    def config_label(self, group: Group) -> str:
        """How the report names a configuration: its swept values (``key=value, ...``), as its jobs' runs do."""
        if self.config_keys:
            return self.label(group.jobs[0], self.config_keys)
        if len(group.jobs) > 1:
            return "the one configuration" + (" (jobs differ only by seed)" if SEED_KEY in self.swept else "")
        return str(group.jobs[0].stats.get("name") or group.jobs[0].name)

    def label(self, job: JobRecord, keys: list[str] | None = None, short: bool = False) -> str:
        keys = self.swept if keys is None else keys
        names = _short_names(keys) if short else keys
        return ", ".join(
            f"{n}={format_value(job.overrides.get(k, DEFAULT_VALUE))}" for n, k in zip(names, keys, strict=True)
        )

    def stat(self, jobs: Iterable[JobRecord]) -> Cell:
        """The objective over the completed jobs among ``jobs``; failed and partial runs would skew it."""
        import pandas as pd

        values = pd.Series([self.outcome(job) for job in jobs], dtype=float)
        return _cell(values.agg(["mean", "std", "count"]))

    def outcome(self, job: JobRecord) -> float | None:
        """The job's objective, or None when it did not complete (its partial figure would skew a mean)."""
        return job.value(self.objective) if job.finished else None


# ---------------------------------------------------------------------------------------- reading


def load_sweep(sweep_dir: Path, objective: str | None = None, maximize: bool | None = None) -> Sweep:
    """Every job under ``sweep_dir`` (or the run in it), ranked; NothingToReport when there is none.

    By default the ranking follows the sweep itself: the objective its jobs returned to the sweeper
    (config key ``objective``, else final_eval_reward), in the sweeper's direction (Optuna's
    ``direction``), else lower-is-better for KL-like objectives and higher-is-better for the rest.
    A held-out objective in a sweep where no job evaluated held-out prompts becomes its training
    counterpart (final_eval_reward -> final_reward), and ``basis`` says so.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise NothingToReport(f"{sweep_dir} is not a folder")
    dirs = find_job_dirs(sweep_dir)
    if not dirs:
        raise NothingToReport(f"no job folders in {sweep_dir}{_where_jobs_are(sweep_dir)}")
    jobs = [load_job(d) for d in dirs]
    own = _common({job.objective for job in jobs}) or DEFAULT_OBJECTIVE
    requested = objective or own
    objective, basis = _basis(requested, jobs)
    if maximize is None and requested == own:  # the sweeper's direction was given for its objective only
        maximize = _sweeper_maximizes(sweep_dir)
    if maximize is None:
        maximize = objective not in MINIMIZED
    known = sorted({k for job in jobs for k, v in job.stats.items() if v is None or job.value(k) is not None})
    if objective not in known:
        raise UserError(f"unknown objective {objective!r}: use one of {', '.join(known)}")
    sweep = Sweep(sweep_dir, jobs, swept_keys(jobs), objective, maximize, basis)
    sweep.jobs.sort(key=lambda job: _rank(sweep, job))
    return sweep


def _basis(objective: str, jobs: list[JobRecord]) -> tuple[str, str]:
    """The objective to rank on and what it measures: held-out reward when some job has it, else training."""
    held_out = [job for job in jobs if job.value("final_eval_reward") is not None]
    if objective in TRAINING_COUNTERPART:
        if held_out:
            lacking = len(jobs) - len(held_out)
            return objective, "the held-out reward" + (f"; {lacking} job(s) without one rank last" if lacking else "")
        training = TRAINING_COUNTERPART[objective]
        return (
            training,
            f"the training reward: no job evaluated held-out prompts (`{training}` stands in for `{objective}`)",
        )
    if objective in TRAINING_COUNTERPART.values() or objective == "final_reward_std":
        hint = "; `--objective final_eval_reward` ranks on held-out prompts" if held_out else ""
        return objective, "the training reward" + hint
    return objective, ""


def find_job_dirs(sweep_dir: Path) -> list[Path]:
    """Job subfolders in Hydra's order (0, 1, ..., 10); the folder itself when it is a single run."""
    return sweep_jobs(sweep_dir) or ([sweep_dir] if JobFolder(sweep_dir).holds_job_files() else [])


def swept_keys(jobs: list[JobRecord]) -> list[str]:
    """Override keys whose value differs between jobs (a key some jobs lack counts), in override order."""
    keys = list(dict.fromkeys(k for job in jobs for k in job.overrides))
    varying = override_table(jobs, keys).nunique()
    return [k for k in keys if varying[k] > 1]


def override_table(jobs: Sequence[JobRecord], keys: list[str]) -> pd.DataFrame:
    """One row per job, one column per key: its value as the report shows it (``(default)`` when not set)."""
    import pandas as pd

    return pd.DataFrame(
        {k: [format_value(job.overrides.get(k, DEFAULT_VALUE)) for job in jobs] for k in keys}, index=range(len(jobs))
    )


def group_jobs(jobs: Iterable[JobRecord], keys: list[str]) -> list[Group]:
    """Jobs grouped by their values of ``keys``, groups in order of first appearance."""
    jobs = list(jobs)
    if not keys:
        return [Group((), jobs)] if jobs else []
    groups = override_table(jobs, keys).groupby(keys, sort=False).indices.values()
    members = sorted(([jobs[i] for i in rows] for rows in groups), key=lambda g: jobs.index(g[0]))
    return [Group(tuple(g[0].overrides.get(k, DEFAULT_VALUE) for k in keys), g) for g in members]


def format_value(value: Any) -> str:
    """An override value as the table shows it (``1e-3`` parses to 0.001 and shows as ``0.001``), as the
    jobs' runs name their configuration."""
    return value_text(value)


def _common(values: set[str | None]) -> str | None:
    return values.pop() if len(values) == 1 else None


def _sweeper_maximizes(sweep_dir: Path) -> bool | None:
    """The direction an optimizing sweeper (Optuna) was given, from multirun.yaml; None for a grid."""
    saved = read_yaml(multirun_file(sweep_dir))
    sweeper = saved.get("hydra", {}).get("sweeper", {}) if isinstance(saved, dict) else {}
    direction = sweeper.get("direction") if isinstance(sweeper, dict) else None
    return {"maximize": True, "minimize": False}.get(str(direction).lower()) if direction else None


def _where_jobs_are(path: Path) -> str:
    """A hint when the folder holds sweeps (a date folder) rather than jobs."""
    inner = sorted(p for p in path.iterdir() if p.is_dir() and find_job_dirs(p))
    if inner:
        return f": it holds sweeps or runs, pass one of them, e.g. {inner[-1]}"
    return f": expected a sweep folder (0/, 1/, ... from `python run.py -m`) or a run folder with {SUMMARY_FILE}"


def _rank(sweep: Sweep, job: JobRecord) -> tuple[bool, bool, float]:
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
    keys = [x_key] if y_key is None else [x_key, y_key]
    groups = group_jobs(sweep.jobs, keys)
    xs = _sorted_values(g.values[0] for g in groups)
    ys = [None] if y_key is None else _sorted_values(g.values[1] for g in groups)
    table = override_table(sweep.jobs, keys).assign(value=[sweep.outcome(job) for job in sweep.jobs])
    table["value"] = table["value"].astype(float)
    stats = table.groupby(keys, sort=False)["value"].agg(["mean", "std", "count"])
    cells = {}
    for index, row in stats.iterrows():
        x, y = (index, None) if y_key is None else index
        cells[(_index(xs, x), 0 if y_key is None else _index(ys, y))] = _cell(row)
    return xs, ys, cells


def _cell(stats: pd.Series) -> Cell:
    """A Cell from pandas' mean, std and count (NaN, as pandas gives for no value or one, becomes None)."""
    n = int(stats["count"])
    mean, std = (
        None if n < need or math.isnan(stats[key]) else float(stats[key]) for key, need in (("mean", 1), ("std", 2))
    )
    return Cell(mean, std, n)


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
    return sorted(unique.values(), key=lambda v: (0, v, "") if finite(v) else (1, 0, format_value(v)))


def _index(values: list[Any], value: Any) -> int:
    """Where ``value`` (raw, or as the report shows it) sits in ``values``."""
    return [format_value(v) for v in values].index(value if isinstance(value, str) else format_value(value))
