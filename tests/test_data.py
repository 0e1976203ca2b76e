"""Prompt datasets as the trainer receives them."""

from __future__ import annotations

import json
import logging

import pytest

from grpo_exp.config.schema import DatasetSettings, TinyRecipe
from grpo_exp.dataset import builtin_names, load_prompts
from grpo_exp.errors import UserError
from grpo_exp.models.tiny import train_tokenizer
from grpo_exp.models.warmup import build_corpus


@pytest.fixture(scope="module")
def tokenizer():
    recipe = TinyRecipe(corpus_size=200, vocab_size=600)
    return train_tokenizer(build_corpus(recipe), recipe.vocab_size)


def json_dataset(tmp_path, records, **settings) -> DatasetSettings:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records), encoding="utf-8")
    return DatasetSettings(source="json", path=str(path), **settings)


def test_string_prompts_become_chat_messages_with_an_optional_system_prompt(tmp_path, tokenizer):
    cfg = json_dataset(tmp_path, [{"prompt": "退款多久到账？", "required_answers": ["退款"]}], system_prompt="你是客服")
    (row,) = load_prompts(cfg, tokenizer)
    assert row["prompt"] == [{"role": "system", "content": "你是客服"}, {"role": "user", "content": "退款多久到账？"}]
    assert row["required_answers"] == ["退款"]  # other columns reach the rewards


def test_chat_records_pass_through_and_mix_with_plain_ones(tmp_path, tokenizer):
    chat = [{"role": "user", "content": "你好"}]
    cfg = json_dataset(tmp_path, [{"prompt": "续写：今天"}, {"prompt": chat}])
    assert [r["prompt"] for r in load_prompts(cfg, tokenizer)] == [[{"role": "user", "content": "续写：今天"}], chat]
    with pytest.raises(UserError, match="every prompt must be a string, or every one a list of messages"):
        load_prompts(json_dataset(tmp_path, [{"prompt": "续写：今天"}, {"prompt": chat}], chat=False), tokenizer)


def test_plain_prompts_stay_strings_without_chat(tmp_path, tokenizer):
    cfg = json_dataset(tmp_path, [{"prompt": "续写：今天"}], chat=False)
    assert [r["prompt"] for r in load_prompts(cfg, tokenizer)] == ["续写：今天"]


def test_long_prompts_are_dropped_and_counted(tmp_path, tokenizer, caplog):
    records = [{"prompt": "短问题"}, {"prompt": "很长的问题" * 200}, {"prompt": "另一个短问题"}]
    cfg = json_dataset(tmp_path, records, max_prompt_tokens=64)
    with caplog.at_level(logging.WARNING, logger="grpo_exp.dataset"):
        rows = load_prompts(cfg, tokenizer)
    assert [r["prompt"][-1]["content"] for r in rows] == ["短问题", "另一个短问题"]
    assert "dropped 1 of 3 prompts longer than 64 tokens" in caplog.text


def test_num_samples_takes_the_first_prompts(tokenizer):
    cfg = DatasetSettings(source="builtin", name="customer_service", num_samples=5)
    assert len(load_prompts(cfg, tokenizer)) == 5


def test_shipped_sets_are_listed():
    assert builtin_names() == [
        "code_generation",
        "content_creation",
        "customer_service",
        "gsm8k_sample",
        "support_agent",
        "support_env",
    ]


def test_prompt_field_other_than_prompt(tmp_path, tokenizer):
    cfg = json_dataset(tmp_path, [{"question": "发票怎么开？"}], prompt_field="question")
    (row,) = load_prompts(cfg, tokenizer)
    assert row["prompt"][-1]["content"] == "发票怎么开？"
