"""The sandbox against hostile snippets, in the best namespace mode this machine has and in ``none``.

Every adversarial snippet below gets a test score of 0, finishes in bounded time, leaves no
process behind and leaves the trainer (this pytest process) unharmed. What it tried on the host
(writing or deleting files, connecting, reading secrets) must not happen, except where the mode
cannot stop it by design (``ESCAPES``): then the side effect is reported as an expected failure.
Each snippet names its processes (``/proc/self/comm``) with a per-test token so leftovers can be
found without confusing them with other sandboxes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import marshal
import os
import platform
import resource
import secrets
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grpo_exp.errors import UserError
from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes, cgroups, child, isolation, seccomp
from grpo_exp.sandbox.codec import CodecError, decode, encode, is_plain
from grpo_exp.sandbox.grading import compile_suite

ROOT_DIR = Path(__file__).resolve().parents[1]
LIMITS = Limits(timeout_s=2.5, test_timeout_s=0.75, memory_mb=256, max_output_bytes=64 * 1024)
TIME_SLACK_S = 3.0  # process start, restarts and clean-up on a loaded 2-core machine
LEFTOVER_GRACE_S = 2.0
ROOT = os.geteuid() == 0
NAMESPACE_MODE = (available_modes() or [None])[0]

MODES = [  # (isolation, fork_server): under bwrap programs are forked from a zygote by default
    pytest.param((NAMESPACE_MODE or "bwrap", True), id="namespaces", marks=pytest.mark.skipif(
        NAMESPACE_MODE is None, reason="no namespace tool (bwrap/unshare) works here")),
    pytest.param(("bwrap", False), id="bwrap-fresh", marks=pytest.mark.skipif(
        NAMESPACE_MODE != "bwrap", reason="bwrap does not work here")),
    pytest.param(("none", True), id="none"),
]  # fmt: skip


def escapes(mode: str) -> set[str]:
    """Side effects ``mode`` cannot stop on this machine (see grpo_exp.sandbox.isolation)."""
    if mode == "bwrap":
        return set()
    found = {"read_host_file"}  # unshare and none leave the host's files in view
    if mode == "none":
        found.add("network")
    if not ROOT:  # no throw-away uid: the snippet is the trainer's own user
        found |= {"write_outside", "delete_outside"}
        if mode == "none":
            found |= {"secret_via_proc", "setsid_escape"}
    return found


@pytest.fixture(scope="module", params=MODES)
def sandbox(request):
    isolation, fork_server = request.param
    with Sandbox(LIMITS, isolation=isolation, workers=2, cache_size=0, fork_server=fork_server) as box:
        yield box


# -- the adversarial snippets -----------------------------------------------------------------------

MARK = """
import os as _os
def _mark():
    try:
        with open('/proc/self/comm', 'w') as fh:
            fh.write(TOKEN)
    except OSError:
        pass
