"""The store agent's warm-up (models/warmup_store.py): episodes that run against the real store, about
orders no shipped table holds, with the store's rules followed in ``tool_share`` of them, laid out turn
by turn as TRL lays out a multi-turn rollout."""

from __future__ import annotations

import json
import random
import re

import pytest

from grpo_exp.agents.store import SupportStore, forbidden, right_action
from grpo_exp.agents.tools import order_table
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models import tiny, warmup
from grpo_exp.models.warmup_store import store_schemas, support_store

EPISODES = 2000
LOOKUP = re.compile(r"订单 (\S+)（(.+)，(\d+) 元）：(.+)")  # the store's lookup_order reply


@pytest.fixture(scope="module")
def episodes():
    return support_store(random.Random(0), EPISODES, TinyRecipe(tool_share=0.4))


def _order(example) -> str:
    return json.loads(example.turns[0][0])["arguments"]["order_id"]


def _calls(example) -> list[tuple[str, dict]]:
    return [(call["name"], call["arguments"]) for call in (json.loads(c) for c, _ in example.turns)]


def test_every_episode_is_about_an_order_no_shipped_table_holds(episodes):
    shipped = set(order_table())
    orders = {_order(ex) for ex in episodes}
    assert not orders & shipped
    assert all(_order(ex) in ex.prompt for ex in episodes), "the request names the episode's order"
    assert len(orders) > EPISODES / 2, "numbers are drawn, not a few repeated"


def test_each_reply_is_what_the_store_says_to_that_call(episodes):
    """Replaying an episode's calls on a store holding the order its lookup showed gives its replies,
    errors included (as TRL sends a raised error back: ``{'error': ...}``)."""
    replayed = 0
    for example in episodes:
        if json.loads(example.turns[0][0])["name"] != "lookup_order":
            continue
        order_id, item, amount, status = LOOKUP.fullmatch(example.turns[0][1]).groups()
        store = SupportStore()
        store.reset(order_id=order_id, want="refund")
        store.orders = {order_id: {"order_id": order_id, "item": item, "amount": int(amount), "status": status}}
        for (name, arguments), (_, reply) in zip(_calls(example), example.turns, strict=True):
            try:
                expected = str(getattr(store, name)(**arguments))
            except Exception as exc:
                expected = str({"error": str(exc)})
            assert reply == expected
        replayed += 1
    assert replayed > EPISODES / 2


def test_the_action_follows_the_state_the_right_way_round_in_the_recipes_share(episodes):
    """After a lookup the action is the rules' in tool_share of episodes, else the one the state forbids:
    either way the state decides it, so the model learns to read the state."""
    looked = [ex for ex in episodes if _calls(ex)[0][0] == "lookup_order"]
    right = 0
    for example in looked:
        want = "refund" if "退款" in example.prompt else "replace"
        status = LOOKUP.fullmatch(example.turns[0][1]).group(4)
        action = _calls(example)[1][0]
        assert action in (right_action(status, want), forbidden(status))
        right += action == right_action(status, want)
    assert 0.8 < len(looked) / EPISODES < 0.9
    assert right / len(looked) == pytest.approx(0.4, abs=0.04)


def test_both_wants_and_every_action_occur(episodes):
    actions = {name for ex in episodes for name, _ in _calls(ex)}
    assert actions == {"lookup_order", "refund", "replace", "escalate"}
    assert any("退款" in ex.prompt for ex in episodes) and any("换" in ex.prompt for ex in episodes)


def test_a_multi_turn_episode_is_laid_out_as_trl_lays_out_its_rollout():
    """Each call is a turn the model learns, each store reply is framed as TRL frames it and masked, and
    TRL's parser reads every call back."""
    from trl.chat_template_utils import add_response_schema, parse_response

    corpus = warmup.build_corpus(TinyRecipe(scenarios={"support_env": 1.0}, corpus_size=60, tool_share=1.0))
    assert all(ex.tools == store_schemas() for ex in corpus)
    tokenizer = tiny.train_tokenizer(corpus, 1000)
    example = next(ex for ex in corpus if len(ex.turns) == 2)
    ids, labels = tiny._encode(tokenizer, example)
    learned = tokenizer.decode([i for i, label in zip(ids, labels, strict=True) if label != tiny.LOSS_IGNORE])
    expected = "".join(tiny.call_turn(call) + tiny.EOS for call, _ in example.turns) + example.reply + tiny.EOS
    assert learned == expected
    text = tokenizer.decode(ids)
    for _, reply in example.turns:
        assert tiny.tool_suffix(reply) in text

    add_response_schema(tokenizer)  # what GRPOTrainer does for Qwen3's template
    before = tokenizer.apply_chat_template(
        [{"role": "user", "content": example.prompt}], tools=list(example.tools), add_generation_prompt=True,
        tokenize=False,
    )  # fmt: skip
    for call, reply in example.turns:
        turn = tokenizer(tiny.call_turn(call) + tiny.EOS, add_special_tokens=False)["input_ids"]
        prefix = tokenizer(before, add_special_tokens=False)["input_ids"]
        assert parse_response(tokenizer, turn, prefix=prefix)["tool_calls"][0]["function"] == json.loads(call)
        before += tiny.call_turn(call) + tiny.EOS + tiny.tool_suffix(reply)


@pytest.mark.parametrize("status", ["待发货", "已发货", "运输中", "派送中"])
def test_the_action_a_state_forbids_is_never_right_and_the_store_refuses_it(status):
    store = SupportStore()
    store.reset(order_id="SO4706", want="refund", status=status)
    store.lookup_order(order_id="SO4706")
    assert all(forbidden(status) != right_action(status, want) for want in ("refund", "replace"))
    with pytest.raises(ValueError):
        getattr(store, forbidden(status))(order_id="SO4706", reason="不想要了")
