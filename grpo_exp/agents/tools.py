"""The tools an agent may call during a rollout, as TRL's GRPOTrainer takes them (``tools=[...]``).

``agent.tools`` lists registered names (``lookup_order``, ``refund``: the support agent's, over the
shipped order table) or the user's functions (``path/to/file.py:fn``, ``module:fn``). TRL shows the
model each tool's JSON schema, built by transformers' ``get_json_schema`` from the type hints and the
Google-style docstring, so a tool without them is refused here, in one line, before the model loads.

TRL calls a tool with the arguments the model wrote and sends what it returns back as the tool's
reply; an exception becomes an ``{"error": ...}`` reply and counts in ``tools/failure_frequency``.
TRL is handed stand-ins (``agents/runner.py``) that run each call in a helper process, where a tool that
hangs can be killed at ``agent.tool_timeout_s`` and a reply is cut at ``agent.tool_reply_max_chars``.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.registry import Registry
from grpo_exp.shipped import read_records, shipped_file
from grpo_exp.user_code import is_user_spec, load_function

Tool = Callable[..., Any]

TOOLS: Registry[Tool] = Registry("tool", hint=" (or give your own as path/to/file.py:function)")
ORDERS = "agents/orders.jsonl"  # the support agent's order table


def resolve_tool(spec: str) -> Tool:
    """The tool ``spec`` names: a registered one, or the user's function."""
    return load_function(spec, "tool") if is_user_spec(spec) else TOOLS.get(spec)


def check_tool(fn: Tool, spec: str) -> None:
    """What TRL needs to show the model a tool: a function, type hints, a docstring that documents each argument."""
    if not inspect.isfunction(fn) and not inspect.ismethod(fn):
        raise UserError(f"tool {spec!r} is a {type(fn).__name__}, not a function: give a def with type hints")
    params = list(inspect.signature(fn).parameters.values())
    unhinted = [p.name for p in params if p.annotation is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if unhinted:
        raise UserError(
            f"tool {spec!r} has no type hint for {', '.join(unhinted)}: the model sees each argument's type "
            f"(e.g. def {fn.__name__}({unhinted[0]}: str) -> str)"
        )
    if not inspect.getdoc(fn):
        raise UserError(
            f"tool {spec!r} has no docstring: the model reads what it does and each argument from it "
            "(a summary line, then Args: with one line per argument)"
        )
    from transformers.utils import get_json_schema  # ~1 s, no torch; only for jobs with tools

    try:
        get_json_schema(fn)
    except Exception as exc:  # transformers' docstring and type-hint parsers raise their own types
        raise UserError(f"tool {spec!r}: {' '.join(str(exc).split())}") from None


@functools.cache
def order_table() -> dict[str, dict[str, Any]]:
    """The shipped orders by id."""
    return {row["order_id"]: row for row in read_records(shipped_file(ORDERS))}


@TOOLS.register("lookup_order")
def lookup_order(order_id: str) -> str:
    """Look up an order's shipping status and expected delivery date.

    Args:
        order_id: The order number the customer gave, e.g. 61023.
    """
    order = order_table().get(order_id.strip())
    if order is None:
        raise KeyError(f"no order {order_id}")
    return f"订单 {order['order_id']}（{order['item']}）：{order['status']}，预计 {order['eta']} 送达"


@TOOLS.register("refund")
def refund(order_id: str, reason: str) -> str:
    """Start a refund for an order.

    Args:
        order_id: The order number the customer gave, e.g. 61023.
        reason: Why the customer wants the refund, in their words.
    """
    order = order_table().get(order_id.strip())
    if order is None:
        raise KeyError(f"no order {order_id}")
    if not reason.strip():
        raise ValueError("a refund needs a reason")
    return f"订单 {order['order_id']} 的退款已受理，{order['amount']} 元将在 3 个工作日内退回"


def tool_schemas(tools: list[Tool]) -> list[dict[str, Any]]:
    """The JSON schemas the chat template shows the model (what TRL passes as ``tools``)."""
    from transformers.utils import get_json_schema

    return [get_json_schema(tool) for tool in tools]


def call_json(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as Qwen's template writes it inside ``<tool_call>`` (the embedded model's warm-up)."""
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
