"""The sweep report, on sweep folders written by hand in Hydra's multirun layout (no training)."""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.report.compare import main, write_report
from grpo_exp.report.sweep import GROUP_SIZE_KEY, LR_KEY, MAX_GRID_VALUES, load_sweep, objective_grid
from grpo_exp.tracking.metrics import summarize, summarize_eval
from tests.conftest import ROOT

STEPS = 20
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
STABLE_KL, HIGH_KL = 0.02, 0.3
OOM = "OutOfMemoryError: CUDA out of memory"


def ramp(final: float, steps: int = STEPS, start: float = 0.1) -> list[float]:
    """Rewards rising to ``final`` over three quarters of the run, then holding there."""
    rise = steps * 3 // 4
    return [start + (final - start) * min(i, rise) / rise for i in range(1, steps + 1)]


def write_job(
    root: Path,
    name: str,
    overrides: list[str],
    rewards: list[float],
    *,
    stds: list[float] | None = None,
    kls: list[float] | None = None,
    status: str | None = "completed",
    error: str | None = None,
    kl_threshold: float = 0.1,
    config: bool = True,
    extra_config: str = "",
    torn_tail: bool = False,
    eval_rewards: dict[int, float] | None = None,
    logged: dict[str, float] | None = None,
    eval_logged: dict[int, dict[str, float]] | None = None,
) -> Path:
    """A job folder as a job leaves it; ``status=None`` leaves out summary.json (a killed job). ``logged``: more
    metrics on every training step; ``eval_logged``: more on the evaluation at each step."""
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if config:
        monitor = f"monitor:\n  kl_threshold: {kl_threshold}\n  min_reward_std: 0.05\n"
        (job / "config.yaml").write_text("seed: 0\ngrpo:\n  num_generations: 4\n" + monitor + extra_config)
    stds = stds or [0.3] * len(rewards)
    rows = []
    for i, (reward, std) in enumerate(zip(rewards, stds, strict=True), start=1):
        row = {"step": i, "reward": reward, "reward_std": std, "frac_reward_zero_std": 0.1, "loss": 0.0}
        if kls is not None:
            row["kl"] = kls[i - 1]
        rows.append(row | (logged or {}))
    evaluations = [
        {"step": k, "eval/reward": v, "eval/reward_std": 0.2} | (eval_logged or {}).get(k, {})
        for k, v in (eval_rewards or {}).items()
    ]
    lines = [json.dumps(r) for r in sorted(rows + evaluations, key=lambda r: r["step"])]
    lines += [json.dumps({"step": len(rows), "train_runtime": 9.0})] if status else []
    text = "\n".join(lines) + "\n" + ('{"step": 99, "rew' if torn_tail else "")
    (job / "metrics.jsonl").write_text(text)
    if status:
        summary = {"name": ",".join(overrides), "status": status, "wall_time_s": 12.5, "startup_s": 2.0}
        summary |= summarize(rows, kl_threshold) | summarize_eval(evaluations) | {"alerts": [], "overrides": {}}
        if error:
            summary["error"] = error
        (job / "summary.json").write_text(json.dumps(summary))
    if error:
        (job / "error.txt").write_text(f"Traceback (most recent call last):\n  ...\n{error}\n")
    return job


def collapsing(final: float) -> tuple[list[float], list[float]]:
    """Reward peaks at 0.6 mid-run, then every completion scores ``final`` alike (std 0)."""
    rewards = [0.6 * min(i, 10) / 10 if i <= 10 else final for i in range(1, STEPS + 1)]
    return rewards, [0.3] * 12 + [0.0] * (STEPS - 12)


