"""The embedded model: built offline, deterministic, cached by recipe, loaded like a hub model."""

from __future__ import annotations

import ast
import dataclasses
import random
import re

import pytest

from grpo_exp.cache import CACHE_ENV
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models import tiny
from grpo_exp.models.code_variants import wrong_variant
from grpo_exp.models.warmup import build_corpus
from grpo_exp.shipped import read_records, shipped_file

# A recipe small enough to build in a second or two.
SMALL = TinyRecipe(
    vocab_size=400,
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=64,
    corpus_size=60,
    sft_steps=3,
    sft_batch_tokens=512,
)
FORMAT = re.compile(r"^您好.+问题已解决.+如有其他问题请随时联系$")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path


def test_build_is_deterministic_and_loads_through_from_pretrained(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        out.mkdir()
        tiny.build(SMALL, out)
    a, b = (AutoModelForCausalLM.from_pretrained(p) for p in (first, second))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert (first / "tokenizer.json").read_bytes() == (second / "tokenizer.json").read_bytes()
    tokenizer = AutoTokenizer.from_pretrained(first)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "你好"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"
    assert a.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_a_habit_phase_follows_the_warm_up_on_its_own_corpus_steps_and_rate(tmp_path, monkeypatch):
    sums = {"min_terms": 2, "max_terms": 3, "max_digits": 1}
    task = dataclasses.replace(
        SMALL, scenarios={"task": 1.0}, task="chain_sum", task_settings=sums, held_out_share=0.2, habit_steps=4,
        habit_share=1.0, habit_lr=1e-4,
    )  # fmt: skip
    phases = []
    real = tiny.warm_up

    def recorded(model, tokenizer, corpus, recipe, steps, lr, rise=0):
        phases.append((steps, lr, sum("=" not in example.reply for example in corpus) / len(corpus), rise))
        real(model, tokenizer, corpus, recipe, steps, lr, rise)

    monkeypatch.setattr(tiny, "warm_up", recorded)
    tiny.build(dataclasses.replace(task, sft_warmup_steps=2), tmp_path)
    assert phases == [(3, SMALL.sft_lr, 0.0, 2), (4, 1e-4, 1.0, 0)]  # worked replies (rising), then the habit
    (tmp_path / "none").mkdir()
    tiny.build(dataclasses.replace(task, habit_steps=0), tmp_path / "none")
    assert len(phases) == 3


def test_the_warm_up_rate_rises_over_its_first_steps_within_the_decay():
    steps = 100
    assert [tiny.rate_factor(s, steps, 0) for s in range(steps)] == [1 - s / steps for s in range(steps)]
    rising = [tiny.rate_factor(s, steps, 10) for s in range(steps)]
    assert rising[0] == pytest.approx(0.1) and rising[9] == pytest.approx(0.91)
    assert rising[:10] == sorted(rising[:10]) and rising[10:] == [1 - s / steps for s in range(10, steps)]


def test_the_build_is_the_same_whatever_threads_the_job_set(tmp_path):
    """A sweep job at threads=1 builds the model a plain run builds: the warm-up's float sums
    depend on torch's thread count, so the build pins its own."""
    import torch

    recipe = dataclasses.replace(SMALL, vocab_size=4000, corpus_size=200, sft_steps=20)  # big enough for sums to differ
    job_threads = torch.get_num_threads()
    weights = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            out = tmp_path / str(threads)
            out.mkdir()
            tiny.build(recipe, out)
            assert torch.get_num_threads() == threads  # the job's own setting is back for its training
            weights.append((out / "model.safetensors").read_bytes())
    finally:
        torch.set_num_threads(job_threads)
    assert weights[0] == weights[1]


def test_cache_is_keyed_by_recipe(cache, monkeypatch):
    path = tiny.ensure_built(SMALL)
    assert path.parent == cache and (path / "config.json").is_file()
    monkeypatch.setattr(tiny, "build", lambda *a: pytest.fail("rebuilt a cached model"))
    assert tiny.ensure_built(SMALL) == path
    changed = dataclasses.replace(SMALL, sft_steps=4)
    assert tiny.recipe_key(changed) != tiny.recipe_key(SMALL)


def test_warmup_replies_meet_the_format_about_as_often_as_the_recipe_says():
    corpus = build_corpus(dataclasses.replace(SMALL, corpus_size=2000, scenarios={"customer_service": 1.0}))
    share = sum(bool(FORMAT.match(ex.reply)) for ex in corpus) / len(corpus)
    assert 0.05 < share < 0.15  # format_share = 0.1
    assert len({ex.reply for ex in corpus}) > 1500  # varied, not a handful of templates


def test_warmup_mix_follows_the_scenario_shares():
    corpus = build_corpus(dataclasses.replace(SMALL, corpus_size=400))
    counts = {s: sum(ex.scenario == s for ex in corpus) for s in ("customer_service", "content_creation")}
    assert counts == {"customer_service": 300, "content_creation": 100}


def test_warmup_batches_mix_scenarios_within_the_token_budget():
    """Batches of one scenario at a time left the model answering writing requests like a customer."""
    import torch

    rows = [([0] * 10, [0] * 10)] * 30 + [([1] * 60, [1] * 60)] * 10  # short replies and long ones
    generator = torch.Generator().manual_seed(0)
    batches = [tiny._batch(rows, 200, generator) for _ in range(300)]
    assert all(len(b) == 1 or len(b) * max(len(ids) for ids, _ in b) <= 200 for b in batches)
    assert sum(len({ids[0] for ids, _ in b}) == 2 for b in batches) > 50  # both kinds in one batch
    assert max(len(b) for b in batches) == 20  # a batch of short rows fills the budget
    assert tiny._batch([([0] * 300, [0] * 300)], 200, generator) == [([0] * 300, [0] * 300)]  # one, even if too long


def test_code_variants_are_wrong_but_mostly_still_python():
    rng = random.Random(0)
    problems = read_records(shipped_file("code_generation.jsonl"))
    variants = [(p["reference"], wrong_variant(p["reference"], rng)) for p in problems]
    assert all(variant != ast.unparse(ast.parse(ref)) for ref, variant in variants)
    parses = sum(_parses(variant) for _, variant in variants)
    assert parses >= 0.8 * len(variants)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def test_warm_up_progress_gives_the_time_left_from_the_rate_so_far():
    from grpo_exp.models.progress import LOG_SECONDS, StepProgress

    now = [0.0]
    progress = StepProgress(200, clock=lambda: now[0])
    now[0] = 2.0
    assert progress.due(1) and progress.timing(1) == "2 s so far, about 6.6 min left"
    now[0] = 2.0 + LOG_SECONDS / 2
    assert not progress.due(7)  # neither a round step nor long enough since the last line
    now[0] = 2.0 + LOG_SECONDS
    assert progress.due(8)  # under load: a line by the clock, not only every 50 steps
    now[0] = 40.0
    assert progress.due(100) and progress.timing(100) == "40 s so far, about 40 s left"
    now[0] = 300.0  # the machine got busier: the estimate follows the rate measured
    assert progress.timing(150) == "5.0 min so far, about 100 s left"
    assert progress.due(200) and progress.timing(200) == "took 5.0 min"


def test_the_build_logs_its_warm_up_with_the_time_left(tmp_path, caplog):
    """Issue 62: under load the build showed step counts with no idea of when it would end."""
    with caplog.at_level("INFO", logger=tiny.__name__):
        tiny.build(SMALL, tmp_path)
    lines = [r.getMessage() for r in caplog.records if "warm-up step" in r.getMessage()]
    assert lines[0].startswith("tiny model warm-up step 1/3: loss ") and lines[0].endswith(" left")
    assert lines[-1].startswith("tiny model warm-up step 3/3: ") and " took " in lines[-1]
