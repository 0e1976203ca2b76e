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
    from grpo_exp.sandbox import Limits, Sandbox, TestSpec

MI_SCALE = 100.0  # radon's maintainability index runs from 0 to 100
TEST_COLUMNS = ("test_list", "test", "entry_point", "test_setup_code", "test_imports")
# a correct solution, by dataset: this project's and MBPP-style ``reference``/``code``, or
# HumanEval's ``canonical_solution`` (a body that completes the prompt)
REFERENCE_COLUMNS = ("reference", "code", "canonical_solution")

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


def extract_code(completion: str) -> str:
    """The code in a completion (``grpo_exp.sandbox.extract``); the sandbox package loads on first use."""
    from grpo_exp.sandbox import extract_code as extract

    return extract(completion)


@register("code_syntax", ceiling=1.0)
def code_syntax(completions: list[str], **_: Any) -> list[float | None]:
    """1.0 where the extracted code parses with ``ast.parse``, else 0.0.

    Empty code (a completion with nothing but whitespace or an empty block) scores 0.0: it
    parses, but there is no code to reward.
    """
    return [0.0 if parse_code(extract_code(c)) is None else 1.0 for c in completions]


def _check_tests_params(params: dict[str, Any]) -> None:
    """``code_tests``'s params as the job is validated, before the model loads: the part itself, on no completions."""
    try:
        code_tests([], **params)
    except TypeError as exc:  # a required param is missing
        message = str(exc).removeprefix(f"{code_tests.__name__}() ")
        raise UserError(f"code_tests: {message} (see conf/reward/code_generation.yaml)") from None


@register("code_tests", ceiling=1.0, check=_check_tests_params)
def code_tests(
    completions: list[str],
    *,
    timeout_s: float,
    test_timeout_s: float,
    memory_mb: int,
    workers: int | None,
    isolation: str,
    partial_credit: bool = True,
    fork_server: bool = True,
    reference_time_multiple: float | None = None,
    min_test_timeout_s: float | None = None,
    max_processes: int | None = None,
    **columns: Any,
) -> list[float | None]:
    """Share of the sample's unit tests the extracted code passes; None for a sample without tests.

    Tests come from the dataset columns ``test_list`` (+ ``test_setup_code``, ``test_imports``),
    MBPP style, or ``test`` + ``entry_point``, HumanEval style (the prompt's helper definitions
    are the dataset's, never the candidate's). The whole batch runs in parallel in one sandbox
    per distinct settings, reused across calls: ``timeout_s`` per completion, ``test_timeout_s``
    per test (or less: ``reference_time_multiple`` times the reference solution's slowest test,
    at least ``min_test_timeout_s``), ``memory_mb`` and ``max_processes`` per completion,
    ``workers`` parallel interpreters (None: one per CPU), ``isolation`` auto | bwrap | unshare |
    none; under bwrap ``fork_server`` forks each completion from a ready interpreter per worker
    instead of starting a fresh one. ``partial_credit=False`` scores all-or-nothing, as
    HumanEval's own ``check`` does.
    Identical (code, tests) pairs are cached.
    """
    from grpo_exp.sandbox import MODES

    for name, flag in (("partial_credit", partial_credit), ("fork_server", fork_server)):
        if not isinstance(flag, bool):
            raise UserError(f"code_tests: {name} must be true or false, got {flag!r}")
    if workers is not None and (type(workers) is not int or workers < 1):
        raise UserError(f"code_tests: workers must be a whole number from 1, or null (one per core), got {workers!r}")
    if isolation not in MODES:  # whether it works on this machine is checked as the sandbox starts
        raise UserError(f"code_tests: isolation must be one of {', '.join(MODES)}, got {isolation!r}")
    limits = _limits(timeout_s, test_timeout_s, memory_mb, max_processes, reference_time_multiple, min_test_timeout_s)
    if not completions:  # the preflight's check (see _check_tests_params): the settings alone
        return []
    sandbox = _sandbox(limits, workers, isolation, fork_server)
    specs = _specs(len(completions), columns)
    results = sandbox.grade_many([(extract_code(c), spec) for c, spec in zip(completions, specs, strict=True)])
    scores: list[float | None] = []
    for result in results:
        fraction = None if result is None else result.fraction
        scores.append(fraction if fraction is None or partial_credit else float(fraction == 1.0))
    return scores


