"""Reward parts for code generation: does it parse, does it pass the sample's tests, is it simple.

The code is taken from the completion's first fenced block (see ``grpo_exp.sandbox.extract``).
Tests run in ``grpo_exp.sandbox``: a fresh, isolated interpreter per completion, with the verdict
decided in the trainer, never by anything the generated code prints or returns. Importing this
module is cheap; radon is imported on first use and the sandbox probes its isolation once.
"""

from __future__ import annotations

import ast
import threading
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grpo_exp.errors import UserError
from grpo_exp.rewards.registry import register

if TYPE_CHECKING:  # the sandbox loads on first use, so runs without a code reward never import it
    from grpo_exp.sandbox import Sandbox, TestSpec

MI_SCALE = 100.0  # radon's maintainability index runs from 0 to 100
TEST_COLUMNS = ("test_list", "test", "entry_point", "test_setup_code")

_sandboxes: dict[tuple, Sandbox] = {}
_sandboxes_lock = threading.Lock()


def parse_code(code: str) -> ast.Module | None:
    """The module ``code`` parses to, or None when it does not parse or holds no statement."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarnings of generated code are not ours to print
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    return tree if tree.body else None


@register("code_syntax")
def code_syntax(completions: list[str], **_: Any) -> list[float | None]:
    """1.0 where the extracted code parses with ``ast.parse``, else 0.0.

    Empty code (a completion with nothing but whitespace or an empty block) scores 0.0: it
    parses, but there is no code to reward.
    """
    from grpo_exp.sandbox import extract_code

    return [0.0 if parse_code(extract_code(c)) is None else 1.0 for c in completions]


@register("code_tests")
def code_tests(
    completions: list[str],
    *,
    timeout_s: float,
    test_timeout_s: float,
    memory_mb: int,
    workers: int | None,
    isolation: str,
    **columns: Any,
) -> list[float | None]:
    """Fraction of the sample's unit tests the extracted code passes; None for a sample without tests.

    Tests come from the dataset columns ``test_list`` (+ ``test_setup_code``), MBPP style, or
    ``test`` + ``entry_point``, HumanEval style. The whole batch runs in parallel in one sandbox
    per distinct settings, reused across calls: ``timeout_s`` per completion, ``test_timeout_s``
    per test, ``memory_mb`` of address space, ``workers`` parallel interpreters (None: one per
    CPU), ``isolation`` auto | bwrap | unshare | none. Identical (code, tests) pairs are cached.
    """
    from grpo_exp.sandbox import extract_code

    sandbox = _sandbox(timeout_s, test_timeout_s, memory_mb, workers, isolation)
    specs = _specs(len(completions), columns)
    results = sandbox.grade_many([(extract_code(c), spec) for c, spec in zip(completions, specs, strict=True)])
    return [None if r is None else r.fraction for r in results]


@register("code_complexity")
def code_complexity(completions: list[str], *, max_complexity: float, **_: Any) -> list[float | None]:
    """A simplicity score in [0, 1] from radon; code that does not parse (or is empty) scores 0.

    score = MI / 100 * min(1, max_complexity / mean CC), where MI is radon's maintainability
    index (0..100, multi-line strings counted as comments) and mean CC the average cyclomatic
    complexity of the functions and methods (1 for straight-line code). So readable code with
    functions of complexity <= ``max_complexity`` (McCabe's classic 10) keeps its MI/100, and
    more tangled code loses in proportion. It rewards simplicity, not correctness: weigh it
    below the tests, since a trivial stub scores high here.
    """
    if max_complexity <= 0:
        raise UserError(f"code_complexity: max_complexity must be positive, got {max_complexity}")
    from radon.complexity import cc_visit
    from radon.metrics import mi_visit

    from grpo_exp.sandbox import extract_code

    scores: list[float | None] = []
    for completion in completions:
        code = extract_code(completion)
        if parse_code(code) is None:
            scores.append(0.0)
            continue
        try:
            mi = mi_visit(code, multi=True)
            blocks = cc_visit(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            scores.append(0.0)
            continue
        functions = [b for b in blocks if not hasattr(b, "methods")]  # classes would count their methods twice
        mean_cc = sum(f.complexity for f in functions) / len(functions) if functions else 1.0
        penalty = min(1.0, max_complexity / mean_cc) if mean_cc > 0 else 1.0
        scores.append(min(1.0, max(0.0, mi / MI_SCALE)) * penalty)
    return scores


def _sandbox(timeout_s: float, test_timeout_s: float, memory_mb: int, workers: int | None, isolation: str) -> Sandbox:
    """One sandbox per distinct settings, kept for the life of the process."""
    from grpo_exp.sandbox import Limits, Sandbox

    key = (float(timeout_s), float(test_timeout_s), int(memory_mb), workers, isolation)
    with _sandboxes_lock:
        if key not in _sandboxes:
            try:
                limits = Limits(timeout_s=key[0], test_timeout_s=key[1], memory_mb=key[2])
            except ValueError as exc:
                raise UserError(f"code_tests: {exc}") from None
            _sandboxes[key] = Sandbox(limits, isolation=isolation, workers=workers)
        return _sandboxes[key]


def _specs(count: int, columns: dict[str, Any]) -> list[TestSpec | None]:
    """Per-completion test specs from the dataset columns TRL passes (any may be missing)."""
    from grpo_exp.sandbox import TestSpec

    values = {name: columns.get(name) or [None] * count for name in TEST_COLUMNS}
    for name, column in values.items():
        if len(column) != count:
            raise UserError(f"code_tests: column {name!r} has {len(column)} values for {count} completions")
    specs = []
    for n in range(count):
        test_list = values["test_list"][n]
        if isinstance(test_list, str):
            test_list = [test_list]
        specs.append(
            TestSpec.from_row(
                test_list=_as_list(test_list),
                test=values["test"][n],
                entry_point=values["entry_point"][n],
                test_setup_code=values["test_setup_code"][n],
            )
        )
    return specs


def _as_list(value: Sequence[str] | None) -> list[str] | None:
    return None if value is None else [str(v) for v in value]
