"""The rules around resuming, without training: which checkpoint, which overrides, which steps stay."""

from __future__ import annotations

import json
import math
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.config.schema import MonitorSettings
from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder
from grpo_exp.job import resume
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.tracking.outcome import format_outcome
from grpo_exp.training import checkpoints
from grpo_exp.training.stops import StopRequest
from tests.conftest import ROOT


def fake_checkpoint(job: Path, step: int, payload: bytes = b"\0" * 16) -> Path:
    """A checkpoint folder with a valid one-tensor safetensors file, sealed as CheckpointSeal does."""
    path = job / f"checkpoint-{step}"
    path.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [len(payload) // 4], "data_offsets": [0, len(payload)]}})
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + payload)
    (path / "trainer_state.json").write_text("{}")
    files = {p.name: p.stat().st_size for p in path.iterdir()}
    (path / checkpoints.SEAL_FILE).write_text(json.dumps({"step": step, "files": files, "monitor": {}}))
    return path


def test_latest_whole_checkpoint_is_chosen(tmp_path):
    fake_checkpoint(tmp_path, 4)
    fake_checkpoint(tmp_path, 8)
    assert checkpoints.latest(tmp_path).step == 8


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: (p / checkpoints.SEAL_FILE).unlink(), "not finished"),
        (lambda p: (p / "trainer_state.json").unlink(), "trainer_state.json is missing"),
        (lambda p: (p / "trainer_state.json").write_text("{ }"), "trainer_state.json is 3 bytes, 2 when saved"),
        (lambda p: (p / checkpoints.SEAL_FILE).write_text("{"), "unreadable"),
    ],
)
def test_damaged_checkpoint_is_passed_over_with_the_reason(tmp_path, caplog, damage, reason):
    fake_checkpoint(tmp_path, 4)
    damage(fake_checkpoint(tmp_path, 8))
    assert checkpoints.latest(tmp_path, set_aside=True).step == 4
    assert "checkpoint-8 can't be used: " in caplog.text and reason in caplog.text
    assert (tmp_path / "damaged-checkpoint-8").is_dir() and not (tmp_path / "checkpoint-8").exists()


def test_safetensors_with_the_right_size_but_a_broken_header_is_damaged(tmp_path):
    path = fake_checkpoint(tmp_path, 4)
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[9] = ord("#")  # same size, header no longer JSON
    weights.write_bytes(bytes(data))
    assert checkpoints.problem(path) == "model.safetensors is damaged"


def test_no_whole_checkpoint_means_none(tmp_path):
    (fake_checkpoint(tmp_path, 4) / checkpoints.SEAL_FILE).unlink()
    assert checkpoints.latest(tmp_path) is None


@pytest.mark.parametrize("form", ["grpo.beta=0.1", "+grpo.beta=0.1", "++grpo.beta=0.1", "model=qwen2_5_0_5b_instruct"])
def test_overrides_that_change_the_experiment_are_refused_in_every_form(form):
    with pytest.raises(UserError, match=r"would change the experiment: .*beta|model="):
        resume.check_overrides("outputs/x", ["grpo.max_steps=300", form])


def test_longer_training_and_reporting_may_change_on_resume():
    resume.check_overrides("outputs/x", ["grpo.max_steps=300", "logger.mode=offline", "hydra.run.dir=x", "threads=1"])


def test_rewind_keeps_steps_up_to_the_checkpoint_and_drops_torn_lines(tmp_path):
    metrics, profiles = tmp_path / "metrics.jsonl", tmp_path / "adaptive_profiles.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "reward": 0.1}) + "\n" for s in range(1, 7)) + '{"step": 7, "rew')
    profiles.write_text("".join(json.dumps({"step": s, "num_generations": 4}) + "\n" for s in (0, 3, 6)))
    JobFolder(tmp_path).rewind(4)
    assert [json.loads(line)["step"] for line in metrics.read_text().splitlines()] == [1, 2, 3, 4]
    assert [json.loads(line)["step"] for line in profiles.read_text().splitlines()] == [0, 3]


def test_a_metrics_line_that_is_not_utf8_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    """Issue 60: a metrics.jsonl with non-UTF-8 bytes crashed `resume=` (and the report) with UnicodeDecodeError."""
    metrics = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "reward": 0.1}).encode() for s in range(1, 6)]
    lines[2] = b'{"step": 3, "reward": 0.1, "note": "\xff\xfe"}'
    metrics.write_bytes(b"\n".join(lines) + b"\n")
    folder = JobFolder(tmp_path)
    with caplog.at_level("WARNING"):
        assert [row["step"] for row in folder.rows()] == [1, 2, 4, 5]
        folder.rewind(4)
    assert f"{metrics}: line 3 is not UTF-8 text; skipped" in caplog.text
    assert [json.loads(line)["step"] for line in metrics.read_text(encoding="utf-8").splitlines()] == [1, 2, 4]


