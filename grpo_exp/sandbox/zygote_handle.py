"""The trainer's handle on one zygote (``zygote``): its bwrap process, control socket and program cgroup.

A zygote lives in the trainer's cgroup and runs only trusted code. Each process it forks for a
program moves itself, before it runs anything of the program's, into a cgroup the zygote keeps
for its programs (memory ``memory_mb``, ``max_processes`` processes), through files the parent
opened and handed the zygote once (``SnippetCgroup.self_join_files``). A program that runs out
of memory meets the OOM killer there, among its own processes alone: no program can have its
zygote killed for its memory, whatever oom_score_adj it gives itself. (It may lower the 1000 it
starts with: the kernel keeps a floor only when the writer holds CAP_SYS_RESOURCE, which even
root lacks in some containers.) Before, zygote and program shared one cgroup, and a program
that lowered its score to 0 and held memory outside its RSS (memfd pages) got the zygote killed.
"""

from __future__ import annotations

import logging
import marshal
import os
import select
import socket
import struct
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from grpo_exp.sandbox import cgroups, seccomp
from grpo_exp.sandbox.cgroups import SnippetCgroup
from grpo_exp.sandbox.identity import UidLease
from grpo_exp.sandbox.isolation import Launcher
from grpo_exp.sandbox.launch_thread import LaunchThread
from grpo_exp.sandbox.limits import MIB, Limits
from grpo_exp.sandbox.process import (
    CHILD_SOURCE,
    CLEANUP_TIMEOUT_S,
    ChildTimeout,
    child_env,
    children_of,
    end_process,
    hung_up,
    poll_one,
)

log = logging.getLogger("grpo_exp.sandbox")

ZYGOTE_SOURCE = Path(__file__).with_name("zygote.py").read_text()
ZYGOTE_PROGRAM = CHILD_SOURCE + "\n" + ZYGOTE_SOURCE + "\n_serve_forks()\n"
# Imported once by each zygote, so programs that use them skip it (21 of HumanEval's 164 prompts import typing).
# Not random (it reseeds in every forked child) nor hashlib (it maps libcrypto, which every fork copies):
# each would cost all programs more than it saves the few that import it.
PRELOADED_MODULES = ("collections", "functools", "heapq", "itertools", "math", "re", "string", "typing")
ZYGOTE_START_TIMEOUT_S = 30.0  # bwrap, Python and the imports; a loaded machine can take seconds
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
    """One fork server process (bwrap + the trusted ``zygote`` code), its control socket and program cgroup.

    Its programs run one at a time in ``cgroup``, made once per zygote: each process the zygote
    forks for a program moves itself in first, before the program's clock starts (see the module
    docstring). Pages a program copies from the zygote count as the program's.
    """

    def __init__(self, launcher: Launcher, limits: Limits, launch: LaunchThread) -> None:
        self.pid: int | None = None  # the zygote's, once it said it is ready
        self.cgroup: SnippetCgroup | None = None
        self._spare: socket.socket | None = None  # to the process forked for the next program
        self._spare_pid: int | None = None  # that process's pid, once collected
        self._cleaning_since: float | None = None  # when the clean-up now unanswered was asked for
        self._cleaning_as: UidLease | None = None  # the uid it runs as, released once it is answered
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.control.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            args = ["-I", "-S", "-c", ZYGOTE_PROGRAM, str(theirs.fileno()), ",".join(PRELOADED_MODULES)]
            args.append(str(limits.max_leftovers))
            with seccomp.filter_fd() as filter_fd:
                fds = (theirs.fileno(),) if filter_fd is None else (theirs.fileno(), filter_fd)
                self.popen = launch.call(
                    lambda: subprocess.Popen(
                        launcher.zygote_argv(args, limits, filter_fd),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        pass_fds=fds,
                        cwd="/",
                        env={**child_env(launcher.workdir or "/"), **ZYGOTE_ENV},
                        start_new_session=True,
                    )
                )
        except BaseException:
            self.control.close()
            raise
        finally:
            theirs.close()

    def wait_ready(self, limits: Limits) -> None:
        """Wait until the zygote has set itself up, make its program cgroup, ask for its first spare.

        Raises ZygoteLost or ChildTimeout. The spare comes as the answer to a first clean-up, which
        hands the zygote the program cgroup's join files: each spare moves itself in.
        """
        self.pid = self._answer(b"ready", time.monotonic() + ZYGOTE_START_TIMEOUT_S)
        joins: list[int] = []
        try:
            if limits.cgroup and cgroups.hierarchies():
                self.cgroup = SnippetCgroup(cgroups.hierarchies(), limits.memory_mb * MIB, limits.max_processes)
                joins = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in self.cgroup.self_join_files()]
            self.clean_later(None, joins)
        finally:
            for fd in joins:
                os.close(fd)

    def collect(self) -> None:
        """Take the last clean-up's answer, there already (``settled``), and the pid of the spare it brought.

        Raises ZygoteLost unless the zygote answered "clean" and the spare is there.
        """
        if self._cleaning_since is not None:
            try:
                self._answer(b"clean", time.monotonic())
            finally:
                self._cleaning_since = None
                self._release_cleaning_uid()
        if self._spare_pid is None:
            self._spare_pid = self._only_child()  # the zygote reaps nothing of it before our next clean-up request

    def start(self, settings: dict, fds: Sequence[int]) -> int:
        """Hand ``settings`` and the program's ``fds`` to the spare (``collect`` first); its pid. Raises ZygoteLost."""
        spare, self._spare = self._spare, None
        pid, self._spare_pid = self._spare_pid, None
        if spare is None or pid is None:
            raise ZygoteLost("fork server has no process ready")
        try:
            with spare:
                socket.send_fds(spare, [marshal.dumps(settings)], list(fds))
        except OSError as exc:
            raise ZygoteLost(f"the fork server's process is gone: {exc}") from None
        return pid

    def clean_later(self, lease: UidLease | None, fds: Sequence[int] = ()) -> None:
        """Ask for the last program's clean-up without waiting: ``collect`` takes the answer.

        ``lease`` (the program's uid, which the clean-up runs as) is released once it is done;
        ``fds`` go with the request (the program cgroup's join files, with the first).
        """
        try:
            socket.send_fds(self.control, [marshal.dumps({"uid": lease.uid if lease else None})], list(fds))
        except OSError as exc:
            raise ZygoteLost(f"fork server gone: {exc}") from None
        self._cleaning_since = time.monotonic()
        self._cleaning_as = lease

    def settled(self) -> bool:
        """Whether its last clean-up is answered (or none is due): ``collect`` will not wait."""
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
        if self.cgroup is None:
            return True
        return self.cgroup.empty_but({program} if program else set())

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

    def _only_child(self) -> int:
        """The spare: the zygote's only child between a clean-up and the next program's."""
        found = children_of(self.pid) if self.pid is not None else []
        if len(found) != 1:
            raise ZygoteLost(f"fork server has {len(found)} children, not 1")
        return found[0]