def grid_sweep(root: Path) -> Path:
    """num_generations 4,8 × lr 1e-3,3e-4 × seeds 0,1 (+ a failed and a killed seed 2), like `run.py -m`.

    Means per configuration: (4, 1e-3) 0.25 collapsing; (4, 3e-4) 0.55; (8, 1e-3) 0.70 with KL above
    0.1 in its last 5 steps; (8, 3e-4) 0.825, the best, although job 5 alone scores highest (0.95).
    """
    stable_kl = [STABLE_KL] * STEPS
    high_kl = [STABLE_KL] * (STEPS - 5) + [HIGH_KL] * 5
    plan = [
        ((4, "1e-3", 0), collapsing(0.2), stable_kl, {}),
        ((4, "1e-3", 1), collapsing(0.3), stable_kl, {}),
        ((4, "3e-4", 0), (ramp(0.5), None), stable_kl, {}),
        ((4, "3e-4", 1), (ramp(0.6), None), stable_kl, {}),
        ((4, "3e-4", 2), (ramp(0.2, 3), None), stable_kl[:3], {"status": "failed", "error": OOM}),
        ((8, "1e-3", 0), (ramp(0.95), None), high_kl, {}),
        ((8, "1e-3", 1), (ramp(0.45), None), high_kl, {}),
        ((8, "3e-4", 0), (ramp(0.8), None), stable_kl, {}),
        ((8, "3e-4", 1), (ramp(0.85), None), stable_kl, {}),
        ((8, "3e-4", 2), (ramp(0.99, 8), None), stable_kl[:8], {"status": None, "torn_tail": True}),
    ]
    sweep = root / "multirun" / "2026-11-29" / "18-00-00"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra:\n  mode: MULTIRUN\n")
    for num, ((group, lr, seed), (rewards, stds), kls, extra) in enumerate(plan):
        overrides = [f"grpo.num_generations={group}", f"optimizer.lr={lr}", f"seed={seed}", "logger=none"]
        write_job(sweep, str(num), overrides, rewards, stds=stds, kls=kls, **extra)
    return sweep


@pytest.fixture(scope="module")
def grid_report(tmp_path_factory) -> Path:
    sweep = grid_sweep(tmp_path_factory.mktemp("outputs"))
    report = write_report(sweep)
    assert report == sweep / "report" / "report.md"
    return report


