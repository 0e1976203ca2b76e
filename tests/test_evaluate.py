"""The eval-only command (``python -m grpo_exp.job.evaluate``) on real job folders: it scores the newest whole
weights and records their step, scores a curriculum job at the level it reached, retries weights a running job
rotates away, and refuses every bad input in one line; a task run's end block shows held-out pass@k."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder, read_rows
from grpo_exp.job import evaluate
from grpo_exp.tracking.outcome import format_outcome
from grpo_exp.training import checkpoints, schedule
from tests.conftest import QUICK_TASK_MODEL, ROOT

TASK = (
    "dataset=reasoning_gym",
    "dataset.task=chain_sum",
    "reward=reasoning_gym",
    "logger=none",
    "threads=1",
    *QUICK_TASK_MODEL,
)
# Two held-out problems, two short completions each: scoring takes seconds.
TINY = (
    "dataset.num_samples=8",
    "dataset.eval_samples=2",
    "grpo.num_generations_eval=2",
    "grpo.eval_on_start=false",
    "grpo.max_completion_length=16",
)
WAIT_S = 900


def run(*overrides: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "run.py", *overrides]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)


def score(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "grpo_exp.job.evaluate", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S)


def one_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a refused command (exit 2, no traceback)."""
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    return line


@pytest.fixture(scope="module")
def resumed(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A task job whose model/ is older than its newest checkpoint, as a stopped, resumed and killed job leaves it:
    its first run ends at step 1 and saves model/; its resume trains to step 2 and leaves model/ as it was."""
    job = tmp_path_factory.mktemp("evaluate") / "job"
    first = run(*TASK, *TINY, "grpo.max_steps=1", "grpo.save_steps=1", f"hydra.run.dir={job}")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run(f"resume={job}", "grpo.max_steps=2", "save_model=false", "logger=none")
    assert second.returncode == 0, second.stderr[-3000:]
    assert {p.name for p in job.glob("checkpoint-*")} == {"checkpoint-1", "checkpoint-2"}
    return job, first


@pytest.fixture
def job(resumed, tmp_path) -> Path:
    """A copy of the resumed job, to damage or rotate."""
    copy = tmp_path / "job"
    shutil.copytree(resumed[0], copy)
    return copy


def test_a_job_is_scored_with_its_newest_whole_weights_and_the_record_names_them_with_their_step(resumed):
    job, _ = resumed
    result = score(str(job), "dataset.eval_samples=2")
    assert result.returncode == 0, result.stderr[-3000:]
    record = read_rows(job / "evaluations.jsonl")[0][-1]
    assert (record["weights"], record["step"]) == (str(job / "checkpoint-2"), 2)  # not model/, from step 1
    (line,) = result.stdout.splitlines()  # the headline; the record stays in the file
    assert line.startswith("checkpoint-2 (step 2): reward ")
    assert f"pass@1 {record['eval/pass@1']:.3f} on 2 held-out prompts, n=2 completions each" in line
    assert str(job / "evaluations.jsonl") in line


@pytest.mark.e2e  # a run stopped, resumed and killed while it trains: the issue's own sequence
def test_after_a_stop_a_resume_and_a_kill_the_newest_checkpoint_is_scored_not_the_stopped_model(tmp_path):
    from tests.test_long_runs import last_step, start, wait_for

    job = tmp_path / "job"
    first = start(*TASK, *TINY, "grpo.max_steps=60", "grpo.save_steps=1", f"hydra.run.dir={job}")
    wait_for(lambda: last_step(job) >= 2, first)
    os.killpg(first.pid, signal.SIGINT)
    first.communicate(timeout=WAIT_S)
    assert first.returncode == 130
    stopped = evaluate.newest_weights(JobFolder(job))
    assert stopped.path == job / "model" and stopped.step is not None  # saved, sealed with its step, at the stop

    def checkpoint_past_the_stop() -> bool:
        newest = checkpoints.latest(job)
        return newest is not None and newest.step >= stopped.step + 2

    second = start(f"resume={job}", "logger=none")
    wait_for(checkpoint_past_the_stop, second)
    os.killpg(second.pid, signal.SIGKILL)
    second.communicate(timeout=WAIT_S)
    newest = checkpoints.latest(job)
    assert evaluate.newest_weights(JobFolder(job)) == evaluate.Weights(newest.path, newest.step)


def test_model_wins_a_tie_and_a_damaged_model_gives_way_to_the_latest_checkpoint(job, caplog):
    shutil.rmtree(job / "checkpoint-2")
    assert evaluate.newest_weights(JobFolder(job)) == evaluate.Weights(job / "model", 1)
    (job / "model" / "model.safetensors").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        assert evaluate.newest_weights(JobFolder(job)) == evaluate.Weights(job / "checkpoint-1", 1)
    assert "model can't be scored (model.safetensors is 0 bytes" in caplog.text


@pytest.mark.parametrize(
    ("damage", "says"), [("missing", "model.safetensors is missing"), ("empty", "model.safetensors is 0 bytes")]
)
def test_a_model_without_its_weights_and_no_checkpoint_is_one_line(job, damage, says):
    for checkpoint in job.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    weights = job / "model" / "model.safetensors"
    weights.unlink() if damage == "missing" else weights.write_bytes(b"")
    line = one_error(score(str(job)))
    assert f"{job} holds no whole weights: its model/ can't be scored ({says}" in line
    assert f"python run.py resume={job}" in line
    assert f"{job / 'model'} can't be scored: {says}" in one_error(score(str(job / "model")))


def test_weights_rotated_away_while_they_load_are_scored_from_the_next_whole_ones(job, monkeypatch, caplog):
    """A job still training removes its oldest checkpoint as it saves a new one (grpo.save_total_limit): here the
    newest goes as the command loads it, as if the job had rotated it away."""
    real = schedule.load_policy
    removed = []

    def rotating(settings, path, layout=None):
        if not removed:
            shutil.rmtree(path)
            removed.append(path)
        return real(settings, path, layout)

    monkeypatch.setattr(schedule, "load_policy", rotating)
    with caplog.at_level(logging.WARNING):
        record = evaluate.evaluate(job, ["dataset.eval_samples=2"])
    assert removed == [job / "checkpoint-2"]
    assert "checkpoint-2 went while it loaded (the job is still training)" in caplog.text
    assert (record["weights"], record["step"]) == (str(job / "model"), 1)  # model/ and checkpoint-1 tie at step 1
    assert 0 <= record["eval/pass@1"] <= 1


def test_a_checkpoint_named_on_the_command_line_and_rotated_away_while_it_loads_is_one_line(job, monkeypatch):
    real = schedule.load_policy

    def rotating(settings, path, layout=None):
        shutil.rmtree(path)
        return real(settings, path, layout)

    monkeypatch.setattr(schedule, "load_policy", rotating)
    with pytest.raises(UserError) as refused:
        evaluate.evaluate(job / "checkpoint-2", [])
    assert "checkpoint-2 was removed or rewritten while it loaded (is the job still training?)" in str(refused.value)
    assert f"score the job folder {job} for its newest whole weights" in str(refused.value)


def test_a_config_group_override_is_one_line_naming_the_fix(resumed):
    line = one_error(score(str(resumed[0]), "dataset=gsm8k"))
    assert "dataset=gsm8k: dataset is a group of settings" in line
    assert "the eval-only command changes its keys only (dataset.<key>=<value>)" in line


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda text: text[: len(text) // 3].rpartition("\n")[0] + "\n", "lacks"),  # cut short at a line's end
        (lambda text: "", "can't be read as the job's config (model.name_or_path is required"),
        (lambda text: "grpo: 3\n", "can't be read as the job's config (Merge error"),
    ],
    ids=["cut-short", "empty", "wrong-shape"],
)
def test_a_damaged_config_yaml_is_one_line_naming_it(job, damage, says):
    config = job / "config.yaml"
    config.write_text(damage(config.read_text()))
    line = one_error(score(str(job)))
    assert f"{config} {says}" in line and "restore it" in line


def test_a_task_runs_end_block_shows_held_out_pass_at_k_and_its_log_names_the_task(resumed):
    _, first = resumed
    summary = json.loads((resumed[0] / "summary.json").read_text())  # the resume's; the block is the first run's
    assert "pass@1" in summary["eval_task"]
    (row,) = [line for line in first.stdout.splitlines() if line.strip().startswith("pass@k")]
    assert "(held-out, 2 completions per problem; last evaluation)" in row
    assert "prompts (reasoning-gym task chain_sum)" in first.stderr and "prompts (None)" not in first.stderr


def test_the_end_block_reads_pass_at_k_from_base_model_to_after_training(tmp_path):
    summary = {
        "status": "completed",
        "steps": 20,
        "evaluations": 3,
        "base_eval_task": {"mean@8": 0.1, "pass@1": 0.1, "pass@8": 0.4},
        "eval_task": {"mean@8": 0.3, "pass@1": 0.3, "pass@8": 0.8},
    }
    text = format_outcome(summary, tmp_path, None)
    expected = "pass@1 0.100 -> 0.300, pass@8 0.400 -> 0.800 (held-out, 8 completions per problem; base model -> after"
    assert expected in text


CURRICULUM = (
    "dataset.curriculum.enabled=true",
    "dataset.curriculum.raise_at=0",
    "dataset.curriculum.max_level=2",
    "grpo.eval_steps=1",
    "grpo.save_steps=1",
    "grpo.max_steps=2",
)


@pytest.fixture(scope="module")
def curriculum_job(tmp_path_factory) -> Path:
    """A curriculum job raised at each evaluation (raise_at=0): level 1 at step 1, level 2 at step 2."""
    job = tmp_path_factory.mktemp("curriculum") / "job"
    result = run(*TASK, *TINY, *CURRICULUM, f"hydra.run.dir={job}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "curriculum level 1 -> 2" in result.stderr
    return job


def scoring_of(job: Path, *overrides: str, weights: Path | None = None):
    folder = JobFolder(job)
    return evaluate.plan(folder, weights, evaluate.recorded(folder, list(overrides)), list(overrides))


def held_out_questions(data) -> list[str]:
    from grpo_exp import dataset

    rows = dataset.LOADERS.get("reasoning_gym")(data)
    return [row["prompt"][-1]["content"] for row in rows if row[dataset.HELD_OUT_COLUMN]]


def numbers(question: str) -> list[str]:
    return [word for word in question.replace("=", " ").split() if word.isdigit()]


@pytest.mark.e2e  # two curriculum stages: about half a minute of training
def test_a_curriculum_job_is_scored_at_the_level_it_reached_and_given_task_settings_win(curriculum_job):
    from reasoning_gym.factory import create_curriculum

    scoring = scoring_of(curriculum_job)
    assert (scoring.weights.step, scoring.level) == (2, 2)  # its step-2 evaluation raised it to level 2
    level_two = create_curriculum("chain_sum")
    level_two.set_global_level(2)
    expected = level_two.generate_configuration()
    data = scoring.settings.dataset
    assert (data.task_settings["max_terms"], data.task_settings["max_digits"]) == (
        expected.max_terms,
        expected.max_digits,
    )
    questions = held_out_questions(scoring_of(curriculum_job, "dataset.eval_samples=20").settings.dataset)
    assert len(questions) == 20 and any(len(numbers(q)) > 2 or any(len(n) > 1 for n in numbers(q)) for q in questions)
    assert scoring_of(curriculum_job, weights=curriculum_job / "checkpoint-1").level == 1  # raised at step 1

    harder = scoring_of(curriculum_job, "+dataset.task_settings.max_terms=5")
    assert harder.level == 2 and harder.settings.dataset.task_settings["max_terms"] == 5
    assert harder.settings.dataset.task_settings["max_digits"] == expected.max_digits
    assert scoring_of(curriculum_job, "dataset.curriculum.start_level=0").level == 0  # told otherwise
    with pytest.raises(UserError, match=r"dataset\.task_settings\.min_terms=9: chain_sum refused"):
        evaluate.evaluate(curriculum_job, ["+dataset.task_settings.min_terms=9"])  # above level 2's max_terms

    record = evaluate.evaluate(curriculum_job, ["dataset.eval_samples=2"])
    assert (record["weights"], record["step"], record["curriculum_level"]) == (str(curriculum_job / "model"), 2, 2)
    assert record["task_settings"] == data.task_settings
