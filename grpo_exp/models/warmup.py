"""The warm-up corpus of the embedded model: (prompt, reply) pairs composed from shipped data.

The mix is set by the recipe's ``scenarios`` (scenario -> share of the corpus). Each scenario's
replies are sometimes right and sometimes not, so the model starts out sampling both and GRPO
has a difference to learn from:

- customer service: replies built slot by slot (greeting, solution, resolution, optional polite
  phrase, sign-off); each of the three slots the article's format checks takes its exact wording
  with probability ``format_share ** (1/3)``, so about ``format_share`` of replies meet the format;
  the solution names the message's required answers with probability ``answer_share``, every
  answer of the message's category with probability ``cover_share`` (a thorough reply), else it is
  any one solution of the message's category; with probability ``topic_share`` the opening restates
  the message's category before the solution;
- content creation: the shipped passages, of varied length and keyword use; with probability
  ``writing_share`` a passage is cut or filled out with other passages' sentences to end near
  ``writing_chars`` characters, the length the requests ask for;
- code generation: the reference solution with probability ``correct_share``, else a near-miss
  variant of it (``code_variants``), in a markdown code block.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.code_variants import wrong_variant
from grpo_exp.models.examples import Example
from grpo_exp.models.warmup_agent import support_agent
from grpo_exp.models.warmup_math import math_replies
from grpo_exp.models.warmup_store import support_store
from grpo_exp.models.warmup_task import task_replies
from grpo_exp.shipped import read_records, shipped_file

FRAGMENTS = "warmup/customer_service_replies.json"
PASSAGES = "warmup/content_creation_passages.jsonl"
# Share of customer-service replies that carry a polite phrase (the article's tone reward).
POLITE_SHARE = 0.3
FORMAT_SLOTS = 3
# Fillings tried per fitted writing reply; the one ending nearest the length asked for wins.
FIT_TRIES = 8


def corpus_files(recipe: TinyRecipe) -> list[str]:
    """Every shipped file the recipe's corpus reads: part of the tiny model's cache key."""
    return sorted({name for scenario, share in recipe.scenarios.items() if share for name in _SCENARIOS[scenario][0]})


def build_corpus(recipe: TinyRecipe) -> list[Example]:
    """``recipe.corpus_size`` warm-up examples in the recipe's mix, deterministic for its seed."""
    rng = random.Random(recipe.seed)
    total = sum(recipe.scenarios.values())
    examples: list[Example] = []
    for scenario, share in recipe.scenarios.items():
        count = round(recipe.corpus_size * share / total)
        examples += _SCENARIOS[scenario][1](rng, count, recipe)
    rng.shuffle(examples)
    return examples


def scenarios() -> list[str]:
    return sorted(_SCENARIOS)


def _customer_service(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    fragments = json.loads(shipped_file(FRAGMENTS).read_text(encoding="utf-8"))
    records = read_records(shipped_file("customer_service.jsonl"))
    exact = recipe.format_share ** (1 / FORMAT_SLOTS)

    def reply(record: dict[str, Any]) -> str:
        def slot(name: str) -> str:
            return rng.choice(fragments[name]["exact" if rng.random() < exact else "other"])

        polite = rng.choice(fragments["polite"]) if rng.random() < POLITE_SHARE else ""
        bodies = fragments["bodies"][record["category"]]
        topic = ""
        if recipe.topic_share and rng.random() < recipe.topic_share:  # 0: the corpus as before
            topic = rng.choice(fragments["topics"]).format(record["category"])
        draw = rng.random() if recipe.answer_share or recipe.cover_share else 1.0  # 0, 0: the corpus as before
        if draw < recipe.answer_share:  # a body per answer the message needs
            body = _naming(bodies, record["required_answers"], rng)
        elif draw < recipe.answer_share + recipe.cover_share:  # a thorough reply: every answer of the category
            body = _naming(bodies, fragments["answers"][record["category"]], rng)
        else:
            body = rng.choice(bodies)
        return slot("openings") + topic + body + slot("resolutions") + polite + slot("closings")

    chosen = [rng.choice(records) for _ in range(count)]
    return [Example("customer_service", r["prompt"], reply(r)) for r in chosen]


def _naming(bodies: list[str], answers: list[str], rng: random.Random) -> str:
    """Solution sentences that together name every one of ``answers``, each sentence once."""
    chosen: list[str] = []
    for answer in rng.sample(answers, len(answers)):
        if not any(answer in body for body in chosen):
            chosen.append(rng.choice([b for b in bodies if answer in b]))
    return "".join(chosen)


def _content_creation(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    passages = read_records(shipped_file(PASSAGES))
    requests = read_records(shipped_file("content_creation.jsonl"))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for request in requests:
        by_topic.setdefault(request["topic"], []).append(request)
    pool = [s for p in passages for s in sentences(p["text"])]
    examples = []
    for _ in range(count):
        passage = rng.choice(passages)
        request = rng.choice(by_topic.get(passage["topic"]) or requests)  # a request on the passage's topic
        text = passage["text"]
        if recipe.writing_chars and recipe.writing_share and rng.random() < recipe.writing_share:
            text = _fitted(sentences(text), pool, recipe.writing_chars, rng)
        examples.append(Example("content_creation", request["prompt"], text))
    return examples


def sentences(text: str) -> list[str]:
    """A passage's sentences, each with its closing punctuation."""
    return re.findall(r"[^。！？]+[。！？”]*", text)


def _fitted(opening: list[str], pool: list[str], chars: int, rng: random.Random) -> str:
    """The passage cut or filled out with other passages' sentences, to end as near ``chars``
    characters as whole sentences allow (the best of a few fillings)."""
    best = ""
    for _ in range(FIT_TRIES):
        text = ""
        for sentence in opening + rng.sample(pool, len(pool)):
            if abs(chars - len(text) - len(sentence)) > abs(chars - len(text)):
                break
            text += sentence
        if abs(chars - len(text)) < abs(chars - len(best)):
            best = text
    return best


def _code_generation(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    problems = read_records(shipped_file("code_generation.jsonl"))
    examples = []
    for _ in range(count):
        problem = rng.choice(problems)
        right = rng.random() < recipe.correct_share
        code = problem["reference"] if right else wrong_variant(problem["reference"], rng)
        examples.append(Example("code_generation", problem["prompt"], f"```python\n{code}\n```"))
    return examples


Builder = Callable[[random.Random, int, TinyRecipe], list[Example]]
# scenario -> (shipped files it reads, builder)
_SCENARIOS: dict[str, tuple[tuple[str, ...], Builder]] = {
    "customer_service": (("customer_service.jsonl", FRAGMENTS), _customer_service),
    "content_creation": (("content_creation.jsonl", PASSAGES), _content_creation),
    "code_generation": (("code_generation.jsonl",), _code_generation),
    "support_agent": (("support_agent.jsonl", "agents/orders.jsonl"), support_agent),
    "support_env": (("support_env.jsonl", "agents/orders.jsonl"), support_store),
    "math": (("gsm8k_sample.jsonl",), math_replies),
    "task": ((), task_replies),  # generated by reasoning-gym, whose version is in the cache key (tiny.recipe_key)
}
