"""Compare the jobs of a sweep: a ranked table, a few plots and a short verdict, from files on disk.

Works offline on what the jobs left in ``outputs/multirun/<date>/<time>/<n>/`` (or in a single run
folder): ``summary.json`` when a job ended, else whatever its ``metrics.jsonl`` holds (a job killed
hard writes no summary), ``config.yaml`` for its alarm thresholds and ``.hydra/overrides.yaml`` for
its swept values. Damaged or missing files become notes in the report, never a crash.

    python -m grpo_exp.compare outputs/multirun/2026-11-29/18-00-00 [--out DIR] [--objective final_reward]

writes ``report.md`` (verdict + table + plots), ``report.csv`` and ``*.png`` into ``<sweep>/report/``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from grpo_exp.config import MonitorSettings
from grpo_exp.errors import UserError
from grpo_exp.metrics import METRICS_FILE, SUMMARY_FILE, read_metrics, summarize

REPORT_DIR = "report"
REPORT_MD = "report.md"
REPORT_CSV = "report.csv"
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
TABLE_ERROR_CHARS = 100
MAX_LISTED = 6  # configurations named in one verdict line before "and N more"
NONE_CELL = "—"
EXIT_NOTHING_TO_REPORT = 2
# Metrics whose absence in some jobs is worth a note (a sweep mixing grpo.beta=0 logs no KL there).
WATCHED_METRICS = ("reward_std", "kl", "frac_reward_zero_std")
# (summary key, markdown header, format) of the table's result columns, in order.
RESULT_COLUMNS = (
    ("final_reward", "final reward", "{:.3f}"),
    ("peak_reward", "peak reward", "{:.3f}"),
    ("final_reward_std", "final reward std", "{:.3f}"),
    ("mean_kl", "mean KL", "{:.3f}"),
    ("max_kl", "max KL", "{:.3f}"),
    ("steps_above_kl_threshold", "steps KL > threshold", "{:.0f}"),
    ("frac_reward_zero_std", "zero-std groups", "{:.0%}"),
    ("steps", "steps", "{:.0f}"),
    ("wall_time_s", "wall time (s)", "{:.0f}"),
)


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
    if stats.get("max_kl") is None:
        stats["steps_above_kl_threshold"] = None  # no KL logged (grpo.beta=0): unknown, not zero
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


# ---------------------------------------------------------------------------------------- verdict


def verdict(sweep: Sweep) -> list[str]:
    """The report's opening bullets: the best configuration, which are stable, which jobs failed."""
    return [*_best(sweep), *_stability(sweep), *_casualties(sweep)]


def _best(sweep: Sweep) -> list[str]:
    scored = [(group, sweep.stat(group.jobs)) for group in sweep.configs()]
    ranked = sorted(
        ((g, s) for g, s in scored if s.mean is not None), key=lambda gs: gs[1].mean, reverse=sweep.maximize
    )
    if not ranked:
        return [f"- **No result:** no job completed with a {sweep.objective}."]
    group, stat = ranked[0]
    head = "Best configuration" if len(scored) > 1 else "Only configuration"
    spread = f" ± {stat.std:.3f} (mean ± std over {stat.n} {sweep.repeats})" if stat.std is not None else ""
    jobs = _jobs_text(job for job in group.jobs if job.finished)
    line = f"- **{head}:** `{_group_label(sweep, group)}`: {sweep.objective} {stat.mean:.3f}{spread}, {jobs}."
    if not _stable(group.jobs):
        line += " It is not stable, see below."
    return [line]


