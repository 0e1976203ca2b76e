"""grpo.dynamic_sampling on the tiny model: the groups trained on never all score alike (solved ones
neither, unless grpo.dynamic_sampling_keep_solved), on one process or several (fake ranks here; two
real ones in tests/test_multiprocess.py).

The unit tests give DynamicSampling fake generations through the interface training/trl_private.py's
TrlGeneration gives it over the real TRL; tests/test_trl_contract.py checks that interface, and the
numbers dynamic sampling logs, against the installed TRL."""

from __future__ import annotations

import json
import logging
import math
import statistics
import threading
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from grpo_exp.tracking.metrics import read_metrics
from grpo_exp.training.dynamic_sampling import DynamicSampling, _merged, _rows, groups_to_draw
from tests.test_long_runs import run

DROPPED, ROUNDS, TRAINED_ZERO = (f"dynamic_sampling/{k}" for k in ("dropped_share", "rounds", "trained_zero_std_share"))
NAN = math.nan
# What TRL (and rewards/ through log_metric) append once per generation round, and one key that
# describes the generated completions, which stays per round.
REWARD_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "rewards/p/mean", "rewards/p/std", "rewards/p/group_std")
REWARD_KEYS += ("frac_solved", "frac_solved_groups")
GENERATED_KEY = "completions/mean_length"


class FakeTrl:
    """What DynamicSampling calls (trl_private.TrlGeneration's methods, GRPOTrainer's public attributes):
    each generation scores its rows with the next of ``rounds`` (completions by parts; NaN: unscored)
    and appends one value per key, as TRL does."""

    def __init__(self, rounds: list[list[list[float]]], group: int = 2, step: int = 0) -> None:
        self.queue = [torch.tensor(r, dtype=torch.float32) for r in rounds]
        self.num_generations = group
        self.reward_weights = torch.tensor([1.0])
        self.reward_func_names = ["p"]
        self.multi_objective_aggregation, self.scale_rewards = "sum_then_normalize", "group"
        self.metrics: defaultdict[str, list[float]] = defaultdict(list)
        self.model = SimpleNamespace(training=True)
        self.accelerator = SimpleNamespace(num_processes=1, process_index=0)
        self.processing_class = SimpleNamespace(pad_token_id=0)
        self.args = SimpleNamespace(seed=0)
        self.state = SimpleNamespace(global_step=step)
        self.train_dataset = [{"prompt": f"p{i}"} for i in range(1000)]
        self.drawn: list[list[str]] = []  # each generation's prompts

    def step_metrics(self) -> dict[str, list[float]]:
        return self.metrics

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> tuple[dict[str, Any], torch.Tensor]:
        self.drawn.append([row["prompt"] for row in inputs])
        scores = self.queue.pop(0)
        for key in (*REWARD_KEYS, GENERATED_KEY):
            self.metrics[key].append(len(self.drawn) * 100.0)  # this round's, whatever it is
        rows = len(inputs)
        first = sum(len(d) for d in self.drawn[:-1])  # each row's id: its place among all generated
        ids = torch.arange(first, first + rows).unsqueeze(1)
        output = {
            "prompt_ids": ids,
            "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
            "completion_ids": ids,
            "completion_mask": torch.ones(rows, 1, dtype=torch.long),
            "advantages": scores[:, 0],
            "num_items_in_batch": torch.tensor(rows),
        }
        return output, scores


class Sampler(DynamicSampling, FakeTrl):
    pass


def sampler(
    rounds: list[list[list[float]]],
    ceiling: float | None = 1.0,
    keep_solved: bool = False,
    max_rounds: int = 4,
    **kwargs: Any,
) -> Sampler:
    trainer = Sampler(rounds, **kwargs)
    trainer.enable_dynamic_sampling(max_rounds=max_rounds, ceilings=[ceiling], keep_solved=keep_solved)
    return trainer


def inputs(groups: int, group: int = 2) -> list[dict[str, str]]:
    return [{"prompt": f"q{g}"} for g in range(groups) for _ in range(group)]


