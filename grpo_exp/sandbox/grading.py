"""Unit tests of a sample, and how the trusted parent runs them against a sandboxed candidate.

Two dataset shapes:

- MBPP: ``test_list`` (assert statements; each string is one test) and optional
  ``test_setup_code`` (run in the parent before the tests; never sent to the child, so
  expected values it may define stay out of the candidate's reach);
- HumanEval: ``test`` defining ``def check(candidate): ...`` and ``entry_point`` (the function the
  candidate must define). Each top-level statement of ``check`` that contains an ``assert`` is
  one test (``assert True, "..."`` placeholders are not counted); the other statements are setup
  steps run in order. A ``check`` whose body cannot be run statement by statement (it returns
  or yields) counts as a single test.

Both shapes may carry ``helpers`` (trusted code the problem supplies: the definitions of a
HumanEval prompt, MBPP's ``test_imports``) and a ``reference`` solution (its measured time sets
the per-test limit, see ``pool``; its top-level definitions name the candidate's functions).

The test code runs in the parent, as trusted dataset code, in a fresh namespace per sample.
``names`` decides where each name the tests use comes from: the problem's own code and standard
modules are the grader's, and only the candidate's functions become a ``RemoteRef`` into the
candidate's program: calling it runs the candidate's code in the sandbox and brings back plain
data only. The comparisons themselves (``==``,
``math.isclose``, ...) therefore run in the parent on plain values, and the candidate never
sees an expected value, only the arguments of its own calls.

Weaker spot, by design: a test that needs the candidate's objects to behave (compare them,
print them, or see arguments mutated in place) cannot be graded this way and fails.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any

from grpo_exp.sandbox.names import TEST_MODULES, defined_names, free_names, prompt_helpers, std_object
from grpo_exp.sandbox.remote import LoadFailed, RemoteRef, RemoteSession, SandboxFault, TestTimeout

if TYPE_CHECKING:
    from grpo_exp.sandbox.forkserver import ForkServer
    from grpo_exp.sandbox.spares import ChildSource

PASSED, FAILED, ERROR, TIMEOUT = "passed", "failed", "error", "timeout"
FALLBACK_CANDIDATE = "__candidate__"  # what check() is called with when run as one test
SUITE_CACHE = 1024  # compiled suites kept: a GRPO group grades all its completions on one problem
REGRADES = 1  # gradings again after the candidate's fork server died under it (see ``forkserver``)
CANDIDATE_FILE = "<solution>"  # the candidate's program in tracebacks and warnings
CANDIDATE_FILE_PATTERN = re.escape(CANDIDATE_FILE) + r"\Z"  # a warning's module, for a compiled string: its file
_CANDIDATE_WARNINGS = ("ignore", None, Warning, re.compile(CANDIDATE_FILE_PATTERN), 0)  # as warnings.filters holds it


@dataclass(frozen=True)
class TestSpec:
    """A sample's tests, in either dataset shape."""

    __test__ = False  # not a pytest class

    asserts: tuple[str, ...] = ()
    setup: str = ""
    check: str | None = None
    entry_point: str | None = None
    helpers: str = ""  # trusted definitions the tests may use, run in the grader before them
    reference: str = ""  # a correct solution: times the tests and names the candidate's functions

    @classmethod
    def mbpp(
        cls,
        test_list: Sequence[str],
        setup: str | None = None,
        *,
        entry_point: str | None = None,
        helpers: str = "",
        reference: str = "",
    ) -> TestSpec:
        return cls(tuple(test_list), setup or "", None, entry_point, helpers, reference)

    @classmethod
    def humaneval(cls, test: str, entry_point: str, *, prompt: str = "", reference: str = "") -> TestSpec:
        """``prompt``: the problem's code prompt, whose helper definitions the tests may use."""
        helpers = prompt_helpers(prompt, entry_point)
        return cls(check=test, entry_point=entry_point, helpers=helpers, reference=reference)

    @classmethod
    def from_row(
        cls,
        test_list: Sequence[str] | None = None,
        test: str | None = None,
        entry_point: str | None = None,
        test_setup_code: str | None = None,
        *,
        prompt: str | None = None,
        reference: str | None = None,
        test_imports: Sequence[str] | None = None,
    ) -> TestSpec | None:
        """The spec of one dataset row, or None when it has no tests."""
        if test_list:
            imports = "\n".join(test_imports or ())
            return cls.mbpp(
                test_list, test_setup_code, entry_point=entry_point or None, helpers=imports, reference=reference or ""
            )
        if test and entry_point:
            return cls.humaneval(test, entry_point, prompt=prompt or "", reference=reference or "")
        return None


