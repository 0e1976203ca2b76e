"""Checks for the shipped code-generation dataset ``grpo_exp/data/code_generation.jsonl``.

Every record must be well formed, its tests must be decomposable (one call of the entry point on the
left, a plain literal on the right), its reference solution must pass all its tests, and a
deliberately wrong solution must fail at least one test of every tested problem.

The reference code is trusted (it ships with the repository), so all problems are run in a single
isolated ``python -I`` subprocess that reports per-problem results as JSON.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

DATA_PATH = Path(__file__).resolve().parents[1] / "grpo_exp" / "data" / "code_generation.jsonl"

REQUIRED_KEYS = {
    "prompt": str,
    "entry_point": str,
    "reference": str,
    "test_list": list,
    "test": str,
    "test_setup_code": str,
    "difficulty": str,
}
DIFFICULTIES = {"easy", "medium", "untested"}
SUBPROCESS_TIMEOUT_S = 120
PER_PROBLEM_TIMEOUT_S = 5


def _load_records() -> list[dict]:
    records = []
    with DATA_PATH.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            assert isinstance(record, dict), f"line {lineno} is not a JSON object"
            records.append(record)
    return records


RECORDS = _load_records()
IDS = [f"{i:02d}-{r.get('entry_point', '?')}" for i, r in enumerate(RECORDS)]


def _style(record: dict) -> str:
    if record["test_list"]:
        return "mbpp"
    if record["test"]:
        return "humaneval"
    return "untested"


def _check_asserts(record: dict) -> list[ast.Assert]:
    """The top-level asserts of ``check(candidate)`` of a HumanEval-style record."""
    tree = ast.parse(record["test"])
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    assert len(checks) == 1, "test must define exactly one `check` function"
    fn = checks[0]
    assert [a.arg for a in fn.args.args] == ["candidate"], "check must take exactly `candidate`"
    assert all(isinstance(stmt, ast.Assert) for stmt in fn.body), "check body must be asserts only"
    return list(fn.body)


def _assert_sources(record: dict) -> list[str]:
    """Each test of a record as a standalone ``assert`` statement (uses ``candidate`` for HumanEval)."""
    if record["test_list"]:
        return list(record["test_list"])
    if record["test"]:
        return [ast.unparse(stmt) for stmt in _check_asserts(record)]
    return []


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _calls_of(node: ast.AST, name: str) -> int:
    return sum(
        1 for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    )


def _assert_is_decomposable(stmt: ast.Assert, func_name: str) -> None:
    """``assert f(...) == <literal>``, ``assert f(...)`` or ``assert not f(...)``, with literal args."""
    assert stmt.msg is None
    test = stmt.test
    if isinstance(test, ast.Compare):
        assert len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq), ast.unparse(stmt)
        call, expected = test.left, test.comparators[0]
        assert _is_literal(expected), f"right side is not a plain literal: {ast.unparse(stmt)}"
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        call = test.operand
    else:
        call = test
    assert isinstance(call, ast.Call), f"left side is not a call: {ast.unparse(stmt)}"
    assert isinstance(call.func, ast.Name) and call.func.id == func_name, ast.unparse(stmt)
    assert not call.keywords, ast.unparse(stmt)
    assert all(_is_literal(arg) for arg in call.args), f"non-literal argument: {ast.unparse(stmt)}"
    assert _calls_of(stmt, func_name) == 1, f"exactly one call of {func_name} expected"


# --------------------------------------------------------------------------- structure


def test_dataset_size_and_mix():
    assert len(RECORDS) >= 51
    styles = Counter(_style(r) for r in RECORDS)
    tested = styles["mbpp"] + styles["humaneval"]
    assert tested >= 48
    assert styles["untested"] == 3
    # roughly two thirds MBPP style, one third HumanEval style
    assert 0.55 <= styles["mbpp"] / tested <= 0.75, styles
    difficulties = Counter(r["difficulty"] for r in RECORDS if _style(r) != "untested")
    assert difficulties["easy"] > 0 and difficulties["medium"] > 0
    entry_points = [r["entry_point"] for r in RECORDS]
    assert len(set(entry_points)) == len(entry_points), "entry points must be unique"
    prompts = [r["prompt"] for r in RECORDS]
    assert len(set(prompts)) == len(prompts), "prompts must be unique"


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_record_schema(record):
    for key, typ in REQUIRED_KEYS.items():
        assert key in record, f"missing key {key!r}"
        assert isinstance(record[key], typ), f"{key!r} must be {typ.__name__}"
    assert all(isinstance(t, str) for t in record["test_list"])
    assert record["difficulty"] in DIFFICULTIES
    assert record["entry_point"].isidentifier()
    assert record["prompt"].strip() and record["reference"].strip()
    assert f"`{record['entry_point']}(" in record["prompt"], "prompt must name the function"
    # exactly one style per record; untested records have neither kind of test
    assert not (record["test_list"] and record["test"])
    assert (record["difficulty"] == "untested") == (not record["test_list"] and not record["test"])


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_reference_defines_entry_point(record):
    tree = ast.parse(record["reference"])
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert record["entry_point"] in names
    lines = [ln for ln in record["reference"].splitlines() if ln.strip()]
    assert 1 <= len(lines) <= 8, f"reference has {len(lines)} lines"
    ast.parse(record["test_setup_code"])


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_tests_are_decomposable(record):
    style = _style(record)
    if style == "untested":
        pytest.skip("no tests available for this record")
    if style == "mbpp":
        assert 3 <= len(record["test_list"]) <= 5
        for src in record["test_list"]:
            tree = ast.parse(src)
            assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert), src
            _assert_is_decomposable(tree.body[0], record["entry_point"])
    else:
        asserts = _check_asserts(record)
        assert 3 <= len(asserts) <= 5
        for stmt in asserts:
            _assert_is_decomposable(stmt, "candidate")
        assert record["entry_point"] not in record["test"]


# --------------------------------------------------------------------------- execution

_RUNNER = r"""
import json, signal, sys

