"""The support agent's warm-up conversations: a customer's message, a tool call, the tool's reply, a final turn.

The embedded model learns the shape of an agent's rollout here, not its judgement: with probability
``tool_share`` the first turn calls the tool the message needs with the message's order number (and a
reason for a refund); otherwise it makes one of the mistakes a weak agent makes (the other tool, a
missing argument, no call at all). Half the conversations are about order numbers no table holds,
so the number in a call can only come from copying the request's; the model still copies it wrong
often enough early on for GRPO to see both. Every call runs against
the real tools, so the tool's reply is what TRL would send back (an error for a wrong call). After a
reply that carries the fact, the final turn states it with probability ``fact_share``, else it answers
vaguely. GRPO then has both right and wrong calls in most groups to learn from.
"""

from __future__ import annotations

import random
from typing import Any

from grpo_exp.agents.tools import TOOLS, call_json, tool_schemas
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.examples import Example
from grpo_exp.shipped import read_records, shipped_file

PROMPTS = "support_agent.jsonl"
REASONS = ("质量问题", "尺码不合适", "买错了", "商品损坏", "不想要了")
VAGUE = (
    "您好，我们已经收到您的问题，会尽快为您处理。",
    "请您耐心等待，有进展会第一时间通知您。",
    "感谢您的反馈，请稍候。",
)
STATED = {  # the final turn that states what the tool said, by tool
    "lookup_order": "您好，您的订单预计 {fact} 送达，请耐心等待。",
    "refund": "您好，退款已受理，{fact}将在 3 个工作日内退回。",
}
MISTAKES = ("other_tool", "missing_argument", "no_call")
# Share of conversations about an order number that is not in the table (the tool answers with an
# error): the model can't learn those numbers by heart, so it learns to copy them from the request.
NEW_ORDER_SHARE = 0.5


def support_agent(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    """``count`` conversations over the shipped prompts and tools, deterministic for ``rng``."""
    records = read_records(shipped_file(PROMPTS))
    schemas = tuple(tool_schemas([TOOLS.get(name) for name in TOOLS.names()]))
    examples = []
    for _ in range(count):
        record = rng.choice(records)
        if rng.random() < NEW_ORDER_SHARE:  # a number no table holds: only copying gets it right
            record = _renumbered(record, rng)
        name, arguments = _call(record, rng.random() < recipe.tool_share, rng)
        if name is None:
            examples.append(Example("support_agent", record["prompt"], rng.choice(VAGUE), tools=schemas))
            continue
        reply, ok = _run(name, arguments)
        stated = ok and name == record["tool"] and rng.random() < recipe.fact_share
        final = STATED[name].format(fact=_fact(name, reply)) if stated else rng.choice(VAGUE)
        turns = ((call_json(name, arguments), reply),)
        examples.append(Example("support_agent", record["prompt"], final, schemas, turns))
    return examples


def _renumbered(record: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The request with an order number of the shipped shape (letters, four distinct digits) no order has."""
    letters = record["order_id"].rstrip("0123456789")
    number = letters + "".join(rng.sample("0123456789", len(record["order_id"]) - len(letters)))
    return {**record, "prompt": record["prompt"].replace(record["order_id"], number), "order_id": number}


def _call(record: dict[str, Any], right: bool, rng: random.Random) -> tuple[str | None, dict[str, Any]]:
    """The first turn's tool and arguments: the right ones, or one of a weak agent's mistakes."""
    name, order = record["tool"], record["order_id"]
    mistake = None if right else rng.choice(MISTAKES)
    if mistake == "no_call":
        return None, {}
    if mistake == "other_tool":
        name = "refund" if name == "lookup_order" else "lookup_order"
    arguments: dict[str, Any] = {"order_id": order}
    if name == "refund" and mistake != "missing_argument":
        arguments["reason"] = rng.choice(REASONS)
    if name == "lookup_order" and mistake == "missing_argument":
        arguments = {}
    return name, arguments


def _run(name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """The tool's reply as TRL sends it back (an error becomes ``{'error': ...}``), and whether it worked."""
    try:
        return str(TOOLS.get(name)(**arguments)), True
    except Exception as exc:
        return str({"error": str(exc)}), False


def _fact(name: str, reply: str) -> str:
    """The part of a tool's reply the customer asked for: the delivery date, or the refunded amount."""
    if name == "lookup_order":
        return reply.split("预计 ", 1)[1].split(" 送达", 1)[0]
    return reply.split("，", 1)[1].split("将在", 1)[0]
