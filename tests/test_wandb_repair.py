"""Repairing a run's W&B history (``python -m grpo_exp.tracking.repair``), for real on the tiny model.

A job whose W&B service process is killed mid-run completes with ``wandb_lost``; the repair sends
what W&B missed from ``metrics.jsonl`` and ``summary.json``, read back here from W&B's offline files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.folder import JobFolder
from grpo_exp.tracking.metrics import eval_rows, training_rows
from tests.conftest import ROOT
from tests.test_long_runs import WAIT_S, last_step, start, wait_for
from tests.wandb_records import read_run

STEPS, EVAL_STEPS, KILL_AT = 8, 4, 3
REPAIR_TIMEOUT_S = 120


def kill_wandb_service(process: subprocess.Popen[str]) -> None:
    """SIGKILL the job's W&B service process (wandb-core names its parent's pid), as test_faults does."""
    found = subprocess.run(["pgrep", "-f", f"wandb-core.*--pid {process.pid}"], capture_output=True, text=True)
    (service,) = [int(pid) for pid in found.stdout.split()]
    os.kill(service, signal.SIGKILL)


def repair(*folders: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "-m", "grpo_exp.tracking.repair", *map(str, folders)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=REPAIR_TIMEOUT_S)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def wandb_steps(job: Path, key: str) -> list[int]:
    """The training steps of the W&B history rows that carry ``key``, over every offline run folder."""
    runs = sorted(job.glob("wandb/offline-run-*"))
    return sorted(int(row["train/global_step"]) for run in runs for row in read_run(run).history if key in row)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A job whose W&B service was killed at step 3 of 8 (held-out evaluations every 4 steps)."""
    job = tmp_path_factory.mktemp("repair") / "job"
    process = start(
        f"grpo.max_steps={STEPS}",
        f"grpo.eval_steps={EVAL_STEPS}",
        "logger.mode=offline",
        "save_model=false",
        f"hydra.run.dir={job}",
    )
    wait_for(lambda: last_step(job) >= KILL_AT, process)
    kill_wandb_service(process)
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["wandb_lost"]
    return job


@pytest.fixture(scope="module")
def repaired(killed) -> tuple[Path, list[str], subprocess.CompletedProcess[str]]:
    """The killed job, what its W&B history held before the repair, and the repair's result."""
    before = wandb_steps(killed, "train/reward")
    return killed, before, repair(killed)


@pytest.mark.e2e  # the killed job: a real run whose W&B service is killed
def test_the_repair_sends_every_step_w_and_b_missed_once_and_the_summary(repaired):
    job, before, result = repaired
    rows = JobFolder(job).rows()
    training, evaluations = [r["step"] for r in training_rows(rows)], [r["step"] for r in eval_rows(rows)]
    assert training == list(range(1, STEPS + 1))
    assert set(range(EVAL_STEPS, STEPS + 1, EVAL_STEPS)) <= set(evaluations)  # and one before training, when on
    assert before != training, "W&B died mid-run: its history misses steps"

    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = lines(result.stdout)
    sent = [step for step in training if step not in before]
    run_id = json.loads((job / "run_info.json").read_text())["wandb"]["id"]
    assert line.startswith(f"{job}: sent {len(sent)} training steps ({sent[0]}-{sent[-1]}), ")
    assert (
        f" and the summary to W&B run {run_id}; saved offline; upload with: wandb sync {job}/wandb/offline-run-*"
        in line
    )

    assert wandb_steps(job, "train/reward") == training, "every training step in W&B exactly once"
    assert wandb_steps(job, "eval/reward") == evaluations, "every held-out evaluation in W&B exactly once"
    first, added = (read_run(run) for run in sorted(job.glob("wandb/offline-run-*")))
    assert added.run_id == first.run_id == run_id and added.name == first.name and added.tags == first.tags
    assert min(row["_step"] for row in added.history) > max(row["_step"] for row in first.history), (
        "wandb sync keeps the added rows only if W&B's steps go on after the first folder's"
    )
    live = {key for row in first.history if "train/reward" in row for key in row}
    assert not live or live == {key for row in added.history if "train/reward" in row for key in row}, "live keys"
    summary = json.loads((job / "summary.json").read_text())
    assert (
        added.summary["summary/status"] == "completed" and added.summary["summary/wandb_lost"] == summary["wandb_lost"]
    )
    assert added.summary["summary/final_reward"] == pytest.approx(summary["final_reward"])
    assert added.exit_code == 0, "the repaired run ends as the job did"


@pytest.mark.e2e  # the killed job: a real run whose W&B service is killed
def test_a_second_repair_finds_nothing_missing_and_sends_nothing(repaired):
    job, _, first = repaired
    assert first.returncode == 0, first.stderr[-3000:]
    runs = sorted(job.glob("wandb/offline-run-*"))

    again = repair(job)

    assert again.returncode == 0, again.stderr[-3000:]
    (line,) = lines(again.stdout)
    assert line.startswith(f"{job}: nothing missing in W&B run ") and f"all {STEPS} training steps" in line
    assert sorted(job.glob("wandb/offline-run-*")) == runs, "no run folder added"


# Writes the first part of a W&B run offline, as a job whose W&B service died after ``held`` steps
# leaves it: the training rows W&B got before it died, no summary.
PARTIAL_RUN = """
import sys, wandb
job, run_id, held = sys.argv[1], sys.argv[2], int(sys.argv[3])
run = wandb.init(id=run_id, project="grpo-exp", name="job-a", group="g", tags=["t"], dir=job, mode="offline")
for step in range(1, held + 1):
    run.log({"train/reward": step / 10, "train/global_step": step})
run.finish()
"""