@dataclass(frozen=True)
class GradeResult:
    """How a candidate did on a sample's tests; ``fraction`` is what the reward uses."""

    passed: int
    total: int
    outcomes: tuple[str, ...] = ()
    status: str = "ok"  # ok | syntax_error | load_error | bad_tests
    detail: str = ""
    isolation: str = ""
    wall_s: float = 0.0
    interpreters: int = 0  # processes started for it, forked or fresh (restarts after a killed test included)
    cached: bool = False
    test_s: tuple[float, ...] = ()  # per test: time spent waiting on the candidate's answers

    @property
    def fraction(self) -> float | None:
        """Share of tests passed; None when there is nothing to grade (no or unreadable tests)."""
        if self.total == 0 or self.status == "bad_tests":
            return None
        return self.passed / self.total


@dataclass
class _Step:
    label: str
    code: Any  # a code object
    is_test: bool


@dataclass
class Suite:
    """A spec compiled for the parent: setup steps, tests, and the names taken from the child."""

    steps: list[_Step]
    candidate_name: str | None = None  # HumanEval: the name bound to the entry point
    entry_point: str | None = None
    remote_names: list[str] = field(default_factory=list)
    module_names: list[str] = field(default_factory=list)
    std_names: list[str] = field(default_factory=list)  # public names of standard modules

    @property
    def total(self) -> int:
        return sum(step.is_test for step in self.steps)


@functools.lru_cache(maxsize=SUITE_CACHE)
def compile_suite(spec: TestSpec) -> Suite:
    """Parse and compile a spec (each distinct one once); raises SyntaxError/ValueError for unreadable tests.

    The result is shared: read it, never change it.
    """
    trees = [ast.parse(spec.helpers)] if spec.helpers else []
    steps = [_Step("helpers", compile(trees[0], "<problem helpers>", "exec"), False)] if spec.helpers else []
    if spec.check is not None:
        suite = _humaneval_suite(spec.check, spec.entry_point or "")
        suite.steps[:0] = steps
        trees.append(ast.parse(spec.check))
    else:
        if spec.setup:
            trees.append(ast.parse(spec.setup))
            steps.append(_Step("setup", compile(trees[-1], "<test setup>", "exec"), False))
        for n, source in enumerate(spec.asserts):
            tree = ast.parse(source)
            trees.append(tree)
            steps.append(_Step(f"test {n}", compile(tree, f"<test {n}>", "exec"), True))
        suite = Suite(steps, entry_point=spec.entry_point)
    candidates = defined_names(spec.reference) | ({spec.entry_point} if spec.entry_point else set())
    for name in sorted(free_names(trees) - {suite.candidate_name}):
        if name in TEST_MODULES:
            suite.module_names.append(name)
        elif name not in candidates and std_object(name, classes_only=not candidates) is not None:
            suite.std_names.append(name)
        else:
            suite.remote_names.append(name)
    return suite


def _humaneval_suite(test: str, entry_point: str) -> Suite:
    tree = ast.parse(test)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks or not entry_point:
        raise ValueError("HumanEval test needs a top-level def check(candidate) and an entry_point")
    check = checks[-1]
    params = [a.arg for a in check.args.posonlyargs + check.args.args]
    param = params[0] if params else "candidate"
    module = ast.Module([n for n in tree.body if n is not check], type_ignores=[])
    steps = [_Step("module", compile(module, "<test module>", "exec"), False)]
    if _runs_statement_by_statement(check):
        for n, stmt in enumerate(check.body):
            code = compile(ast.Module([stmt], type_ignores=[]), f"<check statement {n}>", "exec")
            steps.append(_Step(f"check line {stmt.lineno}", code, _is_test(stmt)))
    else:
        param = FALLBACK_CANDIDATE
        steps.append(_Step("check", compile(f"check({param})", "<check call>", "exec"), True))
    return Suite(steps, candidate_name=param, entry_point=entry_point)


