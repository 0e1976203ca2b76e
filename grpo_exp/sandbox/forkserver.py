"""Programs forked from ready interpreters (zygotes, see ``zygote``) under bwrap.

A fresh isolated interpreter per program (``spares``) spends most of its ~25 ms of CPU on
bwrap and Python's start-up; a fork of a zygote that has already started, under the same
namespaces, costs a small part of that. Each program still gets its own process, session, uid
(under a root trainer), cgroup budget (memory and processes of the program as a whole), rlimits
(CPU, address space, files, processes, no POSIX message queues) and deadlines, and the parent
kills it and everything it started as before. What a fresh interpreter got from fresh
namespaces, a forked program gets from its zygote cleaning up before it forks again: the
working folder is emptied and System V IPC objects are removed (``zygote``). A zygote that
cannot clean up, dies or stops answering is killed and replaced, and a program whose zygote
died while it ran is graded again (``grading``), so nothing is lost and nothing is carried over.

Each zygote forks the next program's process as soon as it has cleaned up after the last one,
and there are two per worker: a program starts on the zygote that has been idle longest, whose
next process is waiting, while the other cleans up. Nothing of that is on a program's clock.

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
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from grpo_exp.sandbox import cgroups, identity
from grpo_exp.sandbox.cgroups import SnippetCgroup
from grpo_exp.sandbox.identity import UidLease
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
    hung_up,
    poll_any,
    poll_one,
)
from grpo_exp.sandbox.spares import ChildSource

log = logging.getLogger("grpo_exp.sandbox")

ZYGOTE_SOURCE = Path(__file__).with_name("zygote.py").read_text()
ZYGOTE_PROGRAM = CHILD_SOURCE + "\n" + ZYGOTE_SOURCE + "\n_serve_forks()\n"
# Imported once by each zygote, so programs that use them skip it (21 of HumanEval's 164 prompts import typing).
# Not random (it reseeds in every forked child) nor hashlib (it maps libcrypto, which every fork copies):
# each would cost all programs more than it saves the few that import it.
PRELOADED_MODULES = ("collections", "functools", "heapq", "itertools", "math", "re", "string", "typing")
FORK_TRIES = 3  # zygotes tried for one program before the failure counts against it
ZYGOTE_START_TIMEOUT_S = 30.0  # bwrap, Python and the imports; a loaded machine can take seconds
ZYGOTE_HEADROOM_MB = 16  # the zygote's own allocations in its cgroup, on top of a program's memory_mb
REPLY_BYTES = 16
# The dynamic linker resolves every symbol when the zygote starts, not on each one's first call in
# each forked child (a lookup and a page copied, per symbol and program). The zygote drops it from
# its environment before it forks anything: programs get exactly child_env.
ZYGOTE_ENV = {"LD_BIND_NOW": "1"}
CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
FD = struct.Struct("i")


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
        self._spare: socket.socket | None = None  # to the process forked for the next program
        self._cleaning_since: float | None = None  # when the clean-up now unanswered was asked for
        self._cleaning_as: UidLease | None = None  # the uid it runs as, released once it is answered
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
                env={**child_env(launcher.workdir or "/"), **ZYGOTE_ENV},
                start_new_session=True,
            )
        except BaseException:
            self.control.close()
            raise
        finally:
            theirs.close()

    def wait_ready(self, limits: Limits) -> None:
        """Wait until the zygote has set itself up, then give it its cgroup; raises ZygoteLost.

        Its first spare is forked only then (asked for as a clean-up), so it is born inside.
        """
        self.pid = self._answer(b"ready", time.monotonic() + ZYGOTE_START_TIMEOUT_S)
        if limits.cgroup and cgroups.hierarchies():
            memory = (limits.memory_mb + ZYGOTE_HEADROOM_MB) * MIB
            self.cgroup = SnippetCgroup(cgroups.hierarchies(), memory, limits.max_processes + 1)
            self.cgroup.add(self.pid)
        self.clean_later(None)

    def start(self, settings: dict, fds: Sequence[int], deadline: float) -> int:
        """Hand ``settings`` and the program's ``fds`` to the spare; its pid. Raises ZygoteLost or ChildTimeout.

        A clean-up still under way is waited for first: it must succeed, and brings the spare.
        """
        if self._cleaning_since is not None:
            try:
                self._answer(b"clean", deadline)
            finally:
                self._cleaning_since = None
                self._release_cleaning_uid()
        spare, self._spare = self._spare, None
        if spare is None:
            raise ZygoteLost("fork server has no process ready")
        try:
            with spare:
                socket.send_fds(spare, [marshal.dumps(settings)], list(fds))
        except OSError as exc:
            raise ZygoteLost(f"the fork server's process is gone: {exc}") from None
        return self._program()

    def clean_later(self, lease: UidLease | None) -> None:
        """Ask for the last program's clean-up without waiting: ``start`` checks it before the next program.

        ``lease`` (the program's uid, which the clean-up runs as) is released once it is done.
        """
        try:
            self.control.send(marshal.dumps({"uid": lease.uid if lease else None}))
        except OSError as exc:
            raise ZygoteLost(f"fork server gone: {exc}") from None
        self._cleaning_since = time.monotonic()
        self._cleaning_as = lease

    def settled(self) -> bool:
        """Whether its last clean-up is answered (or none is due): ``start`` will not wait."""
        return self._cleaning_since is None or poll_one(self.control.fileno(), select.POLLIN, 0)

    def overdue(self) -> bool:
        """Whether a clean-up has gone unanswered for ``CLEANUP_TIMEOUT_S``: the zygote is stuck."""
        since = self._cleaning_since
        return since is not None and not self.settled() and time.monotonic() - since > CLEANUP_TIMEOUT_S

    def alive(self) -> bool:
        """Whether the zygote (and so its namespace) is still there.

        It dies before the program it served (the namespace goes with it, or with bwrap), so once
        the program has stopped answering this is exact.
        """
        return self.popen.poll() is None and not hung_up(self.control.fileno())

    def empty_cgroup(self, program: int | None) -> bool:
        """Kill whatever ``program`` (killed already) started; False if something survives.

        The program itself may still be exiting: with SIGKILL pending it can fork no more, and
        the zygote reaps it before it cleans up.
        """
        if self.cgroup is None or self.pid is None:
            return True
        return self.cgroup.empty_but({self.pid, program} if program else {self.pid})

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
        self.control.close()
        end_process(self.popen, pid_namespace=True)
        if self.cgroup is not None:
            self.cgroup.close()
        self._release_cleaning_uid()  # its clean-up, if any, died with it

    def _release_cleaning_uid(self) -> None:
        lease, self._cleaning_as = self._cleaning_as, None
        if lease is not None:
            lease.release()

    def _answer(self, expected: bytes, deadline: float) -> int:
        """Wait for the zygote's ``expected`` word and the spare's socket with it; the zygote's pid."""
        try:
            if not poll_one(self.control.fileno(), select.POLLIN, deadline - time.monotonic()):
                raise ChildTimeout("the fork server did not answer in time")
            space = socket.CMSG_SPACE(CREDENTIALS.size) + socket.CMSG_SPACE(FD.size)
            word, ancillary, _flags, _address = self.control.recvmsg(REPLY_BYTES, space)
        except OSError as exc:
            raise ZygoteLost(f"fork server gone: {exc}") from None
        pid = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                self._spare = socket.socket(fileno=FD.unpack(payload[: FD.size])[0])
            elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = CREDENTIALS.unpack(payload[: CREDENTIALS.size])[0]
        if word != expected or pid is None or (self._spare is None) != (expected == b"ready"):
            raise ZygoteLost(f"fork server answered {word!r}, not {expected!r}")
        return pid

    def _program(self) -> int:
        """The program the spare became: the zygote's only child until it is cleaned up."""
        found = children_of(self.pid) if self.pid is not None else []
        if len(found) != 1:
            raise ZygoteLost(f"fork server has {len(found)} children, not 1")
        return found[0]


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
        super().__init__(limits, capture_output=False)  # grading never reads a program's output
        self.zygote = zygote
        self.zygote_lost = False  # the zygote died under this program, or cannot go on: replace it
        self._on_close = on_close
        self._lease = identity.lease_uid() if identity.running_as_root() else None
        self._forked = False
        self._pid: int | None = None  # as this process sees it (the child lives in bwrap's PID namespace)
        self._closed = False
        try:
            self._start(job, deadline)
        except BaseException as exc:
            # a zygote that failed to hand over a process, or answered too late, is out of step with us
            self.zygote_lost = not self._forked and isinstance(exc, (ZygoteLost, ChildTimeout))
            self.close()
            raise

    def _start(self, job: dict, deadline: float) -> None:
        rlimits = self.limits.rlimits(whole_snippet_budget=self.zygote.cgroup is not None)
        settings = {
            "uid": self._lease.uid if self._lease else None,
            "rlimits": rlimits,
        }
        self._pid = self.zygote.start(settings, self.child_fds, deadline)
        self._forked = True
        self._attach()
        self.send(job, deadline)  # it reads the job only once its uid and limits are in place

    def close(self) -> None:
        """Kill the program and all it started, have the zygote clean up, hand the zygote back."""
        if self._closed:
            return
        self._closed = True
        lease, self._lease = self._lease, None
        try:
            if self._pid is not None:  # a zombie until the zygote reaps it at "clean": no pid reuse
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._pid, signal.SIGKILL)
            self._close_fds()  # a child we never heard from exits on its own when its pipes close
            if self._forked and not self.zygote.alive():
                self.zygote_lost = True  # it died under the program: see grading's REGRADES
            elif not self.zygote.empty_cgroup(self._pid):
                self.zygote_lost = True
                log.warning("a sandbox program left processes that survive SIGKILL; fork server replaced")
            elif self._forked:
                self.zygote.clean_later(lease)  # the lease goes with it
                lease = None
        except ZygoteLost:
            self.zygote_lost = True
        finally:
            self._close_fds()
            if lease is not None:
                lease.release()
            self._on_close(self)


