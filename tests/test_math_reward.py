"""The math reward (format and accuracy parts), its time limit, the GSM8K-style data and its checks.

The accuracy part must judge an answer exactly as math-verify does when called directly: each
answer form below is scored both ways and against the truth we expect. It must also agree with
TRL's own ``accuracy_reward`` where both read the answer (boxed, anchored LaTeX), and read the
other forms models write (``tests/math_answers.py``). math-verify's own time limit needs the main
thread; the reward runs in a worker thread and in a helper process, so the limit is tested from a
thread, with a real slow input and with a helper that ignores its alarm.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from math_verify import parse, verify

from grpo_exp.config.schema import DatasetSettings, RewardPart, TinyRecipe
from grpo_exp.errors import UserError
from grpo_exp.rewards import registry
from grpo_exp.rewards.compose import WeightedReward
from grpo_exp.rewards.math import (
    Checker,
    check_references,
    math_accuracy,
    math_format,
    reference_after,
)
from grpo_exp.rewards.math_forms import Forms, find_answer, last_boxed, rewrite_numbers
from grpo_exp.shipped import read_records, shipped_file
from tests.conftest import ROOT
from tests.math_answers import AGREED_WITH_TRL, NEW_FORMS

PARTS = yaml.safe_load((ROOT / "conf/reward/math.yaml").read_text())["parts"]
FORMAT = PARTS["format"]["params"]  # reward=math's defaults
ACCURACY = PARTS["accuracy"]["params"]
GSM8K_ONLY = {**ACCURACY, "answer_forms": ["marker"]}  # the accuracy part as +recipe=math sets it
REASONING = "She buys 3 packs of 6, so 3*6 = 18.\n"

# (reference, the reply's final answer, the truth): math-verify's judgement must match both ways
ANSWER_FORMS = [
    # integers, commas grouping thousands
    ("1234", "1,234", True),
    ("1,234", "1234", True),
    ("1,600", "1600", True),
    ("48,600", "48600", True),
    ("3600", "3,600 people", True),
    ("1234", "1,243", False),
    ("1,000", "1.000", False),  # a decimal point, not a thousands separator
    # fractions and decimals
    ("0.5", "1/2", True),
    ("0.5", r"\frac{1}{2}", True),
    (r"\frac{1}{2}", "0.5", True),
    ("1.25", "5/4", True),
    ("1.25", r"$\frac{5}{4}$", True),
    ("0.1", "1/10", True),
    ("12", "12.0", True),
    ("1.5", "1.50", True),
    ("2.5", "2.4", False),
    ("13", "13.5", False),
    ("1/3", "0.333", False),  # rounded too early for math-verify's 6 decimal places
    # \boxed{}
    ("18", r"\boxed{18}", True),
    ("18", r"$\boxed{18}$", True),
    ("1,600", r"\boxed{1600}", True),
    ("5", r"\boxed{5} weeks", True),
    ("18", r"\boxed{17}", False),
    # units and currency
    ("18", "$18", True),
    ("18", "18 dollars", True),
    ("18", "18 cm", True),
    ("270", "$270.00", True),
    # negative numbers
    ("-7", "-7", True),
    ("-7", "-7 degrees", True),
    ("-7", "7", False),
    # percentages: math-verify accepts a percentage as its number or its share
    ("25", "25%", True),
    ("0.25", "25%", True),
    # wrong answers
    ("27", "28", False),
    ("24", "42", False),
    ("12", "12 pieces and 3 left", False),  # math-verify takes the last number
    # no answer at all
    ("18", "", False),
    ("18", "the answer", False),
    ("18", "eighteen", False),
]


def reply(answer: str) -> str:
    return f"{REASONING}#### {answer}"


@pytest.mark.parametrize(("reference", "answer", "truth"), ANSWER_FORMS)
def test_accuracy_agrees_with_math_verify(reference, answer, truth):
    direct = verify(parse(reference), parse(answer))  # math-verify itself, in this (main) thread
    ours = math_accuracy([reply(answer)], reference_answer=[reference], **ACCURACY)
    assert ours == [float(direct)] == [float(truth)]


def test_enough_answer_forms():
    assert len(ANSWER_FORMS) >= 30


def test_accuracy_reads_the_last_marker_and_needs_one():
    score = math_accuracy(
        ["#### 5\nno, wait\n#### 18 apples", "The answer is 18.", "18", "#### "],
        reference_answer=["18"] * 4,
        **GSM8K_ONLY,
    )
    assert score == [1.0, 0.0, 0.0, 0.0]  # answer_forms [marker] and no `####` line: no final answer, 0.0
    assert find_answer("x\n#### 18\nmore text", Forms(("marker",), marker="####")) == "18"
    assert find_answer("x\n####\n18\nmore text", Forms(("marker",), marker="####")) == "18"  # the next line
    whole = math_accuracy(["so it is 18"], reference_answer=["18"], **{**ACCURACY, "answer_forms": ["whole"]})
    assert whole == [1.0]  # whole: math-verify finds the answer in the whole reply


# -- the forms models write, against TRL's own accuracy_reward ---------------------------------------


@pytest.mark.parametrize(("reply", "reference", "truth"), AGREED_WITH_TRL)
def test_accuracy_agrees_with_trls_accuracy_reward(reply, reference, truth):
    from trl.rewards import accuracy_reward

    theirs = accuracy_reward([[{"role": "assistant", "content": reply}]], [reference])
    ours = math_accuracy([reply], reference_answer=[reference], **ACCURACY)
    assert ours == theirs == [truth]


@pytest.mark.parametrize("name", NEW_FORMS)
def test_each_form_models_write_is_read_and_can_be_turned_off(name):
    reply, reference, form = NEW_FORMS[name]
    assert math_accuracy([reply], reference_answer=[reference], **ACCURACY) == [1.0]
    key = "answer_forms" if form in ACCURACY["answer_forms"] else "number_forms"
    without = {**ACCURACY, key: [f for f in ACCURACY[key] if f != form]}
    assert math_accuracy([reply], reference_answer=[reference], **without) == [0.0]


def test_the_last_answer_marker_in_the_reply_gives_the_answer_whichever_kind():
    """Issue 60: a \\boxed{} early in a reply beat its final `#### 17` line, being first in answer_forms."""
    forms = {"marker": "####", "phrases": ["the answer is"], "numbers": ()}
    reply = "3*6 = 18.\nThe answer is \\boxed{5}.\n#### 18"
    assert find_answer(reply, Forms(("boxed", "marker"), **forms)) == "18"
    assert find_answer(reply, Forms(("marker", "boxed"), **forms)) == "18"
    assert find_answer(reply, Forms(("phrase", "boxed"), **forms)) == "\\boxed{5}"  # the box stands after the phrase
    assert find_answer(reply, Forms(("phrase",), **forms)) == "\\boxed{5}"
    assert find_answer("#### 5\nno: the answer is 18.", Forms(("marker", "phrase"), **forms)) == "18"
    assert find_answer("3*6 = 18.\nThe answer is 18.\n#### ", Forms(("marker", "phrase"), **forms)) == "18"
    assert find_answer("3*6 = 18.", Forms(("boxed", "marker", "phrase", "latex"), **forms)) is None
    # a fallback answers only when no marker does: the span after the marker is not the answer
    assert find_answer("#### 18\nCheck: $3 \\cdot 6$", Forms(("latex", "marker"), **forms)) == "18"
    assert find_answer("So $3 \\cdot 6 = 18$", Forms(("marker", "latex", "whole"), **forms)) == "$3 \\cdot 6 = 18$"
    early_box = REASONING + "A first guess: \\boxed{12}. Checking again, 3*6 = 18.\n#### 18"
    assert math_accuracy([early_box] * 2, reference_answer=["18", "12"], **ACCURACY) == [1.0, 0.0]


def test_a_scientific_reference_reads_as_its_number():
    """Issue 60: a reference `1e6` passed the check but was read as 1: "#### 1" scored 1.0, "#### 1000000" 0.0."""
    replies = [reply("1"), reply("1000000"), reply("1e6"), reply("1,000,000")]
    assert math_accuracy(replies, reference_answer=["1e6"] * 4, **ACCURACY) == [0.0, 1.0, 1.0, 1.0]
    assert math_accuracy([reply("0.0025"), reply("2.5")], reference_answer=["2.5e-3"] * 2, **ACCURACY) == [1.0, 0.0]
    check_references([{"answer": "#### 1e6"}], "answer", "####", "data.jsonl")  # it parses: as 1000000


@pytest.mark.parametrize(
    "answer",
    ["17 \\vee 18", "$17 \\vee 18$", "17 or 18", "\\boxed{17 \\lor 18}", "17 \u2228 18", "16 or 17 or 18", "17\\vee18"],
)
def test_a_hedge_of_several_numbers_scores_zero_though_it_names_the_reference(answer):
    """Issue 60: `17 \\vee 18` was scored on its last value alone, so hedging earned the point."""
    assert math_accuracy([reply(answer)], reference_answer=["18"], **ACCURACY) == [0.0]


def test_an_or_that_names_one_number_is_no_hedge():
    assert math_accuracy([reply("18 or so"), reply("18, or more")], reference_answer=["18"] * 2, **ACCURACY) == [
        1.0,
        1.0,
    ]


@pytest.mark.parametrize(
    ("reply", "boxed"),
    [
        (r"so \boxed{\frac{1}{2}} it is", r"\boxed{\frac{1}{2}}"),  # nested braces
        (r"\boxed{5} then \boxed{\frac{1}{2}", r"\boxed{5}"),  # the last one is cut off
        (r"\boxed{\{1, 2\}}", r"\boxed{\{1, 2\}}"),  # escaped braces are not braces
        (r"\boxed {7}", r"\boxed {7}"),
        (r"\boxed{}", r"\boxed{}"),
        ("no box", None),
    ],
)
def test_the_last_complete_boxed_answer_is_taken(reply, boxed):
    found = last_boxed(reply)
    assert (found and found.text) == boxed


@pytest.mark.parametrize(
    ("text", "rewritten"),
    [
        (r"\$18.00", "18.00"),
        ("$1,600.50 in all", "1600.50 in all"),
        ("$18$", "$18$"),  # a math span's dollars stay
        ("$5 and $7", "5 and 7"),  # no span: currency
        ("\u22125", "-5"),
        ("1.5e3 and 2E-2", "1500 and 0.02"),
        ("1e1234", "1e1234"),  # an exponent past MAX_EXPONENT_DIGITS is left as written
        ("x1e6", "x1e6"),  # part of a name, not a number
        ("1{,}234{,}567", "1234567"),
        ("1,23 and 0.123,456", "1,23 and 0.123,456"),  # no thousands groups
    ],
)
def test_numbers_are_rewritten_as_plain_numbers(text, rewritten):
    assert rewrite_numbers(text, ACCURACY["number_forms"]) == rewritten
    assert rewrite_numbers(text, []) == text


def test_a_record_without_a_reference_is_not_scored():
    scores = math_accuracy([reply("18")] * 3, reference_answer=[None, "", "18"], **ACCURACY)
    assert scores == [None, None, 1.0]


@pytest.mark.parametrize(
    "text",
    [
        "Mia buys 3*12 = 36 pencils.\nShe has 36-9 = 27 left.\n#### 27",
        "Mia buys 36 pencils and keeps 27.\n####27\n",
        "Tom runs 4*400 = 1,600 meters.\n#### 1,600",
        "It falls by 11 degrees, so 4-11.\n#### -7",
        "One notebook costs 15/10 dollars.\n#### 1.5",
    ],
)
def test_format_accepts_reasoning_then_one_final_line(text):
    assert math_format([text], **FORMAT) == [1.0]


@pytest.mark.parametrize(
    "text",
    [
        "#### 27",  # no reasoning
        "ok\n#### 27",  # too little reasoning
        "Mia has 36-9 = 27 pencils left.\nThe answer is 27.",  # another ending
        "Mia has 36-9 = 27 pencils left.",  # no final line
        "Mia has 36-9 = 27 pencils left.\n#### 27 pencils",  # more than a number after the marker
        "Mia has 36-9 = 27 pencils left.\n#### 27\nDone!",  # the final line is not last
        "#### 36\nMia has 36-9 = 27 pencils left.\n#### 27",  # two markers
        "Mia has 36-9 = 27 pencils left.\n#### \\boxed{27}",  # not GSM8K's form
        "",
    ],
)
def test_format_rejects_other_forms(text):
    assert math_format([text], **FORMAT) == [0.0]


def test_the_format_pattern_is_config():
    text = "Mia has 36-9 = 27 pencils left.\n#### 27 pencils"
    assert math_format([text], **{**FORMAT, "answer_pattern": ".+"}) == [1.0]


ENDINGS = {
    "marker": "Mia has 36-9 = 27 pencils left.\n#### 27",
    "boxed": "Mia has 36-9 = 27 pencils left.\nSo the final answer is $\\boxed{27}$.",
    "phrase": "Mia has 36-9 = 27 pencils left.\nThe answer is: 27.",
}


@pytest.mark.parametrize("forms", [["marker"], ["boxed"], ["phrase"], ["marker", "boxed"]])
def test_the_format_part_rewards_only_the_final_forms_it_is_given(forms):
    params = {**FORMAT, "answer_forms": forms}
    scores = {name: math_format([reply], **params) for name, reply in ENDINGS.items()}
    assert scores == {name: [1.0 if name in forms else 0.0] for name in ENDINGS}


@pytest.mark.parametrize(
    "text",
    [
        "Mia has \\boxed{36} pencils, 36-9 = 27 left.\n\\boxed{27}",  # a second boxed answer
        "Mia has 36-9 = 27 pencils left.\n\\boxed{27}\nDone!",  # not the last line
        "Mia has 36-9 = 27 pencils left.\n\\boxed{twenty-seven}",  # not the answer pattern
        "ok\n\\boxed{27}",  # too little reasoning
    ],
)
def test_the_boxed_form_has_one_box_on_the_last_line(text):
    assert math_format([text], **{**FORMAT, "answer_forms": ["boxed"]}) == [0.0]


# -- the time limit ------------------------------------------------------------------------------


def test_a_slow_answer_scores_zero_from_a_worker_thread_and_the_next_call_works():
    """What the trainer does: the part runs in a thread of its own (reward.timeout_s), where
    math-verify's own alarm can't run; `9^{9^{9}}` keeps sympy busy far beyond the limit."""
    part = RewardPart(fn="math_accuracy", params={**ACCURACY, "timeout_s": 2})
    reward = WeightedReward("accuracy", part, timeout_s=600)
    columns = {"reference_answer": ["18", "18"]}
    started = time.monotonic()
    scores = reward(["p", "p"], [reply(r"$9^{9^{9}}$"), reply("18")], **columns)
    assert scores == [0.0, 1.0]  # the slow one earns nothing; the other is still judged
    assert time.monotonic() - started < 2 + 3  # its limit, and a helper's start-up
    assert reward(["p"], [reply("18")], reference_answer=["18"]) == [1.0]


# A helper whose check of "HANG" never returns and ignores math-verify's alarm: work stuck in C.
HANGING_HELPER = """
import signal, time
from grpo_exp.rewards import math as m
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
judge = m.judge
def stuck(request, *args):
    if request.get("answer") == "HANG":
        while True:
            time.sleep(1)
    return judge(request, *args)