def _runs_statement_by_statement(check: ast.FunctionDef) -> bool:
    """False when a top-level statement of check() only makes sense inside a function."""
    scoped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    pending: list[ast.AST] = list(check.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom, ast.Nonlocal, ast.Await)):
            return False
        if not isinstance(node, scoped):
            pending.extend(ast.iter_child_nodes(node))
    return True


def _is_test(stmt: ast.stmt) -> bool:
    asserts = [n for n in ast.walk(stmt) if isinstance(n, ast.Assert)]
    return any(not isinstance(a.test, ast.Constant) for a in asserts)


def grade(
    code: str, spec: TestSpec, source: ChildSource | ForkServer, test_timeout_s: float | None = None
) -> GradeResult:
    """Run ``spec`` against the candidate ``code``; the verdict is decided here, in the parent.

    ``test_timeout_s`` overrides the per-test limit of ``source.limits`` (see ``pool``).
    """
    started = time.monotonic()
    try:
        suite = compile_suite(spec)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return GradeResult(0, 0, status="bad_tests", detail=f"{type(exc).__name__}: {exc}"[:200])
    total = suite.total
    try:
        program = compile_candidate(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return GradeResult(0, total, (FAILED,) * total, "syntax_error", type(exc).__name__, source.launcher.mode)
    for _attempt in range(1 + REGRADES):
        session = RemoteSession(source, program, test_timeout_s)
        try:
            outcomes, detail, times = _run_steps(suite, session)
        finally:
            session.close()
        if not session.server_lost:
            break
    status = "load_error" if detail.startswith("load") else "ok"
    return GradeResult(
        passed=outcomes.count(PASSED),
        total=total,
        outcomes=tuple(outcomes),
        status=status,
        detail=detail,
        isolation=source.launcher.mode,
        wall_s=time.monotonic() - started,
        interpreters=session.starts,
        test_s=tuple(times),
    )


def compile_candidate(code: str) -> CodeType:
    """The candidate's program as its child runs it: compiled here, which is also the syntax check.

    A forked child that compiles writes to many pages it shares with its zygote, each copied
    first; given bytecode it only runs it. ``dont_inherit``: none of this module's ``__future__``
    flags. What the compiler warns about (``SyntaxWarning``) is the candidate's business, not the
    trainer's log's: those warnings are ignored, wherever the filters come from.
    """
    if _CANDIDATE_WARNINGS not in warnings.filters:  # restored away by a catch_warnings() block, say
        warnings.filterwarnings("ignore", module=CANDIDATE_FILE_PATTERN)
    return compile(code, CANDIDATE_FILE, "exec", dont_inherit=True, optimize=0)


def _namespace(suite: Suite, session: RemoteSession) -> dict[str, Any]:
    names: dict[str, Any] = {"__name__": "__test__", "__builtins__": builtins}
    for name in suite.module_names:
        names[name] = importlib.import_module(name)
    for name in suite.std_names:
        names[name] = std_object(name, classes_only=False)
    for name in suite.remote_names:
        names[name] = RemoteRef(session, ("g", name))
    if suite.candidate_name is not None:
        names[suite.candidate_name] = RemoteRef(session, ("g", suite.entry_point))
    return names


def _run_steps(suite: Suite, session: RemoteSession) -> tuple[list[str], str, list[float]]:
    names = _namespace(suite, session)
    outcomes: list[str] = []
    times: list[float] = []
    detail = ""
    for step in suite.steps:
        if session.out_of_time():
            if step.is_test:
                outcomes.append(TIMEOUT)
                times.append(0.0)
            continue
        session.begin_test()
        outcome = _run_step(step.code, names)
        if session.fault is not None and outcome == PASSED:  # the test code swallowed it
            outcome = _fault_outcome(session.fault)
        if outcome.startswith("load") and not detail:
            detail = outcome
        if step.is_test:
            outcomes.append(outcome if outcome in (PASSED, FAILED, TIMEOUT) else ERROR)
            times.append(session.busy_s)
    return outcomes, detail, times


def _run_step(code: Any, names: dict[str, Any]) -> str:
    try:
        exec(code, names)
    except AssertionError:
        return FAILED
    except SandboxFault as fault:
        return _fault_outcome(fault)
    except (Exception, SystemExit):
        return ERROR
    return PASSED


def _fault_outcome(fault: SandboxFault) -> str:
    if isinstance(fault, TestTimeout):
        return TIMEOUT
    if isinstance(fault, LoadFailed):
        return f"load error: {fault}"
    return ERROR