def read_csv(report: Path) -> list[dict[str, str]]:
    with (report.parent / "report.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def section(report: Path, title: str) -> str:
    return report.read_text().split(f"## {title}\n")[1].split("\n## ")[0]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_table_has_one_row_per_job_with_swept_columns_best_first(grid_report):
    rows = read_csv(grid_report)
    assert len(rows) == 10
    assert list(rows[0])[:5] == ["job", "grpo.num_generations", "optimizer.lr", "seed", "status"]
    assert "logger" not in rows[0]  # the same in every job: not swept
    for column in ("final_reward", "peak_reward", "final_reward_std", "mean_kl", "max_kl", "wall_time_s", "error"):
        assert column in rows[0]
    # seeds repeat: a configuration's jobs together, configurations in the verdict's order, each one's best first
    assert [r["job"] for r in rows] == ["8", "7", "9", "5", "6", "3", "2", "4", "1", "0"]
    best = rows[0]
    assert (best["grpo.num_generations"], best["optimizer.lr"], best["seed"]) == ("8", "0.0003", "1")
    assert float(best["final_reward"]) == pytest.approx(0.85)
    assert rows[2]["status"] == "incomplete"  # after its configuration's completed jobs, though it scored 0.99
    assert int(rows[3]["steps_above_kl_threshold"]) == 5


def test_markdown_table_lists_every_job_in_rank_order(grid_report):
    table = section(grid_report, "Results").strip().splitlines()
    assert table[0].startswith("| job | grpo.num_generations | optimizer.lr | seed | status |")
    assert "steps KL > 0.1" in table[0]
    jobs = [line.split("|")[1].strip() for line in table[2:]]
    assert jobs == [r["job"] for r in read_csv(grid_report)]


def test_plots_are_valid_pngs_and_linked_from_the_report(grid_report):
    text = grid_report.read_text()
    for name in ("reward_curves.png", "kl_curves.png", "final_reward_heatmap.png"):
        path = grid_report.parent / name
        width, height = png_size(path)
        assert 500 < width < 3000 and 400 < height < 2000, (name, width, height)
        assert path.stat().st_size > 10_000
        assert f"]({name})" in text


def test_heatmap_cell_is_the_mean_over_completed_seeds(grid_report):
    sweep = load_sweep(grid_report.parent.parent)
    xs, ys, cells = objective_grid(sweep, GROUP_SIZE_KEY, LR_KEY)
    assert xs == [4, 8] and ys == [pytest.approx(3e-4), pytest.approx(1e-3)]
    cell = cells[(xs.index(8), 0)]  # group size 8, lr 3e-4: seeds 0 and 1; seed 2 was killed
    assert cell.n == 2
    assert cell.mean == pytest.approx(statistics.fmean([0.8, 0.85]))
    assert cell.std == pytest.approx(statistics.stdev([0.8, 0.85]))
    assert cells[(0, 0)].n == 2  # group size 4, lr 3e-4: the failed seed 2 is left out
    grid = section(grid_report, "`final_reward` by `grpo.num_generations` × `optimizer.lr` (mean ± std over seeds)")
    assert "| 0.0003 | 0.550 ± 0.071 (n=2) | 0.825 ± 0.035 (n=2) |" in grid


def test_verdict_with_two_seeds_each_names_the_highest_but_asks_for_more_seeds(grid_report):
    verdict = section(grid_report, "Verdict").strip().splitlines()[0]
    assert verdict.startswith("- **Not enough seeds to tell:** all 4 configurations ran fewer than 4 seeds (2 seeds")
    highest = "`grpo.num_generations=8, optimizer.lr=0.0003` (final_reward mean 0.825 [0.800, 0.850] over 2 seeds"
    assert f"The highest is {highest}" in verdict
    assert "its interval overlaps `grpo.num_generations=8, optimizer.lr=0.001`'s (mean 0.700 [0.450, 0.950]" in verdict
    assert re.search(r"About \d+ seeds per configuration would settle it\.", verdict)


def test_verdict_flags_kl_excursion_and_reward_std_collapse(grid_report):
    lines = section(grid_report, "Verdict").splitlines()
    stability = next(line for line in lines if line.startswith("- **Stability**"))
    order = [stability.index(f"`grpo.num_generations={g}, optimizer.lr={lr}`") for g, lr in STABILITY_ORDER]
    assert order == sorted(order)  # steady ones first, the KL excursion next, the collapse last
    assert "mean max KL 0.300 over 2 jobs, 15.0× the sweep's median" in stability
    assert "drop 0.350, std fall 0.300" in stability
    kl = next(line for line in lines if line.startswith("- **KL excursion:**"))
    assert "`grpo.num_generations=8, optimizer.lr=0.001`" in kl
    assert "5 steps above 0.1 (highest KL 0.300) in jobs 5, 6" in kl
    collapse = next(line for line in lines if line.startswith("- **Reward std collapse:**"))
    assert "`grpo.num_generations=4, optimizer.lr=0.001`: final reward std 0.000 < 0.05 while" in collapse
    assert "final reward 0.200–0.300 is below its peak 0.600, in jobs 0, 1" in collapse


# The grid's configurations, most stable first: two steady ones, then one whose KL is 15x the others', then
# the one that fell from its peak with a collapsed reward std.
STABILITY_ORDER = [(8, "0.0003"), (4, "0.0003"), (8, "0.001"), (4, "0.001")]


def test_failed_job_is_listed_with_its_error(grid_report):
    verdict = section(grid_report, "Verdict")
    assert f"- **Failed:** job 4 (`grpo.num_generations=4, optimizer.lr=0.0003, seed=2`): {OOM}" in verdict
    failed = next(r for r in read_csv(grid_report) if r["job"] == "4")
    assert (failed["status"], failed["error"]) == ("failed", OOM)


def test_killed_job_is_reported_incomplete_from_its_metrics(grid_report):
    verdict = section(grid_report, "Verdict")
    assert "- **Incomplete** (no summary.json: killed, or still running): job 9 (" in verdict
    assert "8 steps logged" in verdict
    killed = next(r for r in read_csv(grid_report) if r["job"] == "9")
    assert killed["status"] == "incomplete" and int(killed["steps"]) == 8
    assert float(killed["final_reward"]) == pytest.approx(0.99)
    assert "job 9: 1 torn line(s) in metrics.jsonl skipped" in section(grid_report, "Notes")


def test_single_run_folder_is_reported_as_one_configuration(tmp_path):
    run = write_job(tmp_path, "18-12-49", ["grpo.max_steps=20"], ramp(0.7), kls=[0.05] * STEPS)
    report = write_report(run)
    rows = read_csv(report)
    assert [(r["job"], r["status"]) for r in rows] == [("18-12-49", "completed")]
    verdict = section(report, "Verdict")
    assert "**Only configuration:** `grpo.max_steps=20` (final_reward 0.700, one seed, job 18-12-49)." in verdict
    assert "- **Stability**" in verdict and "1. `grpo.max_steps=20` (drop 0.000, std fall 0.000" in verdict
    assert sorted(p.name for p in report.parent.glob("*.png")) == ["kl_curves.png", "reward_curves.png"]


def test_one_swept_key_gets_a_bar_plot_not_a_heatmap(tmp_path):
    for num, (lr, seed, final) in enumerate([("1e-3", 0, 0.4), ("1e-3", 1, 0.6), ("3e-4", 0, 0.7), ("3e-4", 1, 0.9)]):
        write_job(tmp_path, str(num), [f"optimizer.lr={lr}", f"seed={seed}"], ramp(final), kls=[0.01] * STEPS)
    report = write_report(tmp_path)
    png_size(report.parent / "final_reward_vs_optimizer.lr.png")
    assert not list(report.parent.glob("*heatmap*"))
    assert "| 0.0003 | 0.800 ± 0.141 (n=2) |" in report.read_text()
    assert "The highest is `optimizer.lr=0.0003` (final_reward mean 0.800 [0.700, 0.900]" in section(report, "Verdict")


def test_mixed_and_damaged_job_folders_are_reported_not_fatal(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.5), kls=[0.01] * STEPS)
    write_job(tmp_path, "1", ["optimizer.lr=2e-3"], ramp(0.6))  # grpo.beta=0: no KL logged
    write_job(tmp_path, "2", ["optimizer.lr=3e-3"], ramp(0.4), kls=[0.01] * STEPS, config=False)
    write_job(tmp_path, "3", ["optimizer.lr=4e-3"], ramp(0.3), kls=[0.01] * STEPS)
    (tmp_path / "3" / "summary.json").write_text('{"name": "optimizer.lr=4e-3", "sta')  # torn
    (tmp_path / "4" / ".hydra").mkdir(parents=True)  # killed before its first step
    (tmp_path / "4" / ".hydra" / "overrides.yaml").write_text("- optimizer.lr=5e-3\n")
    (tmp_path / "4" / "config.yaml").write_text("monitor:\n  kl_threshold: 0.1\n")
    write_job(
        tmp_path, "5", ["optimizer.lr=6e-3"], [0.1, 0.2, 0.3], kls=[0.15, 0.25, 0.3], status=None, kl_threshold=0.2
    )
    old = write_job(tmp_path, "6", ["optimizer.lr=7e-3"], ramp(0.2), kls=[0.01] * STEPS)
    (old / "summary.json").write_text(json.dumps({"status": "completed", "final_reward": 0.2}))  # older, fewer keys

    report = write_report(tmp_path)
    rows = {r["job"]: r for r in read_csv(report)}
    assert [r["status"] for r in read_csv(report)] == ["completed"] * 4 + ["incomplete"] * 3
    assert rows["1"]["mean_kl"] == "" and rows["1"]["steps_above_kl_threshold"] == ""
    assert rows["5"]["steps_above_kl_threshold"] == "2"  # its own config's threshold, 0.2
    assert float(rows["6"]["peak_reward"]) == pytest.approx(0.2)  # filled in from metrics.jsonl
    assert (rows["4"]["steps"], rows["4"]["final_reward"]) == ("0", "")
    notes = section(report, "Notes")
    assert "job 2: no readable config.yaml" in notes
    assert "job 3: summary.json is unreadable" in notes
    assert "`kl` was not logged by job 1" in notes
    verdict = section(report, "Verdict")
    assert "job 1 logged no KL" in verdict
    stable = next(line for line in verdict.splitlines() if line.startswith("- **Stability**"))
    assert "`optimizer.lr=0.002`" in stable and "0.004" not in stable  # not judged on a partial run alone
    assert "- **KL excursion:** `optimizer.lr=0.006`: 2 steps above 0.2 (highest KL 0.300) in job 5." in verdict
    assert "| 5 | 0.006 | incomplete |" in report.read_text() and "| 2 (> 0.2) |" in report.read_text()
    png_size(report.parent / "kl_curves.png")


