"""Bad input fails early with one line that names the problem and the fix."""

from __future__ import annotations

import json

import pytest

from grpo_exp import hardware
from grpo_exp.errors import UserError
from grpo_exp.spec import build_spec
from tests.machines import A100, CPU_ONLY


def fails(settings, *overrides: str) -> str:
    with pytest.raises(UserError) as err:
        build_spec(settings(*overrides))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_defaults_are_valid_and_quiet(settings):
    checked = build_spec(settings())
    assert checked.warnings == () and [r.__name__ for r in checked.rewards] == ["format"]


def test_batch_not_a_multiple_of_the_group_says_which_values_work(settings):
    message = fails(settings, "grpo.num_generations=5", "grpo.per_device_train_batch_size=12")
    assert "holds 12 completions" in message and "not a multiple of grpo.num_generations=5" in message
    assert "grpo.per_device_train_batch_size=5 or 10 or 15" in message
    assert "grpo.num_generations=4 or 6 or 12" in message
    assert "grpo.hold_fixed=prompts" in message


@pytest.mark.parametrize("group", [2, 4, 5, 6, 8])
def test_any_group_size_gets_whole_groups_by_default(settings, group):
    cfg = settings(f"grpo.num_generations={group}")
    build_spec(cfg)
    assert cfg.grpo.per_device_train_batch_size == cfg.grpo.prompts_per_step * group


def test_hold_fixed_completions_and_none(settings):
    cfg = settings("grpo.hold_fixed=completions", "grpo.num_generations=4")
    build_spec(cfg)
    assert cfg.grpo.per_device_train_batch_size == 12
    assert "group sizes that fit: 2, 3, 4, 6, 12" in fails(
        settings, "grpo.hold_fixed=completions", "grpo.num_generations=5"
    )
    assert "needs grpo.per_device_train_batch_size" in fails(settings, "grpo.hold_fixed=none")


def test_gradient_accumulation_counts_towards_the_generation_batch(settings):
    checked = build_spec(settings("grpo.per_device_train_batch_size=3", "optimizer.gradient_accumulation_steps=2"))
    assert checked.warnings == ()
    message = fails(settings, "grpo.per_device_train_batch_size=4", "optimizer.gradient_accumulation_steps=2")
    assert "holds 8 completions" in message and "grpo.per_device_train_batch_size=3 or 6 or 9" in message


def test_group_of_one_is_an_error(settings):
    assert "use 4-8" in fails(settings, "grpo.num_generations=1", "grpo.per_device_train_batch_size=4")


def test_small_group_warns_with_the_articles_reason(settings):
    warnings = build_spec(settings("grpo.num_generations=3")).warnings
    assert len(warnings) == 1 and "below 4" in warnings[0] and "diversity" in warnings[0]


def test_vllm_on_cpu_warns_and_4bit_on_cpu_fails(settings, monkeypatch):
    monkeypatch.setattr(hardware, "machine", lambda *a, **k: CPU_ONLY)
    assert "generating with transformers on this CPU" in build_spec(settings("grpo.use_vllm=true")).warnings[0]
    assert "needs a CUDA GPU" in fails(settings, "model.quantization.load_in_4bit=true", "model.lora.enabled=true")
    assert "no GPU is visible" in fails(settings, "device=cuda")


def test_vllm_on_gpu_without_vllm_installed_fails(settings, monkeypatch):
    monkeypatch.setattr(hardware, "machine", lambda *a, **k: A100)
    monkeypatch.setattr(hardware, "installed", lambda name: False)
    assert "pip install -e '.[vllm]'" in fails(settings, "grpo.use_vllm=true")
    assert "pip install -e '.[quant]'" in fails(
        settings, "model.quantization.load_in_4bit=true", "model.lora.enabled=true"
    )


def test_missing_and_empty_data_files(settings, tmp_path):
    assert "add dataset.path=prompts.json" in fails(settings, "dataset=json")
    assert "no such file" in fails(settings, "dataset=json", f"dataset.path={tmp_path / 'nope.json'}")
    empty = tmp_path / "empty.json"
    empty.write_text("  \n")
    assert "is empty" in fails(settings, "dataset=json", f"dataset.path={empty}")
    empty_array = tmp_path / "array.json"
    empty_array.write_text("[]")
    assert "holds no records" in fails(settings, "dataset=json", f"dataset.path={empty_array}")


