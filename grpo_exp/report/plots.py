"""The sweep report's figures, as PNG files: reward and KL curves, objective heatmap or bars.

``draw_figures`` picks the figures a sweep's data allows; the functions below it take plain data
(labels, steps, values, cells). Uses matplotlib's object API (``Figure``, rendered by Agg), not
pyplot: no global backend switch and no figures left open in the caller's process (a Hydra
callback). Only ``grpo_exp.report.compare`` imports this module, and only when it draws.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from grpo_exp.report.jobs import JobRecord
from grpo_exp.report.sweep import Cell, Sweep, format_value, grid_axes, group_jobs, is_grid, objective_grid
from grpo_exp.tracking.metrics import EVAL_PASS1

log = logging.getLogger(__name__)

CURVE_SIZE = (10.0, 5.5)  # inches; at DPI this is 1200 x 660 pixels before the legend
HEATMAP_SIZE = (7.5, 5.5)
BAR_SIZE = (8.0, 5.0)
DPI = 120
# Per-step rewards of a dozen completions are noisy: curves show a trailing mean over this share of steps.
SMOOTH_FRACTION = 0.05
LINE_STYLES = ("-", "--", ":", "-.")  # repeats of one configuration (seeds) share a colour
MAX_LEGEND_ROWS = 16  # beyond this the outside legend gets a second column
THRESHOLD_STYLE = {"color": "black", "linestyle": (0, (6, 3)), "linewidth": 1.4}
REWARD_TITLE = "Mean reward per step"
KL_TITLE = "KL divergence from the reference model per step"
TASK_TITLE = "Held-out task accuracy (pass@1) per evaluation"
LEVEL_TITLE = "Curriculum level of each step's problems"
# What the task reward logs per step in a curriculum run (grpo_exp.tasks.curriculum.LEVEL_METRIC, which the
# report's layer may not import; tests/test_compare.py holds them equal).
LEVEL_METRIC = "curriculum/level"
# Cell text turns white on the dark half of the colour map.
DARK_SHARE = 0.5
MISSING_CELL = "no result"
LOG_SPAN = 10  # a scatter's x axis turns logarithmic when its values span this factor (learning rates)
BAR_HEADROOM = 0.25  # share of the y range kept free above the bars for their labels


@dataclass(frozen=True)
class Series:
    """One job's curve; ``group`` is its configuration, which picks the colour."""

    label: str
    group: int
    steps: Sequence[float]
    values: Sequence[float]


def draw_figures(sweep: Sweep, out_dir: Path, notes: list[str]) -> list[tuple[str, str]]:
    """Write every figure the data allows; (title, file name) of those written.

    A figure that fails becomes a note: it must not cost the report its table and verdict.
    """
    images = []
    for title, name, draw in _figures(sweep):
        try:
            draw(out_dir / name)
        except Exception as exc:
            log.warning("plot %s failed: %s", name, exc)
            notes.append(f"plot {name} failed: {type(exc).__name__}: {exc}")
        else:
            images.append((title, name))
    return images


def _figures(sweep: Sweep) -> list[tuple[str, str, Callable[[Path], Path]]]:
    figures = []
    if rewards := _series(sweep, "reward"):
        draw = functools.partial(curves, rewards, title=REWARD_TITLE, ylabel="mean reward", smooth=True)
        figures.append((REWARD_TITLE, "reward_curves.png", draw))
    if kls := _series(sweep, "kl"):
        thresholds = sorted({job.kl_threshold for job in sweep.jobs if job.series("kl")[0]})
        draw = functools.partial(curves, kls, title=KL_TITLE, ylabel="KL", thresholds=thresholds)
        figures.append((KL_TITLE, "kl_curves.png", draw))
    if accuracies := _series(sweep, EVAL_PASS1):  # a verifiable task: the metric the reward cannot inflate
        draw = functools.partial(curves, accuracies, title=TASK_TITLE, ylabel="held-out pass@1", markers=True)
        figures.append((TASK_TITLE, "task_accuracy_curves.png", draw))
    if levels := _series(sweep, LEVEL_METRIC):
        draw = functools.partial(curves, levels, title=LEVEL_TITLE, ylabel="level", integer_y=True)
        figures.append((LEVEL_TITLE, "curriculum_levels.png", draw))
    axes = grid_axes(sweep)
    if axes and not is_grid(sweep, axes) and _numeric(sweep, axes[-1]):
        figures.append(_scatter_figure(sweep, axes[-1], axes[0] if len(axes) == 2 else None))
    elif len(axes) == 2:
        figures.append(_heatmap_figure(sweep, *axes))
    elif axes:
        figures.append(_bar_figure(sweep, axes[0]))
    return figures


