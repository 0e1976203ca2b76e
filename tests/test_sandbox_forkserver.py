"""The fork server: HumanEval graded right, nothing carried from one program to the next, faults lose nothing.

Every program here runs on one worker with one zygote, so all of them are forked from the same
zygote, one after the other: a program that leaves state behind would be seen by the next one. Each
leaving program checks (in its own test) that it really left its state, so a test that passes
proves the state was there and was gone for the next program. The attacks of test_sandbox.py
run on the fork server too (it is the default under bwrap).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import signal
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from grpo_exp.deadline import within
from grpo_exp.rewards import code as code_rewards
from grpo_exp.rewards.registry import get
from grpo_exp.sandbox import Limits, Sandbox, TestSpec, available_modes, cgroups, pool, zygote_handle

pytestmark = pytest.mark.skipif("bwrap" not in available_modes(), reason="the fork server runs under bwrap")

ROOT = Path(__file__).resolve().parents[1]
HUMANEVAL = ROOT / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz"
LIMITS = Limits(timeout_s=5, test_timeout_s=2, memory_mb=256)


@pytest.fixture
def box(monkeypatch):
    monkeypatch.setattr(pool, "ZYGOTES_PER_WORKER", 1)
    with Sandbox(LIMITS, isolation="bwrap", workers=1, cache_size=0) as sandbox:
        assert sandbox.fork_server
        yield sandbox


def _zygote_pids(sandbox: Sandbox) -> list[int]:
    return [zygote.pid for zygote in sandbox._source._idle]


def _grade(sandbox: Sandbox, code: str, *asserts: str) -> float | None:
    return sandbox.grade(textwrap.dedent(code), TestSpec.mbpp(list(asserts))).fraction


def test_humaneval_references_score_full_marks_and_stubs_none():
    with gzip.open(HUMANEVAL, "rt") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    items = []
    for body in ("canonical_solution", None):
        for row in rows:
            spec = TestSpec.humaneval(row["test"], row["entry_point"], prompt=row["prompt"])
            items.append((row["prompt"] + (row[body] if body else "    pass\n"), spec))
    with Sandbox(Limits(timeout_s=10, test_timeout_s=3), isolation="bwrap", workers=2, cache_size=0) as sandbox:
        assert sandbox.fork_server
        results = sandbox.grade_many(items)
    full = [r is not None and r.fraction == 1.0 for r in results]
    assert len(rows) == 164
    assert sum(full[:164]) == 164, [rows[n]["task_id"] for n in range(164) if not full[n]]
    assert sum(full[164:]) == 0


LEAVERS = {
    "module_patched": (
        """
        import math, typing, json
        math.sqrt = lambda x: 42
        typing.List = None
        json.dumps = lambda *a, **k: "patched"
        def leave():
            return math.sqrt(4) == 42 and typing.List is None
        """,
        """
        import math, typing, json
        def check():
            return [math.sqrt(4), typing.List is None, json.dumps([1])]
        """,
        "assert check() == [2.0, False, '[1]']",
    ),
    "global_changed": (
        """
        import builtins, sys
        builtins.LEFT_BEHIND = 1
        builtins.abs = lambda x: -1
        sys.modules["__main__"].__dict__["LEFT_BEHIND"] = 1
        sys.setrecursionlimit(123)
        def leave():
            return LEFT_BEHIND == 1 and abs(-1) == -1 and sys.getrecursionlimit() == 123
        """,
        """
        import builtins, sys
        def check():
            return [hasattr(builtins, "LEFT_BEHIND"), "LEFT_BEHIND" in sys.modules["__main__"].__dict__,
                    abs(-1), sys.getrecursionlimit() == 1000]
        """,
        "assert check() == [False, False, 1, True]",
    ),
    "file_written": (
        """
        import os
        def leave():
            open("left.txt", "w").write("x")
            os.makedirs("deep/er", exist_ok=True)
            open("deep/er/left.txt", "w").write("x")
            os.chmod("deep/er", 0)
            os.chmod("deep", 0o500)
            os.symlink("/usr", "link")
            return sorted(os.listdir(".")) == ["deep", "left.txt", "link"]
        """,
        """
        import os
        def check():
            return sorted(os.listdir(".")) + sorted(os.listdir(os.environ["TMPDIR"]))
        """,
        "assert check() == []",
    ),
    "ipc_object_made": (
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        def leave():
            shm = libc.shmget(4242, 4096, 0o1666)
            queue = libc.msgget(4243, 0o1666)
            sem = libc.semget(4244, 1, 0o1666)
            return min(shm, queue, sem) >= 0
        """,
        """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        def check():
            return [libc.shmget(4242, 0, 0), libc.msgget(4243, 0), libc.semget(4244, 0, 0)]
        """,
        "assert check() == [-1, -1, -1]",
    ),
    "process_left_running": (
        """
        import os, time
        def leave():
            if os.fork() == 0:
                os.setsid()
                time.sleep(0.3)
                open(os.environ["TMPDIR"] + "/late.txt", "w").write("x")
                os._exit(0)
            return True
        """,
        """
        import os, time
        def check():
            time.sleep(0.6)
            return os.listdir(os.environ["TMPDIR"])
        """,
        "assert check() == []",
    ),
}


