"""Held-out evaluation in a real, short run of the tiny model: metrics.jsonl, summary.json and the W&B run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_exp.tracking.metrics import read_eval_metrics, read_metrics
from tests.test_train_e2e import run_training
from tests.wandb_records import read_run

# evaluations at step 0 (eval_on_start, on by default), 2 (eval_steps) and 3 (the last step, not a multiple of 2)
STEPS = 3
RUN = (f"grpo.max_steps={STEPS}", "grpo.eval_steps=2", "dataset.eval_fraction=0.05")
EVAL_KEYS = ("eval/reward", "eval/reward_std", "eval/rewards/format/mean")


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eval_run")
    result = run_training(out, *RUN)
    assert result.returncode == 0, result.stderr[-3000:]
    (out.parent / "console.txt").write_text(result.stdout + result.stderr, encoding="utf-8")
    return out


def test_evaluations_are_rows_of_their_own_in_metrics_jsonl(eval_run):
    evaluations = read_eval_metrics(eval_run / "metrics.jsonl")
    assert [row["step"] for row in evaluations] == [0, 2, STEPS]
    for key in EVAL_KEYS:
        assert all(0 <= row[key] <= 1 for row in evaluations), key
    training = read_metrics(eval_run / "metrics.jsonl")
    assert [row["step"] for row in training] == list(range(1, STEPS + 1))
    assert not any(key.startswith("eval") for row in training for key in row)  # no pollution either way


def test_summary_holds_first_final_and_best_eval_reward_and_returns_it(eval_run):
    summary = json.loads((eval_run / "summary.json").read_text())
    rewards = [row["eval/reward"] for row in read_eval_metrics(eval_run / "metrics.jsonl")]
    assert summary["first_eval_reward"] == rewards[0] and summary["final_eval_reward"] == rewards[-1]
    assert summary["best_eval_reward"] == max(rewards) and summary["evaluations"] == len(rewards)
    assert summary["objective"] == "final_eval_reward" and summary["objective_value"] == rewards[-1]
    assert summary["base_eval_reward"] == rewards[0] and set(summary["base_eval_parts"]) == {"format"}  # step 0
    console = (eval_run.parent / "console.txt").read_text(encoding="utf-8")
    assert f"eval    {rewards[0]:.3f} -> {rewards[-1]:.3f} (held-out reward, base model -> after training; 3" in console


def test_the_wandb_run_logs_the_same_eval_keys(eval_run):
    (run_dir,) = (eval_run / "wandb").glob("offline-run-*")
    keys = read_run(run_dir).history_keys
    assert set(EVAL_KEYS) <= keys
    assert "train/reward" in keys and "eval/reward" in keys


@pytest.mark.e2e  # a second training run for one fallback branch
def test_without_held_out_prompts_the_objective_falls_back_to_training(tmp_path):
    out = tmp_path / "job"
    result = run_training(out, "grpo.max_steps=2", "dataset.eval_fraction=0", "logger=none")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert read_eval_metrics(out / "metrics.jsonl") == [] and summary["final_eval_reward"] is None
    assert summary["base_eval_reward"] is None
    assert summary["objective"] == "final_reward" and summary["objective_value"] == summary["final_reward"]