def test_a_repair_sends_an_offline_run_the_steps_evaluation_and_summary_it_lacks(tmp_path):
    """The repair on a hand-made job folder: no training, so it runs in the fast tier (the killed
    job above is the same repair on a real run)."""
    job, run_id, steps, held = tmp_path / "job", "repair1", 5, 2
    job.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    made = subprocess.run([sys.executable, "-c", PARTIAL_RUN, str(job), run_id, str(held)], env=env, timeout=120)
    assert made.returncode == 0
    info = {"wandb": {"id": run_id, "name": "job-a", "group": "g", "project": "grpo-exp"}}
    (job / "run_info.json").write_text(json.dumps(info), encoding="utf-8")
    rows = [{"step": s, "reward": s / 10, "kl": 0.01} for s in range(1, steps + 1)]
    rows.insert(4, {"step": 4, "eval/reward": 0.7})
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = {"status": "completed", "wandb_lost": "service died", "final_reward": 0.5, "steps": steps}
    (job / "summary.json").write_text(json.dumps(summary), encoding="utf-8")

    result = repair(job)

    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = lines(result.stdout)
    assert line.startswith(f"{job}: sent 3 training steps (3-5), 1 evaluation and the summary to W&B run {run_id}")
    assert wandb_steps(job, "train/reward") == list(range(1, steps + 1)), "every training step once"
    assert wandb_steps(job, "eval/reward") == [4]
    first, added = (read_run(run) for run in sorted(job.glob("wandb/offline-run-*")))
    assert added.run_id == first.run_id == run_id and added.name == "job-a" and added.tags == first.tags
    assert added.summary["summary/final_reward"] == 0.5 and added.exit_code == 0
    again = repair(job)
    assert again.returncode == 0 and lines(again.stdout)[0].startswith(f"{job}: nothing missing in W&B run {run_id}")


def _job(folder: Path, run_info: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "run_info.json").write_text(run_info, encoding="utf-8")
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n", encoding="utf-8")
    return folder


def test_a_job_that_still_runs_is_refused_in_one_line(tmp_path):
    job = _job(tmp_path / "job", json.dumps({"wandb": {"id": "abc123", "project": "grpo-exp"}}))
    with JobFolder(job).lock():  # as the running job holds it
        result = repair(job)
    assert result.returncode == 2, result.stderr[-3000:]
    (line,) = lines(result.stderr)
    assert line == f"error: {job} is in use by the job of pid {os.getpid()} on {os.uname().nodename}: " + (
        "repair it once the job has ended"
    )
    assert not (job / "wandb").exists() and not result.stdout


def test_a_job_without_a_wandb_run_says_so(tmp_path):
    job = _job(tmp_path / "job", json.dumps({"provenance": {}}))
    result = repair(job)
    assert result.returncode == 0, result.stderr[-3000:]
    assert lines(result.stdout) == [
        f"{job}: no W&B run to repair (run_info.json names none: logger=none, or W&B never opened)"
    ]


def test_bad_folders_are_one_line_each_naming_them(tmp_path):
    damaged = _job(tmp_path / "damaged", '{"wandb": {"id": "abc1')
    empty = tmp_path / "empty"
    empty.mkdir()
    result = repair(damaged, empty, tmp_path / "missing")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = lines(result.stderr)
    assert len(errors) == 3 and not result.stdout, errors
    assert errors[0].startswith(f"error: {damaged / 'run_info.json'} can't be read")
    assert errors[1].startswith(f"error: {empty} is not a job folder") and errors[2].startswith(
        f"error: {tmp_path / 'missing'} is not a job folder"
    )


def test_a_sweep_folder_repairs_each_of_its_jobs(tmp_path):
    jobs = [_job(tmp_path / str(n), json.dumps({"provenance": {}})) for n in range(2)]
    result = repair(tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line.split(":")[0] for line in lines(result.stdout)] == [str(job) for job in jobs]


class FakeRun:
    """An online run as ``continue_history`` sees it: its summary, and what is logged to it."""

    def __init__(self, summary: dict) -> None:
        self.summary, self.logged = summary, []

    def log(self, data: dict, step: int | None = None) -> None:
        self.logged.append((data, step))


def test_online_the_resumed_runs_last_step_says_what_is_missing(tmp_path):
    from grpo_exp.tracking.wandb_run import continue_history

    rows = [{"step": s, "reward": s / 10} for s in range(1, 6)]
    evaluations = [{"step": s, "eval/reward": 0.5, "epoch": 0.1} for s in (0, 4)]
    run = FakeRun({"train/global_step": 3, "summary/status": "completed"})

    assert continue_history(run, "online", tmp_path, None, rows, evaluations) == 5

    assert run.logged[0] == ({"repair/from_step": 3}, None)
    sent = [(data["train/global_step"], "eval/reward" in data) for data, _ in run.logged[1:]]
    assert sent == [(4, False), (4, True), (5, False)], "a step's evaluation after its training row, as live"
    assert run.logged[2][0] == {"eval/reward": 0.5, "train/epoch": 0.1, "train/global_step": 4}

    resumed = FakeRun({"train/global_step": 3})
    assert continue_history(resumed, "online", tmp_path, 4, rows) == 4  # the resume path: up to its checkpoint
    assert [data for data, _ in resumed.logged] == [
        {"resume/from_step": 4},
        {"train/reward": 0.4, "train/global_step": 4},
    ]
