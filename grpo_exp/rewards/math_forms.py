r"""Where a math reply states its final answer, and how it writes a number.

Models close a reply in several forms: Qwen-style models box the answer (``\boxed{18}``), GSM8K's
solutions end in ``#### 18``, others say "The answer is 18" or close with ``$18$``. They also write
numbers that math-verify does not read as numbers: ``\$18.00``, ``−5`` (Unicode minus), ``1e6``,
``1{,}600``. The accuracy part finds the answer (``find_answer``) and rewrites its numbers
(``rewrite_numbers``) before math-verify judges it; the format part asks that a reply end in one
of the forms it is given (``ends_in_form``), so a run can still teach one of them. Which forms count
is config (conf/reward/math.yaml), checked by ``forms_from`` before the model loads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple

from grpo_exp.errors import UserError

# The longest exponent the scientific rewrite writes out (1e999): a longer one would put a number of
# any length into the trainer's memory, so it is left as written (and math-verify reads it as wrong).
MAX_EXPONENT_DIGITS = 3
UNICODE_MINUS = "\u2212"

BOXED = re.compile(r"\\boxed\s*\{")
BRACES = re.compile(r"\\.|[{}]", re.DOTALL)  # an escape (\{ is no brace) or a brace
# A math span: $$…$$, \(…\), \[…\], or $…$ as pandoc reads it (no space inside either dollar, no digit
# right after the closing one), so the dollars of "$5 and $7" are currency, not a span.
MATH_SPAN = re.compile(
    r"\$\$.+?\$\$|\\\(.+?\\\)|\\\[.+?\\\]"
    r"|(?<![\\$])\$(?=[^\s$])(?:\\.|[^\\$\n])*?(?<=[^\s\\])\$(?!\d)",
    re.DOTALL,
)
BARE_DOLLAR = re.compile(r"\$(?=\s?-?\d)")
SEPARATOR = r"(?:,|\{,\}|\\,)"  # 1,600 as typed; 1{,}600 and 1\,600 as LaTeX writes it
THOUSANDS = re.compile(rf"(?<![\d.,])\d{{1,3}}(?:{SEPARATOR}\d{{3}})+(?!\d|{SEPARATOR}\d)")
SCIENTIFIC = re.compile(rf"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d{{1,{MAX_EXPONENT_DIGITS}}})(?!\w|\.\d)")
# What joins the values of a hedged answer ("17 \vee 18", "17 or 18"): math-verify keeps the last value alone,
# so a hedge that names the reference among others would score as if it named only the reference.
HEDGE_JOINER = re.compile(r"\\(?:vee|lor)(?![a-zA-Z])|\u2228|\bor\b", re.IGNORECASE)


@dataclass(frozen=True)
class Forms:
    """What a part accepts: where a final answer stands (``answers``; see ``find_answer`` for which one
    gives it), the number spellings it rewrites (``numbers``), the marker and the phrases that open an answer."""

    answers: tuple[str, ...]
    numbers: tuple[str, ...] = ()
    marker: str | None = None
    phrases: tuple[str, ...] = ()

    def phrase_pattern(self) -> re.Pattern[str]:
        """Any phrase, case-insensitively; longest first, so "final answer:" is not read as "answer:"."""
        ordered = sorted(self.phrases, key=len, reverse=True)
        return re.compile("|".join(re.escape(p) for p in ordered), re.IGNORECASE)


# -- where the answer is ---------------------------------------------------------------------------


class Found(NamedTuple):
    """An answer a form found: where its opener (``\\boxed``, the marker, the phrase, the span) starts in the
    reply, and the answer as written."""

    at: int
    text: str


def find_answer(reply: str, forms: Forms) -> str | None:
    """The reply's final answer, numbers rewritten; None when no form finds one.

    Of the answer markers among ``forms.answers`` (``boxed``, ``marker``, ``phrase``), the one that stands
    last in the reply gives it, whichever kind: a reply that boxes a guess early and closes on ``#### 17``
    answers 17. Without any, the first of the other forms (``latex``, ``whole``) that finds one gives it."""
    found = [(name, FINDERS[name](reply, forms)) for name in forms.answers]
    found = [(name, answer) for name, answer in found if answer is not None and answer.text.strip()]
    marked = [answer for name, answer in found if name in FINAL_LINE_FORMS]
    if marked:
        chosen = max(marked, key=lambda answer: answer.at)  # the first listed on a tie
    elif found:
        chosen = found[0][1]
    else:
        return None
    return rewrite_numbers(chosen.text.strip(), forms.numbers)


def is_hedge(answer: str) -> bool:
    """Whether ``answer`` names several numbers joined by ``\\vee``, ``\\lor``, ``∨`` or "or" ("17 \\vee 18",
    "17 or 18"): a hedge, not an answer. "18 or so" names one number and is not."""
    parts = HEDGE_JOINER.split(answer)
    return len(parts) > 1 and all(re.search(r"\d", part) for part in parts)


def last_boxed(reply: str, forms: Forms | None = None) -> Found | None:
    r"""The last complete ``\boxed{…}`` as written (braces balanced; a cut-off one is skipped)."""
    boxed_at = {match.end() - 1: match.start() for match in BOXED.finditer(reply)}
    if not boxed_at:
        return None
    opened: list[int | None] = []  # per open brace: where its \boxed starts, or None
    found: tuple[int, int] | None = None
    for token in BRACES.finditer(reply):
        if token.group() == "{":
            opened.append(boxed_at.get(token.start()))
        elif token.group() == "}" and opened:
            start = opened.pop()
            if start is not None and (found is None or start > found[0]):
                found = (start, token.end())
    return None if found is None else Found(found[0], reply[found[0] : found[1]])


def after_marker(reply: str, forms: Forms) -> Found | None:
    """The first line of text after the reply's last marker (GSM8K: ``#### 72``)."""
    if not forms.marker or forms.marker not in reply:
        return None
    at = reply.rfind(forms.marker)
    return Found(at, _first_line(reply[at + len(forms.marker) :]))