def test_differences_name_changed_keys_but_not_adjustable_ones(settings):
    old = settings()
    new = settings("grpo.beta=0.1", "grpo.max_steps=500", "reward.parts.format.weight=2")
    assert resume.differences(old, new) == ["grpo.beta", "reward.parts.format.weight"]


def test_monitor_state_survives_a_checkpoint():
    monitor = HealthMonitor(MonitorSettings(window=2, kl_threshold=0.1))
    for step in (1, 2):
        monitor.observe(step, {"reward": 0.5, "kl": 0.3, "rewards/tone/group_std": 0.2})
    restored = HealthMonitor(MonitorSettings(window=2, kl_threshold=0.1))
    restored.load_state_dict(json.loads(json.dumps(monitor.state_dict())))
    assert [a.kind for a in restored.alerts] == ["kl_drift"]
    assert restored.observe(3, {"reward": 0.5, "kl": 0.3}) == [], "an alert raised before the stop is not repeated"
    assert list(restored.windows["reward"]) == [0.5, 0.5] and restored.windows["reward"].maxlen == 2
    assert restored.varied == {"rewards/tone/group_std"}, "a set survives the JSON of a checkpoint"


def test_second_signal_stops_at_once():
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs as a background job
    request = StopRequest()
    with request.listening():
        request.defer()  # training has started: the first signal waits for the step's checkpoint
        os.kill(os.getpid(), signal.SIGTERM)
        assert request.signum == signal.SIGTERM and request.exit_code == 143
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before, "handlers restored after training"


def test_a_signal_before_training_stops_at_once():
    from grpo_exp.training.stops import StoppedBeforeTraining

    request = StopRequest()
    with request.listening(), pytest.raises(StoppedBeforeTraining):
        os.kill(os.getpid(), signal.SIGTERM)  # nothing to checkpoint yet: the load is abandoned
    assert request.signum == signal.SIGTERM and request.exit_code == 143


def test_outcome_block_names_status_reward_kl_alerts_and_folder(tmp_path):
    summary = {
        "status": "completed",
        "steps": 150,
        "resumed_from": 100,
        "first_reward": 0.1,
        "final_reward": 0.94,
        "peak_reward": 1.0,
        "mean_kl": 0.5,
        "max_kl": 1.2,
        "steps_above_kl_threshold": 120,
        "alerts": [{"kind": "kl_drift", "step": 10, "message": "..."}],
    }
    text = format_outcome(summary, tmp_path, "saved offline; upload with: wandb sync x")
    assert "150 (resumed from step 100)" in text and "0.100 -> 0.940" in text and "kl_drift (step 10)" in text
    assert str(tmp_path) in text and "wandb sync x" in text


def test_outcome_block_shows_a_nan_final_evaluation_as_nan(tmp_path):
    """Issue 60: the final evaluation is no longer replaced by an earlier one; a NaN one must still print."""
    from grpo_exp.tracking.metrics import summarize_eval

    for evaluations, shown in (([0.4, math.nan], "0.400 -> nan"), ([math.nan], "none -> nan")):
        held_out = summarize_eval([{"step": 5 * i + 5, "eval/reward": v} for i, v in enumerate(evaluations)])
        assert shown in format_outcome({"status": "completed", **held_out}, tmp_path, None)


def run_py(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "run.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def job_folder(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "config.yaml").write_text("seed: 42\n")
    return job


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["resume=nowhere"], "resume=nowhere: not a job folder"),
        (["resume=auto"], "resume=auto continues the run in hydra.run.dir; add hydra.run.dir="),
        (["-m", "resume=auto", "seed=1,2"], "add hydra.sweep.dir="),
        (["-m", "resume={job}"], "continues one job; to resume a sweep"),
        (["resume={job}", "+grpo.beta=0.2"], "would change the experiment: +grpo.beta=0.2"),
        (["resume={job}", "hydra.run.dir=elsewhere"], "leave out hydra.run.dir"),
        (
            ["resume={job}", "logger=nowhere"],
            "no logger config named 'nowhere'; did you mean logger=none? available: none, trackio, wandb",
        ),
        (["+resume={job}"], "Could not append to config. An item is already at 'resume'"),
    ],
)
def test_bad_resume_commands_get_one_line_before_anything_loads(tmp_path, args, message):
    job = job_folder(tmp_path)
    result = run_py(*(a.format(job=job) for a in args))
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_fresh_run_refuses_a_folder_that_holds_a_run(tmp_path):
    job = job_folder(tmp_path)
    (job / "metrics.jsonl").write_text('{"step": 1, "reward": 0.1}\n')
    result = run_py(f"hydra.run.dir={job}", "logger=none")
    assert result.returncode == 2
    assert f"{job} already holds a run; continue it with resume={job}" in result.stderr
    assert (job / "metrics.jsonl").read_text() == '{"step": 1, "reward": 0.1}\n', "nothing written is lost"
