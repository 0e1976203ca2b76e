"""Long runs, for real on the tiny model: a killed run resumes, Ctrl-C stops cleanly, a sweep resumes.

Each test starts ``run.py`` as a user would, in its own process group (as a terminal's Ctrl-C
reaches the whole group), stops it at a chosen point, and resumes it.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_exp.tracking.metrics import read_metrics
from grpo_exp.tracking.wandb_offline import history_step, item_key, records
from grpo_exp.training import checkpoints
from tests.conftest import ROOT
from tests.wandb_records import read_run

# every test here trains and resumes for real (8 minutes of CPU on 2 cores): make test-e2e
pytestmark = pytest.mark.e2e

WAIT_S = 600  # generous: the tiny model trains a step in well under a second on a quiet machine


def start(*overrides: str, multirun: bool = False) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", *(["-m"] if multirun else []), *overrides]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def run(*overrides: str, multirun: bool = False) -> subprocess.CompletedProcess[str]:
    process = start(*overrides, multirun=multirun)
    out, err = process.communicate(timeout=WAIT_S)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def wait_for(condition, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"run.py ended (code {process.returncode}) first: {process.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def last_step(job: Path) -> int:
    return max((row["step"] for row in read_metrics(job / "metrics.jsonl")), default=0)


def wandb_history(job: Path) -> list[tuple[list[int], list[int]]]:
    """Per offline W&B run file, oldest first: W&B's own steps, and the training steps logged."""
    files = []
    for path in sorted(job.glob("wandb/offline-run-*/*.wandb")):
        rows = [record.history for record in records(path) if record.WhichOneof("record_type") == "history"]
        items = [{item_key(item): item.value_json for item in row.item} for row in rows]
        trained = [int(r["train/global_step"]) for r in items if "train/reward" in r]
        files.append(([history_step(row) for row in rows], trained))
    return files


def test_killed_run_resumes_every_step_once_into_the_same_wandb_run(tmp_path):
    job = tmp_path / "job"
    steps = ("grpo.max_steps=14", "grpo.save_steps=4", "optimizer.lr=1e-3", "logger.mode=offline")
    process = start(*steps, f"hydra.run.dir={job}")
    second = job / "checkpoint-8" / checkpoints.SEAL_FILE
    wait_for(lambda: second.is_file() and last_step(job) >= 9, process)
    process.kill()  # SIGKILL, as the OOM killer does: no chance to save anything more
    process.wait()
    assert last_step(job) > 8, "killed after steps beyond the checkpoint, which must be trained again"

    resumed = run(f"resume={job}")

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = read_metrics(job / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 15))
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from"] == 8
    # Continued from the checkpoint, not from the base model: a fresh policy starts at KL 0.
    assert rows[8]["kl"] > 0.0
    runs = sorted(job.glob("wandb/offline-run-*"))
    assert len(runs) == 2 and len({read_run(r).run_id for r in runs}) == 1
    (steps_before, trained_before), (steps_after, trained_after) = wandb_history(job)
    assert min(steps_after) > max(steps_before), "wandb sync keeps the resumed rows only if their steps follow"
    assert trained_before + trained_after == list(range(1, 15)), "every step once in W&B, none lost or repeated"
    info = json.loads((job / "run_info.json").read_text())
    assert info["resumes"][0]["from_step"] == 8 and info["wandb"]["id"] == read_run(runs[0]).run_id


def test_ctrl_c_stops_after_the_step_with_a_checkpoint_and_resumes(tmp_path):
    job = tmp_path / "job"
    process = start("grpo.max_steps=12", "grpo.save_steps=100", "logger.mode=offline", f"hydra.run.dir={job}")
    wait_for(lambda: last_step(job) >= 3, process)
    signalled_at = last_step(job)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=WAIT_S)

    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert signalled_at <= summary["steps"] <= signalled_at + 2  # the step under way, then stop
    checkpoint = checkpoints.latest(job)
    assert checkpoint is not None and checkpoint.step == summary["steps"]
    assert (job / "model" / "model.safetensors").is_file()
    assert f"resume with: python run.py resume={job}" in err
    (first_run,) = job.glob("wandb/offline-run-*")
    assert read_run(first_run).exit_code == 130

    resumed = run(f"resume={job}")

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == list(range(1, 13))
    assert "status  completed" in resumed.stdout


def test_damaged_latest_checkpoint_falls_back_to_the_one_before(tmp_path, caplog):
    job = tmp_path / "job"
    done = run("grpo.max_steps=6", "grpo.save_steps=3", "logger=none", f"hydra.run.dir={job}")
    assert done.returncode == 0, done.stderr[-3000:]
    weights = job / "checkpoint-6" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # cut short, as a full disk or a killed copy leaves it

    assert checkpoints.latest(job).step == 3
    assert "checkpoint-6 can't be used: model.safetensors is" in caplog.text

    extended = run(f"resume={job}", "grpo.max_steps=8")

    assert extended.returncode == 0, extended.stderr[-3000:]
    assert "checkpoint-6 can't be used" in extended.stderr
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == list(range(1, 9))
    assert json.loads((job / "summary.json").read_text())["resumed_from"] == 3
    assert (job / "damaged-checkpoint-6").is_dir(), "set aside, not deleted"


