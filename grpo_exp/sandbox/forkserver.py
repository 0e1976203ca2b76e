"""Programs forked from a ready interpreter per worker (a zygote, see ``zygote``) under bwrap.

A fresh isolated interpreter per program (``spares``) spends most of its ~25 ms of CPU on
bwrap and Python's start-up; a fork of a zygote that has already started, under the same
namespaces, costs a small fraction of that. Each program still gets its own process, session,
uid (under a root trainer), cgroup (memory and processes of the program as a whole), rlimits
(CPU, address space, files, processes, no POSIX message queues) and deadlines, and the
parent kills it and everything it started as before. What a fresh interpreter got from fresh
namespaces, a forked program gets from its zygote cleaning up before the next fork: the working
folder is emptied and System V IPC objects are removed (``zygote``); a zygote that cannot clean,
dies or stops answering is killed and replaced, and a program whose zygote died while it ran is
graded again (``grading``), so nothing is lost and nothing is carried over.

Only ``serve`` jobs (grading) are forked; a standalone run (``runner``) needs its exit status,
which a forked child reports to the zygote, not to us, so it gets a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import logging
import marshal
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from grpo_exp.sandbox import cgroups, identity
from grpo_exp.sandbox.cgroups import SnippetCgroup
from grpo_exp.sandbox.isolation import Launcher
from grpo_exp.sandbox.limits import MIB, Limits
from grpo_exp.sandbox.process import (
    CHILD_SOURCE,
    CLEANUP_TIMEOUT_S,
    Channel,
    ChildTimeout,
    child_env,
    children_of,
    end_process,
    poll_one,
)
from grpo_exp.sandbox.spares import ChildSource

log = logging.getLogger("grpo_exp.sandbox")

ZYGOTE_SOURCE = Path(__file__).with_name("zygote.py").read_text()
ZYGOTE_PROGRAM = CHILD_SOURCE + "\n" + ZYGOTE_SOURCE + "\n_serve_forks()\n"
# Imported once by each zygote, so programs that use them (HumanEval's all import typing) skip it.
PRELOADED_MODULES = ("collections", "functools", "hashlib", "heapq", "itertools", "math", "random", "re", "string",
                     "typing")  # fmt: skip
FORK_TRIES = 3  # zygotes tried for one program before the failure counts against it
ZYGOTE_START_TIMEOUT_S = 30.0  # bwrap, Python and the imports; a loaded machine can take seconds
ZYGOTE_HEADROOM_MB = 16  # the zygote's own allocations in its cgroup, on top of a program's memory_mb
REPLY_BYTES = 16
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ZygoteLost(Exception):
    """The zygote died, stopped answering or could not clean up: it is replaced."""


class Zygote:
    """One fork server process (bwrap + the trusted ``zygote`` code), its control socket and cgroup.

    The zygote lives in a cgroup of its own, which its programs are forked into, one at a time:
    it limits the program's processes (``max_processes``, plus the zygote) and memory
    (``memory_mb``, plus ``ZYGOTE_HEADROOM_MB`` for the zygote's own small allocations; the pages
    it had before it moved in stay charged where they were, and a program's copies of them count
    as the program's). Nothing has to be moved or made per program.
    """

    def __init__(self, launcher: Launcher, limits: Limits) -> None:
        self.pid: int | None = None  # the zygote's, once it said it is ready
        self.cgroup: SnippetCgroup | None = None
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.control.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            args = ["-I", "-S", "-c", ZYGOTE_PROGRAM, str(theirs.fileno()), ",".join(PRELOADED_MODULES)]
            self.popen = subprocess.Popen(
                launcher.zygote_argv(args, limits),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                cwd="/",
                env=child_env(launcher.workdir or "/"),
                start_new_session=True,
            )
        except BaseException:
            self.control.close()
            raise
        finally:
            theirs.close()

    def wait_ready(self, limits: Limits) -> None:
        """Wait until the zygote has set itself up, then give it its cgroup; raises ZygoteLost."""
        try:
            pid, word = _sender(self.control, time.monotonic() + ZYGOTE_START_TIMEOUT_S, REPLY_BYTES)
        except (OSError, ChildTimeout) as exc:
            raise ZygoteLost(f"fork server did not start: {exc}") from None
        if word != b"ready":
            raise ZygoteLost(f"fork server did not start: {word!r}")
        self.pid = pid
        if limits.cgroup and cgroups.hierarchies():
            memory = (limits.memory_mb + ZYGOTE_HEADROOM_MB) * MIB
            self.cgroup = SnippetCgroup(cgroups.hierarchies(), memory, limits.max_processes + 1)
            self.cgroup.add(pid)

    def ask(self, request: dict, fds: Sequence[int], deadline: float) -> bytes:
        """Send one request (with ``fds``) and return the one-word reply; raises ZygoteLost or ChildTimeout."""
        try:
            socket.send_fds(self.control, [marshal.dumps(request)], list(fds))
            if not poll_one(self.control.fileno(), select.POLLIN, deadline - time.monotonic()):
                raise ChildTimeout("the fork server did not answer in time")
            reply = self.control.recv(REPLY_BYTES)
        except OSError as exc:
            raise ZygoteLost(f"fork server gone: {exc}") from None
        if not reply:
            raise ZygoteLost("fork server exited")
        return reply

    def child(self) -> int:
        """The program the zygote has just forked: its only child until it is cleaned up."""
        found = children_of(self.pid) if self.pid is not None else []
        if len(found) != 1:
            raise ZygoteLost(f"fork server has {len(found)} children, not 1")
        return found[0]

    def empty_cgroup(self) -> bool:
        """Kill whatever a program left in the cgroup; False if something survives."""
        return self.cgroup is None or self.pid is None or self.cgroup.empty_but(self.pid)

    def close(self) -> None:
        self.control.close()
        end_process(self.popen, pid_namespace=True)
        if self.cgroup is not None:
            self.cgroup.close()


class ForkedChild(Channel):
    """One program forked from ``zygote``, with the program's uid and limits, in the zygote's cgroup."""

    def __init__(
        self,
        zygote: Zygote,
        limits: Limits,
        job: dict,
        deadline: float,
        on_close: Callable[[ForkedChild], None],
    ) -> None:
        super().__init__(limits)
        self.zygote = zygote
        self.zygote_lost = False  # the zygote died or could not clean up while this program ran
        self._on_close = on_close
        self._lease = identity.lease_uid() if identity.running_as_root() else None
        self._forked = False
        self._pid: int | None = None  # as this process sees it (the child lives in bwrap's PID namespace)
        self._pidfd = -1
        self._closed = False
        try:
            self._start(job, deadline)
        except BaseException as exc:
            # a zygote that failed to fork, or answered too late, is out of step with us
            self.zygote_lost = not self._forked and isinstance(exc, (ZygoteLost, ChildTimeout))
            self.close()
            raise

    def _start(self, job: dict, deadline: float) -> None:
        rlimits = self.limits.rlimits(whole_snippet_budget=self.zygote.cgroup is not None)
        request = {
            "op": "fork",
            "uid": self._lease.uid if self._lease else None,
            "rlimits": [f"{name}={soft},{hard}" for name, soft, hard in rlimits],
        }
        reply = self.zygote.ask(request, self.child_fds, deadline)
        if reply != b"forked":
            raise ZygoteLost(f"fork server answered {reply!r}")
        self._forked = True
        self._attach()
        self._pid = self.zygote.child()
        self._pidfd = os.pidfd_open(self._pid)  # tells when it has exited, though it is not our child
        self.send(job, deadline)  # it reads the job only once its uid and limits are in place

    def close(self) -> None:
        """Kill the program and all it started, let the zygote clean up, hand the zygote back."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._pid is not None:  # a zombie until the zygote reaps it at "clean": no pid reuse
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pid, signal.SIGKILL)
            self._close_fds()  # a child we never heard from exits on its own when its pipes close
            if self._pidfd >= 0 and not poll_one(self._pidfd, select.POLLIN, CLEANUP_TIMEOUT_S):
                log.error("forked sandbox program %d still alive %.0f s after SIGKILL", self._pid, CLEANUP_TIMEOUT_S)
            reply = b"processes left"
            if self.zygote.empty_cgroup():
                reply = self._clean() if self._forked else b"clean"
            if reply != b"clean":
                self.zygote_lost = True
                log.warning("sandbox fork server replaced (%s)", reply.decode(errors="replace"))
        finally:
            self._close_fds()
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
            if self._lease is not None:
                self._lease.release()
            self._on_close(self)

    def _clean(self) -> bytes:
        request = {"op": "clean", "uid": self._lease.uid if self._lease else None}
        try:
            return self.zygote.ask(request, [], time.monotonic() + CLEANUP_TIMEOUT_S)
        except (ZygoteLost, ChildTimeout) as exc:
            return str(exc).encode()