@pytest.mark.parametrize("case", sorted(LEAVERS))
def test_what_a_program_leaves_does_not_reach_the_next(box, case):
    if case == "process_left_running" and not cgroups.hierarchies():
        pytest.skip("without a cgroup a program may not fork")
    leaver, reader, test = LEAVERS[case]
    pids = _zygote_pids(box)
    assert _grade(box, reader, test) == 1.0  # before: what the next program should see
    assert _grade(box, leaver, "assert leave() is True") == 1.0  # it did leave its state
    assert _grade(box, reader, test) == 1.0  # after: none of it
    assert _zygote_pids(box) == pids  # all from the same zygote, none replaced


def test_posix_message_queues_are_refused(box):
    code = """
        import ctypes
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
        def make():
            return rt.mq_open(b"/left", 0o100 | 0o2, 0o666, None)
    """
    assert _grade(box, code, "assert make() == -1") == 1.0


def test_a_program_cannot_signal_its_fork_server(box):
    """Under a root trainer a program runs as a uid of its own and can signal nothing it sees.

    Without root it shares the zygote's uid and can kill it (documented in
    grpo_exp.sandbox.zygote): the attack scores 0 (it saw what it hit, or died with the
    namespace and was graded again), the zygote is replaced, and the next program is graded as
    ever.
    """
    code = """
        import os, signal
        def attack():
            hit = 0
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) != os.getpid():
                    try:
                        os.kill(int(name), signal.SIGKILL)
                        hit += 1
                    except OSError:
                        pass
            return hit
    """
    pids = _zygote_pids(box)
    root = os.geteuid() == 0
    assert _grade(box, code, "assert attack() == 0") == (1.0 if root else 0.0)
    assert _grade(box, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3") == 1.0
    if root:
        assert _zygote_pids(box) == pids
    else:
        assert box._source.restarts >= 1


def test_a_fork_server_killed_between_programs_is_replaced(box):
    os.kill(_zygote_pids(box)[0], signal.SIGKILL)
    time.sleep(0.2)
    assert _grade(box, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3") == 1.0
    assert box._source.restarts == 1


def test_a_program_whose_fork_server_dies_is_graded_again(box):
    slow = """
        import time
        def add(a, b):
            time.sleep(0.4)
            return a + b
    """
    zygote = _zygote_pids(box)[0]
    killer = threading.Timer(0.2, os.kill, (zygote, signal.SIGKILL))
    killer.start()
    result = box.grade(textwrap.dedent(slow), TestSpec.mbpp(["assert add(1, 2) == 3", "assert add(2, 2) == 4"]))
    killer.join()
    assert result.fraction == 1.0, result
    assert box._source.restarts == 1
    assert zygote not in _zygote_pids(box)


def test_memory_is_budgeted_per_program(box):
    """Three children of 150 MB each outgrow the program's 256 MB, every time; one 200 MB process fits."""
    if not cgroups.hierarchies():
        pytest.skip("no cgroup: the budget is RLIMIT_AS per process, and forks are refused")
    forks = """
        import os, time
        def f():
            pids = []
            for _ in range(3):
                pid = os.fork()
                if pid == 0:
                    held = b"x" * (150 * 1024 * 1024)  # written, so resident
                    time.sleep(0.5)
                    os._exit(0)
                pids.append(pid)
            return sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)
    """
    one = """
        def f():
            held = b"x" * (200 * 1024 * 1024)
            return len(held) // (1024 * 1024)
    """
    pids = _zygote_pids(box)
    for _ in range(2):  # the first program and the next, forked from the same zygote
        assert _grade(box, forks, "assert f() == 3") == 0.0
        assert _grade(box, one, "assert f() == 200") == 1.0  # nothing of the last program counts
    assert _zygote_pids(box) == pids


def test_a_forked_program_gets_what_a_fresh_interpreter_gets(box, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret")
    code = """
        import os, resource as r, sys
        def seen():
            limits = [r.getrlimit(getattr(r, n))[1] for n in
                      ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_MSGQUEUE")]
            status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
            return [sorted(os.environ), limits, os.getuid() == 0, int(status["CapEff"], 16), sys.stdin.read(),
                    os.getsid(0) == os.getpid(), os.getcwd(), len(os.listdir("/proc/self/fd"))]
    """
    mib = 1024 * 1024
    processes = 16 if cgroups.hierarchies() else 1  # as in test_sandbox: no cgroup, no forks
    fds = 6  # stdin, stdout, stderr (all /dev/null), its request and reply pipes, and the listing's own
    expected = [["HOME", "LANG", "PATH", "PWD", "TMPDIR"], [256 * mib, processes, 64, mib, 0], False, 0, "", True,
                "/sandbox", fds]  # fmt: skip
    assert _grade(box, code, f"assert seen() == {expected!r}") == 1.0


@pytest.mark.parametrize("closes_range", [True, False], ids=["close_range", "listing"])
def test_a_spare_closes_every_fd_above_the_one_it_keeps(closes_range):
    """Both ways a spare closes the zygote's fds: close_range(2), and listing /proc (old kernels, seccomp)."""
    from grpo_exp.sandbox import zygote

    report_r, report_w = os.pipe()
    above = [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]
    above.append(os.dup2(above[0], 900))
    pid = os.fork()
    if pid == 0:  # the child reports through the pipe, the one fd below the range
        try:
            zygote._close_from(max(report_r, report_w) + 1, closes_range)
            still_open = [fd for fd in above if _is_open(fd)]
            os.write(report_w, json.dumps(still_open).encode())
        finally:
            os._exit(0)
    os.close(report_w)
    report = os.read(report_r, 4096)
    os.waitpid(pid, 0)
    for fd in (report_r, *above):
        os.close(fd)
    assert json.loads(report) == []


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_stuck_fork_server_holds_up_no_program(monkeypatch):
    """A zygote that stops answering is passed over, then replaced; no program waits on it."""
    monkeypatch.setattr(zygote_handle, "CLEANUP_TIMEOUT_S", 0.5)
    with Sandbox(LIMITS, isolation="bwrap", workers=1, cache_size=0) as sandbox:
        stuck = _zygote_pids(sandbox)[0]
        os.kill(stuck, signal.SIGSTOP)  # its process for the next program still runs; its clean-up never will
        try:
            for n in range(4):
                started = time.monotonic()
                code = f"def add(a, b):\n    return a + b + {n} - {n}\n"
                assert _grade(sandbox, code, "assert add(1, 2) == 3") == 1.0
                assert time.monotonic() - started < LIMITS.test_timeout_s / 2
            time.sleep(1.0)
            assert _grade(sandbox, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3") == 1.0
            deadline = time.monotonic() + 10
            while sandbox._source.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sandbox._source.restarts == 1
            assert stuck not in _zygote_pids(sandbox)
        finally:
            with contextlib.suppress(ProcessLookupError):  # replaced: killed with its namespace
                os.kill(stuck, signal.SIGCONT)


# -- issue 51: what one program, or the trainer's threads, cost the others --------------------------

MANY_FOLDERS = 200_000  # made while loading: about 1.5 s to make, 7 s to walk away on the code before the fix


def _shipped_reward() -> tuple[dict, float]:
    """``code_tests``'s params as the shipped code_generation reward sets them (on bwrap), and its time limit."""
    reward = yaml.safe_load((ROOT / "conf" / "reward" / "code_generation.yaml").read_text())
    return reward["parts"]["tests"]["params"] | {"isolation": "bwrap", "fork_server": True}, reward["timeout_s"]


@pytest.fixture
def reward_sandboxes():
    """The code reward's own sandboxes, as a trainer gets them; those this test made are closed after it."""
    before = set(code_rewards._sandboxes)
    yield
    for key in set(code_rewards._sandboxes) - before:
        code_rewards._sandboxes.pop(key).close()


def test_a_program_that_leaves_a_mess_costs_no_other_program_its_score(reward_sandboxes):
    """Issue 51: 4 candidates leave 200,000 folders each; the 8 correct ones of the same call still score 1.0.

    Called as the trainer calls it (its columns, its params, from a reward thread of its own) on
    HumanEval/0. Before, a correct candidate waited for a zygote still walking an attacker's
    folders, and the wait counted against its load limit: [0, 0, 1, 1, 1, 1, 1, 1].
    """
    with gzip.open(HUMANEVAL, "rt") as fh:
        row = json.loads(fh.readline())
    correct = row["prompt"] + row["canonical_solution"]
    mess = f"import os\nfor _n in range({MANY_FOLDERS}):\n    os.mkdir('d%d' % _n)\n"
    completions = [f"{mess}{correct}# attacker {n}\n" for n in range(4)]
    completions += [f"{correct}# correct {n}\n" for n in range(8)]
    columns = {name: [row[name]] * len(completions) for name in ("test", "entry_point", "canonical_solution")}
    params, limit_s = _shipped_reward()
    call = functools.partial(get("code_tests"), completions, prompts=[row["prompt"]] * len(completions), **columns)
    scores = within(lambda: call(**params), limit_s, "reward-tests")
    assert scores[4:] == [1.0] * 8, scores


def test_a_clean_up_stops_at_max_leftovers_and_the_zygote_is_replaced_instead(monkeypatch):
    """Leftovers beyond ``max_leftovers`` (files, or hard links to one file) are not walked: the zygote goes.

    Fewer are removed by the zygote that served the program, as ever. Either way the next program
    (on the same zygote, or its replacement: there is one) finds an empty folder.
    """
    monkeypatch.setattr(pool, "ZYGOTES_PER_WORKER", 1)
    limits = replace(LIMITS, max_leftovers=50)
    leave = textwrap.dedent("""
        import os
        def leave(count, links):
            open("f", "w").close()
            for n in range(count):
                os.link("f", f"l{n}") if links else open(f"f{n}", "w").close()
            return len(os.listdir("."))
    """)
    look = "import os\ndef look():\n    return os.listdir('.')\n"
    with Sandbox(limits, isolation="bwrap", workers=1, cache_size=0) as sandbox:
        for count, links, restarts in [(20, False, 0), (200, False, 1), (200, True, 2)]:
            code = f"{leave}# {count} {links}\n"
            assert _grade(sandbox, code, f"assert leave({count}, {links}) == {count + 1}") == 1.0
            assert _grade(sandbox, look, "assert look() == []") == 1.0
            assert sandbox._source.restarts == restarts


def test_zygotes_outlive_the_thread_that_started_them():
    """Reward parts run in a thread per call: the sandbox made in the first call must serve the next ones.

    bwrap's --die-with-parent kills a sandbox when the thread that started it exits; before, every
    zygote died with the first call's thread, and the next call scored 0 ("OSError while loading").
    """
    made: list[Sandbox] = []
    first_call = threading.Thread(target=lambda: made.append(Sandbox(LIMITS, isolation="bwrap", workers=1)))
    first_call.start()
    first_call.join()
    with made[0] as sandbox:
        pids = _zygote_pids(sandbox)
        time.sleep(0.3)  # what the kernel does when the thread exits
        assert _grade(sandbox, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3") == 1.0
        assert sandbox._source.restarts == 0
        assert sorted(_zygote_pids(sandbox)) == sorted(pids)


def test_a_program_out_of_memory_never_takes_its_zygote_with_it(box):
    """It lowers its oom_score_adj and fills its budget with memfd pages, which are in no process's RSS.

    Before, it shared its zygote's memory cgroup, and the OOM killer took the zygote, the largest
    process there once the program no longer ranked first (twice: the program was graded again).
    Now its cgroup holds the program alone.
    """
    if not cgroups.hierarchies():
        pytest.skip("no cgroup: memory is RLIMIT_AS per process, and forks are refused")
    bomb = """
        import os, time
        def bomb():
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("0")
            for _ in range(12):
                if os.fork() == 0:
                    try:
                        for _ in range(60):  # 60 MiB each, 1 MiB at a time (RLIMIT_FSIZE)
                            os.write(os.memfd_create("held"), b"x" * (1024 * 1024 - 1))
                    except OSError:
                        pass
                    time.sleep(1)
                    os._exit(0)
            time.sleep(1.5)
            return 0
    """
    pids = _zygote_pids(box)
    _grade(box, bomb, "assert bomb() == 0")
    assert box._source.restarts == 0
    assert _zygote_pids(box) == pids
    assert _grade(box, "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3") == 1.0