def after_phrase(reply: str, forms: Forms) -> Found | None:
    """The first line of text after the reply's last phrase ("The answer is 72."), without its colon or full stop."""
    matches = list(forms.phrase_pattern().finditer(reply)) if forms.phrases else []
    if not matches:
        return None
    line = _first_line(reply[matches[-1].end() :].lstrip().removeprefix(":")).removesuffix(".")
    return Found(matches[-1].start(), line)


def _first_line(text: str) -> str:
    """The first line of ``text`` that holds anything, stripped ("#### 72" and "####\\n72" alike)."""
    return text.strip().split("\n", 1)[0].strip()


def last_math_span(reply: str, forms: Forms | None = None) -> Found | None:
    """The reply's last math span as written (``$18$``, ``\\(18\\)``, ``\\[18\\]``, ``$$18$$``)."""
    spans = list(MATH_SPAN.finditer(reply))
    return Found(spans[-1].start(), spans[-1].group()) if spans else None


def whole_reply(reply: str, forms: Forms | None = None) -> Found | None:
    """All of the reply: math-verify picks the answer itself."""
    return Found(0, reply)


FINDERS: dict[str, Callable[[str, Forms], Found | None]] = {
    "boxed": last_boxed,
    "marker": after_marker,
    "phrase": after_phrase,
    "latex": last_math_span,
    "whole": whole_reply,
}
# The answer markers: the forms the format part can ask a reply to end in, and those of which the last in a
# reply gives the accuracy part its answer.
FINAL_LINE_FORMS = ("boxed", "marker", "phrase")


# -- how a number is written -----------------------------------------------------------------------


def read_reference(reference: str) -> str:
    """A record's reference with every number spelling rewritten, whatever a reply's ``number_forms`` say: the
    dataset's ``1e6`` means 1000000, where math-verify would read 1."""
    return rewrite_numbers(reference, REWRITES)


def rewrite_numbers(text: str, numbers: Iterable[str]) -> str:
    """``text`` with the number spellings named in ``numbers`` written as plain numbers."""
    for name, rewrite in REWRITES.items():  # in this order: a currency amount may be negative, with commas
        if name in numbers:
            text = rewrite(text)
    return text


def plain_minus(text: str) -> str:
    """``−5`` → ``-5``: math-verify reads only the ASCII hyphen-minus as a minus sign outside LaTeX."""
    return text.replace(UNICODE_MINUS, "-")