def _series(sweep: Sweep, key: str) -> list[Series]:
    """One curve per job that logged ``key``, labelled by swept values; a configuration's seeds share a
    colour and sit together in the legend, the best job's configuration first."""
    config_of = {id(job): i for i, group in enumerate(sweep.configs()) for job in group.jobs}
    series = []
    for job in sorted(sweep.jobs, key=lambda job: config_of[id(job)]):
        steps, values = job.series(key)
        if steps:
            series.append(Series(_label(sweep, job), config_of[id(job)], steps, values))
    return series


def _label(sweep: Sweep, job: JobRecord) -> str:
    label = sweep.label(job, short=True) or str(job.stats.get("name") or job.name)
    return label if job.finished else f"{label} ({job.status})"


def _heatmap_figure(sweep: Sweep, x_key: str, y_key: str) -> tuple[str, str, Callable[[Path], Path]]:
    xs, ys, cells = objective_grid(sweep, x_key, y_key)
    title = f"{sweep.objective} by group size × learning rate (mean ± std over {sweep.repeats})"
    draw = functools.partial(
        heatmap,
        [format_value(x) for x in xs],
        [format_value(y) for y in ys],
        cells,
        title=title,
        xlabel=f"group size ({x_key})",
        ylabel=f"learning rate ({y_key})",
        value_label=sweep.objective,
    )
    return title, f"{sweep.objective}_heatmap.png", draw


def _bar_figure(sweep: Sweep, key: str) -> tuple[str, str, Callable[[Path], Path]]:
    xs, _, cells = objective_grid(sweep, key)
    jobs = {format_value(g.values[0]): g.jobs for g in group_jobs(sweep.jobs, [key])}
    points = [
        [v for job in jobs[format_value(x)] if job.finished and (v := job.value(sweep.objective)) is not None]
        for x in xs
    ]
    title = f"{sweep.objective} by {key} (mean ± std over {sweep.repeats})"
    draw = functools.partial(
        bars,
        [format_value(x) for x in xs],
        [cells[(i, 0)] for i in range(len(xs))],
        points,
        title=title,
        xlabel=key,
        ylabel=sweep.objective,
    )
    return title, f"{sweep.objective}_vs_{key}.png", draw


def _scatter_figure(sweep: Sweep, x_key: str, colour_key: str | None) -> tuple[str, str, Callable[[Path], Path]]:
    """A search (Optuna) tries scattered values: each completed job as a dot, coloured by the other key."""
    jobs = [job for job in sweep.jobs if job.finished and job.value(sweep.objective) is not None]
    points = [
        (float(job.overrides[x_key]), job.value(sweep.objective), sweep.label(job, [colour_key]) if colour_key else "")
        for job in jobs
    ]
    xs = [x for x, _, _ in points]
    log_x = bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= LOG_SPAN
    title = f"{sweep.objective} by {x_key}, one dot per completed job"
    draw = functools.partial(scatter, points, title=title, xlabel=x_key, ylabel=sweep.objective, log_x=log_x)
    return title, f"{sweep.objective}_vs_{x_key}.png", draw