def _stability(sweep: Sweep) -> list[str]:
    stable, problems = [], []
    for group in sweep.configs():
        label = _group_label(sweep, group)
        assessed = [job for job in group.jobs if job.value("peak_reward") is not None]
        if kl_jobs := [job for job in assessed if job.kl_steps]:
            problems.append(f"- **KL excursion:** `{label}`: {_kl_text(kl_jobs)}.")
        if collapsed := [job for job in assessed if job.collapsed]:
            problems.append(f"- **Reward std collapse:** `{label}`: {_collapse_text(collapsed)}.")
        if any(job.finished for job in assessed) and _stable(assessed):
            stable.append(f"`{label}`")  # judged on finished runs, not on a partial one alone
    logged = [job for job in sweep.jobs if job.value("peak_reward") is not None]
    if not logged:
        return []  # nothing ran long enough to judge
    head = "- **Stable** (KL never above its threshold, reward std never collapsed before success): "
    no_kl = [job for job in logged if job.kl_steps is None]
    caveat = f" ({_jobs_text(no_kl)} logged no KL: only reward std checked)" if no_kl else ""
    return [head + _listing(stable, len(sweep.configs())) + caveat + ".", *problems]


def _listing(labels: list[str], total: int) -> str:
    """Labels in rank order, shortened for a search that tried dozens of configurations."""
    if not labels:
        return "none"
    if len(labels) == total > 1:
        return f"all {total} configurations"
    more = len(labels) - MAX_LISTED
    return ", ".join(labels[:MAX_LISTED]) + (f" and {more} more (see the table)" if more > 0 else "")


def _casualties(sweep: Sweep) -> list[str]:
    lines = []
    for job in sorted(sweep.jobs, key=lambda job: job.status != FAILED):
        ref = _job_ref(sweep, job)
        if job.status == FAILED:
            lines.append(f"- **Failed:** {ref}: {job.error or 'no error recorded'}")
        elif job.status == INCOMPLETE:
            steps = int(job.value("logged_steps") or 0)
            lines.append(
                f"- **Incomplete** (no {SUMMARY_FILE}: killed, or still running): {ref}, {steps} steps logged."
            )
        elif not job.finished:
            lines.append(f"- **{job.status.capitalize()}:** {ref}, {int(job.value('logged_steps') or 0)} steps logged.")
    return lines


def _stable(jobs: list[Job]) -> bool:
    return not any(job.kl_steps or job.collapsed for job in jobs)


def _kl_text(jobs: list[Job]) -> str:
    steps = _span([job.kl_steps for job in jobs], "{:.0f}")
    threshold = _span([job.kl_threshold for job in jobs], "{:g}")
    max_kl = max(job.value("max_kl") or 0.0 for job in jobs)
    return f"{steps} steps above {threshold} (max KL {max_kl:.3f}) in {_jobs_text(jobs)}"


def _collapse_text(jobs: list[Job]) -> str:
    std, floor = (
        _span([job.value("final_reward_std") for job in jobs]),
        _span([job.min_reward_std for job in jobs], "{:g}"),
    )
    final, peak = _span([job.value("final_reward") for job in jobs]), _span([job.value("peak_reward") for job in jobs])
    return (
        f"final reward std {std} < {floor} while the final reward {final} is below its peak {peak}, "
        f"in {_jobs_text(jobs)}: homogeneous generations before success"
    )


def _span(values: list[Any], spec: str = "{:.3f}") -> str:
    """One number, or the range of several ("0.200–0.300"), so a line covers all seeds of a configuration."""
    low, high = spec.format(min(values)), spec.format(max(values))
    return low if low == high else f"{low}–{high}"


def _group_label(sweep: Sweep, group: Group) -> str:
    if sweep.config_keys:
        return sweep.label(group.jobs[0], sweep.config_keys)
    if len(group.jobs) > 1:
        return "the one configuration" + (" (jobs differ only by seed)" if SEED_KEY in sweep.swept else "")
    return str(group.jobs[0].stats.get("name") or group.jobs[0].name)


def _jobs_text(jobs: Iterable[Job]) -> str:
    names = sorted((job.name for job in jobs), key=lambda name: (len(name), name))
    return ("job " if len(names) == 1 else "jobs ") + ", ".join(names)


def _job_ref(sweep: Sweep, job: Job) -> str:
    return f"job {job.name} (`{sweep.label(job)}`)" if sweep.swept else f"job {job.name}"


# ---------------------------------------------------------------------------------------- writing


