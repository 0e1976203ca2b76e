"""Bad input fails early with one line that names the problem and the fix."""

from __future__ import annotations

import json

import pytest

from grpo_exp import hardware
from grpo_exp.errors import UserError
from grpo_exp.validate import validate


def fails(settings, *overrides: str) -> str:
    with pytest.raises(UserError) as err:
        validate(settings(*overrides))
    message = str(err.value)
    assert "\n" not in message
    return message


def test_defaults_are_valid_and_quiet(settings):
    assert validate(settings()) == []


def test_batch_not_a_multiple_of_the_group_says_which_values_work(settings):
    message = fails(settings, "grpo.num_generations=5")
    assert "12 completions, not a multiple of grpo.num_generations=5" in message
    assert "grpo.per_device_train_batch_size=5 or 10 or 15" in message
    assert "grpo.num_generations=4 or 6 or 12" in message


def test_gradient_accumulation_counts_towards_the_generation_batch(settings):
    assert validate(settings("grpo.per_device_train_batch_size=3", "optimizer.gradient_accumulation_steps=2")) == []
    message = fails(settings, "grpo.per_device_train_batch_size=4", "optimizer.gradient_accumulation_steps=2")
    assert "= 8 completions" in message and "grpo.per_device_train_batch_size=3 or 6 or 9" in message


def test_group_of_one_is_an_error(settings):
    assert "use 4-8" in fails(settings, "grpo.num_generations=1", "grpo.per_device_train_batch_size=4")


def test_small_group_warns_with_the_articles_reason(settings):
    warnings = validate(settings("grpo.num_generations=3"))
    assert len(warnings) == 1 and "below 4" in warnings[0] and "diversity" in warnings[0]


def test_vllm_on_cpu_warns_and_4bit_on_cpu_fails(settings, monkeypatch):
    monkeypatch.setattr(hardware, "cuda_available", lambda: False)
    assert "generating with transformers on this CPU" in validate(settings("grpo.use_vllm=true"))[0]
    assert "needs a CUDA GPU" in fails(settings, "model.quantization.load_in_4bit=true")
    assert "no CUDA GPU is visible" in fails(settings, "device=cuda")


def test_vllm_on_gpu_without_vllm_installed_fails(settings, monkeypatch):
    monkeypatch.setattr(hardware, "cuda_available", lambda: True)
    monkeypatch.setattr(hardware, "installed", lambda name: False)
    assert "pip install -e '.[vllm]'" in fails(settings, "grpo.use_vllm=true")
    assert "pip install -e '.[quant]'" in fails(settings, "model.quantization.load_in_4bit=true")


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
    validate(settings("dataset=json", f"dataset.path={data}", "dataset.prompt_field=question"))


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
        ("grpo.loss_type=ppo", "grpo.loss_type=ppo is not one of grpo, dapo"),
        ("optimizer.lr=0", "optimizer.lr=0.0 must be a positive number"),
        ("grpo.beta=-1", "grpo.beta=-1.0 must be >= 0"),
        ("logger.mode=sometimes", "logger.mode=sometimes is not one of auto"),
    ],
)
def test_out_of_range_values(settings, override, message):
    assert message in fails(settings, override)


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


def test_4bit_without_lora_is_refused(settings, monkeypatch):
    monkeypatch.setattr(hardware, "cuda_available", lambda: True)
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    assert "add model.lora.enabled=true" in fails(
        settings, "model=qwen2_5_0_5b_instruct", "model.quantization.load_in_4bit=true"
    )
