"""The warm-up's answer_share: customer-service replies that name the answers their message needs."""

from __future__ import annotations

import hashlib

from grpo_exp.config import TinyRecipe
from grpo_exp.data import read_records, shipped_file
from grpo_exp.models.warmup import build_corpus

ONLY_SERVICE = {"customer_service": 1.0}


def coverage(recipe: TinyRecipe) -> float:
    """Mean share of each example's required answers its reply names (the information reward)."""
    needs = {r["prompt"]: r["required_answers"] for r in read_records(shipped_file("customer_service.jsonl"))}
    corpus = build_corpus(recipe)
    return sum(sum(a in ex.reply for a in needs[ex.prompt]) / len(needs[ex.prompt]) for ex in corpus) / len(corpus)


def test_answer_share_sets_how_often_a_reply_names_its_answers():
    base = coverage(TinyRecipe(corpus_size=1000, scenarios=ONLY_SERVICE))
    half = coverage(TinyRecipe(corpus_size=1000, scenarios=ONLY_SERVICE, answer_share=0.5))
    assert 0.2 < base < 0.35  # any solution of the message's category names some of them by chance
    assert abs(half - (0.5 + 0.5 * base)) < 0.06


def test_answer_share_zero_leaves_the_shipped_corpus_as_it_was():
    """The default draws no extra random numbers: the same corpus as before the option existed
    (digest taken from the code before it), so the embedded model's warm-up is unchanged."""
    corpus = build_corpus(TinyRecipe(corpus_size=300))
    digest = hashlib.sha256(repr([(ex.scenario, ex.prompt, ex.reply) for ex in corpus]).encode()).hexdigest()
    assert digest[:16] == "1445f82731ed1c3b"
