"""Reward parts for verifiable math: a reply's form (reasoning, then one final answer line) and
whether that final answer equals the record's reference, as math-verify judges it.

Why a helper process: math-verify bounds its own ``parse``/``verify`` calls with ``signal.alarm``,
which works only in a process's main thread; grpo-exp calls reward parts in a thread of their own
(``reward.timeout_s``), where math-verify refuses to run with a limit, and without one comparing a
reply of ``$9^{9^{9}}$`` with 18 had not finished after 90 s. So every check runs in ``Checker``'s helper: one
interpreter, started on first use and reused, that runs math-verify in its own main thread, so its
alarm stops slow Python work; the trainer waits at most ``timeout_s`` for each answer and kills the
helper (its whole process group) when none comes, work stuck in C included, then starts another
for the next check (``grpo_exp.helper_process``, shared with agent tools). Importing this module
is cheap: math-verify loads only in the helper.
"""

from __future__ import annotations

import atexit
import math
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.helper_process import Helper, HelperGone, Unavailable
from grpo_exp.helper_process import serve as serve_requests
from grpo_exp.rewards.math_forms import (
    FINAL_LINE_FORMS,
    FINDERS,
    ends_in_form,
    find_answer,
    forms_from,
    is_hedge,
    read_reference,
)
from grpo_exp.rewards.registry import RewardFn, register

GOLD_CACHE = 4096  # references the helper keeps parsed (a dataset's are few, and each is asked often)
# A plain number, commas grouping thousands or none: it parses, so the reference check needs no helper.
PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


# -- the parts -----------------------------------------------------------------------------------


def _check_params(part: RewardFn, params: dict[str, Any]) -> None:
    """A part's params as the job is validated, before the model loads: the part itself on no
    completions (it checks its settings, then returns)."""
    try:
        part([], **params)
    except TypeError as exc:  # a required param is missing
        message = str(exc).removeprefix(f"{part.__name__}() ")
        raise UserError(f"{part.__name__}: {message} (see conf/reward/math.yaml)") from None


@register("math_format", ceiling=1.0, check=lambda params: _check_params(math_format, params))
def math_format(
    completions: list[str],
    *,
    answer_forms: Sequence[str],
    marker: str | None,
    phrases: Sequence[str],
    answer_pattern: str,
    min_reasoning_chars: int,
    **_: Any,
) -> list[float]:
    """1.0 for a reply of reasoning followed by exactly one final answer line, else 0.0.

    The last line is in one of ``answer_forms`` (``marker``: ``#### 72``; ``boxed``: a line holding
    ``\\boxed{72}``; ``phrase``: ``The answer is 72.``) with an answer matching ``answer_pattern``;
    that form appears nowhere else, and at least ``min_reasoning_chars`` characters of reasoning come
    before that line. A bare answer, an answer followed by more text, another form or a second
    answer fail: the part tells the forms apart, so a run teaches the one it names.
    """
    forms = forms_from("math_format", answer_forms, FINAL_LINE_FORMS, marker, phrases)
    _check_format_line(answer_pattern, min_reasoning_chars)
    return [1.0 if ends_in_form(c, forms, answer_pattern, min_reasoning_chars) else 0.0 for c in completions]


def _check_format_line(answer_pattern: Any, min_reasoning_chars: Any) -> None:
    if not isinstance(answer_pattern, str):
        raise UserError(f"math_format: answer_pattern must be a regex such as '-?[0-9]+', got {answer_pattern!r}")
    try:
        re.compile(answer_pattern)
    except re.error as exc:
        raise UserError(f"math_format: answer_pattern {answer_pattern!r} is not a regex ({exc})") from None
    if type(min_reasoning_chars) is not int or min_reasoning_chars < 0:
        raise UserError(f"math_format: min_reasoning_chars must be a whole number from 0, got {min_reasoning_chars!r}")