def test_records_without_prompt_name_the_fields_found(settings, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text("\n".join(json.dumps({"question": f"q{i}", "answer": "a"}) for i in range(3)))
    message = fails(settings, "dataset=json", f"dataset.path={data}")
    assert "no 'prompt' field (fields found: ['answer', 'question'])" in message
    assert "dataset.prompt_field=" in message
    build_spec(settings("dataset=json", f"dataset.path={data}", "dataset.prompt_field=question"))


def test_broken_json_is_reported_with_its_line(settings, tmp_path):
    data = tmp_path / "broken.jsonl"
    data.write_text('{"prompt": "a"}\n{"prompt": \n')
    assert "not valid JSON" in fails(settings, "dataset=json", f"dataset.path={data}")


def test_unknown_reward_name_lists_the_known_ones(settings):
    message = fails(settings, "reward.parts.format.fn=formatt")
    assert "unknown reward function 'formatt'; known:" in message and "regex_match" in message


def test_unknown_shipped_dataset_lists_the_shipped_ones(settings):
    assert "shipped: code_generation, content_creation, customer_service" in fails(settings, "dataset.name=nope")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optimizer.lr=0", "optimizer.lr=0.0 is out of range: it must lie in (0, inf)"),
        ("grpo.beta=-1", "grpo.beta=-1.0 is out of range: it must lie in [0, inf)"),
        ("grpo.top_p=1.5", "grpo.top_p=1.5 is out of range: it must lie in (0, 1]"),
        ("grpo.max_steps=-5", "grpo.max_steps=-5: give a positive step count, or -1"),
        ("grpo.max_steps=0", "grpo.max_steps=0: give a positive step count"),
        ("monitor.max_zero_std_fraction=1.5", "must lie in [0, 1]"),
        ("model.recipe.sft_warmup_steps=-1", "model.recipe.sft_warmup_steps=-1 is out of range"),
        ("model.recipe.sft_steps=0", "model.recipe.sft_steps=0 is out of range"),
    ],
)
def test_out_of_range_values(settings, override, message):
    assert message in fails(settings, override)


def test_every_range_names_a_real_key(settings):
    from operator import attrgetter

    from grpo_exp.config.checks import RANGES

    cfg = settings()
    for key in RANGES:
        attrgetter(key)(cfg)  # AttributeError when a key was renamed or dropped


def test_reward_columns_are_checked_against_the_data(settings, tmp_path):
    message = fails(settings, "reward=customer_service_multi", "dataset=content_creation")
    assert "reward part 'information' (answer_coverage) needs the column 'required_answers'" in message
    assert "its columns: prompt, topic" in message
    rewards = tmp_path / "needs_answer.py"
    rewards.write_text("def f(prompts, completions, answer, **kwargs):\n    return [1.0] * len(completions)\n")
    data = tmp_path / "qa.json"
    data.write_text(json.dumps([{"prompt": "p", "solution": "s"}]))
    overrides = ("reward=custom", f"reward.parts.main.fn={rewards}:f", "dataset=json", f"dataset.path={data}")
    assert "needs the column 'answer'" in fails(settings, *overrides)
    data.write_text(json.dumps([{"prompt": "p", "answer": "s"}]))
    assert build_spec(settings(*overrides)).rewards[0].__name__ == "main"


def test_prompt_field_hint_picks_the_prompt_like_field(settings, tmp_path):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"answer": "42", "question": "what is six times seven?"}) + "\n")
    assert "add dataset.prompt_field=question" in fails(settings, "dataset=json", f"dataset.path={data}")


def test_some_records_without_prompt_are_counted(settings, tmp_path):
    data = tmp_path / "mixed.json"
    data.write_text(json.dumps([{"prompt": "a"}, {"promt": "b"}, {"prompt": "c"}]))
    assert "1 of 3 records have no 'prompt' field (the first is record 2)" in fails(
        settings, "dataset=json", f"dataset.path={data}"
    )


def test_model_mistakes(settings):
    assert "unknown model.source 'hubb'; known: pretrained, tiny" in fails(settings, "model.source=hubb")
    message = fails(settings, "+model.recipe.scenarios.poetry=0.5")
    assert "unknown ['poetry']; known: code_generation, content_creation, customer_service" in message
    assert "need a reasoning-gym task: add dataset=reasoning_gym" in fails(settings, "model.recipe.habit_steps=100")
    assert "need a reasoning-gym task" in fails(settings, "model=tiny_arithmetic")  # the dataset gives no task


def test_4bit_without_lora_is_refused(settings, monkeypatch):
    monkeypatch.setattr(hardware, "machine", lambda *a, **k: A100)
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    assert "add model.lora.enabled=true" in fails(
        settings, "model=qwen2_5_0_5b_instruct", "model.quantization.load_in_4bit=true"
    )
