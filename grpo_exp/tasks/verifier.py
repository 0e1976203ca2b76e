"""reasoning-gym's verifiers, run out of the trainer's process: isolated, time-limited, one fresh process per answer.

Why: a task's ``score_answer`` may run the reply's answer as Python. n_queens, string_insertion,
spiral_matrix and binary_matrix ``eval()`` it; the integration and polynomial tasks hand it to
``sympy.parse_expr``, which evals too. In the trainer, ``<answer>exit(3)</answer>`` ended the run,
an answer could write files, and ``10**10**7`` held the interpreter lock for seconds. So every
task's verifier runs here, whichever task (no list of "safe" tasks to keep up to date):

- a helper process (``grpo_exp.helper_process``: killed whole past its time limit, restarted on
  the next call) under the code sandbox's namespaces (``grpo_exp.sandbox.isolation``; bwrap where it
  works: no network, no host process, no host file but read-only Python and its packages, a
  private tmpfs as working folder), as a throw-away uid under a root trainer, with the sandbox's
  seccomp filter, an environment holding nothing of the trainer's and no ptrace into it;
- that helper is a fork server: it imports reasoning-gym and builds each task's verifier once,
  running only trusted code, and forks a process per answer, so nothing one answer does (a
  patched sympy, a global, a file, an exhausted limit) is there for the next; the batch of a
  step's answers is one request, so a step costs one round trip and a fork per answer;
- the forked process lowers its limits for good before the answer is looked at: CPU and address
  space, no file data written (RLIMIT_FSIZE 0), no new process or thread (RLIMIT_NPROC 1, the
  leased uid's only tasks being the fork server's), no core; it installs an audit hook that
  kills it at the first event outside what verifying does (file opens for writing, sockets,
  subprocesses, signals, frame and gc introspection, ctypes, new audit hooks...) or at code
  compiled from text that holds a word escapes from an eval start with (``DENIED_SOURCE``), and
  catches every exception, SystemExit included; the fork server kills it at ``timeout_s``;
- the verdict comes back on a pipe only that process holds, as a float tagged with a random
  token it got at the fork and that lives only in a stack frame (reaching it takes frame or
  memory introspection, which the hook refuses): printing "1.0", writing to any fd, or exiting
  early gains nothing. An answer that exits, times out, is killed or sends anything malformed
  scores 0.0, as a math check that runs out of time does.

What this does not change: a verifier that evals is still asked to judge the object the answer
evaluates to, so it judges what reasoning-gym's own code makes of it, in that one process.

The module is long on purpose: the trainer's side, the fork server and the answer's process are one
security boundary, and reading them together is how it is reviewed.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import logging
import math
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.helper_process import Helper, HelperGone, Unavailable
from grpo_exp.helper_process import serve as serve_requests

log = logging.getLogger(__name__)

NAME = "the task verifier"
# Address space a verification may add to the fork server's own (sympy simplifying a long answer
# takes a few hundred MB); past it allocations fail and the answer scores 0.0.
VERIFIER_MEMORY_MB = 1024
MAX_PARALLEL = 8  # answers verified at once, at most (one per core; the trainer waits for them meanwhile)
# The fork server's own time per answer beyond its limit (fork, reap), and per batch (the round trip):
# the trainer kills the fork server only when it is this late, i.e. stuck itself.
FORK_SLACK_S = 0.5
BATCH_SLACK_S = 10.0
TOKEN_BYTES = 16  # the verdict's tag: guessing it is hopeless
MIB = 1024 * 1024
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ")  # all of the trainer's environment the fork server gets (no tokens)


class Verifier:
    """The fork server (a ``Helper``) and how to start it; thread-safe (one batch at a time)."""

    def __init__(self, isolation: str = "auto") -> None:
        from grpo_exp.sandbox import identity, resolve
        from grpo_exp.sandbox.launch_thread import LaunchThread

        self.mode = resolve(isolation)  # a weaker mode than bwrap is announced once, loudly
        self._lease = identity.lease_uid() if identity.running_as_root() else None
        self._launcher = LaunchThread("task-verifier-launch")
        self.helper = Helper(self._argv(), NAME, spawn=self._spawn)
        self.failures = 0  # answers that exited, timed out or broke the channel (for tests and logs)

    @property
    def restarts(self) -> int:
        """Fork servers killed (stuck, or ended): for tests and logs."""
        return self.helper.restarts

    def score(self, problems: Sequence[dict[str, Any]], answers: Sequence[str | None], timeout_s: float) -> list[float]:
        """Each answer's verdict from its problem's task (0.0 where verifying failed or outlived ``timeout_s``).

        A group's completions often give the same answer to the same problem: each distinct pair is verified
        once (a fork each), and its verdict goes to every completion that gave it. A verifier is a function of
        the problem and the answer, and each runs in a fresh process, so sharing a verdict changes no score."""
        pairs = [(json.dumps(p, sort_keys=True), a) for p, a in zip(problems, answers, strict=True)]
        distinct = list(dict.fromkeys(pairs))
        verdicts = self._score_distinct([{"entry": json.loads(e), "answer": a} for e, a in distinct], timeout_s)
        verdict_of = dict(zip(distinct, verdicts, strict=True))
        return [verdict_of[pair] for pair in pairs]

    def _score_distinct(self, items: list[dict[str, Any]], timeout_s: float) -> list[float]:
        if not items:
            return []
        try:
            verdicts, failed = self._ask(items, timeout_s)
        except HelperGone:
            # The fork server itself died (an answer got at it) or hung: each answer alone, so one can't spoil the rest.
            log.warning("%s stopped during a batch of %d answers; verifying them one at a time", NAME, len(items))
            verdicts, failed = [], 0
            for item in items:
                try:
                    one, lost = self._ask([item], timeout_s)
                except HelperGone:
                    one, lost = [0.0], 1
                verdicts += one
                failed += lost
        if failed:
            self.failures += failed
            log.warning(
                "%s: %d of %d distinct answers scored 0.0 without a verdict (exited, ran past timeout_s=%g s or were "
                "stopped for touching what verifying never does)",
                NAME,
                failed,
                len(items),
                timeout_s,
            )
        return verdicts

    def close(self) -> None:
        """Stop the fork server and all it started (it also stops by itself when the trainer ends)."""
        from grpo_exp.sandbox import identity

        self.helper.close()
        if self._lease is not None:
            identity.kill_uid(self._lease.uid)
            self._lease.release()
            self._lease = None
        self._launcher.close()

    def _ask(self, items: list[dict[str, Any]], timeout_s: float) -> tuple[list[float], int]:
        batch_s = math.ceil(len(items) / parallel()) * (timeout_s + FORK_SLACK_S) + BATCH_SLACK_S
        answer = self.helper.ask({"items": items, "timeout_s": timeout_s}, batch_s)
        return [float(v) for v in answer["verdicts"]], int(answer["failed"])

    def _argv(self) -> list[str]:
        """The fork server's command line: the sandbox's launcher around ``python -I -c <bootstrap>``."""
        from grpo_exp.sandbox.isolation import Launcher
        from grpo_exp.sandbox.limits import Limits

        paths = _import_paths()
        bootstrap = f"import sys; sys.path[:0] = {paths!r}; from grpo_exp.tasks.verifier import serve; serve()"
        argv = Launcher(self.mode).argv(["-I", "-c", bootstrap], self._lease.uid if self._lease else None, Limits())
        if self.mode == "bwrap":  # the packages and grpo_exp, read-only, where the interpreter looks for them
            end = argv.index("--")
            argv[end:end] = _binds(_bound_paths(paths))
        return argv

    def _spawn(self, argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
        env = {key: os.environ[key] for key in KEPT_ENV if key in os.environ}
        return self._launcher.call(lambda: subprocess.Popen(argv, **{**popen, "env": env}))


def parallel() -> int:
    """Answers verified at once: one per core, at most ``MAX_PARALLEL``."""
    return max(1, min(MAX_PARALLEL, os.cpu_count() or 1))


def _grpo_root() -> str:
    return str(Path(__file__).resolve().parents[2])  # the folder holding grpo_exp


def _import_paths() -> list[str]:
    """The trainer's import path (its packages, reasoning-gym's among them), without the current folder or
    the script's (``sys.path[0]``)."""
    here = os.getcwd()
    paths = [_grpo_root()]
    for path in sys.path[1:]:
        if path and os.path.isdir(path) and os.path.realpath(path) != here and path not in paths:
            paths.append(path)
    return paths


