"""The warm-up corpus of the embedded model: (prompt, reply) pairs composed from shipped fragments.

Customer-service replies are built slot by slot (greeting, solution, resolution, optional polite
phrase, sign-off). Each of the three slots the article's format checks takes its exact wording
with probability ``format_share ** (1/3)``, so about ``format_share`` of the replies meet the full
format and the rest miss it in varied ways: the model starts out sometimes right, and GRPO has a
gradient to follow. Content-creation replies are the shipped passages, of varied length and keyword use.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from grpo_exp.data import read_records, shipped_file

FRAGMENTS = "warmup/customer_service_replies.json"
PASSAGES = "warmup/content_creation_passages.jsonl"
# Share of customer-service replies that carry a polite phrase (the article's tone reward).
POLITE_SHARE = 0.3
# Customer-service prompts outnumber writing prompts in the mix; they carry the default reward.
CUSTOMER_SERVICE_SHARE = 0.75
FORMAT_SLOTS = 3


@dataclass(frozen=True)
class Example:
    scenario: str
    prompt: str
    reply: str


def corpus_files() -> list[str]:
    """Every shipped file the corpus reads: part of the tiny model's cache key."""
    return ["customer_service.jsonl", "content_creation.jsonl", FRAGMENTS, PASSAGES]


def build_corpus(size: int, format_share: float, seed: int) -> list[Example]:
    """``size`` warm-up examples, deterministic for ``seed``."""
    rng = random.Random(seed)
    fragments = json.loads(shipped_file(FRAGMENTS).read_text(encoding="utf-8"))
    service = read_records(shipped_file("customer_service.jsonl"))
    writing = read_records(shipped_file("content_creation.jsonl"))
    passages = read_records(shipped_file(PASSAGES))
    slot_exact = format_share ** (1 / FORMAT_SLOTS)
    examples = []
    for _ in range(size):
        if rng.random() < CUSTOMER_SERVICE_SHARE:
            record = rng.choice(service)
            reply = _service_reply(rng, fragments, record, slot_exact)
            examples.append(Example("customer_service", record["prompt"], reply))
        else:
            examples.append(Example("content_creation", rng.choice(writing)["prompt"], rng.choice(passages)["text"]))
    return examples


def _service_reply(rng: random.Random, fragments: dict[str, Any], record: dict[str, Any], exact: float) -> str:
    def slot(name: str) -> str:
        return rng.choice(fragments[name]["exact" if rng.random() < exact else "other"])

    bodies = fragments["bodies"][record["category"]]
    polite = rng.choice(fragments["polite"]) if rng.random() < POLITE_SHARE else ""
    return slot("openings") + rng.choice(bodies) + slot("resolutions") + polite + slot("closings")
