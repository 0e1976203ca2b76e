"""The shipped orders store (``agent.environment=support_store``): the support agent in a world it changes.

Each rollout gets its own copy of the shipped order table (grpo_exp/data/agents/orders.jsonl) and one
customer request (the dataset row's ``order_id`` and ``want``: ``refund`` or ``replace``); a row's
``status``, when it has one, is the order's state as the customer writes (an order is at one stage one
day and another the next), so the same order and request can call for different actions and only
reading the state tells which. The store's rules decide what is right:

- a refund only for an order not yet shipped (status 待发货);
- a replacement only for an order that has shipped (已发货, 运输中, 派送中);
- anything else the customer asks for goes to a person (``escalate``);
- and no action on an order nobody has looked up in this episode: the desk acts on the order's state,
  not on the customer's word (an action before a lookup is refused).

``get_reward`` reads the final state: 1.0 when exactly one action was taken, the right one, on the
request's order, and nothing was refused; 0.0 otherwise. An agent that never reads the state can be
right on half the shipped requests at best (always escalating, or always doing as asked): every order
is asked for both, in states that allow each and states that don't.
"""

from __future__ import annotations

from typing import Any

from grpo_exp.agents.tools import order_table

NOT_SHIPPED = "待发货"
SHIPPED = ("已发货", "运输中", "派送中")
# The store's rules: the states each action a customer may ask for is allowed in; anything else escalates.
ALLOWED = {"refund": (NOT_SHIPPED,), "replace": SHIPPED}
ACTIONS = (*ALLOWED, "escalate")


def right_action(status: str, want: str) -> str:
    """What the store's rules allow for a customer who wants ``want`` of an order in ``status``."""
    return want if status in ALLOWED.get(want, ()) else "escalate"


def forbidden(status: str) -> str:
    """The action an order in ``status`` rules out (its rules the wrong way round)."""
    return next(action for action, states in ALLOWED.items() if status not in states)


class SupportStore:
    """An online store's order desk: look orders up, then refund, replace or escalate them."""

    def reset(self, order_id: str = "", want: str = "", status: str | None = None, **row: Any) -> None:
        """A fresh copy of the orders, the request's order in the row's ``status`` (if it gives one), and
        the customer's request; the prompt already states it."""
        self.orders = {oid: dict(order) for oid, order in order_table().items()}
        if status and order_id in self.orders:
            self.orders[order_id]["status"] = status
        self.request = (order_id, want)
        self.start_status = self.orders[order_id]["status"] if order_id in self.orders else None
        self.done: list[tuple[str, str]] = []  # (action, order id), in order
        self.refused: list[str] = []  # actions the rules forbade that the model tried anyway
        self.looked_up: set[str] = set()  # the orders whose state the agent has read

    def lookup_order(self, order_id: str) -> str:
        """Look up an order's status, item and amount.

        Args:
            order_id: The order number the customer gave.
        """
        order = self._order(order_id)
        self.looked_up.add(order["order_id"])
        return f"订单 {order['order_id']}（{order['item']}，{order['amount']} 元）：{order['status']}"

    def refund(self, order_id: str, reason: str) -> str:
        """Refund an order that has not shipped yet.

        Args:
            order_id: The order number the customer gave.
            reason: Why the customer wants the refund, in their words.
        """
        order = self._allowed(order_id, "refund", "已发货，不能直接退款")
        order["status"] = "已退款"
        self.done.append(("refund", order["order_id"]))
        return f"订单 {order['order_id']} 已退款 {order['amount']} 元"

    def replace(self, order_id: str, reason: str) -> str:
        """Send a replacement for an order that has shipped.

        Args:
            order_id: The order number the customer gave.
            reason: What is wrong with the item, in the customer's words.
        """
        order = self._allowed(order_id, "replace", "还未发货，无法换货")
        order["status"] = "换货中"
        self.done.append(("replace", order["order_id"]))
        return f"订单 {order['order_id']} 的换货已安排"

    def escalate(self, order_id: str, reason: str) -> str:
        """Hand the request to a person when the store's rules allow nothing else.

        Args:
            order_id: The order number the customer gave.
            reason: What the customer asked for, in their words.
        """
        order = self._looked_up(order_id, "escalate")
        self.done.append(("escalate", order["order_id"]))
        return f"订单 {order['order_id']} 已转人工处理"

    def get_reward(self) -> float:
        """1.0 for exactly the right action on the request's order and nothing refused; else 0.0."""
        order_id, want = self.request
        if self.start_status is None or self.refused:
            return 0.0
        return 1.0 if self.done == [(right_action(self.start_status, want), order_id)] else 0.0

    def _allowed(self, order_id: str, action: str, refusal: str) -> dict[str, Any]:
        """The looked-up order ``action`` is about, when its state allows it; else the action is refused
        with ``refusal``."""
        order = self._looked_up(order_id, action)
        if order["status"] not in ALLOWED[action]:
            self.refused.append(action)
            raise ValueError(f"订单 {order['order_id']} {refusal}")
        return order

    def _looked_up(self, order_id: str, action: str) -> dict[str, Any]:
        """The order an action is about, once the agent has read its state; else the action is refused."""
        order = self._order(order_id)
        if order["order_id"] not in self.looked_up:
            self.refused.append(action)
            raise ValueError(f"请先查询订单 {order['order_id']} 的状态再处理")
        return order

    def _order(self, order_id: str) -> dict[str, Any]:
        order = self.orders.get(order_id.strip())
        if order is None:
            raise KeyError(f"no order {order_id}")
        return order