def _bound_paths(paths: list[str]) -> list[str]:
    """What bwrap binds for ``paths``: grpo_exp's folder only where it lives (the rest of the checkout, its
    outputs among them, stays out of sight); nothing under /usr or the interpreter's own folders, bound already."""
    from grpo_exp.sandbox.isolation import interpreter_roots

    root = _grpo_root()
    bound = ["/usr", *interpreter_roots()]
    out = []
    for path in paths:
        real = os.path.realpath(path)
        if any(real == b or real.startswith(b.rstrip("/") + "/") for b in bound):
            continue
        out.append(os.path.join(root, "grpo_exp") if real == os.path.realpath(root) else real)
    return out


def _binds(paths: list[str]) -> list[str]:
    """bwrap options binding ``paths`` read-only, their parents traversable whatever the host's modes
    (the fork server may run as a leased uid, and bwrap makes missing parents private to root)."""
    options: list[str] = []
    made: set[str] = set()
    for path in paths:
        parents = []
        parent = os.path.dirname(path)
        while parent not in (os.sep, ""):
            parents.append(parent)
            parent = os.path.dirname(parent)
        for folder in reversed(parents):
            if folder not in made:
                made.add(folder)
                options += ["--perms", "0755", "--dir", folder]
        options += ["--ro-bind", path, path]
    return options