def test_the_steps_reward_numbers_describe_the_groups_trained_on():
    """Issue 39: they were the means of each round's numbers, dropped groups in; other keys stay per round."""
    trainer = sampler([[[1.0], [0.0], [0.9], [0.9]], [[0.2], [0.8]]])  # round 1 drops (0.9, 0.9); round 2 refills
    metrics = trainer.step_metrics()
    metrics["reward"].append(-1.0)  # an earlier generation batch of the same step
    trainer.generation_batch(inputs(2))
    trained = [1.0, 0.0, 0.2, 0.8]
    assert metrics["reward"] == [-1.0, pytest.approx(statistics.mean(trained))]
    assert metrics["reward_std"] == metrics["rewards/p/std"] == [pytest.approx(statistics.stdev(trained))]
    assert metrics["rewards/p/mean"] == [pytest.approx(0.5)] and metrics["frac_reward_zero_std"] == [0.0]
    assert metrics["rewards/p/group_std"] == [pytest.approx((0.5 + 0.3) / 2)]  # population std per group, as compose's
    assert metrics["frac_solved"] == [0.25] and metrics["frac_solved_groups"] == [0.0]  # the 1.0 is at the ceiling
    assert metrics[GENERATED_KEY] == [100.0, 200.0]  # every completion generated, round by round
    assert metrics[DROPPED] == [1 / 3] and metrics[ROUNDS] == [1.0]


def test_a_group_nothing_scored_is_not_solved_and_one_scored_completion_is_no_spread():
    """Issue 39: a group of unscored completions counted as solved (``all([])``), unlike rewards/solved.py,
    and was trained on; with one completion scored (TRL's baseline leaves the other out) it has no advantage."""
    unscored, one_scored, mixed = [[NAN], [NAN]], [[0.5], [NAN]], [[1.0], [0.0]]
    trainer = sampler([unscored + one_scored + mixed, [[0.0], [1.0], [0.3], [0.6]]])
    assert not trainer._solved(torch.tensor(unscored)) and trainer._solved(torch.tensor([[1.0], [NAN]]))
    batch = trainer.generation_batch(inputs(3))
    assert batch["prompt_ids"].flatten().tolist() == [4, 5, 6, 7, 8, 9]  # the mixed group, then round 2's two
    assert trainer.step_metrics()[DROPPED] == [2 / 5]


@pytest.mark.parametrize(
    ("aggregation", "scale", "zero_std_share"),
    [("sum_then_normalize", "group", 0.5), ("sum_then_normalize", "batch", 0.0), ("normalize_then_sum", "group", 0.0)],
)
def test_frac_reward_zero_std_is_per_group_or_over_the_batch_as_trl_judges_it(aggregation, scale, zero_std_share):
    trainer = sampler([[[1.0], [1.0], [0.0], [1.0]]], keep_solved=True)  # a solved group (kept) and a mixed one
    trainer.multi_objective_aggregation, trainer.scale_rewards = aggregation, scale
    trainer.generation_batch(inputs(2))
    assert trainer.step_metrics()["frac_reward_zero_std"] == [zero_std_share]


def test_each_generation_batch_of_a_step_refills_from_prompts_of_its_own():
    """Issue 39: the refill's seed changed only with the step, so a step's batches (gradient accumulation
    over steps_per_generation) drew the same prompts; a resumed step draws what it drew before."""
    alike_then_mixed = [[[0.5], [0.5]], [[0.0], [1.0]]]
    trainer = sampler(alike_then_mixed * 2, step=3)
    trainer.generation_batch(inputs(1))
    trainer.generation_batch(inputs(1))
    first, second = trainer.drawn[1], trainer.drawn[3]
    assert first != second
    resumed = sampler(alike_then_mixed, step=3)
    resumed.generation_batch(inputs(1))
    assert resumed.drawn[1] == first


SOLVED_THEN_MIXED = [[[1.0], [1.0], [0.0], [1.0]], [[0.3], [0.6]]]  # round 1: a solved group, a mixed one