def test_stopped_sweep_resumes_only_what_was_left(tmp_path):
    sweep_dir = tmp_path / "sweep"
    sweep = ("grpo.num_generations=4,6", "optimizer.lr=1e-3,2e-3", "grpo.hold_fixed=prompts", "grpo.max_steps=5")
    command = (*sweep, "grpo.save_steps=2", "logger=none", f"hydra.sweep.dir={sweep_dir}")
    process = start(*command, multirun=True)
    wait_for(lambda: last_step(sweep_dir / "2") >= 1, process)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 130, err[-3000:]
    assert "resume=auto" in err and not (sweep_dir / "3").exists()
    finished = {job: (sweep_dir / job / "metrics.jsonl").read_text() for job in ("0", "1")}

    resumed = run(*command, "resume=auto", multirun=True)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for job, text in finished.items():
        assert (sweep_dir / job / "metrics.jsonl").read_text() == text, f"job {job} ran again"
    summaries = [json.loads((sweep_dir / str(j) / "summary.json").read_text()) for j in range(4)]
    assert [s["status"] for s in summaries] == ["completed"] * 4
    assert "resumed_from" in summaries[2] and "resumed_from" not in summaries[3]
    with (sweep_dir / "report" / "report.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == 4


def test_same_seed_same_rewards_and_a_reproducibility_record(tmp_path):
    jobs = [tmp_path / "a", tmp_path / "b"]
    for job in jobs:
        done = run("grpo.max_steps=3", "grpo.save_steps=0", "logger=none", "save_model=false", f"hydra.run.dir={job}")
        assert done.returncode == 0, done.stderr[-3000:]
    first, second = (read_metrics(job / "metrics.jsonl") for job in jobs)
    assert [(r["reward"], r["kl"], r["loss"]) for r in first] == [(r["reward"], r["kl"], r["loss"]) for r in second]
    record = json.loads((jobs[0] / "run_info.json").read_text())["provenance"]
    assert record["seed"] == 42 and record["device"].startswith("cpu")
    assert {"torch", "transformers", "trl", "peft", "hydra-core", "wandb"} <= set(record["packages"])
    assert len(record["git"]["commit"]) == 40 and isinstance(record["git"]["dirty"], bool)
    assert "grpo.max_steps=3" in record["command"]


def submitit_task(sweep_dir: Path) -> int | None:
    """The pid of the process submitit's local executor runs the job in, once it has started."""
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and "submitit.core._submit" in command and str(sweep_dir) in command:
            return int(proc.name)
    return None


def test_preempted_submitit_job_checkpoints_is_requeued_and_resumes(tmp_path):
    sweep_dir = tmp_path / "sweep"
    command = ("hydra/launcher=submitit_local", "resume=auto", "grpo.max_steps=10", "grpo.save_steps=100")
    process = start(*command, "logger=none", "save_model=false", f"hydra.sweep.dir={sweep_dir}", multirun=True)
    job = sweep_dir / "0"
    wait_for(lambda: last_step(job) >= 3 and submitit_task(sweep_dir), process)
    os.kill(submitit_task(sweep_dir), signal.SIGUSR2)  # what SLURM sends before a time limit or pre-emption
    _, err = process.communicate(timeout=WAIT_S)

    assert process.returncode == 0, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from"] >= 3
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == list(range(1, 11))
    logs = "".join(p.read_text() for p in sweep_dir.glob(".submitit/*/*.err"))
    assert "pre-empted at step" in logs and "Requeued job" in logs


def test_a_run_updating_twice_per_generation_counts_every_step(tmp_path):
    """grpo.num_iterations=2 logs a reward only at the steps that generate (1, 3): the summary still
    counts the 4 steps trained, so resume=auto finds the run complete rather than training it again."""
    job = tmp_path / "job"
    job_args = ("grpo.max_steps=4", "grpo.num_iterations=2", "logger=none", "dataset.eval_fraction=0")
    first = run(*job_args, "save_model=false", f"hydra.run.dir={job}")
    assert first.returncode == 0, first.stderr[-3000:]
    assert [row["step"] for row in read_metrics(job / "metrics.jsonl") if "reward" in row] == [1, 3]
    assert json.loads((job / "summary.json").read_text())["steps"] == 4

    again = run(*job_args, "save_model=false", "resume=auto", f"hydra.run.dir={job}")

    assert again.returncode == 0, again.stderr[-3000:]
    assert "completed its 4 steps before; nothing to do" in again.stderr


def test_a_run_failed_after_its_last_checkpoint_resumes_without_training_past_max_steps(tmp_path):
    """A job marked failed after its checkpoint at grpo.max_steps (say, the disk filled while model/ was
    saved) is resumed: transformers would train a step of the epoch before it checks max_steps. It trains
    none, ends completed, and saves the checkpoint's weights as model/."""
    from safetensors.torch import load_file

    job, steps = tmp_path / "job", 2
    first = run(
        "logger=none", "save_model=false", "dataset.eval_fraction=0", f"grpo.max_steps={steps}", f"hydra.run.dir={job}"
    )
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    (job / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))  # as the failed save leaves it
    resumed = run(f"resume={job}", "save_model=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl") if "loss" in r] == list(range(1, steps + 1))
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"
    trained = load_file(job / f"checkpoint-{steps}" / "model.safetensors")
    saved = load_file(job / "model" / "model.safetensors")
    assert saved.keys() == trained.keys() and all(saved[k].equal(trained[k]) for k in trained)
