"""Defects found by an independent review of the sandbox (issue 10), each reproduced as a test.

Every test here failed before its fix. They run in the strongest isolation this machine has
(bwrap where it works), the one ``auto`` picks for training.
"""

from __future__ import annotations

import textwrap
import time

import pytest

from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes

MODE = (available_modes() or ["none"])[0]
LIMITS = Limits(timeout_s=2.0, test_timeout_s=1.5, memory_mb=256)
SECOND_S = 1.0  # the bound: a snippet's limit plus a second


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(LIMITS, isolation=MODE, workers=2, cache_size=0) as box:
        yield box


# -- 1. a forged reply cannot stall the grader ---------------------------------------------------------

FORGED_SET = """
import os, sys, time
def f():
    p = 2**61 - 1  # every multiple of it hashes to 0
    body = ",".join('["i","%x"]' % (k * p) for k in range(1, {count} + 1))
    data = ('{{"i":1,"v":["S",[' + body + ']]}}\\n').encode()
    fd = int(sys.argv[2])  # the reply pipe
    while data:
        data = data[os.write(fd, data):]
    time.sleep(60)
"""


@pytest.mark.parametrize("count", [140_000])  # ~3.7 MiB: under the message cap, 150 s to build before
def test_hash_colliding_reply_is_refused_within_the_limit(sandbox, count):
    started = time.monotonic()
    result = sandbox.grade(FORGED_SET.format(count=count), TestSpec.mbpp(["assert f() == set()"]))
    assert time.monotonic() - started < LIMITS.timeout_s + SECOND_S
    assert result.fraction == 0.0


# -- 3. exceptions come back by class and hierarchy ----------------------------------------------------

RAISERS = textwrap.dedent("""
    import json, statistics
    class Mine(KeyError):
        pass
    def decode_error():
        return b"\\xff".decode("utf-8")
    def encode_error():
        return "\\u20ac".encode("ascii")
    def group():
        raise ExceptionGroup("two", [ValueError(1), TypeError(2)])
    def bad_json():
        return json.loads("{")
    def no_mean():
        return statistics.mean([])
    def mine():
        raise Mine("k")
""")
EXPECTING = [
    ("decode_error()", "UnicodeDecodeError"),
    ("decode_error()", "ValueError"),
    ("encode_error()", "UnicodeError"),
    ("group()", "ExceptionGroup"),
    ("bad_json()", "json.JSONDecodeError"),
    ("bad_json()", "ValueError"),
    ("no_mean()", "ValueError"),
    ("mine()", "LookupError"),
]


def _raises(call: str, kind: str) -> str:
    return f"try:\n    {call}\nexcept {kind}:\n    pass\nelse:\n    assert False, 'no {kind}'"


def test_exceptions_are_caught_as_in_a_native_run(sandbox):
    tests = [_raises(call, kind) for call, kind in EXPECTING]
    tests.append("try:\n    mine()\nexcept ValueError:\n    pass\nexcept KeyError:\n    assert False, 'wrong class'")
    native = []
    for test in tests:
        names: dict = {}
        exec(RAISERS, names)
        try:
            exec(test, names)
            native.append("passed")
        except AssertionError:
            native.append("failed")
    assert native == ["passed"] * (len(tests) - 1) + ["failed"]
    result = sandbox.grade(RAISERS, TestSpec.mbpp(tests))
    assert list(result.outcomes) == native
