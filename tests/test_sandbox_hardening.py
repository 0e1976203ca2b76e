"""Defects found by an independent review of the sandbox (issue 10), each reproduced as a test.

Every test here failed before its fix. They run in the strongest isolation this machine has
(bwrap where it works), the one ``auto`` picks for training.
"""

from __future__ import annotations

import ast
import logging
import os
import secrets
import textwrap
import threading
import time
from pathlib import Path

import pytest

from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes, isolation
from grpo_exp.sandbox.limits import MIB

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


# -- 2. memory is budgeted per snippet, not per process -----------------------------------------------

FORK_AND_TOUCH = """
import os, time
def f():
    for _ in range(8):
        if os.fork() == 0:
            with open("/proc/self/comm", "w") as fh:
                fh.write(TOKEN)
            hog = b"x" * (400 * 1024 * 1024)  # written, so really resident
            time.sleep(2)
            os._exit(0)
    time.sleep(1.5)
    return 1
"""


def _resident_bytes(token: str) -> int:
    """Summed VmRSS of the processes named ``token`` (shared pages count once per process)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if Path(f"/proc/{name}/comm").read_text().strip() != token:
                continue
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        total += sum(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:"))
    return total


def test_forked_children_share_one_memory_budget():
    limits = Limits(timeout_s=8.0, test_timeout_s=8.0, memory_mb=512)
    token = "hog" + secrets.token_hex(5)
    peak, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _resident_bytes(token))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with Sandbox(limits, isolation=MODE, workers=1, cache_size=0) as box:
            box.grade(f"TOKEN = {token!r}\n" + FORK_AND_TOUCH, TestSpec.mbpp(["assert f() == 1"]))
    finally:
        done.set()
        watcher.join()
    assert peak[0] < 2 * limits.memory_mb * MIB, f"{peak[0] / MIB:.0f} MiB resident"


def test_without_a_cgroup_a_snippet_cannot_fork():
    limits = Limits(timeout_s=2.0, cgroup=False)
    with Sandbox(limits, isolation=MODE, workers=1, cache_size=0) as box:
        run = box.run("import os\ntry:\n    os.fork()\nexcept OSError:\n    print('refused')\n")
    assert run.stdout.decode().strip() == "refused"


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


# -- 4. the tests' helpers are the dataset's, never the candidate's ------------------------------------

CYCLIC_PROMPT = textwrap.dedent('''
    def encode_cyclic(s: str):
        """returns encoded string by cycling groups of three characters."""
        groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]
        groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]
        return "".join(groups)


    def decode_cyclic(s: str):
        """takes as input string encoded with encode_cyclic function. Returns decoded string."""
''')
CYCLIC_TEST = textwrap.dedent("""
    def check(candidate):
        from random import Random
        rng = Random(0)
        for _ in range(20):
            text = "".join(rng.choice("abcdefg") for _ in range(rng.randint(10, 20)))
            encoded_str = encode_cyclic(text)
            assert candidate(encoded_str) == text