@register("math_accuracy", ceiling=1.0, check=lambda params: _check_params(math_accuracy, params))
def math_accuracy(
    completions: list[str],
    *,
    column: str,
    answer_forms: Sequence[str],
    number_forms: Sequence[str],
    marker: str | None,
    phrases: Sequence[str],
    timeout_s: float,
    **columns: Any,
) -> list[float | None]:
    """1.0 where the reply's final answer equals the record's reference (math-verify), else 0.0.

    The final answer is the last answer marker's of ``answer_forms`` in the reply, whichever kind (the
    last ``\\boxed{}``, the line after the last ``marker``, the line after the last of ``phrases``), else
    the first fallback's that finds one (the last math span, the whole reply); its numbers rewritten as
    ``number_forms`` says (``\\$18.00``, ``−5``, ``1e6``, ``1{,}600``). The reference's numbers are
    rewritten with every form. A reply without an answer scores 0.0, as does a hedge of several numbers
    ("17 \\vee 18") where the reference is one, and one whose check outlives ``timeout_s`` (an answer
    that can't be verified in time earns nothing). A record without a reference (dataset column
    ``column``) is not scored: None.
    """
    forms = forms_from("math_accuracy", answer_forms, tuple(FINDERS), marker, phrases, number_forms)
    _check_accuracy_settings(column, timeout_s)
    if not completions:  # the preflight's check (see _check_params): the settings alone
        return []
    if column not in columns:
        raise KeyError(f"math_accuracy needs the dataset column {column!r}; columns: {sorted(columns)}")
    checker = shared_checker()
    scores: list[float | None] = []
    for reply, reference in zip(completions, columns[column], strict=True):
        if reference is None or not str(reference).strip():
            scores.append(None)
            continue
        answer, gold = find_answer(reply, forms), read_reference(str(reference))
        if answer is None or (is_hedge(answer) and not is_hedge(gold)):
            scores.append(0.0)
            continue
        verdict = checker.verify(gold, answer, timeout_s)
        scores.append(None if verdict is None else float(verdict))
    return scores


def _check_accuracy_settings(column: Any, timeout_s: Any) -> None:
    if not isinstance(column, str) or not column:
        raise UserError(f"math_accuracy: column must name the dataset column of references, got {column!r}")
    if type(timeout_s) not in (int, float) or not 0 < timeout_s < math.inf:
        raise UserError(f"math_accuracy: timeout_s must be seconds above 0 (math-verify can hang), got {timeout_s!r}")


def reference_after(text: Any, marker: str | None) -> str | None:
    """A record's reference: the text after the last ``marker`` in ``text`` (all of it when ``marker`` is
    None), stripped; None when ``text`` is missing. GSM8K's ``answer`` ends in ``#### 72``. Shared by
    every dataset loader, so the hub's GSM8K and the shipped sample read it alike."""
    if text is None:
        return None
    text = str(text)
    if marker is None:
        return text.strip()
    return text.rpartition(marker)[2].strip() if marker in text else ""


def reference_parses(reference: str, timeout_s: float = 5.0) -> bool:
    """Whether math-verify parses ``reference``, read as the accuracy part reads it (``read_reference``), into
    something it can compare (a plain number always does)."""
    gold = read_reference(reference)
    if PLAIN_NUMBER.fullmatch(gold.strip()):
        return True
    return bool(shared_checker().parses(gold, timeout_s))


def check_references(
    records: list[dict[str, Any]], field: str, marker: str | None, source: str, lines: list[int] | None = None
) -> None:
    """A one-line ``UserError`` naming the first record (and its line in ``source``) whose reference is
    there but can't be compared: the marker is missing, nothing follows it, or math-verify can't parse
    it. A record without ``field`` has no reference, and the accuracy part leaves it unscored."""
    if not any(record.get(field) is not None for record in records):
        raise UserError(f"{source}: no record has dataset.reference_field={field!r} (fields: {sorted(records[0])})")
    for number, record in enumerate(records, 1):
        if record.get(field) is None:
            continue
        reference = reference_after(record[field], marker)
        if reference and reference_parses(reference):
            continue
        if marker is not None and marker not in str(record[field]):
            why = f"its {field!r} has no {marker!r}"
        elif not reference:
            why = "its reference is empty"
        else:
            why = f"its reference {reference[:60]!r} does not parse as math (math-verify)"
        where = f"record {number}" + (f" (line {lines[number - 1]})" if lines else "")
        raise UserError(f"{source}: {where}: {why}; fix or remove the record")


