"""Real multiruns of the tiny model: one job and one W&B run per point, a report at the end."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.wandb_records import read_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def multirun(sweep_dir: Path, *overrides: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", "-m", f"hydra.sweep.dir={sweep_dir}", "logger.mode=offline", *overrides]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in sweep_dir.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    sweep_dir = tmp_path_factory.mktemp("grid")
    result = multirun(
        sweep_dir, "grpo.num_generations=4,6", "optimizer.lr=5e-4,1e-3", "grpo.max_steps=3", "grpo.hold_fixed=prompts"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir


@pytest.mark.e2e  # the grid fixture: a real 2 x 2 multirun, shared
def test_each_point_is_its_own_job_and_wandb_run(grid):
    jobs = job_dirs(grid)
    assert len(jobs) == 4
    runs = [read_run(next((job / "wandb").glob("offline-run-*"))) for job in jobs]
    assert len({r.run_id for r in runs}) == 4
    assert len({r.group for r in runs}) == 1 and runs[0].group.startswith("sweep_num_generations_lr-")
    points = {(r.config["grpo.num_generations"], r.config["optimizer.lr"]) for r in runs}
    assert points == {(4, 5e-4), (4, 1e-3), (6, 5e-4), (6, 1e-3)}
    for run in runs:
        swept = run.name.split(" - job ")[0]  # the swept values lead, by their keys' last parts (issue 62)
        assert f"num_generations={run.config['grpo.num_generations']}" in swept and "grpo." not in swept
        assert {"swept:grpo.num_generations", "swept:optimizer.lr", "model:tiny"} <= set(run.tags)
        assert {"train/reward", "train/reward_std", "train/kl", "train/rewards/format/mean"} <= run.history_keys
        assert run.config["grpo_exp"]["grpo"]["num_generations"] == run.config["grpo.num_generations"]
        assert run.exit_code == 0


@pytest.mark.e2e  # the grid fixture: a real 2 x 2 multirun, shared
def test_fixed_budget_gives_every_group_size_the_same_prompts_per_step(grid):
    for job in job_dirs(grid):
        config = (job / "config.yaml").read_text()
        group = 4 if "num_generations: 4" in config else 6
        assert f"per_device_train_batch_size: {group * 2}" in config  # 2 prompts per step, fixed


@pytest.mark.e2e  # the grid fixture: a real 2 x 2 multirun, shared
def test_report_ranks_all_four_jobs_with_their_swept_values(grid):
    with (grid / "report" / "report.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    assert {(r["grpo.num_generations"], r["optimizer.lr"]) for r in rows} == {
        ("4", "0.0005"),
        ("4", "0.001"),
        ("6", "0.0005"),
        ("6", "0.001"),
    }
    finals = [float(r["final_eval_reward"]) for r in rows]  # the held-out reward, not the training one
    assert finals == sorted(finals, reverse=True)
    report = (grid / "report" / "report.md").read_text()
    assert "Ranked by `final_eval_reward` (higher is better), the held-out reward." in report
    assert "## Verdict" in report and "One seed per configuration" in report


@pytest.mark.e2e  # the grid fixture: a real 2 x 2 multirun, shared
def test_report_plots_are_real_pngs(grid):
    for name in ("reward_curves.png", "kl_curves.png", "final_eval_reward_heatmap.png"):
        data = (grid / "report" / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name


FLAKY = """
CALLS = {"n": 0}


def flaky(prompts, completions, fail=False, **kwargs):
    CALLS["n"] += 1
    if fail and CALLS["n"] >= 3:
        raise RuntimeError("judge model unreachable")
    return [float(len(c) > 10) for c in completions]
"""


def steps_logged(job: Path) -> list[int]:
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "reward" in r]


@pytest.mark.e2e  # a failing job, then resume
def test_a_failing_job_fails_the_sweep_after_the_others_and_resume_reruns_only_it(tmp_path):
    rewards = tmp_path / "flaky.py"
    rewards.write_text(FLAKY)
    sweep_dir = tmp_path / "sweep"
    command = (
        "reward=custom",
        f"reward.parts.main.fn={rewards}:flaky",
        "+reward.parts.main.params.fail=true,false",
        "grpo.max_steps=4",
        "grpo.save_steps=1",
    )
    result = multirun(sweep_dir, *command)
    assert result.returncode == 1, result.stderr[-3000:]
    failed, completed = job_dirs(sweep_dir)
    assert json.loads((failed / "summary.json").read_text())["status"] == "failed"
    assert json.loads((completed / "summary.json").read_text())["status"] == "completed"
    assert read_run(next((failed / "wandb").glob("offline-run-*"))).exit_code != 0
    assert read_run(next((completed / "wandb").glob("offline-run-*"))).exit_code == 0
    report = (sweep_dir / "report" / "report.md").read_text()
    assert "**Failed:** job 0" in report and "RuntimeError: judge model unreachable" in report
    line = next(line for line in result.stderr.splitlines() if "re-run only these with:" in line)
    assert line.startswith("sweep: job 0 failed (") and "RuntimeError: judge model unreachable" in line
    assert "job 1" not in line
    resume = line.split("re-run only these with: ", 1)[1]
    assert f"hydra.sweep.dir={sweep_dir}" in resume and resume.endswith("resume=auto")

    rewards.write_text(FLAKY.replace("raise RuntimeError", "pass  #"))  # the reward is fixed
    before = (completed / "metrics.jsonl").read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    again = subprocess.run(
        [sys.executable, *shlex.split(resume)[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((failed / "summary.json").read_text())["status"] == "completed"
    assert steps_logged(failed) == [1, 2, 3, 4]  # every step once: resumed, not re-logged
    assert (completed / "metrics.jsonl").read_text() == before  # the completed job did not train again
    assert "re-run only these" not in again.stderr


def test_invalid_sweep_point_stops_the_sweep_before_any_job_runs(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = multirun(
        sweep_dir, "grpo.hold_fixed=completions", "grpo.completions_per_step=12", "grpo.num_generations=4,8"
    )
    assert result.returncode == 2
    assert "12 completions per step don't split into groups of grpo.num_generations=8" in result.stderr
    assert not sweep_dir.exists()


def test_parallel_launcher_runs_jobs_side_by_side(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = multirun(sweep_dir, "+launcher=parallel", "seed=1,2", "grpo.max_steps=2")
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [json.loads((job / "summary.json").read_text()) for job in job_dirs(sweep_dir)]
    assert [s["status"] for s in summaries] == ["completed", "completed"]
    assert "threads: 1" in (job_dirs(sweep_dir)[0] / "config.yaml").read_text()


@pytest.mark.e2e  # a real optuna search
@pytest.mark.skipif(not importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper"), reason="optuna extra")
def test_optuna_search_returns_the_objective_and_reports(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = multirun(sweep_dir, "+sweep=optuna", "hydra.sweeper.n_trials=2", "grpo.max_steps=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(job_dirs(sweep_dir)) == 2
    assert "Ranked by `final_eval_reward`" in (sweep_dir / "report" / "report.md").read_text()