_mark()
"""

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 3) == 5"]

CASES: dict[str, str] = {
    "infinite_loop": "def add(a, b):\n    while True:\n        pass\n",
    "loop_while_loading": "while True:\n    pass\n",
    "sleep": "import time\ndef add(a, b):\n    time.sleep(100)\n",
    "ignored_signals": """
        import signal, time
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, lambda *a: None)
        def add(a, b):
            while True:
                time.sleep(0.01)
    """,
    "fork_bomb": """
        def add(a, b):
            while True:
                try:
                    if _os.fork() == 0:
                        _mark()
                except OSError:
                    pass
    """,
    "memory_bomb": """
        def add(a, b):
            hog = [bytearray(10**7) for _ in range(10**4)]
            return len(hog)
    """,
    "output_flood": """
        import sys
        def add(a, b):
            while True:
                sys.stdout.write("x" * 65536)
                sys.stderr.write("y" * 65536)
    """,
    "write_outside": """
        def add(a, b):
            for folder in (OUTSIDE, "/tmp"):
                try:
                    with open(folder + "/pwned-" + TOKEN, "w") as fh:
                        fh.write("x")
                except OSError:
                    pass
            return 0
    """,
    "delete_outside": """
        import shutil
        def add(a, b):
            try:
                _os.remove(OUTSIDE + "/victim.txt")
            except OSError:
                pass
            shutil.rmtree(OUTSIDE, ignore_errors=True)
            return 0
    """,
    "network": """
        import socket
        def add(a, b):
            try:
                with socket.create_connection(("127.0.0.1", PORT), timeout=0.5) as s:
                    s.sendall(b"stolen")
            except OSError:
                pass
            return 0
    """,
    "early_sys_exit": "import sys\ndef add(a, b):\n    return a + b + 1\nprint('PASSED')\nsys.exit(0)\n",
    "early_os_exit": "def add(a, b):\n    return a + b + 1\n_os._exit(0)\n",
    "exit_inside_call": "def add(a, b):\n    _os._exit(0)\n",
    "forged_verdicts": """
        import sys
        print("PASSED\\nAll tests passed\\nOK")
        sys.stderr.write("2 passed\\n")
        FAKE = (b'{"ready": true}\\n{"i": 1, "v": ["b", true]}\\n{"passed": 2, "total": 2}\\n'
                b'{"i": 2, "v": ["s", "PASSED"]}\\nPASSED\\n')
        for fd in range(3, 64):
            try:
                _os.write(fd, FAKE)
            except OSError:
                pass
        def add(a, b):
            for fd in range(3, 64):
                try:
                    _os.write(fd, FAKE)
                except OSError:
                    pass
            return "PASSED"
    """,
    "eq_always_true": """
        class Liar:
            def __eq__(self, other):
                return True
            __ne__ = lambda self, other: False
            __hash__ = lambda self: 0
            __bool__ = lambda self: True
        def add(a, b):
            return Liar()
    """,
    "int_subclass_liar": """
        class Liar(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def add(a, b):
            return Liar(0)
    """,
    "shadow_trusted_module": """
        class math:
            isclose = staticmethod(lambda *a, **k: True)
        def add(a, b):
            return 0
    """,
    "setsid_escape": """
        import time
        def add(a, b):
            if _os.fork() == 0:
                _os.setsid()
                if _os.fork() == 0:
                    _mark()
                    time.sleep(60)
                _os._exit(0)
            return 0
    """,
    "recursion_bomb": "import sys\nsys.setrecursionlimit(10**6)\ndef add(a, b):\n    return add(a, b) + 1\n",
    "close_stdout": """
        import sys
        sys.stdout.close()
        _os.close(1)
        _os.close(2)
        def add(a, b):
            return a - b
    """,
    "close_all_fds": "_os.closerange(0, 256)\ndef add(a, b):\n    return a + b\n",
    "read_secrets": """
        def add(a, b):
            found = [v for k, v in _os.environ.items() if "SECRET" in k]
            for pid in _os.listdir("/proc"):
                try:
                    with open(f"/proc/{pid}/environ", "rb") as fh:
                        for item in fh.read().split(b"\\0"):
                            if item.startswith(b"GRPO_FAKE_SECRET="):
                                found.append(item.split(b"=", 1)[1].decode())
                except OSError:
                    pass
            return found[0] if found else ""
    """,
    "read_host_file": """
        def add(a, b):
            with open(HOST_FILE) as fh:
                return fh.read()
    """,
}

# tests whose expected value is the planted secret / host file content: passing them = leaking
LEAK_TESTS = {"read_secrets": "assert add(1, 2) == SECRET", "read_host_file": "assert add(1, 2) == HOST_TEXT"}


def _leftovers(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                comm = Path(f"/proc/{name}/comm").read_text().strip()
                state = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if comm == token and state != "Z":
                found.append(int(name))
    return found


def _wait_no_leftovers(token: str) -> list[int]:
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := _leftovers(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@contextlib.contextmanager
def _listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    try:
        yield server
    finally:
        server.close()


def _connection_made(server: socket.socket) -> bool:
    readable, _, _ = select.select([server], [], [], 0.2)
    return bool(readable)


@pytest.mark.parametrize("case", sorted(set(CASES) - set(LEAK_TESTS)))
def test_adversarial_snippet_scores_zero_and_harms_nothing(sandbox, case, tmp_path, monkeypatch):
    token = "sbx" + secrets.token_hex(5)  # 13 characters: fits /proc/<pid>/comm
    secret = "s3cr3t-" + secrets.token_hex(8)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me")
    host_file = tmp_path / "host.txt"
    host_file.write_text(secrets.token_hex(8))
    monkeypatch.setenv("GRPO_FAKE_SECRET", secret)  # in the trainer's own environment ...
    holder = subprocess.Popen(  # ... and in a host process the snippet might look at
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "GRPO_FAKE_SECRET": secret}
    )
    limits_before = [resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC)]
    handler_before = signal.getsignal(signal.SIGTERM)
    try:
        with _listener() as server:
            prelude = (
                f"TOKEN = {token!r}\nOUTSIDE = {str(outside)!r}\nPORT = {server.getsockname()[1]}\n"
                f"HOST_FILE = {str(host_file)!r}\n" + MARK
            )
            code = prelude + textwrap.dedent(CASES[case])
            started = time.monotonic()
            result = sandbox.grade(code, TestSpec.mbpp(ADD_TESTS))
            elapsed = time.monotonic() - started
            connected = _connection_made(server)
    finally:
        holder.kill()
        holder.wait()

    assert result.fraction == 0.0, result
    assert elapsed < LIMITS.timeout_s + TIME_SLACK_S
    survivors = _wait_no_leftovers(token)
    for pid in survivors:  # only possible where ESCAPES allows it; asserted below
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    # the trainer is unharmed
    assert [resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC)] == limits_before
    assert signal.getsignal(signal.SIGTERM) == handler_before
    assert os.environ["GRPO_FAKE_SECRET"] == secret
    assert Path.cwd().exists()

    side_effects = ["setsid_escape"] if survivors else []
    if (outside / f"pwned-{token}").exists():
        side_effects.append("write_outside")
    if Path(f"/tmp/pwned-{token}").exists():
        side_effects.append("write_tmp")
        Path(f"/tmp/pwned-{token}").unlink()
    if not (outside / "victim.txt").exists():
        side_effects.append("delete_outside")
    if connected:
        side_effects.append("network")
    expected = escapes(sandbox.mode) | ({"write_tmp"} if sandbox.mode != "bwrap" else set())
    unexpected = [e for e in side_effects if e not in expected]
    assert unexpected == [], f"{case} in {sandbox.mode}: {unexpected}"
    if side_effects:
        pytest.xfail(f"{sandbox.mode} cannot stop {side_effects} (documented in grpo_exp.sandbox.isolation; bwrap can)")


@pytest.mark.parametrize("case", sorted(LEAK_TESTS))
def test_leaks_are_stopped_by_namespaces(sandbox, case, tmp_path, monkeypatch):
    """Reading secrets/host files: the leak test must fail unless the mode cannot stop it."""
    secret = "s3cr3t-" + secrets.token_hex(8)
    host_file = tmp_path / "host.txt"
    host_file.write_text(secrets.token_hex(8))
    monkeypatch.setenv("GRPO_FAKE_SECRET", secret)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**os.environ, "GRPO_FAKE_SECRET": secret}
    )
    try:
        code = f"TOKEN = 'x'\nHOST_FILE = {str(host_file)!r}\n" + MARK + textwrap.dedent(CASES[case])
        setup = f"SECRET = {secret!r}\nHOST_TEXT = {host_file.read_text()!r}"
        result = sandbox.grade(code, TestSpec.mbpp([LEAK_TESTS[case]], setup))
        run = sandbox.run(code + "\nprint(add(1, 2))\n")
    finally:
        holder.kill()
        holder.wait()
    leaked = result.fraction != 0.0 or secret.encode() in run.stdout + run.stderr
    via = "secret_via_proc" if case == "read_secrets" else "read_host_file"
    if via in escapes(sandbox.mode):
        if leaked:
            pytest.xfail(f"{sandbox.mode} cannot stop {via} (documented in grpo_exp.sandbox.isolation; bwrap can)")
    else:
        assert not leaked


def test_output_flood_is_capped(sandbox):
    started = time.monotonic()
    run = sandbox.run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    assert time.monotonic() - started < LIMITS.timeout_s + TIME_SLACK_S
    assert len(run.stdout) <= LIMITS.max_output_bytes
    assert run.output_truncated


def test_a_graded_program_prints_into_nothing(sandbox):
    """Grading never reads output: 4 MB of it (past max_output_bytes) changes no grade, forked or fresh."""
    code = textwrap.dedent("""
        import sys
        def add(a, b):
            for _ in range(64):
                sys.stdout.write("x" * 65536)
                sys.stderr.write("y" * 65536)
            return a + b
    """)
    result = sandbox.grade(code, TestSpec.mbpp(ADD_TESTS))
    assert result.fraction == 1.0, result


def test_child_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    run = sandbox.run("import os, sys\nprint(sorted(os.environ))\nprint(sys.stdin.read() == '')\nprint(os.getcwd())")
    out = run.stdout.decode()
    assert run.returncode == 0, run.stderr
    assert "WANDB" not in out and "HF_TOKEN" not in out
    names = ["HOME", "LANG", "PATH", "TMPDIR", *(["PWD"] if sandbox.mode == "bwrap" else [])]  # bwrap adds PWD
    assert out.splitlines()[0] == str(sorted(names))
    assert out.splitlines()[1] == "True"  # stdin is empty


def test_private_workdir_is_removed(sandbox):
    run = sandbox.run("import os\nopen('scratch.txt', 'w').write('x')\nprint(os.getcwd())")
    workdir = run.stdout.decode().strip()
    assert run.returncode == 0, run.stderr
    if sandbox.launcher.host_workdir:  # else a private tmpfs inside the sandbox
        assert not Path(workdir).exists()


def test_limits_are_set_in_the_child(sandbox):
    run = sandbox.run(
        "import resource as r\n"
        "print([r.getrlimit(getattr(r, n))[1] for n in ('RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE')])"
    )
    assert run.returncode == 0, run.stderr
    mib = 1024 * 1024
    processes = 16 if cgroups.hierarchies() else 1  # no cgroup for the whole snippet: no forks
    assert run.stdout.decode().strip() == str([256 * mib, processes, 64, mib])


KEYRING_TRAINER = r"""
import ctypes, json, platform, sys
from grpo_exp.sandbox import Sandbox, TestSpec, seccomp
add_key, _request_key, keyctl = seccomp.ABIS[platform.machine()].denied
libc = ctypes.CDLL(None, use_errno=True)
assert libc.syscall(keyctl, 1, None) > 0  # KEYCTL_JOIN_SESSION_KEYRING: as under a login; programs inherit it
isolation, fork_server, description = sys.argv[1], sys.argv[2] == "True", sys.argv[3]
head = f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nDESC = {description.encode()!r}\n"
add = head + (  # into the session keyring, then the user keyring
    "def add():\n"
    f"    keys = [libc.syscall({add_key}, b'user', DESC, b'an earlier program', 18, ring) for ring in (-3, -4)]\n"
    "    return [keys, ctypes.get_errno()]\n"
)
find = head + f"def find():\n    return libc.syscall({keyctl}, 10, -3, b'user', DESC, 0)\n"  # KEYCTL_SEARCH
with Sandbox(isolation=isolation, workers=1, cache_size=0, fork_server=fork_server) as box:
    added = box.grade(add, TestSpec.mbpp(["assert add() == [[-1, -1], 1]"])).fraction  # EPERM
    found = box.grade(find, TestSpec.mbpp(["assert find() == -1"])).fraction
with open("/proc/keys") as fh:
    print(json.dumps([added, found, description in fh.read()]))
"""


@pytest.mark.skipif(platform.machine() not in seccomp.ABIS, reason="no seccomp filter for this architecture")
def test_kernel_keyrings_are_out_of_reach(sandbox):
    """Issue 51: keyrings are not namespaced and nothing cleans them, so no program may touch them.

    The trainer has a session keyring, as under a login or systemd: before, a program's key there
    was read by the next program, under another uid, and showed in the host's /proc/keys (and a
    key in its user keyring outlived the run, for the next run's program with the same uid).
    """
    description = f"grpo-keyring-{secrets.token_hex(4)}"
    argv = [sys.executable, "-c", KEYRING_TRAINER, sandbox.mode, str(sandbox.fork_server), description]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT_DIR)
    assert done.returncode == 0, done.stderr[-2000:]
    added, found, on_host = json.loads(done.stdout.splitlines()[-1])
    assert [added, found, on_host] == [1.0, 1.0, False]


# -- correct solutions score full marks ------------------------------------------------------------


def test_correct_mbpp_solution_scores_full_marks(sandbox):
    code = textwrap.dedent("""
        import math
        class Stack:
            def __init__(self):
                self.items = []
            def push(self, x):
                self.items.append(x)
            def size(self):
                return len(self.items)
        def make(n):
            s = Stack()
            for i in range(n):
                s.push(i)
            return s
        def area(r):
            return math.pi * r * r
        def pair(a, b):
            return (a, {b: [a, None]}, {a, b}, 1.5, True, b"x")
        def keys(d):
            return d.keys()
    """)
    tests = [
        "assert math.isclose(area(1), 3.14159, rel_tol=1e-3)",
        "s = make(3)\ns.push(9)\nassert s.size() == 4",
        "assert Stack().size() == 0",
        "assert pair(1, 'k') == (1, {'k': [1, None]}, {1, 'k'}, 1.5, True, b'x')",
        "assert sorted(map_twice(pair, [1])) == [1]",
        "assert sorted(keys({'b': 1, 'a': 2})) == ['a', 'b'] and len(keys({})) == 0",
    ]
    setup = "def map_twice(f, xs):\n    return [f(x, x)[0] for x in xs]"
    result = sandbox.grade(code, TestSpec.mbpp(tests, setup))
    assert result.fraction == 1.0, result
    assert result.total == len(tests)


def test_correct_humaneval_solution_scores_full_marks(sandbox):
    test = textwrap.dedent("""
        METADATA = {"author": "test"}

        def check(candidate):
            import random
            assert candidate([1, 2, 3]) == 6
            assert candidate([]) == 0, "empty"
            for xs in ([1], [2, 3]):
                assert candidate(xs) == sum(xs)
            rng = random.Random(0)
            data = [rng.randint(0, 9) for _ in range(20)]
            assert candidate(data) == sum(data)
            assert abs(candidate([0.1, 0.2]) - 0.3) < 1e-9
            assert True, "This prints if this assert fails"
    """)
    code = "def total(xs):\n    return sum(xs)\n"
    result = sandbox.grade(code, TestSpec.humaneval(test, "total"))
    assert result.total == 5  # the placeholder `assert True` is not a test
    assert result.fraction == 1.0, result
    wrong = sandbox.grade("def total(xs):\n    return len(xs)\n", TestSpec.humaneval(test, "total"))
    assert 0 < wrong.fraction < 1  # candidate([]) == 0 and len([1]) == 1 pass, the rest fail


def test_expected_exceptions_and_timeouts_per_test(sandbox):
    code = textwrap.dedent("""
        def f(x):
            if x < 0:
                raise ValueError("negative")
            if x == 0:
                while True:
                    pass
            return x
    """)
    raises = "try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False"
    tests = [raises, "assert f(0) == 0", "assert f(2) == 2"]
    result = sandbox.grade(code, TestSpec.mbpp(tests))
    assert result.outcomes == ("passed", "timeout", "passed")
    assert result.interpreters == 2  # a fresh interpreter after the one stuck in the loop was killed


def test_faults_cannot_be_swallowed_by_test_code(sandbox):
    code = "def f():\n    while True:\n        pass\n"
    code += "class Yes:\n    __eq__ = lambda s, o: True\ndef g():\n    return Yes()\n"
    tests = ["try:\n    f()\nexcept Exception:\n    pass", "try:\n    assert g() == 1\nexcept:\n    pass"]
    result = sandbox.grade(code, TestSpec.mbpp(tests))
    assert result.outcomes == ("timeout", "error")


def test_syntax_error_scores_zero_without_starting_anything(sandbox):
    result = sandbox.grade("def add(a, b) return a + b", TestSpec.mbpp(ADD_TESTS))
    assert (result.fraction, result.status, result.interpreters) == (0.0, "syntax_error", 0)


# -- cache and parallelism ---------------------------------------------------------------------------


def test_second_identical_call_is_a_cache_hit():
    box = Sandbox(LIMITS, isolation="none", workers=2)
    code = "def add(a, b):\n    return a + b\n"
    first = box.grade(code, TestSpec.mbpp(ADD_TESTS))
    hits = box.cache_stats.hits
    second = box.grade(code, TestSpec.mbpp(ADD_TESTS))
    assert (first.cached, second.cached) == (False, True)
    assert box.cache_stats.hits == hits + 1
    assert second.fraction == first.fraction == 1.0
    batch = box.grade_many([(code + "# new\n", TestSpec.mbpp(ADD_TESTS))] * 3)
    assert box.cache_stats.misses == 2 and all(r.fraction == 1.0 for r in batch)  # one run for three


def test_snippets_run_in_parallel():
    sleeps, each_s = 4, 0.6
    box = Sandbox(LIMITS, isolation="none", workers=sleeps, cache_size=0)
    code = "import time\ndef f():\n    time.sleep({each_s})\n    return {n}\n"
    items = [(code.format(each_s=each_s, n=n), TestSpec.mbpp([f"assert f() == {n}"])) for n in range(sleeps)]
    started = time.monotonic()
    results = box.grade_many(items)
    elapsed = time.monotonic() - started
    assert [r.fraction for r in results] == [1.0] * sleeps
    assert elapsed < sleeps * each_s * 0.75  # serially it would take sleeps * each_s
    box.close()


def test_every_snippet_gets_a_fresh_interpreter():
    box = Sandbox(LIMITS, isolation="none", workers=1, cache_size=0)
    poison = "import builtins, os\nbuiltins.POISON = os.getpid()\ndef f():\n    return os.getpid()\n"
    probe = "import builtins, os\ndef f():\n    return [hasattr(builtins, 'POISON'), os.getpid()]\n"
    first = box.grade(poison, TestSpec.mbpp(["assert f() > 0"]))
    second = box.grade(probe, TestSpec.mbpp(["assert f()[0] is False"]))
    assert first.fraction == second.fraction == 1.0
    spares = [child.popen for child in box._source._idle]
    assert spares, "a spare interpreter should be booting for the next snippet"
    box.close()
    assert all(p.returncode is not None for p in spares)  # killed and reaped with the sandbox


# -- isolation selection -------------------------------------------------------------------------------


def test_auto_falls_back_to_limits_only_and_warns_once(monkeypatch, caplog):
    monkeypatch.setattr(isolation, "probe", lambda mode: mode == "none")
    monkeypatch.setattr(isolation, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="grpo_exp.sandbox"):
        first = Sandbox(LIMITS, isolation="auto")
        second = Sandbox(LIMITS, isolation="auto")
    assert first.mode == second.mode == "none"
    warnings = [r for r in caplog.records if "WITHOUT NAMESPACES" in r.getMessage()]
    assert len(warnings) == 1
    ok = first.grade("def add(a, b):\n    return a + b\n", TestSpec.mbpp(ADD_TESTS))
    assert ok.fraction == 1.0 and ok.isolation == "none"


def test_unavailable_namespace_mode_is_refused(monkeypatch):
    monkeypatch.setattr(isolation, "probe", lambda mode: mode == "none")
    with pytest.raises(UserError, match="bubblewrap"):
        Sandbox(LIMITS, isolation="bwrap")
    with pytest.raises(UserError, match="isolation must be one of"):
        Sandbox(LIMITS, isolation="docker")


@pytest.mark.skipif(NAMESPACE_MODE is None, reason="no namespace tool works here")
def test_every_working_namespace_mode_grades(tmp_path):
    for mode in available_modes():
        box = Sandbox(LIMITS, isolation=mode, workers=1, cache_size=0)
        assert box.grade("def add(a, b):\n    return a + b\n", TestSpec.mbpp(ADD_TESTS)).fraction == 1.0


# -- the pieces ------------------------------------------------------------------------------------------


def test_codec_round_trips_plain_data_both_ways_and_refuses_the_rest():
    value = [None, True, -(2**100), 1.5, float("inf"), "é\ud800", b"\x00", 1 + 2j, (1, 2), {3}, frozenset({4}),
             {(1,): [2]}]  # fmt: skip
    child_side = child._Codec({})
    sent = marshal.loads(marshal.dumps(encode(value, lambda v: None)))  # parent -> child
    assert child_side.dec(sent) == value
    received = json.loads(child_side.enc(value))  # child -> parent
    assert decode(received, lambda k: None) == value
    assert decode(json.loads(child_side.enc(object())), lambda k: ("handle", k)) == ("handle", 0)
    assert is_plain(value) and not is_plain([object()]) and not is_plain(type("I", (int,), {})(1))
    with pytest.raises(CodecError):
        encode(object(), lambda v: None)
    for bad in (["z", 1], ["i", 3], ["l", "x"], "s", ["s", "zz"], ["d", [[["l", []], ["n"]]]], ["S", [["l", []]]]):
        with pytest.raises(CodecError):
            decode(bad, lambda k: None)


def test_humaneval_suite_counts_each_top_level_assert():
    test = (
        "def check(candidate):\n    x = candidate(1)\n    assert x == 1\n    assert True\n    assert candidate(2) == 2"
    )
    suite = compile_suite(TestSpec.humaneval(test, "f"))
    assert suite.total == 2
    returns = "def check(candidate):\n    if candidate(1) != 1:\n        return\n    assert candidate(2) == 2\n"
    assert compile_suite(TestSpec.humaneval(returns, "f")).total == 1  # run as one test


def test_unreadable_tests_are_not_scored():
    box = Sandbox(LIMITS, isolation="none")
    assert box.grade("x = 1", TestSpec.mbpp(["assert ("])).fraction is None
    assert TestSpec.from_row(test_list=[], test=None) is None
