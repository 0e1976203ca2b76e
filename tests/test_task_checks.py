"""A generated task's config is refused in one line before the model loads where it could never work:
a curriculum that can't move up, task settings of the wrong type or that can't make a problem, sizes
that would stall the draw; and a draw that is slow anyway says how far it has got."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grpo_exp.errors import UserError
from grpo_exp.spec import build_spec
from grpo_exp.tasks import checks, problems
from grpo_exp.tasks.problems import Region, draw
from tests.conftest import ROOT
from tests.test_cli import BATCH_PROBE

TASK = ("dataset=reasoning_gym", "reward=reasoning_gym", "model=tiny_arithmetic")
MIX = ("dataset=reasoning_gym_mix", "reward=reasoning_gym", "model=tiny_arithmetic")
CURRICULUM = (*TASK, "dataset.curriculum.enabled=true")


def refused(settings, *overrides: str) -> str:
    with pytest.raises(UserError) as err:
        build_spec(settings(*overrides))
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["dataset.curriculum.metric=eval/pass1"], "metric=eval/pass1: held-out evaluations never log it"),
        (["dataset.curriculum.metric=eval/pass1"], "did you mean eval/pass@1?"),
        (["reward.task_metrics.k=[4]"], "reward.task_metrics.k=[4] has no 1; add it: reward.task_metrics.k=[1,4]"),
        (
            ["dataset.curriculum.metric=eval/pass@4", "grpo.num_generations_eval=2"],
            "grpo.num_generations_eval gives 2; raise it to 4",
        ),
        (["reward.task_metrics.part=null"], "reward.task_metrics.part is null"),
        (["dataset.curriculum.metric=eval/mean@8", "grpo.num_generations_eval=2"], "they log eval/mean@2"),
        (["dataset.curriculum.metric=pass@1"], "use dataset.curriculum.metric=eval/pass@1"),
        (["dataset.curriculum.raise_at=2"], "eval/pass@1 lies in [0, 1], so it never reaches 2"),
        (["dataset.curriculum.raise_at=nan"], "dataset.curriculum.raise_at=nan: give the value of eval/pass@1"),
        (
            ["dataset.curriculum.metric=eval/rewards/accuracy/mean", "dataset.curriculum.raise_at=1.5"],
            "eval/rewards/accuracy/mean is at most 1",
        ),
        (["dataset.curriculum.metric=eval/reward", "dataset.curriculum.raise_at=5"], "eval/reward is at most 1"),
        (["dataset.curriculum.metric=eval/curriculum/level"], "the level can't wait on itself"),
    ],
)
def test_a_curriculum_that_could_never_move_up_is_refused(settings, overrides, says):
    assert says in refused(settings, *CURRICULUM, *overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["dataset.curriculum.raise_at=0"],  # every evaluation raises the level: odd, but it moves
        ["dataset.curriculum.metric=eval/pass@4", "grpo.num_generations_eval=4"],
        ["dataset.curriculum.metric=eval/rewards/accuracy/mean", "dataset.curriculum.raise_at=1"],
        ["dataset.curriculum.metric=eval/reward", "dataset.curriculum.raise_at=0.95"],
        ["dataset.curriculum.metric=eval/frac_solved"],
    ],
)
def test_a_curriculum_whose_metric_is_logged_and_reachable_passes(settings, overrides):
    build_spec(settings(*CURRICULUM, *overrides))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (
            [*TASK, "+dataset.task_settings.max_terms=2.5"],
            "dataset.task_settings.max_terms=2.5: chain_sum's max_terms is a whole number (its default: 6)",
        ),
        ([*TASK, "+dataset.task_settings.allow_negation=3"], "allow_negation is true or false"),
        (
            [*TASK, "dataset.task=basic_arithmetic", "+dataset.task_settings.format_style=fancy"],
            "format_style is one of simple, natural",
        ),
        (
            [*TASK, "+dataset.task_settings.max_digits=100000"],
            "dataset.task_settings.max_digits=100000: chain_sum can't generate a problem with it",
        ),
        ([*TASK, "+dataset.task_settings.max_terms=1"], "dataset.task_settings.max_terms=1: chain_sum refused"),
        (
            [*TASK, "+dataset.task_settings.min_terms=5", "+dataset.task_settings.max_terms=3"],
            "dataset.task_settings.min_terms=5, dataset.task_settings.max_terms=3: chain_sum refused",
        ),
        (
            [*MIX, "dataset.task_settings.datasets.0.weight=inf"],
            "dataset.task_settings.datasets[0].weight=inf: give a positive number",
        ),
        ([*MIX, "dataset.task_settings.datasets.0.weight=abc"], "dataset.task_settings.datasets[0].weight=abc"),
        ([*MIX, "dataset.task_settings.datasets.0.weight=0"], "dataset.task_settings.datasets[0].weight=0"),
        ([*MIX, "dataset.task_settings.datasets.0.name=null"], "dataset.task_settings.datasets[0].name is missing"),
        (
            [*MIX, "dataset.task_settings.datasets.1.name=chain_sun"],
            "dataset.task_settings.datasets[1].name=chain_sun: no such reasoning-gym task",
        ),
        (
            [*MIX, "dataset.task_settings.datasets.1.name=chain_sum"],
            "datasets[1].name=chain_sum: chain_sum is also dataset.task_settings.datasets[0]",
        ),
        (
            [*MIX, "dataset.task_settings.datasets.0.config.max_terms=2.5"],
            "dataset.task_settings.datasets[0].config.max_terms=2.5: chain_sum's max_terms is a whole number",
        ),
        (
            [*MIX, "dataset.task_settings.datasets.1.config.max_digits=100000"],
            "datasets[1].config.max_digits=100000: basic_arithmetic can't generate a problem with it",
        ),
    ],
)
def test_task_settings_are_checked_by_type_and_range_under_the_key_written(settings, overrides, says):
    assert says in refused(settings, *overrides)


def test_settings_whose_first_problem_stalls_are_refused_at_the_time_limit(settings, monkeypatch):
    monkeypatch.setattr(checks, "TRIAL_LIMIT_S", 0.01)  # knight_swap takes about 0.6 s a problem
    message = refused(settings, *TASK, "dataset.task=knight_swap", "+dataset.task_settings.max_steps=30")
    assert message.startswith("dataset.task_settings.max_steps=30: knight_swap can't generate a problem")
    assert "no problem within 0.01 s" in message


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["dataset.num_samples=1000000000"], "dataset.num_samples=1000000000: at most 200,000"),
        (["dataset.eval_samples=1000000"], "dataset.eval_samples=1000000: at most 10,000"),
    ],
)
def test_generated_sizes_past_their_bound_are_refused(settings, overrides, says):
    assert says in refused(settings, *TASK, *overrides)
    build_spec(settings("dataset=gsm8k_sample", "dataset.num_samples=1000000000"))  # a file's rows: no draw


def test_a_slow_draw_shows_how_far_it_has_got_and_a_quick_one_is_silent(monkeypatch, capsys):
    settings = {"max_terms": 3, "max_digits": 1}
    draw("chain_sum", settings, seed=0, count=30, region=Region(0.2, held_out=False))
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(problems, "PROGRESS_AFTER_S", 0)
    drawn = draw("chain_sum", settings, seed=0, count=30, region=Region(0.2, held_out=True))
    line = capsys.readouterr().err.strip().split("\r")[-1]
    assert len(drawn) == 30 and line.startswith("drawing chain_sum's held-out problems: 100%") and "30/30" in line


# The issue's commands (issue 60, findings 2, 5 and 6) through run.py's check before Hydra starts a job.
ISSUE_COMMANDS = [
    (
        "dataset=reasoning_gym reward=reasoning_gym dataset.curriculum.enabled=true dataset.curriculum.raise_at=0 "
        "dataset.curriculum.metric=eval/pass1 grpo.eval_steps=1 grpo.max_steps=3 dataset.eval_samples=8 "
        "dataset.num_samples=200 logger=none threads=1",
        "dataset.curriculum.metric=eval/pass1",
    ),
    ("dataset=reasoning_gym reward=reasoning_gym +dataset.task_settings.max_terms=2.5", "task_settings.max_terms=2.5"),
    (
        "dataset=reasoning_gym reward=reasoning_gym +dataset.task_settings.max_digits=100000",
        "task_settings.max_digits=100000",
    ),
    ("dataset=reasoning_gym_mix reward=reasoning_gym dataset.task_settings.datasets.0.weight=inf", "[0].weight=inf"),
    ("dataset=reasoning_gym_mix reward=reasoning_gym dataset.task_settings.datasets.0.weight=abc", "[0].weight=abc"),
    ("dataset=reasoning_gym_mix reward=reasoning_gym dataset.task_settings.datasets.0.name=null", "[0].name is"),
    ("dataset=reasoning_gym reward=reasoning_gym dataset.eval_samples=1000000", "at most 10,000 held-out"),
    ("dataset=reasoning_gym reward=reasoning_gym dataset.num_samples=1000000000", "at most 200,000"),
]


def test_the_issues_commands_each_get_one_line_and_exit_2_before_torch():
    done = subprocess.run(
        [sys.executable, "-c", BATCH_PROBE, json.dumps([command for command, _ in ISSUE_COMMANDS])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.splitlines()[-1])
    for (command, message), result in zip(ISSUE_COMMANDS, results, strict=True):
        errors = [line for line in result["stderr"].splitlines() if line.strip()]
        assert result["code"] == 2 and len(errors) == 1, (command, result)
        assert errors[0].startswith("error: ") and message in errors[0], (command, errors[0])
        assert not result["heavy"], (command, result["heavy"])
