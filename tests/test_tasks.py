"""reasoning-gym's tasks: checked before the model loads, drawn from disjoint regions, scored by their verifier;
the task metrics (mean@n, unbiased pass@k); the curriculum's levels; the task warm-up of the embedded model."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest

from grpo_exp import dataset
from grpo_exp.config.reply_format import check_reply_format
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.errors import UserError
from grpo_exp.models.warmup_task import habit_corpus, task_replies
from grpo_exp.rewards.compose import build_rewards
from grpo_exp.rewards.task import task_accuracy, task_format
from grpo_exp.rewards.task_metrics import group_metrics, log_task_metrics, pass_at_k
from grpo_exp.spec import build_spec
from grpo_exp.tasks import curriculum
from grpo_exp.tasks.problems import TASK_ENTRY, Region, draw
from grpo_exp.tracking.metrics import objective_value, summarize_eval

TASK = ("dataset=reasoning_gym", "reward=reasoning_gym", "model=tiny_arithmetic")
SMALL = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}


def refused(settings, *overrides: str) -> str:
    with pytest.raises(UserError) as err:
        build_spec(settings(*TASK, *overrides))
    assert "\n" not in str(err.value)
    return str(err.value)


def test_a_task_job_checks_and_its_rewards_read_the_task_entry(settings):
    spec = build_spec(settings(*TASK))
    assert [r.__name__ for r in spec.rewards] == ["accuracy", "format"]
    assert spec.rewards[0].task_ks == (1, 4, 8)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["dataset.task=chain_sun"], "no such reasoning-gym task; did you mean chain_sum"),
        (["+dataset.task_settings.digits=2"], "chain_sum takes no setting 'digits'; its settings: min_terms"),
        (["+dataset.task_settings.max_terms=1"], "refused: max_terms must be >= min_terms"),
        (["dataset.task=null"], "need a reasoning-gym task: add dataset=reasoning_gym dataset.task=<name>"),
        (["dataset.curriculum.enabled=true", "dataset.curriculum.start_level=99"], "levels run from 0 to 10"),
        (["dataset.curriculum.enabled=true", "dataset.eval_fraction=0"], "judged on held-out evaluations"),
        (["reward.task_metrics.part=nope"], "no such part (parts: accuracy, format)"),
        (["reward.task_metrics.k=[0]"], "reward.task_metrics.k=[0]"),
        (["reward.parts.accuracy.params.tag='<a>'"], "must name an XML-like tag"),
    ],
)
def test_a_bad_task_is_one_line_before_the_model_loads(settings, overrides, says):
    assert says in refused(settings, *overrides)


def test_a_composite_names_its_tasks_and_each_is_checked(settings):
    build_spec(settings("dataset=reasoning_gym_mix", "reward=reasoning_gym", "model=tiny_arithmetic"))
    bad = "dataset.task_settings.datasets=[{name: chain_sun, weight: 1, config: {}}]"
    assert "no such reasoning-gym task" in refused(settings, "dataset=reasoning_gym_mix", bad)


@pytest.mark.parametrize("model", ["tiny", "tiny_math", "tiny_code"])
def test_a_tiny_model_never_warmed_up_on_task_replies_is_refused_naming_the_recipe(settings, model):
    """Issue 62: on the customer-service model the task reward stayed 0 for 30 steps, with no word of the fix."""
    with pytest.raises(UserError) as err:
        build_spec(settings("dataset=reasoning_gym", "reward=reasoning_gym", f"model={model}"))
    said = str(err.value)
    assert "\n" not in said and "reward.reply_format=task" in said
    assert "use +recipe=arithmetic or model=tiny_arithmetic" in said and "python -m grpo_exp.plan --probe" in said


def test_a_model_warmed_up_on_the_tasks_replies_or_a_hub_model_is_not_refused(settings):
    build_spec(settings(*TASK))
    build_spec(settings(*TASK, "model.recipe.scenarios.customer_service=1"))  # a mix that has the task's replies
    check_reply_format(settings("dataset=reasoning_gym", "reward=reasoning_gym", "model=qwen2_5_0_5b_instruct"))


def test_held_out_problems_are_distinct_and_never_in_training():
    train = draw("chain_sum", SMALL, seed=3, count=1500, region=Region(0.2, held_out=False))
    held = draw("chain_sum", SMALL, seed=3, count=100, region=Region(0.2, held_out=True))
    questions = {p["question"] for p in held}
    assert len(held) == 100 == len(questions)
    assert not questions & {p["question"] for p in train}
    assert draw("chain_sum", SMALL, seed=3, count=100, region=Region(0.2, held_out=True)) == held  # reproducible
    other = draw("chain_sum", SMALL, seed=4, count=1500, region=Region(0.2, held_out=False))  # another stream
    assert not questions & {p["question"] for p in other}


def test_a_small_held_out_region_gives_what_it_has():
    level_zero = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # 200 problems in all
    held = draw("chain_sum", level_zero, seed=0, count=500, region=Region(0.2, held_out=True))
    assert 10 < len(held) < 80 and len({p["question"] for p in held}) == len(held)


def test_the_loader_splits_on_its_own_marks(settings):
    data = settings(*TASK, "dataset.num_samples=50", "dataset.eval_samples=12").dataset
    rows = dataset.LOADERS.get("reasoning_gym")(data)
    train = [r for r in rows if not r[dataset.HELD_OUT_COLUMN]]
    held = [r for r in rows if r[dataset.HELD_OUT_COLUMN]]
    assert len(train) == 50 and len(held) == 12
    assert json.loads(held[0][TASK_ENTRY])["question"] == held[0]["prompt"][-1]["content"]


def test_the_task_verifier_scores_the_tagged_answer():
    entry = json.dumps(draw("chain_sum", SMALL, seed=0, count=1, region=Region(0.0, held_out=False))[0])
    answer = json.loads(entry)["answer"]
    replies = [f"1 + 2 = 3\n<answer>{answer}</answer>", f"<answer>{int(answer) + 1}</answer>", answer]
    replies.append("<answer></answer>")
    scored = task_accuracy(replies, task_entry=[entry] * 4, tag="answer", timeout_s=5, isolation="auto")
    assert scored == [1.0, 0.0, 0.0, 0.0]
    assert task_format(replies, tag="answer") == [1.0, 1.0, 0.0, 0.0]
    assert task_format([f"<answer>{answer}</answer> more", "<answer>1</answer><answer>2</answer>"], tag="answer") == [
        0.0,
        0.0,
    ]


def test_the_accuracy_part_logs_the_level_of_its_problems():
    problem = draw("chain_sum", SMALL, seed=0, count=1, region=Region(0.0, held_out=False))[0]
    problem["metadata"][curriculum.LEVEL_KEY] = 2
    logged: list[tuple[str, float]] = []
    entries = [json.dumps(problem)]
    task_accuracy(
        ["x"],
        task_entry=entries,
        tag="answer",
        timeout_s=5,
        isolation="auto",
        log_metric=lambda k, v: logged.append((k, v)),
    )
    assert logged == [(curriculum.LEVEL_METRIC, 2.0)]


def _pass_at_k_by_subsets(n: int, c: int, k: int) -> float:
    """The share of k-subsets of n samples (c of them right) holding a right one: what pass@k estimates."""
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(8, 0, 1), (8, 1, 1), (8, 3, 4), (8, 5, 4), (6, 2, 6), (10, 1, 3)])
def test_pass_at_k_is_the_chance_a_k_subset_solves(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_by_subsets(n, c, k))


def test_pass_at_k_refuses_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_task_metrics_per_group_leave_out_ks_above_the_group_and_unscored_completions():
    assert group_metrics([True, False, False, False], [1, 4, 8]) == {"mean@4": 0.25, "pass@1": 0.25, "pass@4": 1.0}
    logged: dict[str, list[float]] = {}
    prompts = ["a"] * 4 + ["b"] * 4
    scores = [1.0, 0.0, None, 0.0, 0.5, 0.0, 0.0, 0.0]  # b's 0.5 is partial credit: not solved
    log_task_metrics(prompts, scores, 1.0, [1, 2], lambda k, v: logged.setdefault(k, []).append(v))
    expected = {"mean@3": [1 / 3], "pass@1": [1 / 3, 0.0], "pass@2": [2 / 3, 0.0], "mean@4": [0.0]}
    assert logged.keys() == expected.keys()
    assert all(logged[k] == pytest.approx(v) for k, v in expected.items())


def test_the_task_part_logs_its_metrics_when_trl_calls_it(settings):
    rewards, _ = build_rewards(settings(*TASK).reward)
    problem = draw("chain_sum", SMALL, seed=0, count=1, region=Region(0.0, held_out=False))[0]
    right, wrong = f"<answer>{problem['answer']}</answer>", "<answer>x</answer>"
    logged: dict[str, list[float]] = {}
    rewards[0](
        prompts=["p"] * 4,
        completions=[right, wrong, wrong, wrong],
        task_entry=[json.dumps(problem)] * 4,
        log_metric=lambda k, v: logged.setdefault(k, []).append(v),
    )
    assert logged["mean@4"] == [0.25] and logged["pass@4"] == [1.0] and "pass@8" not in logged


def test_held_out_pass_at_1_is_a_summary_number_and_an_objective():
    rows = [
        {"step": 0, "eval/reward": 0.2, "eval/pass@1": 0.1, "eval/mean@8": 0.1, "eval/pass@8": 0.4},
        {"step": 10, "eval/reward": 0.5, "eval/pass@1": 0.4, "eval/mean@8": 0.4, "eval/pass@8": 0.7},
        {"step": 20, "eval/reward": 0.6, "eval/pass@1": 0.3, "eval/mean@8": 0.3, "eval/pass@8": 0.8},
    ]
    summary = summarize_eval(rows)
    assert summary["base_eval_task"] == {"mean@8": 0.1, "pass@1": 0.1, "pass@8": 0.4}
    assert summary["eval_task"]["pass@8"] == 0.8
    assert (summary["first_eval_pass@1"], summary["final_eval_pass@1"], summary["best_eval_pass@1"]) == (0.1, 0.3, 0.4)
    assert objective_value(summary, "best_eval_pass@1") == ("best_eval_pass@1", 0.4)
    assert "final_eval_pass@1" not in summarize_eval([{"step": 0, "eval/reward": 0.2}])


def test_a_curriculum_level_sets_the_tasks_range_settings(settings):
    data = settings(*TASK, "dataset.curriculum.enabled=true", "+dataset.task_settings.allow_negation=true").dataset
    assert curriculum.task_settings(data) == {**SMALL, "max_terms": 2, "allow_negation": True}  # level 0
    up = curriculum.task_settings(curriculum.at_level(data, 2))
    assert (up["max_terms"], up["max_digits"], up["allow_negation"]) == (4, 3, True)
    assert curriculum.last_level(data) == 10


def test_the_task_warm_up_keeps_out_of_the_held_out_region_and_its_steps_add_up():
    recipe = TinyRecipe(task="chain_sum", task_settings=SMALL, held_out_share=0.2, error_share=0.0)
    replies = task_replies(random.Random(0), 300, recipe)
    held = {p["question"] for p in draw("chain_sum", SMALL, 0, 100, Region(0.2, held_out=True))}
    assert not held & {r.prompt for r in replies}
    for reply in replies:
        *steps, last = reply.reply.splitlines()
        for step in steps:
            left, result = step.split(" = ")
            assert eval(left) == int(result)
        assert last == f"<answer>{steps[-1].split(' = ')[1]}</answer>"
        assert int(steps[-1].split(" = ")[1]) == eval(reply.prompt.rsplit(":", 1)[1].rstrip("= "))


def test_the_habit_phase_answers_its_share_at_once_and_still_keeps_out_of_the_held_out_region():
    recipe = TinyRecipe(task="chain_sum", task_settings=SMALL, held_out_share=0.2, corpus_size=400, habit_share=0.8)
    replies = habit_corpus(recipe)
    held = {p["question"] for p in draw("chain_sum", SMALL, 0, 100, Region(0.2, held_out=True))}
    assert len(replies) == 400 and not held & {r.prompt for r in replies}
    at_once = [r for r in replies if "=" not in r.reply]
    assert 0.72 < len(at_once) / len(replies) < 0.88
    for reply in at_once:  # right answers, only without the working: the habit is skipping it, not erring
        assert reply.reply == f"<answer>{eval(reply.prompt.rsplit(':', 1)[1].rstrip('= '))}</answer>"
    assert all(r.reply.splitlines()[0].count(" = ") == 1 for r in replies if r not in at_once)
    assert all("=" in r.reply for r in habit_corpus(dataclasses.replace(recipe, habit_share=0.0)))


def test_slipped_warm_up_replies_carry_the_slip_to_the_answer():
    recipe = TinyRecipe(task="chain_sum", task_settings=SMALL, held_out_share=0.2, error_share=1.0)
    for reply in task_replies(random.Random(0), 50, recipe):
        right = eval(reply.prompt.rsplit(":", 1)[1].rstrip("= "))
        assert reply.reply.endswith("</answer>") and f"<answer>{right}</answer>" not in reply.reply