_shared: dict[str, Verifier] = {}
_shared_lock = threading.Lock()


def shared_verifier(isolation: str = "auto") -> Verifier:
    """The process's verifier for ``isolation`` (its fork server is reused by every call and stopped at exit)."""
    with _shared_lock:
        if isolation not in _shared:
            _shared[isolation] = Verifier(isolation)
            atexit.register(_shared[isolation].close)
        return _shared[isolation]


def check_isolation(isolation: Any) -> None:
    """One line for an isolation mode that isn't one (the sandbox's modes); whether it works here is
    found when the fork server starts."""
    from grpo_exp.sandbox.isolation import MODES

    if isolation not in MODES:
        raise UserError(f"task_accuracy: isolation must be one of {', '.join(MODES)}, got {isolation!r}")


# -- inside the fork server ------------------------------------------------------------------------

PR_SET_DUMPABLE = 4
LAST_FD = 2**31 - 1  # closerange's "every fd above" (one close_range syscall on Linux)
# Audit events a verification raises (compiling and running an expression, importing a module sympy
# loads lazily, reading a module's file); any other kills the answer's process before it happens.
ALLOWED_EVENTS = frozenset(
    {
        "builtins.id",
        "compile",
        "exec",
        "import",
        "marshal.loads",
        "object.__getattr__",
        "open",
        "os.listdir",
        "os.scandir",
    }
)
# Of the restricted attributes (``object.__getattr__``), the one sympy reads as it loads (its dispatch
# tables): a function's code. Frames (a traceback's, a generator's) stay out of reach.
READABLE_ATTRIBUTES = frozenset({"__code__"})
# Words no answer's code may hold where it is compiled from text (an eval, sympy's parse_expr): escapes from an
# eval start with a dunder, a function of its own, a second compile, or reaching into objects by name.
DENIED_SOURCE = ("__", "lambda", "eval", "exec", "compile", "getattr", "setattr", "delattr", "globals")
FAILED = -1.0  # a verdict slot no verifier wrote