def without_currency(text: str) -> str:
    r"""``\$18.00`` and ``$18.00`` → ``18.00``; the dollars of a math span such as ``$18$`` stay."""
    text = text.replace("\\$", "")
    spans = [match.span() for match in MATH_SPAN.finditer(text)]

    def drop(dollar: re.Match[str]) -> str:
        return dollar.group() if any(start <= dollar.start() < end for start, end in spans) else ""

    return BARE_DOLLAR.sub(drop, text)


def without_thousands_separators(text: str) -> str:
    r"""``1,600``, ``1{,}600`` and ``1\,600`` → ``1600``; a list such as ``1,23`` stays."""
    return THOUSANDS.sub(lambda number: re.sub(SEPARATOR, "", number.group()), text)


def positional(text: str) -> str:
    """``1e6`` → ``1000000``, ``2.5e-3`` → ``0.0025``: math-verify reads ``1e6`` as 1."""
    return SCIENTIFIC.sub(lambda number: format(Decimal(number.group()), "f"), text)


REWRITES: dict[str, Callable[[str], str]] = {
    "unicode_minus": plain_minus,
    "currency": without_currency,
    "commas": without_thousands_separators,
    "scientific": positional,
}


# -- the format part's final line --------------------------------------------------------------------


def ends_in_form(reply: str, forms: Forms, answer_pattern: str, min_reasoning_chars: int) -> bool:
    """Whether ``reply`` is reasoning (``min_reasoning_chars`` at least), then a last line in one of
    ``forms.answers`` with an answer matching ``answer_pattern``, that form appearing nowhere else."""
    text = reply.strip()
    reasoning, _, last = text.rpartition("\n")
    if len(reasoning.strip()) < min_reasoning_chars:
        return False
    return any(_final_line(name, text, last.strip(), forms, answer_pattern) for name in forms.answers)


def _final_line(name: str, text: str, line: str, forms: Forms, answer: str) -> bool:
    if name == "marker":
        assert forms.marker is not None  # forms_from requires one for this form
        opener = re.escape(forms.marker)
        return text.count(forms.marker) == 1 and re.fullmatch(rf"{opener}[ \t]*(?:{answer})", line) is not None
    if name == "boxed":
        return len(BOXED.findall(text)) == 1 and re.search(rf"\\boxed\s*\{{(?:{answer})\}}", line) is not None
    phrases = forms.phrase_pattern()
    opener = f"(?i:{phrases.pattern})"
    final = re.fullmatch(rf"{opener}[ \t]*:?[ \t]*(?:{answer})[ \t]*\.?", line)
    return len(phrases.findall(text)) == 1 and final is not None


# -- checking the params (before the model loads) ----------------------------------------------------


def forms_from(
    part: str,
    answer_forms: Any,
    allowed: Sequence[str],
    marker: Any,
    phrases: Any,
    number_forms: Any = (),
) -> Forms:
    """The forms a part's params name, or a one-line UserError: ``answer_forms`` from ``allowed``,
    ``number_forms`` from ``REWRITES``, a ``marker`` when a form needs one, ``phrases`` likewise."""
    answers = _names(part, "answer_forms", answer_forms, allowed, empty_ok=False)
    numbers = _names(part, "number_forms", number_forms, tuple(REWRITES), empty_ok=True)
    if "marker" in answers and (not isinstance(marker, str) or not marker.strip()):
        raise UserError(f"{part}: answer_forms lists marker, so marker must be text such as '####', got {marker!r}")
    if "phrase" in answers and not _texts(phrases):
        raise UserError(f"{part}: answer_forms lists phrase, so phrases must be a list of text, got {phrases!r}")
    phrases = tuple(phrases) if _texts(phrases) else ()
    return Forms(answers, numbers, marker if isinstance(marker, str) else None, phrases)


def _names(part: str, key: str, value: Any, allowed: Sequence[str], empty_ok: bool) -> tuple[str, ...]:
    names = list(value) if _is_list(value) else [None]
    known = all(isinstance(name, str) and name in allowed for name in names)
    if not known or (not names and not empty_ok) or len(set(names)) < len(names):
        need = "a list" if empty_ok else "a non-empty list"
        raise UserError(f"{part}: {key} must be {need} of distinct names from {', '.join(allowed)}, got {value!r}")
    return tuple(names)


def _texts(value: Any) -> bool:
    return _is_list(value) and len(value) > 0 and all(isinstance(text, str) and text.strip() for text in value)


def _is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str)
