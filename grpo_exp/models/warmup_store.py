"""The store agent's warm-up episodes (``+recipe=support_env``): a request, a lookup, an action, a last turn.

The embedded model learns the shape of an episode in the orders store (``agents/store.py``) here: it looks
the order up (most of the time), then takes one action. In ``tool_share`` of the episodes the action is the
one the store's rules require; in the rest it is the one the order's state forbids (a refund of a shipped
order, a replacement of one not shipped yet), as an agent that has the rules the wrong way round would.
Both kinds of action follow the state, so the model learns to read the state it looked up; which way
round is right is GRPO's to learn from the store's reward. (Mistakes drawn at random taught it nothing
about the state: its actions came out the same for shipped and unshipped orders, and GRPO drifted to
always escalating, right on half the requests; benchmarks/support_env.md.) Some episodes act without
looking first, and some take a second action after the first (the store scores both 0).

Every episode is about an order no shipped table holds (``SO`` and four digits, with a status drawn at
random), so the model copies the request's order number rather than recalling one, and the orders
``+recipe=support_env`` trains and holds out on are new to it. Every call runs against a real store
holding that order, so each reply is what the store says in a rollout (an error as TRL sends one).
"""

from __future__ import annotations

import random
import string
from typing import Any

from grpo_exp.agents.environments import tool_methods
from grpo_exp.agents.runner import describe
from grpo_exp.agents.store import ACTIONS, NOT_SHIPPED, SHIPPED, SupportStore, forbidden, right_action
from grpo_exp.agents.tools import call_json, order_table, tool_schemas
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.examples import Example
from grpo_exp.shipped import read_records, shipped_file

REQUESTS = "support_env.jsonl"  # the requests' wording, by what the customer wants (never their orders)
SKIP_LOOKUP_SHARE = 0.15  # episodes that act before looking the order up
TWICE_SHARE = 0.1  # episodes that take a second action after the first
NOT_SHIPPED_SHARE = 0.5  # made-up orders not shipped yet (the rest shipped, in transit or out for delivery)
REASONS = {"refund": ("不想要了", "买错了", "不需要了"), "replace": ("商品损坏", "发错货了", "质量问题")}
LAST_TURN = {
    "refund": "已为您办理退款，款项将原路退回。",
    "replace": "已为您安排换货，请留意物流信息。",
    "escalate": "已为您转接人工客服，请稍候。",
    "error": "抱歉，暂时无法办理，请稍后再试。",
}


def support_store(rng: random.Random, count: int, recipe: TinyRecipe) -> list[Example]:
    """``count`` store episodes over the shipped requests' wording, deterministic for ``rng``."""
    wordings = _wordings()
    schemas = store_schemas()
    table = order_table()
    examples = []
    for _ in range(count):
        want = rng.choice(sorted(wordings))
        order = _made_up_order(table, rng)
        prompt = rng.choice(wordings[want]).format(order_id=order["order_id"])
        right = right_action(order["status"], want)
        store = SupportStore()
        store.reset(order_id=order["order_id"], want=want)
        store.orders = {order["order_id"]: order}  # the store holds the made-up order alone
        calls = [] if rng.random() < SKIP_LOOKUP_SHARE else [("lookup_order", {"order_id": order["order_id"]})]
        action = right if rng.random() < recipe.tool_share else forbidden(order["status"])
        calls.append(_action(action, order["order_id"], want, rng))
        if rng.random() < TWICE_SHARE:
            calls.append(_action(rng.choice(ACTIONS), order["order_id"], want, rng))
        turns = []
        last = "error"
        for name, arguments in calls:
            reply, ok = _run(store, name, arguments)
            turns.append((call_json(name, arguments), reply))
            last = name if ok else "error"
        examples.append(Example("support_env", prompt, LAST_TURN[last], schemas, tuple(turns)))
    return examples


def store_schemas() -> tuple[dict[str, Any], ...]:
    """The store's tools as TRL shows them: its public methods, bound (no ``self``), in TRL's order."""
    store = SupportStore()
    return tuple(tool_schemas([getattr(store, name) for name, _ in tool_methods(SupportStore)]))


def _wordings() -> dict[str, list[str]]:
    """The shipped requests' sentences by what the customer wants, the order number a ``{order_id}`` slot."""
    wordings: dict[str, set[str]] = {}
    for row in read_records(shipped_file(REQUESTS)):
        wordings.setdefault(row["want"], set()).add(row["prompt"].replace(row["order_id"], "{order_id}"))
    return {want: sorted(texts) for want, texts in wordings.items()}


def _made_up_order(table: dict[str, dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    """A shipped order's item and amount under a number no order has, in a status drawn at random."""
    while True:
        number = "SO" + "".join(rng.sample(string.digits, 4))
        if number not in table:
            break
    template = table[rng.choice(sorted(table))]
    status = NOT_SHIPPED if rng.random() < NOT_SHIPPED_SHARE else rng.choice(SHIPPED)
    return {**template, "order_id": number, "status": status}


def _action(name: str, order_id: str, want: str, rng: random.Random) -> tuple[str, dict[str, Any]]:
    return name, {"order_id": order_id, "reason": rng.choice(REASONS[want])}


def _run(store: SupportStore, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    """The store's reply as TRL sends it back (an error becomes ``{'error': ...}``), and whether it worked."""
    try:
        return str(getattr(store, name)(**arguments)), True
    except Exception as exc:
        return str({"error": describe(exc)}), False