def test_solved_groups_are_dropped_and_refilled_as_dapo_does():
    """Issue 38: a solved group (all at the ceiling) was trained on, with no advantage anywhere."""
    trainer = sampler(SOLVED_THEN_MIXED)
    batch = trainer.generation_batch(inputs(2))
    metrics = trainer.step_metrics()
    assert batch["prompt_ids"].flatten().tolist() == [2, 3, 4, 5]  # round 1's mixed group, round 2's
    assert metrics[DROPPED] == [1 / 3] and metrics[ROUNDS] == [1.0] and metrics[TRAINED_ZERO] == [0.0]
    assert metrics["frac_reward_zero_std"] == [0.0] and metrics["frac_solved_groups"] == [0.0]


def test_keep_solved_trains_them_and_counts_them_among_the_groups_that_scored_alike():
    trainer = sampler(SOLVED_THEN_MIXED[:1], keep_solved=True)
    batch = trainer.generation_batch(inputs(2))
    metrics = trainer.step_metrics()
    assert batch["prompt_ids"].flatten().tolist() == [0, 1, 2, 3] and metrics[ROUNDS] == [0.0]
    assert metrics[DROPPED] == [0.0] and metrics[TRAINED_ZERO] == [0.5] == metrics["frac_reward_zero_std"]


def test_groups_that_fill_the_batch_when_the_rounds_run_out_are_counted_and_logged(caplog):
    alike = [[0.5], [0.5], [1.0], [1.0]]  # one unsolved, one solved: both alike
    trainer = sampler([alike, [[0.2], [0.2], [0.0], [0.0]]], max_rounds=1, step=6)
    with caplog.at_level(logging.WARNING, logger="grpo_exp.training.dynamic_sampling"):
        trainer.generation_batch(inputs(2))
    metrics = trainer.step_metrics()
    assert metrics[ROUNDS] == [1.0] and metrics[DROPPED] == [1.0] and metrics[TRAINED_ZERO] == [1.0]
    (record,) = caplog.records
    assert "step 7's batch filled 2 of its 2 groups" in record.getMessage() and "1 extra round" in record.getMessage()
    trainer = sampler(SOLVED_THEN_MIXED)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="grpo_exp.training.dynamic_sampling"):
        trainer.generation_batch(inputs(2))
    assert not caplog.records, "the rounds did not run out"


@pytest.mark.parametrize(
    ("missing", "group", "processes", "drawn"),
    [(3, 4, 1, 3), (1, 4, 2, 1), (1, 3, 2, 2), (3, 3, 2, 4), (1, 6, 4, 2), (5, 2, 8, 8)],
)
def test_a_round_draws_groups_whose_rows_split_evenly_over_the_ranks(missing, group, processes, drawn):
    assert groups_to_draw(missing, group, processes) == drawn
    assert drawn * group % processes == 0


class World:
    """What torch.distributed gives two ranks, for threads: every rank's value, in rank order."""

    def __init__(self, size: int) -> None:
        self.barrier = threading.Barrier(size, timeout=30)  # a rank that skips a round breaks it: no hang
        self.slots: list[Any] = [None] * size

    def exchange(self, rank: int, value: Any) -> list[Any]:
        self.slots[rank] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()
        return values


class RankTrl(FakeTrl):
    """FakeTrl as one of several ranks: it generates its share of the rows (a higher rank's
    completions one token wider), scores come back for every rank's rows as TRL gathers them, and
    row ids are places in the whole batch."""

    def __init__(self, rounds: list[list[list[float]]], world: World, rank: int, group: int) -> None:
        super().__init__(rounds, group=group)
        self.world, self.rank = world, rank
        self.accelerator = SimpleNamespace(num_processes=len(world.slots), process_index=rank)

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> tuple[dict[str, Any], torch.Tensor]:
        self.drawn.append([row["prompt"] for row in inputs])
        scores = self.queue.pop(0)
        for key in (*REWARD_KEYS, GENERATED_KEY):
            self.metrics[key].append(len(self.drawn) * 100.0)
        rows, processes = len(inputs), self.accelerator.num_processes
        first = sum(len(d) for d in self.drawn[:-1]) * processes + self.rank * rows
        ids = torch.arange(first, first + rows).unsqueeze(1).repeat(1, 1 + self.rank)
        mask = torch.ones_like(ids)
        output = {
            "prompt_ids": ids[:, :1],
            "prompt_mask": mask[:, :1],
            "completion_ids": ids,
            "completion_mask": mask,
            "advantages": scores[self.rank * rows : (self.rank + 1) * rows, 0],
            "num_items_in_batch": mask.sum(),
        }
        return output, scores