def _numeric(sweep: Sweep, key: str) -> bool:
    values = [job.overrides.get(key) for job in sweep.jobs]
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def curves(
    series: Sequence[Series],
    out: Path,
    *,
    title: str,
    ylabel: str,
    smooth: bool = False,
    thresholds: Sequence[float] = (),
    markers: bool = False,
    integer_y: bool = False,
) -> Path:
    """All jobs' curves on one axis, legend outside the plot so it never hides a line; ``markers`` for
    sparse points (evaluations), ``integer_y`` for a count (a curriculum level)."""
    fig = Figure(figsize=CURVE_SIZE, dpi=DPI)
    ax = fig.subplots()
    window = _smoothing_window(series) if smooth else 1
    colours = _colour_map(max((s.group for s in series), default=0) + 1)
    repeats: dict[int, int] = {}
    for s in series:
        style = LINE_STYLES[repeats.get(s.group, 0) % len(LINE_STYLES)]
        repeats[s.group] = repeats.get(s.group, 0) + 1
        ax.plot(
            s.steps,
            _trailing_mean(s.values, window),
            style,
            color=colours(s.group),
            linewidth=1.6,
            label=s.label,
            marker="o" if markers else None,
        )
    for threshold in thresholds:
        ax.axhline(threshold, **THRESHOLD_STYLE, label=f"alarm threshold {threshold:g}")
    ax.set_title(title)
    ax.set_xlabel("training step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if integer_y:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel if window == 1 else f"{ylabel} (trailing mean of {window} steps)")
    ax.grid(alpha=0.3)
    if entries := len(series) + len(thresholds):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", ncols=1 + entries // MAX_LEGEND_ROWS)
    return _save(fig, out)


def heatmap(
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    cells: dict[tuple[int, int], Cell],
    out: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    value_label: str,
) -> Path:
    """A grid of the objective, each cell annotated with its mean, ± std across seeds and count."""
    grid = [[_cell_mean(cells.get((x, y))) for x in range(len(x_labels))] for y in range(len(y_labels))]
    fig = Figure(figsize=HEATMAP_SIZE, dpi=DPI)
    ax = fig.subplots()
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    low, high = image.get_clim()
    for (x, y), cell in ((key, cells.get(key)) for key in _all_cells(x_labels, y_labels)):
        dark = (
            cell is not None and cell.mean is not None and high > low and (cell.mean - low) / (high - low) < DARK_SHARE
        )
        ax.text(x, y, _cell_text(cell), ha="center", va="center", fontsize="small", color="white" if dark else "black")
    ax.set_xticks(range(len(x_labels)), labels=x_labels)
    ax.set_yticks(range(len(y_labels)), labels=y_labels)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.colorbar(image, ax=ax, label=value_label)
    return _save(fig, out)


def bars(
    labels: Sequence[str],
    cells: Sequence[Cell],
    points: Sequence[Sequence[float]],
    out: Path,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
) -> Path:
    """One bar per swept value (mean, ± std whiskers), each job's own value as a dot on it."""
    fig = Figure(figsize=BAR_SIZE, dpi=DPI)
    ax = fig.subplots()
    positions = range(len(labels))
    means = [_cell_mean(c) for c in cells]
    errors = [c.std or 0.0 for c in cells]
    ax.bar(positions, [0.0 if math.isnan(m) else m for m in means], yerr=errors, capsize=6, color="#4c72b0", alpha=0.8)
    for x, values in zip(positions, points, strict=True):
        ax.plot([x] * len(values), values, "o", color="black", markersize=4, label="job" if x == 0 else None)
    for x, cell, top in zip(positions, cells, _bar_tops(cells, points), strict=True):
        ax.annotate(_cell_text(cell), (x, top), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom")
    ax.margins(y=BAR_HEADROOM)
    ax.set_xticks(list(positions), labels=labels)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    if any(points):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return _save(fig, out)


def scatter(
    points: Sequence[tuple[float, float, str]], out: Path, *, title: str, xlabel: str, ylabel: str, log_x: bool = False
) -> Path:
    """(x, objective, colour label) dots; one colour per label, legend outside the plot."""
    fig = Figure(figsize=BAR_SIZE, dpi=DPI)
    ax = fig.subplots()
    labels = list(dict.fromkeys(label for _, _, label in points))
    colours = _colour_map(len(labels))
    for i, label in enumerate(labels):
        mine = [(x, y) for x, y, own in points if own == label]
        ax.scatter([x for x, _ in mine], [y for _, y in mine], color=colours(i), label=label or None, s=28)
    if log_x:
        ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if any(labels):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return _save(fig, out)


def _bar_tops(cells: Sequence[Cell], points: Sequence[Sequence[float]]) -> list[float]:
    """Where a bar's label goes: above its whisker and its highest dot."""
    return [
        max([0.0, *values, _cell_mean(c) + (c.std or 0.0) if c.mean is not None else 0.0])
        for c, values in zip(cells, points, strict=True)
    ]


def _save(fig: Figure, out: Path) -> Path:
    fig.savefig(out, bbox_inches="tight")
    return out


def _colour_map(groups: int):
    """Distinct colours: tab10 for up to ten configurations, tab20 beyond (cycling past twenty)."""
    cmap = matplotlib.colormaps["tab10" if groups <= 10 else "tab20"]
    return lambda group: cmap(group % cmap.N)


def _smoothing_window(series: Sequence[Series]) -> int:
    longest = max((len(s.values) for s in series), default=0)
    return max(1, round(longest * SMOOTH_FRACTION))


def _trailing_mean(values: Sequence[float], window: int) -> list[float]:
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _all_cells(x_labels: Sequence[str], y_labels: Sequence[str]) -> list[tuple[int, int]]:
    return [(x, y) for x in range(len(x_labels)) for y in range(len(y_labels))]


def _cell_mean(cell: Cell | None) -> float:
    return cell.mean if cell is not None and cell.mean is not None else math.nan


def _cell_text(cell: Cell | None) -> str:
    if cell is None or cell.mean is None:
        return MISSING_CELL
    text = f"{cell.mean:.3f}"
    if cell.std is not None:
        text += f"\n± {cell.std:.3f}"
    return text + (f"\nn={cell.n}" if cell.n > 1 else "")
