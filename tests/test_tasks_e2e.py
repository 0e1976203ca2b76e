"""reasoning-gym tasks end to end: a short run logs the task's accuracy and its held-out task metrics; a wrong
task name stops before the model loads; a curriculum raises its level and a resume keeps it; the eval-only
command scores a job's weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.folder import read_rows
from grpo_exp.tracking.held_out import held_out_metrics
from grpo_exp.tracking.metrics import eval_rows, training_rows
from tests.conftest import QUICK_TASK_MODEL, ROOT

TASK = ("dataset=reasoning_gym", "dataset.task=chain_sum", "reward=reasoning_gym", "logger=none", *QUICK_TASK_MODEL)
SHORT = ("dataset.num_samples=40", "dataset.eval_samples=6", "grpo.num_generations_eval=4", "save_model=false")


def run(*overrides: str, out: Path | None = None, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "run.py", *overrides, *([f"hydra.run.dir={out}"] if out else [])]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_a_wrong_task_name_is_one_line_and_exit_2(tmp_path):
    result = run(*TASK, "dataset.task=chain_sun", out=tmp_path / "job", timeout=120)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "chain_sun" in line]
    assert len(errors) == 1 and "did you mean chain_sum" in errors[0] and "Traceback" not in result.stderr


def test_the_issue_command_logs_the_tasks_accuracy_and_held_out_pass_at_k(tmp_path, settings):
    out = tmp_path / "job"
    result = run(*TASK, "grpo.max_steps=3", *SHORT, out=out)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_rows(out / "metrics.jsonl")[0]
    trained = training_rows(rows)
    assert len(trained) == 3 and all("rewards/accuracy/mean" in r and "pass@1" in r for r in trained)
    held = eval_rows(rows)  # before the first step and after the last
    assert [r["step"] for r in held] == [0, 3]
    assert all({"eval/mean@4", "eval/pass@1", "eval/pass@4"} <= set(r) for r in held)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_eval_pass@1"] == held[-1]["eval/pass@1"]
    assert set(summary["eval_task"]) == {"mean@4", "pass@1", "pass@4"}
    # what a curriculum may wait on (tracking/held_out.py) is what the held-out rows carry, the level aside
    logged = {key for row in held for key in row if key.startswith("eval/")} - {"eval/curriculum/level"}
    assert logged == set(held_out_metrics(settings(*TASK, "grpo.max_steps=3", *SHORT)))


@pytest.mark.e2e  # two curriculum stages, a resume and an evaluation: a few minutes
def test_a_curriculum_raises_its_level_survives_a_resume_and_the_weights_can_be_scored(tmp_path):
    out = tmp_path / "job"
    curriculum = ("dataset.curriculum.enabled=true", "dataset.curriculum.raise_at=0", "dataset.curriculum.max_level=2")
    steps = ("grpo.eval_steps=2", "grpo.save_steps=2", "save_model=false")
    first = run(*TASK, *SHORT, *curriculum, *steps, "grpo.max_steps=4", out=out)
    assert first.returncode == 0, first.stderr[-3000:]
    levels = {r["step"]: r["curriculum/level"] for r in training_rows(read_rows(out / "metrics.jsonl")[0])}
    assert levels == {1: 0, 2: 0, 3: 1, 4: 1}  # raise_at=0: the evaluation at step 2 passes level 0
    assert "curriculum level 0 -> 1" in first.stderr
    longer = run(f"resume={out}", "grpo.max_steps=6", "logger=none", out=out)
    assert longer.returncode == 0, longer.stderr[-3000:]
    rows = read_rows(out / "metrics.jsonl")[0]
    levels = {r["step"]: r["curriculum/level"] for r in training_rows(rows)}
    assert levels[5] == 2 and levels[6] == 2  # step 4's evaluation passed level 1: the resume goes on at level 2
    held = {r["step"]: r.get("eval/curriculum/level") for r in eval_rows(rows)}
    assert held[6] == 2

    scored = subprocess.run(
        [sys.executable, "-m", "grpo_exp.job.evaluate", "--json", str(out), "dataset.eval_samples=5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    result = json.loads(scored.stdout)
    assert result["held_out_prompts"] == 5 and 0 <= result["eval/pass@1"] <= 1
    assert (Path(result["weights"]).name, result["step"], result["curriculum_level"]) == ("checkpoint-6", 6, 2)
    assert json.loads((out / "evaluations.jsonl").read_text().splitlines()[-1]) == result