class Rank(DynamicSampling, RankTrl):
    def _every_rank(self, output: dict[str, Any]) -> dict[str, Any]:
        return _merged(self.world.exchange(self.rank, output), pad=0)


def test_two_ranks_pick_the_same_groups_of_the_whole_batch_and_each_keeps_an_equal_slice():
    """Issue 38: groups of 4 over 2 ranks of 6 rows, so the middle group spans both ranks. Round 1
    keeps the first group; round 2 draws the 2 missing groups alike on both ranks, 4 rows each."""
    mixed, alike = [[0.0], [1.0], [0.5], [0.5]], [[0.2]] * 4
    rounds = [mixed + alike + alike, mixed + mixed]
    world = World(2)
    ranks = [Rank(rounds, world, r, group=4) for r in (0, 1)]
    for rank in ranks:
        rank.enable_dynamic_sampling(max_rounds=4, ceilings=[1.0])
    batches: list[Any] = [None, None]

    def train(rank: Rank) -> None:
        batches[rank.rank] = rank.generation_batch(inputs(3, group=4)[rank.rank * 6 : rank.rank * 6 + 6])

    threads = [threading.Thread(target=train, args=(rank,)) for rank in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(batch is not None for batch in batches), "a rank failed or hung"
    ids = [batch["completion_ids"][:, 0].tolist() for batch in batches]
    assert ids == [[0, 1, 2, 3, 12, 13], [14, 15, 16, 17, 18, 19]]  # round 1's group 0, round 2's two groups
    assert batches[0]["completion_ids"].shape == batches[1]["completion_ids"].shape == (6, 2)  # padded alike
    assert [b["completion_mask"].sum().item() for b in batches] == [6, 2 + 4 * 2]
    assert [int(b["num_items_in_batch"]) for b in batches] == [16, 16]  # the whole batch's loss tokens
    assert batches[0]["advantages"].tolist() == [0.0, 1.0, 0.5, 0.5, 0.0, 1.0]
    round_two = [rank.drawn[1] for rank in ranks]
    assert len(round_two[0]) == len(round_two[1]) == 4 and round_two[0][0] != round_two[1][0]
    assert round_two[0][:4] == [round_two[0][0]] * 4 and round_two[1] == [round_two[1][0]] * 4  # a group each
    metrics = [rank.step_metrics() for rank in ranks]
    assert metrics[0] == metrics[1] and metrics[0][TRAINED_ZERO] == [0.0] and metrics[0][DROPPED] == [2 / 5]


def test_the_token_count_leaves_tool_results_out_as_trl_does():
    """Issue 39: the recount took every completion token, tool results (tool_mask 0) too."""
    batch = {
        "completion_ids": torch.tensor([[1, 2, 3], [4, 5, 0]]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
        "tool_mask": torch.tensor([[1, 0, 1], [1, 1, 1]]),
        "advantages": torch.tensor([0.5, -0.5]),
        "num_items_in_batch": torch.tensor(4),
    }
    merged = _merged([_rows(batch, slice(0, 1)), _rows(batch, slice(1, 2))], pad=0)
    assert int(merged["num_items_in_batch"]) == 4


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
    # TRL's numbers describe the groups trained on (issue 39): solved groups are dropped too (issue 38)
    assert all(row["frac_reward_zero_std"] == 0 and row.get("frac_solved_groups", 0) == 0 for row in rows)
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