# -- the helper process ----------------------------------------------------------------------------


class Checker:
    """math-verify in a helper process (``grpo_exp.helper_process``): ``verify`` and ``parses`` with a hard
    time limit per call.

    Thread-safe (one call at a time); the helper starts on first use, and after a kill on the next.
    """

    def __init__(self, argv: list[str] | None = None) -> None:
        # -P: the current folder stays off the path (a user's math.py there must not shadow the standard one)
        argv = argv or [sys.executable, "-P", "-c", "from grpo_exp.rewards.math import serve; serve()"]
        # stderr to /dev/null: math-verify logs each timeout; the score says it already
        self.helper = Helper(argv, "the math reward's checker")

    @property
    def restarts(self) -> int:
        """Helpers killed at a time limit (for tests and logs)."""
        return self.helper.restarts

    def verify(self, gold: str, answer: str, timeout_s: float) -> bool | None:
        """Whether ``answer`` equals ``gold``; False when the check outlived ``timeout_s``; None when
        ``gold`` does not parse."""
        result = self._ask({"op": "verify", "gold": gold, "answer": answer}, timeout_s)
        return False if result is TimeoutError else result

    def parses(self, text: str, timeout_s: float) -> bool | None:
        """Whether math-verify parses ``text`` into an expression (None: it took over ``timeout_s``)."""
        result = self._ask({"op": "parse", "text": text}, timeout_s)
        return None if result is TimeoutError else bool(result)

    def close(self) -> None:
        """Stop the helper (it also stops by itself when this process ends: its input closes)."""
        self.helper.close()

    def _ask(self, request: dict[str, Any], timeout_s: float) -> Any:
        if not timeout_s > 0:
            raise UserError(f"math reward timeout_s={timeout_s}: give seconds above 0 (math-verify can hang)")
        try:
            answer = self.helper.ask({**request, "alarm_s": max(1, math.ceil(timeout_s) - 1)}, timeout_s)
        except HelperGone:  # stuck (or gone): killed, and the next call starts a fresh helper
            return TimeoutError
        return answer["result"]


_shared: Checker | None = None
_shared_lock = threading.Lock()


def shared_checker() -> Checker:
    """The process's one checker (its helper is reused by every call and stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Checker()
            atexit.register(_shared.close)
        return _shared


# -- inside the helper -----------------------------------------------------------------------------


def serve() -> None:
    """The helper's loop (``grpo_exp.helper_process.serve``): math-verify loaded once, then one check per request."""
    serve_requests(_checks)


def _checks() -> Callable[[dict[str, Any]], dict[str, Any]]:
    try:
        from math_verify import parse, verify
    except ImportError as exc:
        raise Unavailable(f"math-verify is not installed ({exc}): pip install math-verify") from None
    golds: dict[str, list[Any]] = {}

    def check(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"result": judge(request, parse, verify, golds)}
        except Exception:  # math-verify gives up on odd input by returning; anything else is a failed check
            return {"result": False}

    return check


def judge(request: dict[str, Any], parse: Any, verify: Any, golds: dict[str, list[Any]]) -> bool | None:
    """One request, with math-verify's own alarm (``alarm_s``, whole seconds) on each call."""
    alarm = request["alarm_s"]
    if request["op"] == "parse":
        return _comparable(parse(request["text"], parsing_timeout=alarm))
    gold_text = request["gold"]
    if gold_text not in golds:
        if len(golds) >= GOLD_CACHE:
            golds.clear()
        golds[gold_text] = parse(gold_text, parsing_timeout=alarm)
    gold = golds[gold_text]
    if not _comparable(gold):
        return None
    answer = parse(request["answer"], parsing_timeout=alarm)
    return bool(answer) and bool(verify(gold, answer, timeout_seconds=alarm))


def _comparable(parsed: list[Any]) -> bool:
    """math-verify's parse gives expressions, then the matched text as a fallback: only an expression counts."""
    return any(not isinstance(item, str) for item in parsed)