class _Timeout(Exception):
    pass

def _alarm(signum, frame):
    raise _Timeout()

signal.signal(signal.SIGALRM, _alarm)
jobs = json.load(sys.stdin)
results = []
for job in jobs:
    res = {"error": None, "asserts": [], "check": None}
    signal.setitimer(signal.ITIMER_REAL, job["timeout"])
    try:
        ns = {"__name__": "__candidate__"}
        exec(job["setup"], ns)
        exec(job["code"], ns)
        fn = ns[job["entry_point"]]
        for src in job["asserts"]:
            local = dict(ns)
            local["candidate"] = fn
            try:
                exec(src, local)
                res["asserts"].append(True)
            except _Timeout:
                raise
            except BaseException:
                res["asserts"].append(False)
        if job["check"]:
            local = dict(ns)
            exec(job["check"], local)
            try:
                local["check"](fn)
                res["check"] = True
            except _Timeout:
                raise
            except BaseException:
                res["check"] = False
    except _Timeout:
        res["error"] = "timeout"
    except BaseException as exc:
        res["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    results.append(res)
sys.stdout.write(json.dumps(results))
"""


def _wrong_solution(entry_point: str) -> str:
    return f"def {entry_point}(*a, **k):\n    return None\n"


@pytest.fixture(scope="module")
def run_results():
    """Run every reference and a wrong solution for every tested problem in one subprocess."""
    jobs = []
    for record in RECORDS:
        for kind, code in (
            ("reference", record["reference"]),
            ("wrong", _wrong_solution(record["entry_point"])),
        ):
            jobs.append(
                {
                    "kind": kind,
                    "entry_point": record["entry_point"],
                    "setup": record["test_setup_code"],
                    "code": code,
                    "asserts": _assert_sources(record),
                    "check": record["test"],
                    "timeout": PER_PROBLEM_TIMEOUT_S,
                }
            )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _RUNNER],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(jobs)
    by_key = {}
    for job, res in zip(jobs, results, strict=True):
        by_key[(job["entry_point"], job["kind"])] = res
    return by_key


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_reference_passes_all_tests(record, run_results):
    res = run_results[(record["entry_point"], "reference")]
    assert res["error"] is None, res["error"]
    sources = _assert_sources(record)
    failed = [src for src, ok in zip(sources, res["asserts"], strict=True) if not ok]
    assert not failed, f"reference fails: {failed}"
    if record["test"]:
        assert res["check"] is True, "check(candidate) fails on the reference"


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_wrong_solution_fails_some_test(record, run_results):
    if _style(record) == "untested":
        pytest.skip("no tests available for this record")
    res = run_results[(record["entry_point"], "wrong")]
    assert res["error"] is None, res["error"]
    assert not all(res["asserts"]), "tests are vacuous: a solution returning None passes them all"
    if record["test"]:
        assert res["check"] is False
