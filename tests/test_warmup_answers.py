"""The warm-up corpus knobs: customer-service replies that name the answers, writing replies of the length asked for."""

from __future__ import annotations

import hashlib
import json

import pytest

from grpo_exp.config.schema import TinyRecipe
from grpo_exp.errors import UserError
from grpo_exp.models.warmup import FRAGMENTS, PASSAGES, build_corpus, sentences
from grpo_exp.shipped import read_records, shipped_file
from grpo_exp.spec import build_spec

ONLY_SERVICE = {"customer_service": 1.0}
NEITHER = {"answer_share": 0.0, "cover_share": 0.0, "topic_share": 0.0, "writing_share": 0.0}


def coverage(recipe: TinyRecipe) -> float:
    """Mean share of each example's required answers its reply names (the information reward)."""
    needs = {r["prompt"]: r["required_answers"] for r in read_records(shipped_file("customer_service.jsonl"))}
    corpus = build_corpus(recipe)
    return sum(sum(a in ex.reply for a in needs[ex.prompt]) / len(needs[ex.prompt]) for ex in corpus) / len(corpus)


def test_answer_share_sets_how_often_a_reply_names_its_answers():
    base = coverage(TinyRecipe(corpus_size=1000, scenarios=ONLY_SERVICE, **NEITHER))
    half = coverage(TinyRecipe(corpus_size=1000, scenarios=ONLY_SERVICE, answer_share=0.5, cover_share=0.0))
    assert 0.2 < base < 0.35  # any solution of the message's category names some of them by chance
    assert abs(half - (0.5 + 0.5 * base)) < 0.06


def test_a_thorough_reply_names_every_answer_of_its_category_once_each():
    answers = json.loads(shipped_file(FRAGMENTS).read_text(encoding="utf-8"))["answers"]
    category = {r["prompt"]: r["category"] for r in read_records(shipped_file("customer_service.jsonl"))}
    corpus = build_corpus(TinyRecipe(corpus_size=200, scenarios=ONLY_SERVICE, answer_share=0.0, cover_share=1.0))
    for ex in corpus:
        assert all(a in ex.reply for a in answers[category[ex.prompt]]), ex.reply
    sentences = [s for ex in corpus for s in ex.reply.split("。")]
    assert coverage(TinyRecipe(corpus_size=200, scenarios=ONLY_SERVICE, answer_share=0.0, cover_share=1.0)) == 1.0
    assert len(sentences) > len(corpus) * 4  # several solutions per reply, not one


def test_shares_of_zero_leave_the_original_corpus_as_it_was():
    """With both shares at 0 the corpus draws no extra random numbers: the corpus from before the
    options existed (digest taken from the code before them)."""
    corpus = build_corpus(TinyRecipe(corpus_size=300, **NEITHER))
    digest = hashlib.sha256(repr([(ex.scenario, ex.prompt, ex.reply) for ex in corpus]).encode()).hexdigest()
    assert digest[:16] == "1445f82731ed1c3b"


def test_topic_share_sets_how_often_the_opening_restates_the_message_category():
    category = {r["prompt"]: r["category"] for r in read_records(shipped_file("customer_service.jsonl"))}
    topics = json.loads(shipped_file(FRAGMENTS).read_text(encoding="utf-8"))["topics"]

    def restated(share: float) -> float:
        corpus = build_corpus(TinyRecipe(corpus_size=1000, scenarios=ONLY_SERVICE, topic_share=share))
        return sum(any(t.format(category[ex.prompt]) in ex.reply for t in topics) for ex in corpus) / len(corpus)

    assert restated(1.0) == 1.0
    assert abs(restated(0.5) - 0.5) < 0.06
    assert restated(0.0) == 0.0


def test_shares_over_one_are_refused_before_the_model_loads(settings):
    with pytest.raises(UserError, match=r"answer_share \(0.6\) \+ cover_share \(0.5\) is over 1"):
        build_spec(settings("model.recipe.answer_share=0.6"))


@pytest.mark.parametrize("override", ["model.recipe.topic_share=1.5", "model.recipe.format_share=-0.1"])
def test_a_share_outside_zero_to_one_is_refused_before_the_model_loads(settings, override):
    key, value = override.split("=")
    with pytest.raises(UserError, match=rf"^{key} is {value}: a share of the warm-up replies, between 0 and 1$"):
        build_spec(settings(override))


def writing(recipe: TinyRecipe) -> list[str]:
    return [ex.reply for ex in build_corpus(recipe) if ex.scenario == "content_creation"]


def test_fitted_writing_replies_end_near_the_length_asked_for_in_whole_sentences():
    shipped = {s for p in read_records(shipped_file(PASSAGES)) for s in sentences(p["text"])}
    replies = writing(TinyRecipe(corpus_size=400, writing_chars=150, writing_share=1.0))
    errors = [abs(150 - len(reply)) for reply in replies]
    assert sum(errors) / len(errors) < 6  # the passages as shipped miss by 36 on average
    assert max(errors) < 30
    for reply in replies:
        assert set(sentences(reply)) <= shipped, reply


def test_writing_share_sets_how_many_replies_are_fitted():
    passages = {p["text"] for p in read_records(shipped_file(PASSAGES))}
    replies = writing(TinyRecipe(corpus_size=1600, writing_chars=150, writing_share=0.5))
    assert abs(sum(r not in passages for r in replies) / len(replies) - 0.5) < 0.08  # a few fit as shipped


def test_a_negative_writing_length_is_refused_before_the_model_loads(settings):
    with pytest.raises(UserError, match=r"^model.recipe.writing_chars is -5: .*0 keeps the passages as they are$"):
        build_spec(settings("model.recipe.writing_chars=-5"))
