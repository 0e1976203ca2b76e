"""The held-out split: never shares a prompt with training, same for every job of a sweep, checked early."""

from __future__ import annotations

import json

import pytest

from grpo_exp.config.schema import DatasetSettings, TinyRecipe
from grpo_exp.dataset import check_dataset, load_splits, prompt_key
from grpo_exp.errors import UserError
from grpo_exp.models.tiny import train_tokenizer
from grpo_exp.models.warmup import build_corpus


@pytest.fixture(scope="module")
def tokenizer():
    recipe = TinyRecipe(corpus_size=200, vocab_size=600)
    return train_tokenizer(build_corpus(recipe), recipe.vocab_size)


def write(path, records):
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in records), encoding="utf-8")
    return str(path)


def keys(dataset) -> list[str]:
    return [prompt_key(p) for p in dataset["prompt"]]


@pytest.mark.parametrize("name", ["customer_service", "content_creation", "code_generation"])
def test_shipped_sets_hold_out_a_tenth_that_training_never_sees(name, tokenizer):
    cfg = DatasetSettings(source="builtin", name=name)
    train, held_out = load_splits(cfg, tokenizer)
    assert held_out is not None
    assert not set(keys(train)) & set(keys(held_out))
    total = len(train) + len(held_out)
    assert len(held_out) == -(-total // 10)  # a tenth, rounded up
    assert "required_answers" in held_out.column_names or name != "customer_service"  # rewards' columns kept


def test_split_is_fixed_by_its_own_seed_not_the_jobs(tokenizer):
    cfg = DatasetSettings(source="builtin", name="customer_service")
    first, again = load_splits(cfg, tokenizer)[1], load_splits(cfg, tokenizer)[1]
    assert keys(first) == keys(again)
    other = load_splits(DatasetSettings(source="builtin", name="customer_service", split_seed=1), tokenizer)[1]
    assert set(keys(other)) != set(keys(first))


def test_duplicate_prompts_stay_on_one_side(tmp_path, tokenizer):
    records = [{"prompt": f"问题{i % 5}"} for i in range(20)]  # 5 distinct prompts, each 4 times
    cfg = DatasetSettings(source="json", path=write(tmp_path / "p.jsonl", records), eval_fraction=0.4)
    train, held_out = load_splits(cfg, tokenizer)
    assert len(set(keys(held_out))) == 2 and len(held_out) == 8
    assert not set(keys(train)) & set(keys(held_out))


def test_eval_path_replaces_the_fraction_and_training_drops_shared_prompts(tmp_path, tokenizer, caplog):
    train_file = write(tmp_path / "train.jsonl", [{"prompt": f"问题{i}"} for i in range(10)])
    eval_file = write(tmp_path / "eval.jsonl", [{"prompt": "问题3"}, {"prompt": "另一个问题"}])
    cfg = DatasetSettings(source="json", path=train_file, eval_path=eval_file, eval_fraction=0.5)
    train, held_out = load_splits(cfg, tokenizer)
    assert [p[-1]["content"] for p in held_out["prompt"]] == ["问题3", "另一个问题"]
    assert len(train) == 9 and "问题3" not in [p[-1]["content"] for p in train["prompt"]]
    assert "dropped 1 training prompts that are also in" in caplog.text


def test_fraction_zero_turns_evaluation_off(tokenizer):
    cfg = DatasetSettings(source="builtin", name="customer_service", eval_fraction=0)
    train, held_out = load_splits(cfg, tokenizer)
    assert held_out is None and len(train) == 256


def test_a_single_prompt_trains_without_evaluation(tmp_path, tokenizer):
    cfg = DatasetSettings(source="json", path=write(tmp_path / "one.jsonl", [{"prompt": "只有一个"}]))
    train, held_out = load_splits(cfg, tokenizer)
    assert held_out is None and len(train) == 1


def test_a_bad_eval_file_fails_before_the_model_loads(tmp_path):
    cfg = DatasetSettings(source="builtin", name="customer_service", eval_path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(UserError, match=r"dataset.eval_path=.*nope.jsonl: no such file"):
        check_dataset(cfg)
    cfg.eval_path = write(tmp_path / "q.jsonl", [{"question": "没有 prompt 字段"}])
    with pytest.raises(UserError, match=r"add dataset\.prompt_field=question"):
        check_dataset(cfg)


def test_the_fraction_must_leave_prompts_to_train_on(settings):
    from grpo_exp.spec import build_spec

    with pytest.raises(UserError, match=r"dataset.eval_fraction=1.0 is out of range: it must lie in \[0, 1\)"):
        build_spec(settings("dataset.eval_fraction=1.0"))
    assert settings().dataset.eval_fraction == 0.1  # shipped default, documented in conf/dataset/


# (held-out prompts, completions per prompt, configured batch, batch used): 26 prompts in 2 batches of 13,
# a prime 23 in one, 100 in batches of 4 prompts (24 completions, as asked), 7 one prompt at a time.
EVAL_BATCHES = [(26, 2, 24, 26), (23, 2, 24, 46), (100, 6, 24, 24), (7, 4, 8, 4)]


@pytest.mark.parametrize(("prompts", "group", "configured", "expected"), EVAL_BATCHES)
def test_evaluation_batches_hold_whole_groups_and_weigh_alike(settings, prompts, group, configured, expected):
    """TRL's eval/reward is a mean of batch means: equal batches make it the mean over every completion."""
    from grpo_exp.config.batch import eval_batch

    cfg = settings(f"grpo.num_generations_eval={group}", f"grpo.per_device_eval_batch_size={configured}")
    size = eval_batch(cfg, prompts, processes=1)
    assert size == expected and size % group == 0 and (prompts * group) % size == 0