""")
CYCLIC_CHEAT = "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n"
CYCLIC_REAL = CYCLIC_PROMPT + "    return encode_cyclic(encode_cyclic(s))\n"


def _code_tests(completions: list[str], **columns) -> list[float | None]:
    from grpo_exp.rewards.registry import get

    params = {"timeout_s": 3.0, "test_timeout_s": 1.0, "memory_mb": 256, "workers": 2, "isolation": MODE}
    return get("code_tests")(completions, **params, **columns)


def test_a_redefined_prompt_helper_earns_nothing():
    chat = [[{"role": "system", "content": "Complete the code."}, {"role": "user", "content": CYCLIC_PROMPT}]]
    scores = _code_tests(
        [CYCLIC_CHEAT, CYCLIC_REAL], prompts=chat * 2, test=[CYCLIC_TEST] * 2, entry_point=["decode_cyclic"] * 2
    )
    assert scores == [0.0, 1.0]


def test_a_standard_name_in_a_test_is_not_the_candidates():
    cheat = "class Counter:\n    def __new__(cls, xs):\n        return {'a': 2, 'b': 1}\n"
    cheat += "def letters(s):\n    return []\n"
    honest = "def letters(s):\n    return list(s)\n"
    tests = [["assert Counter(letters('aab')) == Counter({'a': 2, 'b': 1})"]] * 2
    assert _code_tests([cheat, honest], test_list=tests) == [0.0, 1.0]
    assert _code_tests([cheat, honest], test_list=tests, entry_point=["letters"] * 2) == [0.0, 1.0]


# -- 6. a loop costs a multiple of the reference's time, not the configured limit ----------------------

ADD_SPEC_TESTS = ["assert add(1, 2) == 3", "assert add(2, 3) == 5", "assert add(-1, 1) == 0"]
ADD_REFERENCE = "def add(a, b):\n    return a + b\n"


def test_per_test_limit_comes_from_the_reference_solution():
    limits = Limits(timeout_s=30.0, test_timeout_s=5.0, reference_time_multiple=10, min_test_timeout_s=0.25)
    spec = TestSpec.mbpp(ADD_SPEC_TESTS, entry_point="add", reference=ADD_REFERENCE)
    broken = TestSpec.mbpp(ADD_SPEC_TESTS, entry_point="add", reference="def add(a, b):\n    return a - b\n")
    with Sandbox(limits, isolation=MODE, workers=2, cache_size=0) as box:
        limit = box.test_limit(spec)
        spin = box.grade("def add(a, b):\n    while True:\n        pass\n", spec)
        slow_but_fine = box.grade("import time\ndef add(a, b):\n    time.sleep(0.05)\n    return a + b\n", spec)
        assert box.test_limit(broken) == limits.test_timeout_s  # a reference that fails proves nothing
    assert limits.min_test_timeout_s <= limit < limits.test_timeout_s
    assert spin.outcomes == ("timeout",) * 3
    assert spin.wall_s < limits.test_timeout_s  # all three tests, where one alone used to take 5 s
    assert slow_but_fine.fraction == 1.0


# -- 7. all-or-nothing scoring, as HumanEval's check ---------------------------------------------------

RETURNS_NONE = "def first_even(xs):\n    return None\n"
FIRST_EVEN_TEST = textwrap.dedent("""
    def check(candidate):
        assert candidate([1, 3]) is None
        assert candidate([5, 7, 9]) is None
        assert candidate([1, 4]) == 4
""")


def test_partial_credit_can_be_switched_off():
    columns = {"test": [FIRST_EVEN_TEST], "entry_point": ["first_even"]}
    assert _code_tests([RETURNS_NONE], **columns) == [pytest.approx(2 / 3)]
    assert _code_tests([RETURNS_NONE], partial_credit=False, **columns) == [0.0]


# -- 5. the fallback below bwrap hides the host's shared folders and secrets, and says so -------------

SNOOP = """
import os
for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
    try:
        with open(folder + "/" + TOKEN, "w") as fh:
            fh.write("left behind")
    except OSError:
        pass
for secret in ("/etc/shadow", "/etc/gshadow"):
    try:
        with open(secret) as fh:
            print(secret, repr(fh.read()))
    except OSError as exc:
        print(secret, "unreadable", exc.errno)
try:
    print("/root", sorted(os.listdir("/root")))
except OSError as exc:
    print("/root", "unreadable", exc.errno)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not isolation.probe("unshare"), reason="needs root and a working unshare")
def test_unshare_fallback_leaves_no_file_and_reads_no_secret():
    token = "grpo-snoop-" + secrets.token_hex(6)
    with Sandbox(LIMITS, isolation="unshare", workers=1, cache_size=0) as box:
        run = box.run(f"TOKEN = {token!r}\n" + SNOOP)
    assert run.returncode == 0, run.stderr
    left = [f for f in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock") if os.path.exists(f"{f}/{token}")]
    for folder in left:
        os.remove(f"{folder}/{token}")
    assert left == []
    seen = dict(line.split(" ", 1) for line in run.stdout.decode().splitlines())
    for secret in ("/etc/shadow", "/etc/gshadow"):
        if os.path.exists(secret):
            assert seen[secret] == "''" or seen[secret].startswith("unreadable"), seen
    host_root = {name for name in os.listdir("/root") if name != ".pyenv"}  # the interpreter may live there
    assert not host_root & set(ast.literal_eval(seen["/root"]) if seen["/root"].startswith("[") else [])


def test_auto_announces_a_fallback_weaker_than_bwrap_once(monkeypatch, caplog):
    monkeypatch.setattr(isolation, "probe", lambda mode: mode != "bwrap")
    monkeypatch.setattr(isolation, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="grpo_exp.sandbox"):
        modes = [isolation.resolve("auto") for _ in range(3)]
    assert modes == ["unshare"] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "apt-get install -y bubblewrap" in warnings[0], warnings
