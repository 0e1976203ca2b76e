"""Compare the jobs of a sweep: a ranked table, a few plots and a short verdict, from files on disk.

Works offline on what the jobs left in ``outputs/multirun/<date>/<time>/<n>/`` (or in a single run folder),
read by ``grpo_exp.report.sweep``; damaged or missing files become notes in the report, never a crash.

    python -m grpo_exp.report outputs/multirun/2026-11-29/18-00-00 [--out DIR] [--objective final_reward]

writes ``report.md`` (verdict + table + plots), ``report.csv`` and ``*.png`` into ``<sweep>/report/``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.folder import INTERVALS_CSV, REPORT_DIR, report_dir
from grpo_exp.report import seed_verdict
from grpo_exp.report.casualties import casualties
from grpo_exp.report.decision import Decision
from grpo_exp.report.episodes import episode_columns
from grpo_exp.report.halving import halving_section
from grpo_exp.report.jobs import JobRecord
from grpo_exp.report.stability import HIGHEST_KL, Stability, describe, median_max_kl, rank_stability
from grpo_exp.report.sweep import (
    DEFAULT_OBJECTIVE,
    DEFAULT_VALUE,
    Cell,
    Sweep,
    format_value,
    grid_axes,
    is_grid,
    load_sweep,
    objective_grid,
)
from grpo_exp.report.text import MAX_LISTED, NONE_CELL, jobs_text, md_row

REPORT_MD = "report.md"
REPORT_CSV = "report.csv"
TABLE_ERROR_CHARS = 100
EXIT_NOTHING_TO_REPORT = 2
# Metrics whose absence in some jobs is worth a note (a sweep mixing grpo.beta=0 logs no KL there).
WATCHED_METRICS = ("reward_std", "kl", "frac_reward_zero_std")
# (summary key, markdown header, format) of the table's result columns, in order.
RESULT_COLUMNS = (
    ("base_eval_reward", "base eval reward", "{:.3f}"),  # the held-out reward before the first step
    ("final_eval_reward", "final eval reward", "{:.3f}"),
    ("best_eval_reward", "best eval reward", "{:.3f}"),
    ("final_reward", "final reward", "{:.3f}"),
    ("peak_reward", "peak reward", "{:.3f}"),
    ("final_reward_std", "final reward std", "{:.3f}"),
    ("mean_kl", "mean KL", "{:.3f}"),
    ("max_kl", "max KL", "{:.3f}"),
    ("steps_above_kl_threshold", "steps KL > threshold", "{:.0f}"),
    ("frac_reward_zero_std", "zero-std groups", "{:.0%}"),
    ("tool_call_frequency", "tool calls per rollout", "{:.2f}"),  # an agent's (TRL's tools/... metrics)
    ("tool_failure_frequency", "failed tool calls", "{:.0%}"),
    ("min_is_ratio", "min IS ratio (vLLM)", "{:.2f}"),  # TRL's importance-sampling correction, vLLM jobs only
    ("max_is_ratio", "max IS ratio (vLLM)", "{:.2f}"),
    ("steps", "steps", "{:.0f}"),
    ("wall_time_s", "wall time (s)", "{:.0f}"),
)


# Columns only a sweep with held-out evaluations (base: grpo.eval_on_start), agents or vLLM fills; else left out.
OPTIONAL_COLUMNS = frozenset(
    key for key, _, _ in RESULT_COLUMNS if "eval" in key or key.startswith("tool_") or key.endswith("_is_ratio")
)


# ---------------------------------------------------------------------------------------- verdict


def verdict(sweep: Sweep, decision: Decision | None = None) -> list[str]:
    """The report's opening bullets: the decision over seeds, how stable each configuration is, which jobs failed."""
    ranked = rank_stability(_assessed(sweep))
    decision = decision if decision is not None else seed_verdict.sweep_decision(sweep)
    return [
        *seed_verdict.decision_lines(sweep, decision, _stability_note(decision, ranked)),
        *_stability(sweep, ranked),
        *casualties(sweep),
    ]