def serve() -> None:
    """The fork server's loop (``grpo_exp.helper_process.serve``): trusted set-up once, a fork per answer."""
    serve_requests(_setup)


def _setup() -> Callable[[dict[str, Any]], dict[str, Any]]:
    import ctypes

    try:
        from reasoning_gym import get_score_answer_fn
    except ImportError as exc:
        raise Unavailable(f"reasoning-gym is not installed ({exc}): pip install reasoning-gym") from None
    from grpo_exp.sandbox import child, seccomp

    compiled = seccomp.keyring_filter()
    if compiled is not None:
        child._deny_syscalls(compiled)  # inherited by every fork; bwrap may have installed it too: both hold
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # an answer's process can't ptrace or read this one
    os.chdir("/")  # not the working folder: nothing relative lands anywhere writable
    gc.freeze()
    scorers: dict[str, Callable[..., Any]] = {}

    def scorer(entry: dict[str, Any]) -> Callable[..., Any]:
        task = entry["metadata"]["source_dataset"]
        if task not in scorers:  # built here, before any fork: each answer's process finds it ready
            scorers[task] = get_score_answer_fn(task)
            # The problem's own answer, ours not the model's: it loads the modules the verifier imports
            # on first use (sympy's), once here rather than in every answer's process.
            with contextlib.suppress(Exception):
                scorers[task](entry.get("answer"), entry)
            gc.freeze()  # what the server holds is never collected in a fork: its pages stay shared, not copied
        return scorers[task]

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        items, timeout_s = request["items"], float(request["timeout_s"])
        jobs = []
        for item in items:
            try:
                jobs.append((scorer(item["entry"]), item))
            except Exception:  # an entry naming no task: nothing to run
                jobs.append((None, item))
        verdicts = _verify_all(jobs, timeout_s)
        failed = sum(v == FAILED for v in verdicts)
        return {"verdicts": [max(v, 0.0) for v in verdicts], "failed": failed}

    return handle


def _verify_all(jobs: list[tuple[Callable[..., Any] | None, dict[str, Any]]], timeout_s: float) -> list[float]:
    """Each job's verdict, ``parallel()`` processes at a time, each killed at ``timeout_s``."""
    verdicts = [FAILED] * len(jobs)
    running: dict[int, tuple[int, int, float, bytes]] = {}  # read fd -> (job, pid, deadline, token)
    buffers: dict[int, bytes] = {}
    waiting = list(enumerate(jobs))
    while waiting or running:
        while waiting and len(running) < parallel():
            index, (score_answer, item) = waiting.pop(0)
            if score_answer is None:
                continue
            token = os.urandom(TOKEN_BYTES)
            read_fd, pid = _fork(score_answer, item, token, timeout_s)
            running[read_fd] = (index, pid, time.monotonic() + timeout_s, token)
            buffers[read_fd] = b""
        if not running:
            break
        wait_s = max(0.0, min(deadline for _, _, deadline, _ in running.values()) - time.monotonic())
        ready = select.select(list(running), [], [], wait_s)[0]
        for fd in ready:
            chunk = os.read(fd, 4096)
            if chunk and len(buffers[fd]) < 4096:
                buffers[fd] += chunk
                continue
            index, pid, _, token = running.pop(fd)  # end of file: the process is done
            verdicts[index] = _verdict(buffers.pop(fd), token)
            _end(fd, pid)
        now = time.monotonic()
        for fd in [fd for fd, (_, _, deadline, _) in running.items() if deadline <= now]:
            _, pid, _, _ = running.pop(fd)  # past its limit: killed, and its verdict stays FAILED
            buffers.pop(fd)
            _end(fd, pid)
    return verdicts


def _verdict(message: bytes, token: bytes) -> float:
    """The verdict in ``message`` when it is exactly the token and a number from 0 to 1, else FAILED."""
    if len(message) <= TOKEN_BYTES or message[:TOKEN_BYTES] != token:
        return FAILED
    try:
        value = float(message[TOKEN_BYTES:].decode("ascii"))
    except ValueError:
        return FAILED
    return value if 0.0 <= value <= 1.0 else FAILED