def _check_complexity_params(params: dict[str, Any]) -> None:
    """``code_complexity``'s one param, as the job is validated (before the model loads)."""
    _check_max_complexity(params.get("max_complexity"))


def _check_max_complexity(max_complexity: Any) -> None:
    if type(max_complexity) not in (int, float) or not max_complexity > 0:
        raise UserError(f"code_complexity: max_complexity must be positive, got {max_complexity!r}")


@register("code_complexity", ceiling=1.0, check=_check_complexity_params)
def code_complexity(completions: list[str], *, max_complexity: float, **_: Any) -> list[float | None]:
    """A simplicity score in [0, 1] from radon; code that does not parse (or is empty) scores 0.

    score = MI / 100 * min(1, max_complexity / mean CC), where MI is radon's maintainability
    index (0..100, multi-line strings counted as comments) and mean CC the average cyclomatic
    complexity of the functions and methods (1 for straight-line code). So readable code with
    functions of complexity <= ``max_complexity`` (McCabe's classic 10) keeps its MI/100, and
    more tangled code loses in proportion. It rewards simplicity, not correctness: weigh it
    below the tests, since a trivial stub scores high here.
    """
    _check_max_complexity(max_complexity)
    from radon.complexity import cc_visit
    from radon.metrics import mi_visit

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


def _limits(
    timeout_s: float,
    test_timeout_s: float,
    memory_mb: int,
    max_processes: int | None,
    reference_time_multiple: float | None,
    min_test_timeout_s: float | None,
) -> Limits:
    """The sandbox's limits from the reward's params (None: the sandbox's own default)."""
    from grpo_exp.sandbox import Limits

    max_processes = Limits.max_processes if max_processes is None else max_processes
    min_test_timeout_s = Limits.min_test_timeout_s if min_test_timeout_s is None else min_test_timeout_s
    try:
        return Limits(
            timeout_s=float(timeout_s),
            test_timeout_s=float(test_timeout_s),
            memory_mb=int(memory_mb),
            max_processes=int(max_processes),
            reference_time_multiple=None if reference_time_multiple is None else float(reference_time_multiple),
            min_test_timeout_s=float(min_test_timeout_s),
        )
    except (TypeError, ValueError) as exc:
        raise UserError(f"code_tests: {exc}") from None


def _sandbox(limits: Limits, workers: int | None, isolation: str, fork_server: bool) -> Sandbox:
    """One sandbox per distinct settings, kept for the life of the process."""
    from grpo_exp.sandbox import Sandbox

    key = (limits, workers, isolation, fork_server)
    with _sandboxes_lock:
        if key not in _sandboxes:
            _sandboxes[key] = Sandbox(limits, isolation=isolation, workers=workers, fork_server=fork_server)
        return _sandboxes[key]


def _specs(count: int, columns: dict[str, Any]) -> list[TestSpec | None]:
    """Per-completion test specs from the dataset columns TRL passes (any may be missing)."""
    from grpo_exp.sandbox import TestSpec

    values = {name: columns.get(name) or [None] * count for name in (*TEST_COLUMNS, *REFERENCE_COLUMNS, "prompts")}
    for name, column in values.items():
        if len(column) != count:
            raise UserError(f"code_tests: column {name!r} has {len(column)} values for {count} completions")
    specs = []
    for n in range(count):
        prompt = _prompt_text(values["prompts"][n])
        specs.append(
            TestSpec.from_row(
                test_list=_as_list(values["test_list"][n]),
                test=values["test"][n],
                entry_point=values["entry_point"][n],
                test_setup_code=values["test_setup_code"][n],
                prompt=prompt,
                reference=_reference(values, n, prompt),
                test_imports=_as_list(values["test_imports"][n]),
            )
        )
    return specs


def _prompt_text(prompt: Any) -> str:
    """The problem text of a prompt: itself, or the last user message of a conversation."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    return ""


def _reference(values: dict[str, list[Any]], n: int, prompt: str) -> str:
    if values["reference"][n] or values["code"][n]:
        return str(values["reference"][n] or values["code"][n])
    body = values["canonical_solution"][n]
    return prompt + str(body) if body else ""


def _as_list(value: Sequence[str] | str | None) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    return None if value is None else [str(v) for v in value]