def _assessed(sweep: Sweep) -> dict[str, list[JobRecord]]:
    """Each configuration's finished jobs that logged a reward (a partial run alone is not judged)."""
    configs = {}
    for group in sweep.configs():
        jobs = [job for job in group.jobs if job.finished and job.value("peak_reward") is not None]
        if jobs:
            configs[sweep.config_label(group)] = jobs
    return configs


def _stability_note(decision: Decision | None, stability: list[Stability]) -> str:
    """Where the decision's leader stands on stability, for the end of its line."""
    if decision is None:
        return ""
    label = decision.leader.label
    live = [s.label for s in stability if not s.dead]
    if any(s.label == label and s.dead for s in stability):
        return " Its reward never varied: it is dead, see below."
    if label in live and len(live) > 1:
        return f" Stability: #{live.index(label) + 1} of {len(live)}, see below."
    return ""


def _stability(sweep: Sweep, ranked: list[Stability]) -> list[str]:
    if not ranked:
        return []  # nothing ran long enough to judge
    live, dead = [s for s in ranked if not s.dead], [s for s in ranked if s.dead]
    lines = []
    if live:
        median = median_max_kl(ranked)
        entries = [f"{i}. `{s.label}` ({describe(s, median)})" for i, s in enumerate(live, start=1)]
        more = len(entries) - MAX_LISTED
        listing = "; ".join(entries[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
        no_kl = [job for s in live for job in s.jobs if job.kl_steps is None]
        caveat = f" ({jobs_text(no_kl)} logged no KL: ranked without it)" if no_kl else ""
        lines.append(
            "- **Stability**, relative to this sweep, most stable first (ranked on the drop from the peak reward, "
            "the fall of reward std before success and the max KL against the sweep's median; a KL past the "
            f"collapse limit ranks last){caveat}: {listing}."
        )
    if dead:
        floor, gain = (
            _span([j.min_reward_std for s in dead for j in s.jobs], "{:g}"),
            _span([j.min_improvement for s in dead for j in s.jobs], "{:g}"),
        )
        for s in dead:
            reward = _span([job.value("final_reward") for job in s.jobs])
            lines.append(
                f"- **Dead:** `{s.label}`: the reward stayed at {reward}, reward std never reached {floor} and the "
                f"reward moved less than {gain}, in {jobs_text(s.jobs)}: no learning signal, not stable."
            )
    drifting, collapses = [], []
    for group in sweep.configs():  # flags, partial runs included: a killed run's KL alarm still matters
        label, logged = sweep.config_label(group), [job for job in group.jobs if job.value("peak_reward") is not None]
        if kl_jobs := [job for job in logged if job.kl_steps]:
            drifting.append((label, kl_jobs))
        if collapsed := [job for job in logged if job.collapsed and not job.dead]:
            collapses.append(f"- **Reward std collapse:** `{label}`: {_collapse_text(collapsed)}.")
    return [*lines, *_kl_lines(drifting, sweep), *collapses]


def _kl_lines(drifting: list[tuple[str, list[JobRecord]]], sweep: Sweep) -> list[str]:
    """A line per drifting configuration, or one summary line when most of a big sweep drifts."""
    if len(drifting) <= MAX_LISTED:
        return [f"- **KL excursion:** `{label}`: {_kl_text(jobs)}." for label, jobs in drifting]
    jobs = [job for _, group in drifting for job in group]
    mildest_label, mildest = min(drifting, key=lambda lj: max(job.value("max_kl") or 0.0 for job in lj[1]))
    return [
        f"- **KL excursion** in {len(drifting)} of {len(sweep.configs())} configurations: {_kl_text(jobs)}; "
        f"the mildest is `{mildest_label}` ({HIGHEST_KL} {max(job.value('max_kl') or 0.0 for job in mildest):.3f})."
    ]


def _kl_text(jobs: list[JobRecord]) -> str:
    steps = _span([job.kl_steps for job in jobs], "{:.0f}")
    threshold = _span([job.kl_threshold for job in jobs], "{:g}")
    max_kl = max(job.value("max_kl") or 0.0 for job in jobs)
    return f"{steps} steps above {threshold} ({HIGHEST_KL} {max_kl:.3f}) in {jobs_text(jobs)}"


def _collapse_text(jobs: list[JobRecord]) -> str:
    std, floor = (
        _span([job.value("final_reward_std") for job in jobs]),
        _span([job.min_reward_std for job in jobs], "{:g}"),
    )
    final, peak = _span([job.value("final_reward") for job in jobs]), _span([job.value("peak_reward") for job in jobs])
    return (
        f"final reward std {std} < {floor} while the final reward {final} is below its peak {peak}, "
        f"in {jobs_text(jobs)}: homogeneous generations before success"
    )


def _span(values: list[Any], spec: str = "{:.3f}") -> str:
    """One number, or the range of several ("0.200–0.300"), so a line covers all seeds of a configuration."""
    low, high = spec.format(min(values)), spec.format(max(values))
    return low if low == high else f"{low}–{high}"


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
    out_dir = Path(out_dir) if out_dir is not None else report_dir(sweep.path)
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = _notes(sweep)
    images = _draw(sweep, out_dir, notes) if plots else []
    decision = seed_verdict.sweep_decision(sweep)
    write_csv(sweep, out_dir / REPORT_CSV, decision)
    if decision is not None:
        seed_verdict.write_intervals_csv(decision, out_dir / INTERVALS_CSV)
    report = out_dir / REPORT_MD
    report.write_text(markdown(sweep, images, notes, decision), encoding="utf-8")
    return report


def console_summary(report: Path) -> str:
    """What the console shows of a written report: its header line and verdict (the tables and plots stay in
    the file), printed by the report command and at the end of a sweep."""
    return report.read_text(encoding="utf-8").split("\n## Results")[0].rstrip()


def write_csv(sweep: Sweep, path: Path, decision: Decision | None = None) -> None:
    """One row per job, ranked (by configuration when seeds repeat); raw numbers, empty cells where a job has no
    value."""
    keys = _result_keys(sweep)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["job", *sweep.swept, "status", *keys, "kl_threshold", "error"])
        for job in seed_verdict.job_order(sweep, decision):
            swept = [format_value(job.overrides.get(k, DEFAULT_VALUE)) for k in sweep.swept]
            results = [job.stats[k] if job.value(k) is not None else "" for k in keys]
            writer.writerow([job.name, *swept, job.status, *results, job.kl_threshold, job.error or ""])


def markdown(sweep: Sweep, images: list[tuple[str, str]], notes: list[str], decision: Decision | None = None) -> str:
    """report.md: header line, verdict, configurations over seeds, results table, grid of the objective, plots,
    notes."""
    counts = ", ".join(f"{n} {status}" for status, n in Counter(job.status for job in sweep.jobs).items())
    order = "higher" if sweep.maximize else "lower"
    swept = ", ".join(f"`{k}`" for k in sweep.swept) or "nothing (a single configuration)"
    lines = [
        f"# {'Sweep' if len(sweep.jobs) > 1 else 'Run'} report: {sweep.path}",
        "",
        f"{len(sweep.jobs)} job(s): {counts}. Swept: {swept}. Ranked by `{sweep.objective}` ({order} is better)"
        + (f", {sweep.basis}." if sweep.basis else "."),
        "",
        "## Verdict",
        "",
        *verdict(sweep, decision),
        *seed_verdict.intervals_section(sweep, decision),
        "",
        "## Results",
        "",
        *_results_table(sweep, decision),
        *_grid_section(sweep),
        *halving_section(sweep.path),
    ]
    if images:
        lines += ["", "## Plots", *(f"\n![{title}]({name})" for title, name in images)]
    if notes:
        lines += ["", "## Notes", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines).rstrip() + "\n"


def _results_table(sweep: Sweep, decision: Decision | None = None) -> list[str]:
    columns = _result_columns(sweep)
    thresholds = {job.kl_threshold for job in sweep.jobs}
    headers = ["job", *sweep.swept, "status", *(h for _, h, _ in columns), "error"]
    if len(thresholds) == 1:
        (threshold,) = thresholds
        headers = [h.replace("threshold", f"{threshold:g}") for h in headers]
    lines = [md_row(headers), md_row(["---"] * len(headers))]
    for job in seed_verdict.job_order(sweep, decision):
        swept = [format_value(job.overrides.get(k, DEFAULT_VALUE)) for k in sweep.swept]
        results = [_result_cell(job, key, spec, own_threshold=len(thresholds) > 1) for key, _, spec in columns]
        error = (job.error or "")[:TABLE_ERROR_CHARS]
        lines.append(md_row([job.name, *swept, job.status, *results, error]))
    return lines


def _result_cell(job: JobRecord, key: str, spec: str, own_threshold: bool) -> str:
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
    return ["", f"## {title}", "", md_row(header), md_row(["---"] * len(header)), *map(md_row, rows)]


def _draw(sweep: Sweep, out_dir: Path, notes: list[str]) -> list[tuple[str, str]]:
    """The figures, when matplotlib is there; (title, file name) of those written."""
    try:
        from grpo_exp.report.plots import draw_figures
    except ImportError as exc:
        notes.append(f"plots skipped: {exc} (pip install matplotlib)")
        return []
    return draw_figures(sweep, out_dir, notes)


def _notes(sweep: Sweep) -> list[str]:
    """What was missing or damaged, per job, and metrics that only some jobs logged."""
    notes = [f"job {job.name}: {note}" for job in sweep.jobs for note in job.notes]
    notes += [  # monitor.on_collapse=rollback: each rollback a job took (summary.json "rollbacks")
        f"job {job.name}: rolled back at step {r['from_step']} to step {r['to_step']} ({r['cause']}; {r['change']})"
        for job in sweep.jobs
        for r in job.stats.get("rollbacks") or []
    ]
    logged = [job for job in sweep.jobs if job.rows]
    for key in WATCHED_METRICS:
        missing = [job for job in logged if not job.series(key)[0]]
        if missing and len(missing) < len(logged):
            hint = " (TRL logs no KL when grpo.beta=0)" if key == "kl" else ""
            notes.append(f"`{key}` was not logged by {jobs_text(missing)}{hint}")
    return notes


def _result_columns(sweep: Sweep) -> list[tuple[str, str, str]]:
    """(key, header, format) of the table's result columns: the fixed ones a job filled, an environment's episode
    columns before the steps and wall time, and the objective at the end when it is none of those."""
    filled = {key for key in OPTIONAL_COLUMNS if any(job.value(key) is not None for job in sweep.jobs)}
    fixed = [column for column in RESULT_COLUMNS if column[0] in filled or column[0] not in OPTIONAL_COLUMNS]
    split = [key for key, _, _ in fixed].index("steps")  # what the jobs did, then how long they ran
    columns = [*fixed[:split], *episode_columns(sweep.jobs), *fixed[split:]]
    known = any(key == sweep.objective for key, _, _ in columns)
    return columns if known else [*columns, (sweep.objective, sweep.objective, "{:.4g}")]


def _result_keys(sweep: Sweep) -> list[str]:
    return [key for key, _, _ in _result_columns(sweep)]


def _fmt(value: float | None, spec: str) -> str:
    return NONE_CELL if value is None else spec.format(value)


def _cell_md(cell: Cell | None) -> str:
    if cell is None or cell.mean is None:
        return NONE_CELL
    spread = f" ± {cell.std:.3f}" if cell.std is not None else ""
    return f"{cell.mean:.3f}{spread} (n={cell.n})"


# ---------------------------------------------------------------------------------------- command


def main(argv: list[str] | None = None) -> int:
    """``python -m grpo_exp.report SWEEP_DIR``; returns 2 (with one line on stderr) when there is nothing to report."""
    parser = argparse.ArgumentParser(prog="python -m grpo_exp.report", description=__doc__.split("\n\n")[0])
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
    parser.add_argument(
        "--log-table",
        action="store_true",
        help="also log the interval table to the trackers the jobs used (W&B, offline too; trackio)",
    )
    args = parser.parse_args(argv)
    try:
        report = write_report(args.sweep_dir, args.out, args.objective, args.maximize, not args.no_plots)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOTHING_TO_REPORT
    print(console_summary(report))
    print(f"\nreport: {report}")
    if args.log_table:
        from grpo_exp.report.trackers import log_intervals

        for line in log_intervals(args.sweep_dir, args.objective, args.maximize) or [
            "no tracker: the jobs logged to neither W&B nor trackio"
        ]:
            print(f"intervals: {line}")
    return 0