def test_objective_and_direction_change_the_ranking(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.9), kls=[0.4] * STEPS)
    write_job(tmp_path, "1", ["optimizer.lr=1e-4"], ramp(0.5), kls=[0.05] * STEPS)
    ranking = lambda: [r["job"] for r in read_csv(tmp_path / "report" / "report.md")]  # noqa: E731
    assert main([str(tmp_path), "--no-plots"]) == 0
    assert ranking() == ["0", "1"]
    assert main([str(tmp_path), "--objective", "max_kl", "--no-plots"]) == 0  # KL: lower is better by default
    assert ranking() == ["1", "0"]
    assert main([str(tmp_path), "--objective", "max_kl", "--maximize", "--no-plots"]) == 0
    assert ranking() == ["0", "1"]
    assert not list((tmp_path / "report").glob("*.png"))
    assert main([str(tmp_path), "--objective", "no_such_metric", "--no-plots"]) == 2


def test_default_objective_is_the_one_the_jobs_returned_to_the_sweeper(tmp_path):
    write_job(
        tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.9)[:10] + [0.2] * 10, extra_config="objective: peak_reward\n"
    )
    write_job(tmp_path, "1", ["optimizer.lr=1e-4"], ramp(0.5), extra_config="objective: peak_reward\n")
    report = write_report(tmp_path, plots=False)
    assert "Ranked by `peak_reward` (higher is better)" in report.read_text()
    assert [r["job"] for r in read_csv(report)] == ["0", "1"]