def _sender(sock: socket.socket, deadline: float, size: int) -> tuple[int, bytes]:
    """The next message on ``sock`` and its sender's pid in our PID namespace (the kernel attaches it)."""
    if not poll_one(sock.fileno(), select.POLLIN, deadline - time.monotonic()):
        raise ChildTimeout("no word from the sandbox process in time")
    data, ancillary, _flags, _address = sock.recvmsg(size, socket.CMSG_SPACE(CREDENTIALS.size))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and data:
            return CREDENTIALS.unpack(payload[: CREDENTIALS.size])[0], data
    raise OSError("the sandbox process exited before it started")


class ForkServer:
    """Hands out programs forked from zygotes: each zygote serves one program at a time.

    ``zygotes`` (one per worker) start with the sandbox, so no program waits for one; a zygote
    that fails is replaced when its program closes. ``restarts`` counts the replacements.
    """

    def __init__(self, launcher: Launcher, limits: Limits, zygotes: int) -> None:
        if launcher.mode != "bwrap":
            raise ValueError(f"the fork server runs under bwrap only, not {launcher.mode}")
        self.launcher = launcher
        self.limits = limits
        self.fresh = ChildSource(launcher, limits)  # standalone runs need an exit status
        self.restarts = 0
        self._idle: list[Zygote] = []
        self._closed = False
        self._lock = threading.Lock()
        for zygote in [Zygote(launcher, limits) for _ in range(zygotes)]:  # they boot in parallel
            self._ready(zygote)

    def start(self, job: dict, deadline: float) -> Channel:
        """A program that has been sent ``job``; raises ChildTimeout or OSError."""
        if job["mode"] != "serve":
            return self.fresh.start(job, deadline)
        failure: Exception | None = None
        for _ in range(FORK_TRIES):
            zygote = self._take()
            if zygote is None:
                continue
            try:
                return ForkedChild(zygote, self.limits, job, deadline, self._give_back)
            except (ZygoteLost, OSError) as exc:  # a zygote killed between programs: the next one
                failure = exc
        raise OSError(f"no sandbox fork server could start the program: {failure}")

    def close(self) -> None:
        """Stop the idle zygotes; those serving a program stop when it is closed."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for zygote in idle:
            zygote.close()
        self.fresh.close()

    def _take(self) -> Zygote | None:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._ready(Zygote(self.launcher, self.limits), keep=False)

    def _ready(self, zygote: Zygote, keep: bool = True) -> Zygote | None:
        """Wait for a new zygote; kept idle (or returned), or None when it failed."""
        try:
            zygote.wait_ready(self.limits)
        except (ZygoteLost, OSError) as exc:
            log.warning("a sandbox fork server failed to start: %s", exc)
            zygote.close()
            return None
        if keep:
            self._keep(zygote)
            return None
        return zygote

    def _keep(self, zygote: Zygote) -> None:
        with self._lock:
            closed = self._closed
            if not closed:
                self._idle.append(zygote)
        if closed:
            zygote.close()

    def _give_back(self, child: ForkedChild) -> None:
        zygote = child.zygote
        if not child.zygote_lost and zygote.popen.poll() is None:
            self._keep(zygote)
            return
        child.zygote_lost = True
        self.restarts += 1
        zygote.close()
        if not self._closed:
            self._ready(Zygote(self.launcher, self.limits))
