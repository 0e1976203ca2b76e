"""The article's rewards, rebuilt from weighted parts, give the article's values."""

from __future__ import annotations

import pytest

from grpo_exp.errors import UserError
from grpo_exp.rewards import names, register
from grpo_exp.rewards.compose import build_rewards, completion_text
from grpo_exp.rewards.registry import get
from tests.conftest import FIXTURES
from tests.fixtures import article_rewards as article

SERVICE_REPLIES = [
    "您好，您的订单已经发出，问题已解决，如有其他问题请随时联系",  # full format
    "您好！退款已提交，问题已解决。请留意短信，谢谢。如有其他问题请随时联系",  # full format, tone, answers
    "您好，问题已解决，如有其他问题请随时联系。",  # trailing 。 after the sign-off: fails the strict format
    "你好，问题已解决，如有其他问题请随时联系",  # 你好 is not 您好
    "您好问题已解决如有其他问题请随时联系",  # nothing between the parts: .+ needs at least one character
    "您好，已经为您办理退款，3个工作日内到账，问题已解决",  # loose format only
    "",
]
CONTENT_REPLIES = ["创新" * 75, "技术与实践" * 10, "短", "创新技术实践" + "好" * 144, "x" * 300]


def total(parts, weights, completions, **columns) -> list[float]:
    scores = [p(prompts=[""] * len(completions), completions=completions, **columns) for p in parts]
    return [sum(w * (s or 0.0) for w, s in zip(weights, row, strict=True)) for row in zip(*scores, strict=True)]


def test_customer_service_format_matches_article(settings):
    parts, weights = build_rewards(settings("reward=customer_service").reward)
    assert total(parts, weights, SERVICE_REPLIES) == article.reward_customer_service(SERVICE_REPLIES)
    assert total(parts, weights, SERVICE_REPLIES)[:4] == [1.0, 1.0, 0.0, 0.0]


def test_content_creation_matches_article(settings):
    parts, weights = build_rewards(settings("reward=content_creation").reward)
    ours = total(parts, weights, CONTENT_REPLIES)
    assert ours == pytest.approx(article.reward_content_creation(CONTENT_REPLIES))
    assert ours[3] == pytest.approx(0.6)  # 150 characters, all three keywords: 0.4*0 + 0.6*1


def test_multi_objective_matches_article_with_per_sample_answers(settings):
    parts, weights = build_rewards(settings("reward=customer_service_multi").reward)
    answers = [article.required_answers] * len(SERVICE_REPLIES)
    ours = total(parts, weights, SERVICE_REPLIES, required_answers=answers)
    assert ours == pytest.approx(article.reward_customer_service_multi(SERVICE_REPLIES))
    # reply 2: format 0.4 + answers 1/2 of 0.4 + tone 0.2
    assert ours[1] == pytest.approx(0.4 + 0.2 + 0.2)


def test_parts_are_named_for_trl_logging(settings):
    parts, weights = build_rewards(settings("reward=customer_service_multi").reward)
    assert [p.__name__ for p in parts] == ["format", "information", "tone"]
    assert weights == [0.4, 0.4, 0.2]


def test_answer_coverage_reads_each_samples_column_and_skips_samples_without_answers():
    coverage = get("answer_coverage")
    scores = coverage(
        ["退款已提交", "请提供订单号", "无"],
        column="required_answers",
        required_answers=[["退款", "原路返回"], "订单号", []],
    )
    assert scores == [0.5, 1.0, None]


def test_conversational_completions_are_flattened_to_text(settings):
    parts, _ = build_rewards(settings("reward=customer_service").reward)
    chat = [[{"role": "assistant", "content": SERVICE_REPLIES[0]}]]
    assert parts[0](prompts=[[{"role": "user", "content": "?"}]], completions=chat) == [1.0]
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        ("reward_customer_service", article.reward_customer_service),
        ("reward_content_creation", article.reward_content_creation),
        ("reward_customer_service_multi", article.reward_customer_service_multi),
    ],
)
def test_article_code_pasted_as_user_reward_runs_unchanged(settings, fn, expected):
    spec = f"{FIXTURES / 'article_rewards.py'}:{fn}"
    parts, _ = build_rewards(settings("reward=custom", f"reward.parts.main.fn={spec}").reward)
    chat = [[{"role": "assistant", "content": c}] for c in SERVICE_REPLIES]
    assert parts[0](prompts=[""] * len(chat), completions=chat) == pytest.approx(expected(SERVICE_REPLIES))


def test_user_reward_by_module_path_with_trl_signature(settings, tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def brevity(prompts, completions, limit=5, **kwargs):\n"
        "    return [1.0 if len(c) <= limit else 0.0 for c in completions]\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = settings("+reward.parts.short={fn: my_rewards.brevity, weight: 0.5, params: {limit: 3}}")
    parts, weights = build_rewards(cfg.reward)
    assert [p.__name__ for p in parts] == ["format", "short"] and weights == [1.0, 0.5]
    assert parts[1](prompts=["", ""], completions=["abc", "abcd"]) == [1.0, 0.0]


def test_progressive_schedule_holds_a_part_back_until_its_start_step(settings):
    class State:
        global_step = 3

    cfg = settings("reward=customer_service_multi", "reward.parts.tone.start_step=10")
    tone = build_rewards(cfg.reward)[0][2]
    replies = ["请稍等，谢谢"]
    assert tone(prompts=[""], completions=replies, trainer_state=State()) == [None]
    State.global_step = 10
    assert tone(prompts=[""], completions=replies, trainer_state=State()) == [1.0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuch", "unknown reward function 'nosuch'; known: "),
        ("no_such_module.fn", "cannot import 'no_such_module'"),
        ("tests.fixtures.article_rewards.nope", "has no function 'nope'"),
        ("missing/file.py:fn", "does not exist"),
    ],
)
def test_bad_reward_specs_fail_with_one_line(settings, spec, message):
    with pytest.raises(UserError, match=message) as err:
        build_rewards(settings("reward=custom", f"reward.parts.main.fn={spec}").reward)
    assert "\n" not in str(err.value)