def test_search_sweep_gets_a_scatter_plot_in_the_sweepers_direction(tmp_path):
    """An Optuna-like search: continuous learning rates, a few group sizes, direction from multirun.yaml."""
    (tmp_path / "multirun.yaml").write_text("hydra:\n  sweeper:\n    direction: minimize\n")
    for num in range(MAX_GRID_VALUES + 2):
        overrides = [f"grpo.num_generations={(4, 6, 8)[num % 3]}", f"optimizer.lr={1e-5 * (1 + num / 3):.3g}"]
        write_job(tmp_path, str(num), overrides, ramp(0.3 + num / 30), kls=[0.01] * STEPS)
    report = write_report(tmp_path)
    assert "Ranked by `final_reward` (lower is better)" in report.read_text()
    assert read_csv(report)[0]["job"] == "0"
    png_size(report.parent / "final_reward_vs_optimizer.lr.png")
    assert not list(report.parent.glob("*heatmap*"))
    assert "## `final_reward` by" not in report.read_text()  # no grid table for scattered values
    assert load_sweep(tmp_path, "peak_reward").maximize  # the sweeper's direction was for its own objective


def test_cli_exits_2_with_one_line_when_there_is_nothing_to_report(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no job folders in") and err.count("\n") == 1
    assert main([str(tmp_path / "missing")]) == 2
    grid_sweep(tmp_path)  # a folder of sweeps, not of jobs: the error points at one
    assert main([str(tmp_path / "multirun" / "2026-11-29")]) == 2
    assert "18-00-00" in capsys.readouterr().err
    result = subprocess.run(
        [sys.executable, "-m", "grpo_exp.report", str(tmp_path / "missing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stderr.startswith("error:")


def test_report_without_matplotlib_still_has_table_and_verdict(tmp_path, monkeypatch):
    write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.5), kls=[0.01] * STEPS)
    write_job(tmp_path, "1", ["optimizer.lr=1e-4"], ramp(0.4), kls=[0.01] * STEPS)
    monkeypatch.setitem(sys.modules, "grpo_exp.report.plots", None)  # import fails as if matplotlib were missing
    report = write_report(tmp_path)
    assert [r["job"] for r in read_csv(report)] == ["0", "1"]
    assert "plots skipped" in section(report, "Notes") and "## Plots" not in report.read_text()
    assert not list(report.parent.glob("*.png"))


def test_importing_compare_loads_neither_matplotlib_nor_pandas():
    code = "import sys, grpo_exp.report.compare; print(sorted({'matplotlib', 'pandas'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


def test_a_sweep_that_drifts_everywhere_gets_one_kl_line_naming_the_mildest(tmp_path):
    for n, lr in enumerate((1e-5, 2e-5, 3e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3)):
        kls = [HIGH_KL * (1 + n)] * STEPS
        write_job(tmp_path, str(n), [f"optimizer.lr={lr}"], ramp(0.5 + n / 100), kls=kls)
    report = write_report(tmp_path, plots=False).read_text()
    kl_lines = [line for line in report.splitlines() if "KL excursion" in line]
    assert len(kl_lines) == 1 and "in 8 of 8 configurations" in kl_lines[0]
    assert "the mildest is `optimizer.lr=1e-05` (highest KL 0.300)" in kl_lines[0]


def test_a_sweep_with_held_out_prompts_ranks_on_them_and_says_so(tmp_path):
    """Training reward favours job 0; the held-out prompts favour job 1, and the report follows them."""
    write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.9), kls=[0.05] * STEPS, eval_rewards={0: 0.1, STEPS: 0.3})
    write_job(tmp_path, "1", ["optimizer.lr=1e-4"], ramp(0.6), kls=[0.05] * STEPS, eval_rewards={0: 0.1, STEPS: 0.5})
    report = write_report(tmp_path, plots=False)
    text = report.read_text()
    assert "Ranked by `final_eval_reward` (higher is better), the held-out reward." in text
    assert "**One seed per configuration:** `optimizer.lr=0.0001` scored highest (final_eval_reward 0.500" in text
    assert "can't tell noise from difference. Run each on at least 4 seeds (`seed=0,1,2,3`)" in text
    rows = read_csv(report)
    assert [r["job"] for r in rows] == ["1", "0"]
    assert [float(r["final_eval_reward"]) for r in rows] == [0.5, 0.3] and rows[1]["final_reward"] == "0.9"
    assert "| final eval reward | best eval reward | final reward |" in text
    training = write_report(tmp_path, objective="final_reward", plots=False).read_text()
    assert "the training reward; `--objective final_eval_reward` ranks on held-out prompts" in training


