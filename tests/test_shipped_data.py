"""Checks on the shipped data files under grpo_exp/data (prompts and warm-up reply fragments).

The regexes are the article's reward patterns: a reply composed of an "exact" opening, resolution
and closing must earn the customer-service format reward, and swapping any one of them for an
"other" variant must lose it.
"""

import itertools
import json
import re
from collections import Counter
from importlib.resources import files

import pytest

FULL_FORMAT = re.compile(r"^您好.+问题已解决.+如有其他问题请随时联系$")
LOOSE_FORMAT = re.compile(r"^您好.+问题已解决.+$")
CLOSING_TAIL = "如有其他问题请随时联系"
KEYWORDS = ("创新", "技术", "实践")
CATEGORIES = {"物流", "退款", "退换货", "账户", "支付", "优惠券", "发票", "商品质量", "售后维修", "会员"}


def _path(name):
    return files("grpo_exp") / "data" / name


def _text(name):
    raw = _path(name).read_bytes()
    return raw.decode("utf-8")  # strict: fails on anything that is not UTF-8


def _jsonl(name):
    rows = []
    for lineno, line in enumerate(_text(name).splitlines(), 1):
        assert line.strip(), f"{name}:{lineno} is blank"
        row = json.loads(line)
        assert isinstance(row, dict), f"{name}:{lineno} is not a JSON object"
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def cs_rows():
    return _jsonl("customer_service.jsonl")


