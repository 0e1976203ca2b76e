"""monitor.stop_when_solved: a run whose reward stays at its ceiling ends early, saved and completed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from transformers import TrainerControl

from grpo_exp.config.schema import MonitorSettings
from grpo_exp.folder import JobFolder
from grpo_exp.tracking.metrics import read_eval_metrics
from grpo_exp.training.callbacks import SolvedStop
from tests.conftest import FIXTURES
from tests.test_train_e2e import run_training

CONSTANT = f"{FIXTURES / 'probe_rewards.py'}:constant"  # 1.0 for every completion: solved from the start


def logged(callback: SolvedStop, step: int, logs: dict, max_steps: int = 100) -> TrainerControl:
    control = TrainerControl()
    state = SimpleNamespace(global_step=step, max_steps=max_steps, is_world_process_zero=True)
    callback.on_log(SimpleNamespace(save_strategy="steps"), state, control, logs=logs)
    return control


def test_training_steps_at_the_ceiling_for_the_window_stop_the_run(tmp_path):
    stop = SolvedStop(JobFolder(tmp_path), MonitorSettings(stop_when_solved=True, solved_window=3), held_out=False)
    assert not logged(stop, 1, {"frac_solved": 1.0}).should_training_stop
    assert not logged(stop, 2, {"frac_solved": 0.9}).should_training_stop  # one miss starts the count again
    for step in (3, 4, 5):
        assert not logged(stop, step, {"frac_solved": 1.0}).should_training_stop
    control = logged(stop, 6, {"frac_solved": 1.0})  # solved from step 3 through 6: 3 steps back
    assert control.should_training_stop and control.should_save
    assert JobFolder(tmp_path).rows() == [{"step": 6, "stopped_solved": 6}]


def test_it_is_off_by_default_and_ignores_the_other_split(tmp_path):
    off = SolvedStop(JobFolder(tmp_path), MonitorSettings(solved_window=1), held_out=False)
    assert not any(logged(off, s, {"frac_solved": 1.0}).should_training_stop for s in range(1, 5))
    held_out = SolvedStop(JobFolder(tmp_path), MonitorSettings(stop_when_solved=True, solved_window=1), held_out=True)
    assert not any(logged(held_out, s, {"frac_solved": 1.0}).should_training_stop for s in range(1, 5))
    assert not logged(held_out, 100, {"eval_frac_solved": 1.0}, max_steps=100).should_training_stop  # the last step


@pytest.mark.e2e  # a real run to the ceiling; the stop itself is unit-tested above
def test_a_solved_tiny_model_run_stops_early_with_a_checkpoint(tmp_path):
    out = tmp_path / "job"
    result = run_training(
        out,
        "logger=none",
        "grpo.max_steps=20",
        "grpo.eval_steps=2",
        "dataset.eval_fraction=0.05",
        "reward=custom",
        f"reward.parts.main.fn={CONSTANT}",
        "reward.parts.main.ceiling=1",
        "monitor.stop_when_solved=true",
        "monitor.solved_window=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    # held out: solved at step 0 (the base model's evaluation) and at step 2, two steps apart
    assert [row["step"] for row in read_eval_metrics(out / "metrics.jsonl")] == [0, 2]
    assert summary["status"] == "completed" and summary["steps"] == 2 and summary["stopped_solved_at"] == 2
    assert (out / "checkpoint-2").is_dir() and (out / "model").is_dir()
    assert "stopped early: the reward stayed at its ceiling" in result.stdout