def test_wrong_length_result_is_reported(settings, tmp_path):
    (tmp_path / "bad.py").write_text("def f(completions):\n    return [1.0]\n")
    parts, _ = build_rewards(settings("reward=custom", f"reward.parts.main.fn={tmp_path / 'bad.py'}:f").reward)
    with pytest.raises(UserError, match="returned 1 scores for 2 completions"):
        parts[0](prompts=["", ""], completions=["a", "b"])


def test_registry_refuses_duplicates_and_lists_names():
    assert {"regex_match", "answer_coverage", "contains_all", "length_score", "keyword_share"} <= set(names())
    with pytest.raises(ValueError, match="registered twice"):
        register("regex_match")(lambda completions, **_: [])


def test_scale_by_multiplies_a_part_by_anothers_score_once_per_batch(settings, tmp_path, monkeypatch):
    (tmp_path / "counted.py").write_text(
        "calls = []\n"
        "def half(prompts, completions, **kwargs):\n"
        "    calls.append(len(completions))\n"
        "    return [0.5 if c else None for c in completions]\n"
        "def one(prompts, completions, **kwargs):\n"
        "    return [1.0 for c in completions]\n"
    )
    monkeypatch.chdir(tmp_path)
    cfg = settings(
        "reward=custom",
        "reward.parts.main.fn=counted.half",
        "+reward.parts.scaled={fn: counted.one, scale_by: main}",
    )
    gate, scaled = build_rewards(cfg.reward)[0]
    completions = ["a", "", "b"]
    assert gate(prompts=[""] * 3, completions=completions) == [0.5, None, 0.5]
    assert scaled(prompts=[""] * 3, completions=completions) == [0.5, 1.0, 0.5]  # None: not gated
    import counted

    assert counted.calls == [3]  # the gate's scores of this batch were reused, not recomputed
    assert scaled(prompts=[""], completions=["c"]) == [0.5] and counted.calls == [3, 1]


def test_scale_by_refuses_unknown_parts_and_cycles(settings):
    with pytest.raises(UserError, match="scale_by=nope: no such part"):
        build_rewards(settings("reward.parts.format.scale_by=nope").reward)
    cfg = settings(
        "reward=customer_service_multi", "reward.parts.format.scale_by=tone", "reward.parts.tone.scale_by=format"
    )
    with pytest.raises(UserError, match="in a circle: format -> tone -> format"):
        build_rewards(cfg.reward)


def test_soft_overlong_takes_the_token_ids_trl_passes_and_punishes_only_near_the_limit(settings):
    overlong = "+reward.parts.overlong={fn: soft_overlong, weight: 0.4, params: {max_tokens: 10, cache: 4}}"
    parts, _ = build_rewards(settings("reward=customer_service_multi", overlong).reward)
    part = parts[[p.__name__ for p in parts].index("overlong")]
    ids = [[1] * 6, [1] * 8, [1] * 10]  # free, half-way into the cache, at the limit (cut)
    scores = part(prompts=["q"] * 3, completions=["a"] * 3, completion_ids=ids, required_answers=[["x"]] * 3)
    assert scores == [0.0, -0.5, -1.0]


def test_the_bot_s_overlong_penalty_follows_the_completion_length_a_user_sets(settings):
    """Its limit is ${grpo.max_completion_length}, resolved in the job's config, not a copy of it."""
    shipped = settings("+recipe=customer_service_bot").reward.parts["overlong"].params
    longer = settings("+recipe=customer_service_bot", "grpo.max_completion_length=256").reward.parts["overlong"]
    assert shipped == {"max_tokens": 128, "cache": 32}
    assert longer.params["max_tokens"] == 256


INFINITE = f"+reward.parts.inf={{fn:'{FIXTURES / 'infinite_rewards.py'}:inf_for_a_third',weight:1}}"


def test_an_infinite_score_is_no_score_with_one_warning(settings, caplog):
    """Issue 31: inf from a user's reward crashed the job after one step (an internal TypeError)."""
    parts, _ = build_rewards(settings(INFINITE).reward)
    part = next(p for p in parts if p.__name__ == "inf")
    completions = ["好。", "好。好。", "好"] * 2
    with caplog.at_level("WARNING", logger="grpo_exp.rewards"):
        scores = part(prompts=["p"] * 6, completions=completions)
        again = part(prompts=["p"] * 6, completions=completions)
    assert scores == again == [None, 1 / 3, 1.0, None, 1 / 3, 1.0]
    warned = [r.getMessage() for r in caplog.records if "returned inf or -inf" in r.getMessage()]
    assert warned == [
        "reward part 'inf' (" + part.spec + ") returned inf or -inf for 2 of 6 completions: they "
        "get no score, like NaN (an infinite score would make every advantage in its group NaN); "
        "return a finite number"
    ]