def write_report(
    sweep_dir: Path,
    out_dir: Path | None = None,
    objective: str | None = None,
    maximize: bool | None = None,
    plots: bool = True,
) -> Path:
    """Write report.md, report.csv and the PNGs into ``out_dir`` (default ``<sweep_dir>/report``).

    ``objective`` and ``maximize`` default to the sweep's own (see ``load_sweep``). Returns report.md's
    path. Raises NothingToReport (a UserError) when the folder holds no job, UserError for an
    objective that no job has.
    """
    sweep = load_sweep(Path(sweep_dir), objective, maximize)
    out_dir = Path(out_dir) if out_dir is not None else sweep.path / REPORT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = _notes(sweep)
    images = _draw(sweep, out_dir, notes) if plots else []
    write_csv(sweep, out_dir / REPORT_CSV)
    report = out_dir / REPORT_MD
    report.write_text(markdown(sweep, images, notes), encoding="utf-8")
    return report


def write_csv(sweep: Sweep, path: Path) -> None:
    """One row per job, ranked; raw numbers, empty cells where a job has no value."""
    keys = _result_keys(sweep)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job", *sweep.swept, "status", *keys, "kl_threshold", "error"])
        for job in sweep.jobs:
            swept = [format_value(job.overrides.get(k, DEFAULT_VALUE)) for k in sweep.swept]
            results = [job.stats[k] if job.value(k) is not None else "" for k in keys]
            writer.writerow([job.name, *swept, job.status, *results, job.kl_threshold, job.error or ""])


def markdown(sweep: Sweep, images: list[tuple[str, str]], notes: list[str]) -> str:
    """report.md: header line, verdict, results table, grid of the objective, plots, notes."""
    counts = ", ".join(f"{n} {status}" for status, n in Counter(job.status for job in sweep.jobs).items())
    order = "higher" if sweep.maximize else "lower"
    swept = ", ".join(f"`{k}`" for k in sweep.swept) or "nothing (a single configuration)"
    lines = [
        f"# {'Sweep' if len(sweep.jobs) > 1 else 'Run'} report: {sweep.path}",
        "",
        f"{len(sweep.jobs)} job(s): {counts}. Swept: {swept}. Ranked by `{sweep.objective}` ({order} is better).",
        "",
        "## Verdict",
        "",
        *verdict(sweep),
        "",
        "## Results",
        "",
        *_results_table(sweep),
        *_grid_section(sweep),
    ]
    if images:
        lines += ["", "## Plots", *(f"\n![{title}]({name})" for title, name in images)]
    if notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines).rstrip() + "\n"


def _results_table(sweep: Sweep) -> list[str]:
    columns = [c for c in RESULT_COLUMNS if c[0] in _result_keys(sweep)]
    columns += [(k, k, "{:.4g}") for k in _result_keys(sweep) if k not in {c[0] for c in RESULT_COLUMNS}]
    thresholds = {job.kl_threshold for job in sweep.jobs}
    headers = ["job", *sweep.swept, "status", *(h for _, h, _ in columns), "error"]
    if len(thresholds) == 1:
        (threshold,) = thresholds
        headers = [h.replace("threshold", f"{threshold:g}") for h in headers]
    lines = [_md_row(headers), _md_row(["---"] * len(headers))]
    for job in sweep.jobs:
        swept = [format_value(job.overrides.get(k, DEFAULT_VALUE)) for k in sweep.swept]
        results = [_result_cell(job, key, spec, own_threshold=len(thresholds) > 1) for key, _, spec in columns]
        error = (job.error or "")[:TABLE_ERROR_CHARS]
        lines.append(_md_row([job.name, *swept, job.status, *results, error]))
    return lines


def _result_cell(job: Job, key: str, spec: str, own_threshold: bool) -> str:
    text = _fmt(job.value(key), spec)
    if own_threshold and key == "steps_above_kl_threshold" and job.kl_steps is not None:
        text += f" (> {job.kl_threshold:g})"  # thresholds differ between jobs: name this one's
    return text