def _end(fd: int, pid: int) -> None:
    """Kill the answer's process (it may still run after closing its pipe) and reap it."""
    os.close(fd)
    with contextlib.suppress(ProcessLookupError):  # it ended already (a zombie until reaped below)
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _fork(score_answer: Callable[..., Any], item: dict[str, Any], token: bytes, timeout_s: float) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            _answer_process(score_answer, item, token, write_fd, timeout_s)
        finally:
            os._exit(0)  # whatever happened, this process ends here and never returns to the server's loop
    os.close(write_fd)
    return read_fd, pid


def _answer_process(
    score_answer: Callable[..., Any], item: dict[str, Any], token: bytes, out_fd: int, timeout_s: float
) -> None:
    """In the answer's process: limits for good, the audit hook, then the verifier; the verdict to ``out_fd``."""
    write, leave = os.write, os._exit  # held here: an answer that replaces os.write or os._exit changes nothing
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, out_fd)  # the trainer's channel among them: only the verdict's pipe stays
    os.closerange(out_fd + 1, LAST_FD)
    here = resource.getrlimit(resource.RLIMIT_AS)[0]
    address_space = _address_space() + VERIFIER_MEMORY_MB * MIB
    cpu = max(1, math.ceil(timeout_s))
    for limit, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (address_space, address_space) if here == resource.RLIM_INFINITY else (here, here)),
        (resource.RLIMIT_FSIZE, (0, 0)),
        (resource.RLIMIT_NPROC, (1, 1)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_NOFILE, (out_fd + 32, out_fd + 32)),
    ):
        resource.setrlimit(limit, value)
    # Every name the verdict's path looks up is held here first: builtins and module globals are the
    # answer's to replace (``builtins.repr = ...``), these locals are not.
    # The C conversions of float and int (numpy's float64 is a float) read the number itself, never a
    # method an object of the answer's making overrides.
    conversions, text, failure = (float.__float__, int.__float__), repr, BaseException
    sys.addaudithook(_hook(leave))
    verdict = 0.0
    try:
        value = score_answer(item["answer"], item["entry"])
        for convert in conversions:
            try:
                verdict = convert(value)
                break
            except failure:  # not this kind of number
                continue
    except failure:  # SystemExit and KeyboardInterrupt too: a wrong answer, not the end of anything
        verdict = 0.0
    write(out_fd, token + text(verdict).encode("ascii"))


def _hook(leave: Callable[[int], Any]) -> Callable[[str, tuple[Any, ...]], None]:
    """The audit hook: an event verifying never raises ends the process at once (its verdict: none, so 0.0).

    Reachable from nowhere but the interpreter's hook list (no module holds it), and it looks up no
    global or builtin (all it uses is bound here), so an answer can neither unhook nor patch it.
    Opens for reading pass (modules sympy loads lazily); code compiled from text (not a module's file)
    that holds one of ``DENIED_SOURCE`` never compiles: no answer needs them."""
    allowed, readable, kind, text, raw, number = ALLOWED_EVENTS, READABLE_ATTRIBUTES, type, str, bytes, int
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_EXCL
    denied_text, denied_raw = DENIED_SOURCE, tuple(word.encode() for word in DENIED_SOURCE)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in allowed:
            leave(3)
        if event == "object.__getattr__" and args[1] not in readable:
            leave(3)
        if event == "open":
            mode, flags = args[1], args[2]
            if kind(mode) is text and ("w" in mode or "a" in mode or "x" in mode or "+" in mode):
                leave(3)
            if kind(flags) is number and flags & writes:
                leave(3)
        if event == "compile" and not (kind(args[1]) is text and args[1].endswith(".py")):
            source = args[0]
            words = denied_text if kind(source) is text else denied_raw if kind(source) is raw else ()
            for word in words:
                if word in source:
                    leave(3)

    return hook


def _address_space() -> int:
    """This process's virtual size in bytes (the fork server's own, which a fork inherits)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