m.judge = stuck
m.serve()
"""


def test_a_hung_check_is_killed_at_its_limit_and_the_helper_restarts():
    checker = Checker([sys.executable, "-c", HANGING_HELPER])
    try:
        assert checker.verify("18", "18", timeout_s=1.5) is True  # started, and works
        started = time.monotonic()
        assert checker.verify("18", "HANG", timeout_s=1.5) is False  # a hung check scores 0.0
        assert 1.4 < time.monotonic() - started < 3
        assert checker.restarts == 1
        assert checker.verify("18", "1,8", timeout_s=5) is False
        assert checker.verify("1,234", "1234", timeout_s=5) is True  # a fresh helper answers
    finally:
        checker.close()


def test_the_checker_works_from_many_threads_at_once():
    checker = Checker()
    results: list[bool | None] = []
    lock = threading.Lock()

    def ask(n: int) -> None:
        verdict = checker.verify(str(n), f"{n}.0", timeout_s=5)
        with lock:
            results.append(verdict)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        checker.close()
    assert results == [True] * 8


def test_a_time_limit_of_zero_is_refused():
    with pytest.raises(UserError, match="timeout_s=0"):
        Checker().verify("1", "1", timeout_s=0)


# -- the data: shipped sample, references, the check before the model loads -------------------------


def test_the_shipped_sample_is_gsm8k_shaped_and_every_reference_parses():
    records = read_records(shipped_file("gsm8k_sample.jsonl"))
    assert 55 <= len(records) <= 70
    assert len({r["question"] for r in records}) == len(records)
    for record in records:
        assert set(record) == {"question", "answer"}
        *steps, last = record["answer"].splitlines()
        assert steps and last.startswith("#### ")
        assert parse(reference_after(record["answer"], "####"))
    assert any("," in reference_after(r["answer"], "####") for r in records)  # commas in large numbers
    check_references(records, "answer", "####", "gsm8k_sample.jsonl")


def test_the_loader_puts_the_reference_in_its_column():
    from grpo_exp.dataset import LOADERS

    cfg = DatasetSettings(
        source="builtin",
        name="gsm8k_sample",
        prompt_field="question",
        reference_field="answer",
        reference_marker="####",
    )
    dataset = LOADERS.get("builtin")(cfg)
    row = dataset[6]
    assert row["reference_answer"] == "1,600" and row["answer"].endswith("#### 1,600")
    assert row["prompt"] == [{"role": "user", "content": row["question"]}]


def test_references_are_read_alike_for_every_source():
    assert reference_after("2+2 = 4\n#### 4", "####") == "4"
    assert reference_after("a #### b\n#### 1,234 ", "####") == "1,234"
    assert reference_after("no marker", "####") == ""
    assert reference_after(" 7 ", None) == "7"
    assert reference_after(None, "####") is None


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("3+3 = 6\n#### six", "its reference 'six' does not parse as math"),
        ("3+3 = 6", "its 'answer' has no '####'"),
        ("3+3 = 6\n####  ", "its reference is empty"),
    ],
)
def test_a_bad_reference_is_named_with_its_record_and_line_in_one_line(tmp_path, answer, why):
    path = tmp_path / "problems.jsonl"
    good = json.dumps({"question": "What is 2+2?", "answer": "2+2 = 4\n#### 4"})
    path.write_text(good + "\n\n" + json.dumps({"question": "What is 3+3?", "answer": answer}) + "\n")
    result = run(
        "reward=math",
        "dataset=json",
        f"dataset.path={path}",
        "dataset.prompt_field=question",
        "dataset.reference_field=answer",
        "dataset.reference_marker='####'",
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert f"{path}: record 2 (line 3): {why}" in lines[0]


def test_a_json_array_names_the_line_too(tmp_path):
    path = tmp_path / "problems.json"
    records = [{"question": "Q1", "answer": "#### 4"}, {"question": "Q2", "answer": "#### x+"}]
    path.write_text(json.dumps(records, indent=2))
    with pytest.raises(UserError, match=r"record 2 \(line 6\)"):
        from grpo_exp.dataset import check_dataset

        check_dataset(
            DatasetSettings(
                source="json",
                path=str(path),
                prompt_field="question",
                reference_field="answer",
                reference_marker="####",
            )
        )


def test_a_hub_dataset_is_checked_when_it_loads():
    records = [{"answer": "#### 3"}, {"answer": None}, {"answer": "#### \\frac{1}{"}]
    with pytest.raises(UserError, match=r"^openai/gsm8k \(train\): record 3: its reference"):
        check_references(records, "answer", "####", "openai/gsm8k (train)")


# -- configs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        ["reward=math", "dataset=gsm8k_sample"],
        ["+recipe=math"],
        ["+recipe=math_gsm8k"],
        ["reward=math", "dataset=gsm8k"],
    ],
)
def test_the_math_configs_pass_the_preflight(overrides):
    from grpo_exp.job import command

    command.preflight([*overrides, "logger=none"])  # exits on a bad config


FORM_NAMES = "boxed, marker, phrase, latex, whole"
NUMBER_NAMES = "unicode_minus, currency, commas, scientific"


@pytest.mark.parametrize(
    ("part", "change", "message"),
    [
        ("math_accuracy", {"answer_forms": ["boxd"]}, rf"answer_forms must be a non-empty list .* {FORM_NAMES}, got"),
        ("math_accuracy", {"answer_forms": []}, "answer_forms must be a non-empty list"),
        ("math_accuracy", {"answer_forms": "boxed"}, "answer_forms must be a non-empty list"),  # text, not a list
        ("math_accuracy", {"answer_forms": ["marker", "marker"]}, "answer_forms must be a non-empty list of distinct"),
        ("math_accuracy", {"number_forms": ["euros"]}, f"number_forms must be a list of .* from {NUMBER_NAMES}, got"),
        ("math_accuracy", {"marker": None}, "answer_forms lists marker, so marker must be text"),
        ("math_accuracy", {"phrases": []}, "answer_forms lists phrase, so phrases must be a list of text"),
        ("math_accuracy", {"timeout_s": 0}, "timeout_s must be seconds above 0"),
        ("math_accuracy", {"column": ""}, "column must name the dataset column"),
        ("math_format", {"answer_forms": ["latex"]}, "answer_forms must be .* from boxed, marker, phrase, got"),
        ("math_format", {"answer_pattern": "(["}, r"answer_pattern '\(\[' is not a regex"),
        ("math_format", {"min_reasoning_chars": -1}, "min_reasoning_chars must be a whole number from 0"),
        ("math_format", {"marker": ""}, "answer_forms lists marker, so marker must be text"),
    ],
)
def test_bad_params_are_refused_in_one_line_by_the_preflight_check(part, change, message):
    defaults = ACCURACY if part == "math_accuracy" else FORMAT
    with pytest.raises(UserError, match=f"^{part}: {message}") as refused:
        registry.check_params(part, {**defaults, **change})
    assert "\n" not in str(refused.value)


def test_unused_settings_are_not_checked():
    params = {**ACCURACY, "answer_forms": ["boxed"], "marker": None, "phrases": None}
    registry.check_params("math_accuracy", params)  # no marker form, no phrase form: nothing to refuse


def test_a_missing_param_is_named():
    params = {k: v for k, v in ACCURACY.items() if k != "number_forms"}
    missing = r"^math_accuracy: missing 1 required keyword-only argument: 'number_forms' \(see conf/reward/math.yaml\)$"
    with pytest.raises(UserError, match=missing):
        registry.check_params("math_accuracy", params)


def test_a_bad_form_stops_the_job_in_one_line_before_the_model_loads():
    result = run("+recipe=math", "reward.parts.format.params.answer_forms=[boxd]")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "math_format: answer_forms must be a non-empty list of distinct names" in lines[0]


def test_the_math_reward_needs_a_reference_column():
    result = run("reward=math", "dataset=customer_service")
    assert result.returncode == 2
    assert "needs the column 'reference_answer'" in result.stderr


def test_no_math_verify_for_help_or_cfg_job():
    probe = "import sys, runpy; sys.argv = ['run.py', *sys.argv[1:]]\n"
    probe += "try:\n    runpy.run_path('run.py', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    probe += "assert 'math_verify' not in sys.modules and 'sympy' not in sys.modules, 'imported'"
    for args in (["--help"], ["+recipe=math", "--cfg", "job"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-500:]


# -- the tiny model's warm-up ---------------------------------------------------------------------


def test_the_math_recipe_reads_the_accuracy_after_the_marker_only(settings):
    """benchmarks/math.md was measured so; the warm-up's other endings are ones the run unlearns."""
    assert settings("+recipe=math").reward.parts["accuracy"].params == GSM8K_ONLY
    assert settings("reward=math", "dataset=gsm8k_sample").reward.parts["accuracy"].params == ACCURACY