def _grid_section(sweep: Sweep) -> list[str]:
    """The objective per group size × learning rate (or per value of the one swept key), as a table."""
    axes = grid_axes(sweep)
    if not axes or not is_grid(sweep, axes):
        return []
    xs, ys, cells = objective_grid(sweep, *axes)
    if len(axes) == 1:
        header = [axes[0], sweep.objective]
        rows = [[format_value(x), _cell_md(cells.get((i, 0)))] for i, x in enumerate(xs)]
    else:
        header = [f"{axes[1]} ↓ {axes[0]} →", *map(format_value, xs)]
        rows = [[format_value(y), *(_cell_md(cells.get((i, j))) for i in range(len(xs)))] for j, y in enumerate(ys)]
    title = f"`{sweep.objective}` by " + " × ".join(f"`{k}`" for k in axes) + f" (mean ± std over {sweep.repeats})"
    return ["", f"## {title}", "", _md_row(header), _md_row(["---"] * len(header)), *map(_md_row, rows)]


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


def _draw(sweep: Sweep, out_dir: Path, notes: list[str]) -> list[tuple[str, str]]:
    """The figures, when matplotlib is there; (title, file name) of those written."""
    try:
        from grpo_exp.report_plots import draw_figures
    except ImportError as exc:
        notes.append(f"plots skipped: {exc} (pip install matplotlib)")
        return []
    return draw_figures(sweep, out_dir, notes)


def _notes(sweep: Sweep) -> list[str]:
    """What was missing or damaged, per job, and metrics that only some jobs logged."""
    notes = [f"job {job.name}: {note}" for job in sweep.jobs for note in job.notes]
    logged = [job for job in sweep.jobs if job.rows]
    for key in WATCHED_METRICS:
        missing = [job for job in logged if not job.series(key)[0]]
        if missing and len(missing) < len(logged):
            hint = " (TRL logs no KL when grpo.beta=0)" if key == "kl" else ""
            notes.append(f"`{key}` was not logged by {_jobs_text(missing)}{hint}")
    return notes


def _result_keys(sweep: Sweep) -> list[str]:
    keys = [key for key, _, _ in RESULT_COLUMNS]
    return keys if sweep.objective in keys else [*keys, sweep.objective]


def _sorted_values(values: Iterable[Any]) -> list[Any]:
    """Unique values, numbers in numeric order before anything else (e.g. ``(default)``)."""
    unique = {format_value(v): v for v in values}
    return sorted(unique.values(), key=lambda v: (0, v, "") if _finite(v) else (1, 0, format_value(v)))


def _index(values: list[Any], value: Any) -> int:
    return [format_value(v) for v in values].index(format_value(value))


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(value: float | None, spec: str) -> str:
    return NONE_CELL if value is None else spec.format(value)


def _cell_md(cell: Cell | None) -> str:
    if cell is None or cell.mean is None:
        return NONE_CELL
    spread = f" ± {cell.std:.3f}" if cell.std is not None else ""
    return f"{cell.mean:.3f}{spread} (n={cell.n})"


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


# ---------------------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    """``python -m grpo_exp.compare SWEEP_DIR``; returns 2 (with one line on stderr) when there is nothing to report."""
    parser = argparse.ArgumentParser(prog="python -m grpo_exp.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path, help="a sweep folder (outputs/multirun/<date>/<time>) or a run folder")
    parser.add_argument("--out", type=Path, help=f"where to write the report (default: <sweep_dir>/{REPORT_DIR})")
    parser.add_argument(
        "--objective", help=f"summary key to rank by (default: the jobs' `objective` config, else {DEFAULT_OBJECTIVE})"
    )
    direction = parser.add_mutually_exclusive_group()
    direction.add_argument("--minimize", dest="maximize", action="store_false", default=None, help="lower is better")
    direction.add_argument(
        "--maximize", dest="maximize", action="store_true", help="higher is better (default except for KL-like keys)"
    )
    parser.add_argument("--no-plots", action="store_true", help="write the table and verdict only")
    args = parser.parse_args(argv)
    try:
        report = write_report(args.sweep_dir, args.out, args.objective, args.maximize, not args.no_plots)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOTHING_TO_REPORT
    print(report.read_text(encoding="utf-8").split("## Results")[0].rstrip())
    print(f"\nreport: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