def test_without_held_out_prompts_the_report_says_it_ranks_on_training_reward(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.9), kls=[0.05] * STEPS)
    text = write_report(tmp_path, plots=False).read_text()
    assert "Ranked by `final_reward` (higher is better), the training reward: no job evaluated held-out" in text
    assert "final eval reward" not in text  # no empty held-out columns


def test_a_flat_zero_run_is_dead_not_stable(tmp_path):
    """The new user's sweep: two runs stayed at reward 0 with zero spread; every run passed KL 0.1."""
    flat = dict(stds=[0.0] * STEPS, kls=[0.01] * STEPS)
    write_job(tmp_path, "0", ["optimizer.lr=1e-6"], [0.0] * STEPS, **flat)
    write_job(tmp_path, "1", ["optimizer.lr=1e-5"], [0.0] * STEPS, **flat)
    write_job(tmp_path, "2", ["optimizer.lr=3e-4"], ramp(0.9), kls=[0.2] * STEPS)
    write_job(tmp_path, "3", ["optimizer.lr=1e-3"], ramp(0.9)[:12] + [0.5] * 8, kls=[0.4] * STEPS)
    verdict = section(write_report(tmp_path, plots=False), "Verdict")
    stability = next(line for line in verdict.splitlines() if line.startswith("- **Stability**"))
    assert "1e-06" not in stability and "1e-05" not in stability
    assert stability.index("`optimizer.lr=0.0003`") < stability.index("`optimizer.lr=0.001`")
    dead = [line for line in verdict.splitlines() if line.startswith("- **Dead:**")]
    assert len(dead) == 2 and all("the reward stayed at 0.000" in line and "not stable" in line for line in dead)
    assert "`optimizer.lr=1e-06`" in dead[0] + dead[1] and "`optimizer.lr=1e-05`" in dead[0] + dead[1]
    assert "- **KL excursion** in 2 of 4 configurations" in verdict or verdict.count("- **KL excursion:**") == 2
    assert "Stability: #1 of 2" in verdict  # the best by reward is also the most stable of the live ones


