"""The shipped orders store (``agent.environment=support_store``): the support agent in a world it changes.

Each rollout gets its own copy of the shipped order table (grpo_exp/data/agents/orders.jsonl) and one
customer request (the dataset row's ``order_id`` and ``want``: ``refund`` or ``replace``). The store's
rules decide what is right:

- a refund only for an order not yet shipped (status 待发货);
- a replacement only for an order that has shipped (已发货, 运输中, 派送中);
- anything else the customer asks for goes to a person (``escalate``).

``get_reward`` reads the final state: 1.0 when exactly one action was taken, the right one, on the
request's order, and no refund of an ineligible order was tried; 0.0 otherwise.
"""

from __future__ import annotations

from typing import Any

from grpo_exp.agents.tools import order_table

NOT_SHIPPED = "待发货"
SHIPPED = ("已发货", "运输中", "派送中")
ACTIONS = ("refund", "replace", "escalate")


def right_action(status: str, want: str) -> str:
    """What the store's rules allow for a customer who wants ``want`` of an order in ``status``."""
    if want == "refund" and status == NOT_SHIPPED:
        return "refund"
    if want == "replace" and status in SHIPPED:
        return "replace"
    return "escalate"


class SupportStore:
    """An online store's order desk: look orders up, then refund, replace or escalate them."""

    def reset(self, order_id: str = "", want: str = "", **row: Any) -> None:
        """A fresh copy of the orders and the customer's request; the prompt already states it."""
        self.orders = {oid: dict(order) for oid, order in order_table().items()}
        self.request = (order_id, want)
        self.done: list[tuple[str, str]] = []  # (action, order id), in order
        self.refused: list[str] = []  # actions the rules forbade that the model tried anyway

    def lookup_order(self, order_id: str) -> str:
        """Look up an order's status, item and amount.

        Args:
            order_id: The order number the customer gave.
        """
        order = self._order(order_id)
        return f"订单 {order['order_id']}（{order['item']}，{order['amount']} 元）：{order['status']}"

    def refund(self, order_id: str, reason: str) -> str:
        """Refund an order that has not shipped yet.

        Args:
            order_id: The order number the customer gave.
            reason: Why the customer wants the refund, in their words.
        """
        order = self._order(order_id)
        if order["status"] != NOT_SHIPPED:
            self.refused.append("refund")
            raise ValueError(f"订单 {order['order_id']} 已发货，不能直接退款")
        order["status"] = "已退款"
        self.done.append(("refund", order["order_id"]))
        return f"订单 {order['order_id']} 已退款 {order['amount']} 元"

    def replace(self, order_id: str, reason: str) -> str:
        """Send a replacement for an order that has shipped.

        Args:
            order_id: The order number the customer gave.
            reason: What is wrong with the item, in the customer's words.
        """
        order = self._order(order_id)
        if order["status"] not in SHIPPED:
            self.refused.append("replace")
            raise ValueError(f"订单 {order['order_id']} 还未发货，无法换货")
        order["status"] = "换货中"
        self.done.append(("replace", order["order_id"]))
        return f"订单 {order['order_id']} 的换货已安排"

    def escalate(self, order_id: str, reason: str) -> str:
        """Hand the request to a person when the store's rules allow nothing else.

        Args:
            order_id: The order number the customer gave.
            reason: What the customer asked for, in their words.
        """
        order = self._order(order_id)
        self.done.append(("escalate", order["order_id"]))
        return f"订单 {order['order_id']} 已转人工处理"

    def get_reward(self) -> float:
        """1.0 for exactly the right action on the request's order and nothing refused; else 0.0."""
        order_id, want = self.request
        original = order_table().get(order_id)
        if original is None or self.refused:
            return 0.0
        return 1.0 if self.done == [(right_action(original["status"], want), order_id)] else 0.0

    def _order(self, order_id: str) -> dict[str, Any]:
        order = self.orders.get(order_id.strip())
        if order is None:
            raise KeyError(f"no order {order_id}")
        return order