class ForkServer:
    """Hands out programs forked from zygotes: each zygote serves one program at a time.

    ``zygotes`` (two per worker) start with the sandbox, so no program waits for one; a zygote
    that fails is replaced when its program closes. ``restarts`` counts the replacements.
    """

    def __init__(self, launcher: Launcher, limits: Limits, zygotes: int) -> None:
        if launcher.mode != "bwrap":
            raise ValueError(f"the fork server runs under bwrap only, not {launcher.mode}")
        self.launcher = launcher
        self.limits = limits
        self.fresh = ChildSource(launcher, limits)  # standalone runs need an exit status
        self.restarts = 0
        self._idle: deque[Zygote] = deque()  # the longest idle first: its clean-up is done
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
            idle, self._idle = self._idle, deque()
        for zygote in idle:
            zygote.close()
        self.fresh.close()

    def _take(self) -> Zygote | None:
        """An idle zygote whose last clean-up is done (the longest idle first), waiting for one if need be.

        One that is stuck in its clean-up is never waited for long: after ``CLEANUP_TIMEOUT_S`` it
        is replaced (in the background, off every program's clock).
        """
        while True:
            with self._lock:
                idle = list(self._idle)
                found = next((zygote for zygote in idle if zygote.settled()), None)
                stuck = [zygote for zygote in idle if zygote is not found and zygote.overdue()]
                for zygote in [found, *stuck]:
                    if zygote is not None:
                        self._idle.remove(zygote)
            for zygote in stuck:
                self._replace(zygote)
            if found is not None:
                return found
            waiting = [zygote for zygote in idle if zygote not in stuck]
            if not waiting:
                return self._ready(Zygote(self.launcher, self.limits), keep=False)
            poll_any([zygote.control.fileno() for zygote in waiting], CLEANUP_TIMEOUT_S)

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
        self._replace(zygote, wait=True)

    def _replace(self, zygote: Zygote, wait: bool = False) -> None:
        """Close a failed zygote and start another in its place (``wait``: before returning)."""
        self.restarts += 1
        zygote.close()
        if self._closed:
            return
        if wait:
            self._ready(Zygote(self.launcher, self.limits))
        else:
            threading.Thread(target=self._ready, args=(Zygote(self.launcher, self.limits),), daemon=True).start()
