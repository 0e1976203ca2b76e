"""A key that only one choice of its group reads is refused under another, where it would be silently ignored."""

from __future__ import annotations

import pytest

from grpo_exp.config.group_keys import check_group_keys
from grpo_exp.errors import UserError
from grpo_exp.spec import build_spec

READ_BY_TASKS = "choose dataset=reasoning_gym or dataset=reasoning_gym_mix, or leave the key out"


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        # issue 62: this trained the customer-service prompts with no word that the task was ignored
        (["dataset.task=chain_sum"], "dataset.task=chain_sum has no effect here: only dataset.source=reasoning_gym "),
        (["+dataset.task_settings.max_terms=3"], "dataset.task_settings has no effect here"),
        (["dataset.curriculum.raise_at=0.5"], "dataset.curriculum.raise_at=0.5 has no effect here"),
        (["dataset.eval_samples=8"], "dataset.eval_samples=8 has no effect here"),
        (["dataset=json", "dataset.task=chain_sum"], "this run's dataset.source is json"),
        (["dataset.split=test"], "only dataset.source=hub reads it"),
        (["dataset=reasoning_gym", "dataset.path=prompts.json"], "only dataset.source=json reads it"),
    ],
)
def test_a_key_the_chosen_group_does_not_read_is_one_line(settings, overrides, says):
    with pytest.raises(UserError) as err:
        check_group_keys(settings(*overrides))
    assert "\n" not in str(err.value) and says in str(err.value)


def test_the_refusal_names_the_options_that_read_the_key(settings):
    with pytest.raises(UserError) as err:
        build_spec(settings("dataset.task=chain_sum"))
    assert str(err.value).endswith(READ_BY_TASKS)
    with pytest.raises(UserError, match="choose dataset=gsm8k or dataset=hub"):
        build_spec(settings("dataset.subset=main"))


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["dataset=reasoning_gym", "dataset.task=basic_arithmetic", "dataset.curriculum.raise_at=0.5"],
        ["dataset=reasoning_gym_mix"],
        ["dataset=gsm8k"],
        ["dataset=hub", "dataset.name=trl-lib/tldr", "dataset.split=test"],
        ["dataset.task=null", "dataset.eval_samples=100"],  # a value at its default changes nothing: not refused
    ],
)
def test_keys_the_chosen_group_reads_pass(settings, overrides):
    check_group_keys(settings(*overrides))