def test_a_flat_run_that_is_best_is_called_dead(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=1e-6"], [0.2] * STEPS, stds=[0.0] * STEPS, kls=[0.01] * STEPS)
    write_job(tmp_path, "1", ["optimizer.lr=1e-3"], ramp(0.15), kls=[0.01] * STEPS)
    verdict = section(write_report(tmp_path, plots=False), "Verdict")
    assert "`optimizer.lr=1e-06` scored highest (final_reward 0.200, job 0)" in verdict
    assert "to tell. Its reward never varied: it is dead" in verdict


def test_task_accuracy_and_curriculum_level_get_their_own_figures(tmp_path):
    from grpo_exp.report.plots import LEVEL_METRIC, LEVEL_TITLE, TASK_TITLE
    from grpo_exp.tasks.curriculum import LEVEL_METRIC as LOGGED

    assert LEVEL_METRIC == LOGGED  # the key the task reward logs is the one the report plots
    for num, lr in enumerate(("1e-4", "3e-4")):
        job = write_job(tmp_path, str(num), [f"optimizer.lr={lr}"], ramp(0.6), kls=[0.01] * STEPS)
        rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
        for row in rows:  # the task reward logs the level of each step's problems with its reward
            row |= {LEVEL_METRIC: int(row["step"] >= 12)} if "reward" in row else {}
        rows += [{"step": s, "eval/reward": 0.5, "eval/pass@1": 0.3 + 0.1 * num + s / 100} for s in (0, 10, 20)]
        (job / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    report = write_report(tmp_path)
    for name in ("task_accuracy_curves.png", "curriculum_levels.png"):
        width, height = png_size(report.parent / name)
        assert width > 600 and height > 300
    text = report.read_text()
    assert TASK_TITLE in text and LEVEL_TITLE in text


def test_a_run_without_task_metrics_draws_no_task_figures(tmp_path):
    write_job(tmp_path, "0", ["optimizer.lr=1e-4"], ramp(0.6), kls=[0.01] * STEPS)
    report = write_report(tmp_path)
    assert not (report.parent / "task_accuracy_curves.png").exists()
    assert not (report.parent / "curriculum_levels.png").exists()


def test_a_nan_final_evaluation_is_a_failed_job_not_an_earlier_score(tmp_path):
    """Issue 60: `final_eval_reward` fell back to an earlier evaluation (the base model's, at worst) past a NaN."""
    held_out = summarize_eval([{"step": 0, "eval/reward": 0.9}, {"step": 20, "eval/reward": float("nan")}])
    assert math.isnan(held_out["final_eval_reward"]) and held_out["evaluations"] == 2
    write_job(tmp_path, "0", ["+tag=a"], ramp(0.8), eval_rewards={0: 0.9, 10: 0.5, 20: float("nan")})
    write_job(tmp_path, "1", ["+tag=b"], ramp(0.4), eval_rewards={0: 0.2, 10: 0.3, 20: 0.4})
    report = write_report(tmp_path, plots=False)
    verdict = section(report, "Verdict")
    assert verdict.strip().startswith("- **Only configuration that completed:** `tag=b` (final_eval_reward 0.400")
    assert "- **Failed:** job 0 (`tag=a`): its final evaluation (step 20) scored NaN" in verdict
    assert {row["job"]: (row["status"], row["final_eval_reward"]) for row in read_csv(report)}["0"] == ("failed", "")


def test_a_metrics_file_with_bytes_that_are_not_utf8_is_reported_with_the_line_named(tmp_path, caplog):
    """Issue 60: non-UTF-8 bytes in metrics.jsonl crashed the report with UnicodeDecodeError."""
    job = write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.8), status=None)
    metrics = job / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines()
    lines[4] = b'{"step": 5, "reward": 0.3, "x": "\xff"}'
    metrics.write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level("WARNING"):
        report = write_report(tmp_path, plots=False)
    assert f"{metrics}: line 5 is not UTF-8 text; skipped" in caplog.text
    assert "job 0: 1 torn line(s) in metrics.jsonl skipped (line 5)" in section(report, "Notes")
    assert "19 steps logged" in section(report, "Verdict")


def test_a_kl_past_the_collapse_limit_ranks_after_every_configuration_under_it(tmp_path):
    """Issue 62: places hide sizes, so a steady reward at KL 4 (the others' about 0.2) was ranked most stable."""
    write_job(tmp_path, "0", ["optimizer.lr=1e-2"], ramp(0.8), kls=[4.0] * STEPS)  # collapse limit 10 x 0.1 = 1
    write_job(tmp_path, "1", ["optimizer.lr=1e-3"], ramp(0.8)[:16] + [0.7] * 4, kls=[0.25] * STEPS)
    write_job(tmp_path, "2", ["optimizer.lr=3e-4"], ramp(0.8)[:16] + [0.6] * 4, kls=[0.2] * STEPS)
    verdict = section(write_report(tmp_path, plots=False), "Verdict")
    stability = next(line for line in verdict.splitlines() if line.startswith("- **Stability**"))
    order = [stability.index(f"`optimizer.lr={lr}`") for lr in ("0.001", "0.0003", "0.01")]
    assert order == sorted(order)
    assert "3. `optimizer.lr=0.01` (drop 0.000, std fall 0.000, mean max KL 4.000" in stability
    assert "KL past the collapse limit 1)" in stability


def test_each_kl_figure_of_the_verdict_says_which_it_is(tmp_path):
    """Issue 62: the stability line (a mean over seeds) and the KL excursion line (the highest job) both said
    "max KL", with different numbers for one configuration."""
    write_job(tmp_path, "0", ["optimizer.lr=1e-3", "seed=0"], ramp(0.8), kls=[0.2] * STEPS)
    write_job(tmp_path, "1", ["optimizer.lr=1e-3", "seed=1"], ramp(0.8), kls=[0.4] * STEPS)
    verdict = section(write_report(tmp_path, plots=False), "Verdict")
    assert "mean max KL 0.300 over 2 jobs" in verdict and "(highest KL 0.400) in jobs 0, 1" in verdict
    assert "(max KL" not in verdict and " max KL 0." not in verdict.replace("mean max KL", "")


