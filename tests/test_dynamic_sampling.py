"""grpo.dynamic_sampling on the tiny model: the groups trained on never all score alike (unless solved)."""

from __future__ import annotations

import json

import pytest
import torch

from grpo_exp.tracking.metrics import read_metrics
from grpo_exp.training.dynamic_sampling import _merged, _rows
from tests.test_long_runs import run

DROPPED, ROUNDS, TRAINED_ZERO = (f"dynamic_sampling/{k}" for k in ("dropped_share", "rounds", "trained_zero_std_share"))


def test_groups_from_two_rounds_merge_with_prompts_left_and_completions_right_padded():
    first = {
        "prompt_ids": torch.tensor([[5, 6], [5, 6]]),
        "prompt_mask": torch.ones(2, 2, dtype=torch.long),
        "completion_ids": torch.tensor([[1, 2, 3], [1, 2, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "advantages": torch.tensor([0.5, -0.5]),
        "num_items_in_batch": torch.tensor(5),
    }
    second = {
        "prompt_ids": torch.tensor([[7, 8, 9], [7, 8, 9]]),
        "prompt_mask": torch.ones(2, 3, dtype=torch.long),
        "completion_ids": torch.tensor([[4], [4]]),
        "completion_mask": torch.tensor([[1], [1]]),
        "advantages": torch.tensor([0.0, 0.0]),
        "num_items_in_batch": torch.tensor(2),
    }
    merged = _merged([_rows(first, slice(0, 2)), _rows(second, slice(0, 2))], pad=0)
    assert merged["prompt_ids"].tolist()[0] == [0, 5, 6] and merged["prompt_mask"].tolist()[0] == [0, 1, 1]
    assert merged["completion_ids"].tolist()[2] == [4, 0, 0] and merged["completion_mask"].tolist()[2] == [1, 0, 0]
    assert merged["advantages"].tolist() == [0.5, -0.5, 0.0, 0.0] and int(merged["num_items_in_batch"]) == 7


def test_dynamic_sampling_trains_no_group_that_scored_alike_and_logs_what_it_dropped(tmp_path):
    """The default task at num_generations=4 has many alike groups: some are dropped, none trained on."""
    job = tmp_path / "job"
    result = run(
        "logger=none",
        "dataset.eval_fraction=0",
        "save_model=false",
        "threads=1",
        "grpo.num_generations=4",
        "grpo.dynamic_sampling=true",
        "grpo.max_sampling_rounds=20",
        "grpo.max_steps=5",
        f"hydra.run.dir={job}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(job / "metrics.jsonl")
    assert len(rows) == 5 and all(row[TRAINED_ZERO] == 0 for row in rows)
    assert any(row[DROPPED] > 0 and row[ROUNDS] >= 1 for row in rows)  # without it, TRL's frac_reward_zero_std
    assert all(0 <= row[DROPPED] < 1 for row in rows)
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"


@pytest.mark.e2e  # a plain 2-step run, as every other training test runs without it
def test_without_dynamic_sampling_nothing_changes(tmp_path):
    job = tmp_path / "job"
    result = run(
        "logger=none",
        "dataset.eval_fraction=0",
        "save_model=false",
        "threads=1",
        "grpo.max_steps=2",
        f"hydra.run.dir={job}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not any(key.startswith("dynamic_sampling/") for row in read_metrics(job / "metrics.jsonl") for key in row)