def test_the_math_warm_up_mixes_forms_and_numbers():
    from grpo_exp.models.warmup import build_corpus
    from grpo_exp.models.warmup_math import math_replies

    recipe = TinyRecipe(scenarios={"math": 1.0}, format_share=0.2, correct_share=0.4, corpus_size=600)
    examples = math_replies(random.Random(0), 600, recipe)
    references = {
        r["question"]: reference_after(r["answer"], "####") for r in read_records(shipped_file("gsm8k_sample.jsonl"))
    }
    replies = [e.reply for e in examples]
    form = math_format(replies, **FORMAT)
    right = math_accuracy(replies, reference_answer=[references[e.prompt] for e in examples], **GSM8K_ONLY)
    assert 0.1 < sum(form) / len(form) < 0.3  # some replies already in the final form, most not
    assert 0.05 < sum(right) / len(right) < 0.3  # some right answers in that form, more wrong ones
    assert any("The answer is" in r for r in replies) and any("####" not in r for r in replies)
    assert all("<<" not in r for r in replies)
    assert [e.scenario for e in build_corpus(recipe)] == ["math"] * 600


# -- end to end ------------------------------------------------------------------------------------


def run(*overrides: str, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "run.py", *overrides, "logger=none"]
    if out is not None:
        command.append(f"hydra.run.dir={out}")
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e  # a math run with training and evaluation: about 2 minutes
def test_a_short_run_logs_both_parts_in_training_and_evaluation(tmp_path):
    from grpo_exp.tracking.metrics import read_eval_metrics, read_metrics

    out = tmp_path / "job"
    result = run("reward=math", "dataset=gsm8k_sample", "grpo.max_steps=3", out=out)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(out / "metrics.jsonl")
    trained = [r for r in rows if "reward" in r]
    assert len(trained) == 3
    assert all("rewards/accuracy/mean" in r and "rewards/format/mean" in r for r in trained)
    evaluated = read_eval_metrics(out / "metrics.jsonl")  # before the first step and after the last
    assert len(evaluated) == 2
    assert all("eval/rewards/accuracy/mean" in r and "eval/rewards/format/mean" in r for r in evaluated)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["eval_parts"]) == {"format", "accuracy"}


@pytest.mark.slow
def test_the_math_recipe_learns_the_final_answer_form(tmp_path):
    """benchmarks/math.md's seed 42 (held-out format 0.10 -> 0.65): the format part rises at least 0.3."""
    out = tmp_path / "job"
    result = run("+recipe=math", "seed=42", "threads=2", out=out)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["eval_parts"]["format"] >= summary["base_eval_parts"]["format"] + 0.3
    assert summary["eval_parts"]["accuracy"] is not None