def test_the_verdict_is_printed_on_the_console_when_a_sweep_ends(tmp_path, capsys):
    from omegaconf import OmegaConf

    from grpo_exp.sweep.hydra_callbacks import SweepReport

    write_job(tmp_path, "0", ["optimizer.lr=1e-3"], ramp(0.8), kls=[0.05] * STEPS)
    write_job(tmp_path, "1", ["optimizer.lr=1e-4"], ramp(0.5), kls=[0.05] * STEPS)
    SweepReport(log_table=False).on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    printed = capsys.readouterr().out
    assert "## Verdict" in printed and "- **Stability**" in printed and "`optimizer.lr=0.001`" in printed
    assert "## Results" not in printed  # the tables stay in the file


# An agent in an environment (+recipe=support_env): its state part is named `state`, beside a format part.
ENVIRONMENT_CONFIG = "reward:\n  parts:\n    form:\n      fn: format\n    state:\n      fn: environment_state\n"
TOOLS = {"tools/call_frequency": 1.5, "tools/failure_frequency": 0.0}
EPISODES = TOOLS | {"episodes/turns": 2.5}
CALLS = {"episodes/tool_calls/lookup_order": 1.0, "episodes/tool_calls/refund": 0.5}
HELD_OUT_PARTS = {
    0: {"eval/rewards/state/mean": 0.125, "eval/rewards/form/mean": 0.9},
    STEPS: {"eval/rewards/state/mean": 0.625},
}
EPISODE_HEADERS = (
    "| held-out episode success, base | held-out episode success, final | turns per episode "
    "| lookup_order calls per episode | refund calls per episode | steps |"
)


def write_agent_job(root: Path, name: str, overrides: list[str], **kwargs) -> Path:
    return write_job(
        root,
        name,
        overrides,
        ramp(0.6),
        extra_config=ENVIRONMENT_CONFIG,
        logged=EPISODES | CALLS,
        eval_logged=HELD_OUT_PARTS,
        **kwargs,
    )


def test_a_job_with_an_environment_gets_episode_columns_and_one_without_empty_cells(tmp_path):
    """Held-out success is the environment part's held-out mean (not the eval reward, not another part's), before
    the first step and at the last evaluation; turns and each tool's calls per episode come from the training steps."""
    write_agent_job(tmp_path, "0", ["+tag=a"], eval_rewards={0: 0.5, STEPS: 0.7})
    write_job(tmp_path, "1", ["+tag=b"], ramp(0.5), eval_rewards={0: 0.4, STEPS: 0.9})
    report = write_report(tmp_path, plots=False)
    assert EPISODE_HEADERS in report.read_text()
    rows = {row["job"]: row for row in read_csv(report)}
    keys = ("base_episode_success", "final_episode_success", "episode_turns")
    calls = ("episode_tool_calls/lookup_order", "episode_tool_calls/refund")
    assert [float(rows["0"][key]) for key in (*keys, *calls)] == [0.125, 0.625, 2.5, 1.0, 0.5]
    assert all(rows["1"][key] == "" for key in (*keys, *calls))
    assert [row["job"] for row in read_csv(report)] == ["1", "0"]  # on the held-out reward
    ranked = write_report(tmp_path, objective="final_episode_success", plots=False)
    assert [row["job"] for row in read_csv(ranked)] == ["0", "1"]  # on success; a job without episodes ranks last

    plain = tmp_path / "plain"  # tools but no environment: a job of +recipe=support_agent
    write_job(plain, "0", ["+tag=a"], ramp(0.5), eval_rewards={0: 0.4, STEPS: 0.5}, logged=TOOLS)
    write_job(plain, "1", ["+tag=b"], ramp(0.6), eval_rewards={0: 0.4, STEPS: 0.6}, logged=TOOLS)
    text = write_report(plain, plots=False).read_text()
    assert "| tool calls per rollout |" in text and "episode" not in text
    assert not [key for key in read_csv(plain / "report" / "report.md")[0] if "episode" in key]


def test_a_final_evaluation_that_scored_nan_shows_no_final_episode_success(tmp_path):
    """A job whose last evaluation scored NaN has no final score (issue 60): no final episode success either, though
    its state part's last held-out mean is a number; its base success stands."""
    write_agent_job(tmp_path, "0", ["+tag=a"], eval_rewards={0: 0.5, 10: 0.6, STEPS: float("nan")})
    write_agent_job(tmp_path, "1", ["+tag=b"], eval_rewards={0: 0.5, STEPS: 0.7})
    rows = {row["job"]: row for row in read_csv(write_report(tmp_path, plots=False))}
    assert (rows["0"]["status"], rows["0"]["base_episode_success"], rows["0"]["final_episode_success"]) == (
        "failed",
        "0.125",
        "",
    )
    assert rows["1"]["final_episode_success"] == "0.625"