@pytest.fixture(scope="module")
def replies():
    data = json.loads(_text("warmup/customer_service_replies.json"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def cc_rows():
    return _jsonl("content_creation.jsonl")


@pytest.fixture(scope="module")
def passages():
    return _jsonl("warmup/content_creation_passages.jsonl")


def _is_str_list(value):
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


# ---------------------------------------------------------------- customer_service.jsonl


def test_customer_service_records(cs_rows):
    assert len(cs_rows) >= 220
    for row in cs_rows:
        assert set(row) == {"prompt", "category", "required_answers"}, row
        assert isinstance(row["prompt"], str)
        assert 8 <= len(row["prompt"]) <= 40, row["prompt"]
        assert "\n" not in row["prompt"]
        assert row["category"] in CATEGORIES, row
        answers = row["required_answers"]
        assert _is_str_list(answers) and 1 <= len(answers) <= 3, row
        assert len(set(answers)) == len(answers), row
        assert all(2 <= len(a) <= 6 for a in answers), row


def test_customer_service_prompts_distinct_and_balanced(cs_rows):
    prompts = [row["prompt"] for row in cs_rows]
    assert len(set(prompts)) == len(prompts)
    per_category = Counter(row["category"] for row in cs_rows)
    assert set(per_category) == CATEGORIES
    assert min(per_category.values()) >= 15


def test_required_answers_come_from_category_vocabulary(cs_rows, replies):
    vocab = replies["answers"]
    for row in cs_rows:
        for answer in row["required_answers"]:
            assert answer in vocab[row["category"]], row
    categories = {row["category"] for row in cs_rows}
    assert categories <= set(replies["bodies"])
    # every phrase of the vocabulary is asked for by some prompt
    used = {(row["category"], a) for row in cs_rows for a in row["required_answers"]}
    for category, phrases in vocab.items():
        for phrase in phrases:
            assert (category, phrase) in used, (category, phrase)


# ---------------------------------------------------------------- customer_service_replies.json


def test_replies_structure(replies):
    assert set(replies) == {"openings", "resolutions", "closings", "bodies", "polite", "answers", "topics"}
    for group in ("openings", "resolutions", "closings"):
        assert set(replies[group]) == {"exact", "other"}, group
        for kind in ("exact", "other"):
            fragments = replies[group][kind]
            assert _is_str_list(fragments) and len(fragments) >= 8, (group, kind)
            assert len(set(fragments)) == len(fragments), (group, kind)
    assert _is_str_list(replies["polite"]) and len(replies["polite"]) >= 10
    # openings that restate the message's category: one slot each, for the category's name
    assert _is_str_list(replies["topics"]) and all(t.count("{}") == 1 for t in replies["topics"])
    assert set(replies["answers"]) == set(replies["bodies"]) == CATEGORIES
    for category, phrases in replies["answers"].items():
        assert _is_str_list(phrases) and 3 <= len(phrases) <= 5, category
        assert all(2 <= len(p) <= 6 for p in phrases), category


def _all_fragments(replies):
    for group in ("openings", "resolutions", "closings"):
        for kind in ("exact", "other"):
            yield from replies[group][kind]
    yield from replies["polite"]
    yield from replies["topics"]
    for bodies in replies["bodies"].values():
        yield from bodies


def test_fragments_are_single_line(replies):
    for fragment in _all_fragments(replies):
        assert "\n" not in fragment and "\r" not in fragment, fragment
        assert fragment == fragment.strip(), fragment


def test_openings(replies):
    for fragment in replies["openings"]["exact"]:
        assert fragment.startswith("您好"), fragment
        assert "问题已解决" not in fragment
    for fragment in replies["openings"]["other"]:
        assert not fragment.startswith("您好"), fragment
        assert "问题已解决" not in fragment


def test_resolutions(replies):
    for fragment in replies["resolutions"]["exact"]:
        assert "问题已解决" in fragment, fragment
        assert not fragment.startswith("您好"), fragment
        assert not fragment.endswith("问题已解决"), "needs a character after 问题已解决"
    for fragment in replies["resolutions"]["other"]:
        assert "问题已解决" not in fragment, fragment
        assert not fragment.startswith("您好"), fragment


def test_closings(replies):
    for fragment in replies["closings"]["exact"]:
        assert fragment.endswith(CLOSING_TAIL), fragment
        assert "问题已解决" not in fragment
    for fragment in replies["closings"]["other"]:
        assert not fragment.endswith(CLOSING_TAIL), fragment
        assert "问题已解决" not in fragment


def test_bodies(replies):
    for category, bodies in replies["bodies"].items():
        assert _is_str_list(bodies) and len(bodies) >= 10, category
        vocab = replies["answers"][category]
        for body in bodies:
            assert 10 <= len(body) <= 40, body
            assert "问题已解决" not in body, body
            assert not body.startswith("您好"), body
            assert not body.endswith(CLOSING_TAIL), body
            assert not ("请" in body and "谢谢" in body), body
            assert any(phrase in body for phrase in vocab), (category, body)
        # every phrase of the vocabulary can be learnt from some body
        for phrase in vocab:
            assert any(phrase in body for body in bodies), (category, phrase)


def test_polite(replies):
    for fragment in replies["polite"]:
        assert "请" in fragment and "谢谢" in fragment, fragment
        assert "问题已解决" not in fragment
        assert not fragment.startswith("您好")
        assert not fragment.endswith(CLOSING_TAIL)


def test_composed_replies_hit_and_miss_the_format_reward(replies):
    """exact+exact+exact earns the format reward; any single "other" part loses it."""
    body = replies["bodies"]["退款"][0]
    polite = replies["polite"][0]
    groups = ("openings", "resolutions", "closings")
    for opening, resolution, closing in itertools.product(*(replies[g]["exact"] for g in groups)):
        for middle in ("", body, body + polite):
            reply = opening + resolution + middle + closing
            assert FULL_FORMAT.match(reply), reply
            assert LOOSE_FORMAT.match(reply), reply
    for swapped in groups:
        for other in replies[swapped]["other"]:
            parts = {g: replies[g]["exact"][0] for g in groups}
            parts[swapped] = other
            reply = parts["openings"] + parts["resolutions"] + body + polite + parts["closings"]
            assert not FULL_FORMAT.match(reply), reply


def test_a_full_reply_covers_required_answers_and_tone(cs_rows, replies):
    """For each prompt some body of its category mentions at least one required answer."""
    for row in cs_rows:
        bodies = replies["bodies"][row["category"]]
        assert any(a in b for a in row["required_answers"] for b in bodies), row


# ---------------------------------------------------------------- content_creation*.jsonl


def test_content_creation_prompts(cc_rows):
    assert len(cc_rows) >= 110
    prompts = [row["prompt"] for row in cc_rows]
    assert len(set(prompts)) == len(prompts)
    for row in cc_rows:
        assert set(row) == {"prompt", "topic"}, row
        assert isinstance(row["prompt"], str) and isinstance(row["topic"], str)
        assert 2 <= len(row["topic"]) <= 8, row
        assert row["topic"] in row["prompt"], row
        assert "150" in row["prompt"] or "一百五十" in row["prompt"], row
    assert len({row["topic"] for row in cc_rows}) >= 50


def test_content_creation_passages(passages, cc_rows):
    assert len(passages) >= 110
    topics = {row["topic"] for row in cc_rows}
    for row in passages:
        assert set(row) == {"topic", "text"}, row
        assert isinstance(row["topic"], str) and isinstance(row["text"], str)
        assert row["topic"] in topics, row["topic"]
        assert 60 <= len(row["text"]) <= 220, (row["topic"], len(row["text"]))
        assert "\n" not in row["text"]
    texts = [row["text"] for row in passages]
    assert len(set(texts)) == len(texts)


def test_passage_lengths_are_spread(passages):
    lengths = [len(row["text"]) for row in passages]
    n = len(lengths)
    assert sum(1 for x in lengths if x < 100) >= n // 6
    assert sum(1 for x in lengths if 130 <= x <= 170) >= n // 8
    assert sum(1 for x in lengths if x > 180) >= n // 12


def test_passage_keyword_mix(passages):
    counts = Counter(sum(kw in row["text"] for kw in KEYWORDS) for row in passages)
    n = len(passages)
    none, some, every = counts[0], counts[1] + counts[2], counts[3]
    for share in (none, some, every):
        assert share >= n // 4, counts
