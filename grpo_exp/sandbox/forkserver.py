"""Programs forked from ready interpreters (zygotes, see ``zygote`` and ``zygote_handle``) under bwrap.

A fresh isolated interpreter per program (``spares``) spends most of its ~25 ms of CPU on
bwrap and Python's start-up; a fork of a zygote that has already started, under the same
namespaces and seccomp filter, costs a small part of that. Each program still gets its own
process, session, uid (under a root trainer), cgroup budget (memory and processes of the program
as a whole, in a cgroup that holds the program alone), rlimits (CPU, address space, files,
processes, no POSIX message queues) and deadlines, and the parent kills it and everything it
started as before. What a fresh interpreter got from fresh namespaces, a forked program gets
from its zygote cleaning up before it forks again: the working folder is emptied and System V
IPC objects are removed (``zygote``). A zygote that cannot clean up, dies or stops answering is
killed and replaced, and a program whose zygote died while it ran is graded again
(``grading``), so nothing is lost and nothing is carried over.

Each zygote forks the next program's process as soon as it has cleaned up after the last one,
and there are two per worker: a program starts on the zygote that has been idle longest, whose
next process is waiting, while the other cleans up. Nothing of that is on a program's clock:
its clocks start once it has its process (``Channel.started``), however long it waited. A
clean-up removes at most ``Limits.max_leftovers`` entries; a program that left more has its
zygote discarded instead, tmpfs and all, and a new one boots in the background, off every
program's clock: so one program's clean-up costs at most a zygote's start, whatever it made.
Every zygote is started from one thread that lives as long as the server (``launch_thread``):
bwrap's ``--die-with-parent`` follows the thread that started it, not the trainer.

Only ``serve`` jobs (grading) are forked; a standalone run (``runner``) needs its exit status,
which a forked child reports to the zygote, not to us, so it gets a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable

from grpo_exp.sandbox import identity
from grpo_exp.sandbox.isolation import Launcher
from grpo_exp.sandbox.launch_thread import LaunchThread
from grpo_exp.sandbox.limits import Limits
from grpo_exp.sandbox.process import CLEANUP_TIMEOUT_S, Channel, ChildTimeout, poll_any
from grpo_exp.sandbox.spares import ChildSource
from grpo_exp.sandbox.zygote_handle import ZYGOTE_START_TIMEOUT_S, Zygote, ZygoteLost

log = logging.getLogger("grpo_exp.sandbox")

FORK_TRIES = 3  # zygotes tried for one program before the failure counts against it
# Longest a program waits for a zygote (off its clock): a stuck clean-up noticed, then a new zygote booted.
TAKE_TIMEOUT_S = CLEANUP_TIMEOUT_S + ZYGOTE_START_TIMEOUT_S
TAKE_POLL_S = 0.02  # while no zygote is idle, how often to look for one that has booted meanwhile


class ForkedChild(Channel):
    """One program forked from ``zygote``, with the program's uid and limits, in the zygote's program cgroup.

    ``budget_s`` is its time to read the job (and, for the caller, to load): its clock starts here,
    once it has a zygote, not when it asked for one.
    """

    def __init__(
        self,
        zygote: Zygote,
        limits: Limits,
        job: dict,
        budget_s: float,
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
            self._start(job, self.started + budget_s)
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
        self._pid = self.zygote.start(settings, self.child_fds)
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
    that fails is replaced in the background. ``restarts`` counts the replacements.
    """

    def __init__(self, launcher: Launcher, limits: Limits, zygotes: int) -> None:
        if launcher.mode != "bwrap":
            raise ValueError(f"the fork server runs under bwrap only, not {launcher.mode}")
        self.launcher = launcher
        self.limits = limits
        self.fresh = ChildSource(launcher, limits)  # standalone runs need an exit status
        self.restarts = 0
        self._idle: deque[Zygote] = deque()  # the longest idle first: its clean-up is done
        self._booting = 0  # zygotes starting in the background
        self._failed_boots = 0  # in a row: once one fails while a program waits, it waits no longer
        self._closed = False
        self._lock = threading.Lock()
        self._launch = LaunchThread("sandbox-zygotes")
        for zygote in [self._new_zygote() for _ in range(zygotes)]:  # they boot in parallel
            if zygote is not None and self._ready(zygote):
                self._keep(zygote)

    def start(self, job: dict, budget_s: float) -> Channel:
        """A program that has been sent ``job``; raises ChildTimeout or OSError.

        ``budget_s`` counts from ``Channel.started``: once the program has its process.
        """
        if job["mode"] != "serve":
            return self.fresh.start(job, budget_s)
        failure: Exception | None = None
        for _ in range(FORK_TRIES):
            zygote = self._take()
            try:
                return ForkedChild(zygote, self.limits, job, budget_s, self._give_back)
            except (ZygoteLost, OSError) as exc:  # a zygote killed between programs: the next one
                failure = exc
        raise OSError(f"no sandbox fork server could start the program: {failure}")

    def close(self) -> None:
        """Stop the idle zygotes, then the launch thread, and with it any zygote still booting."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, deque()
        for zygote in idle:
            zygote.close()
        self._launch.close()
        self.fresh.close()

    def _take(self) -> Zygote:
        """An idle zygote whose clean-up is done and clean (the longest idle first), waiting if need be.

        The wait is no program's: its clocks start once it has its process. A zygote that answered
        "dirty" or died, or is stuck in its clean-up for ``CLEANUP_TIMEOUT_S``, is replaced in the
        background; raises OSError when none is ready within ``TAKE_TIMEOUT_S``, or none will be (the
        one started for this program failed).
        """
        give_up = time.monotonic() + TAKE_TIMEOUT_S
        failed_boots = self._failed_boots
        while True:
            with self._lock:
                if self._closed:
                    raise OSError("the sandbox is closed")
                if not self._idle and not self._booting and self._failed_boots > failed_boots:
                    raise OSError("no sandbox fork server could be started")
                found = next((zygote for zygote in self._idle if zygote.settled()), None)
                stuck = [zygote for zygote in self._idle if zygote is not found and zygote.overdue()]
                for zygote in [found, *stuck]:
                    if zygote is not None:
                        self._idle.remove(zygote)
                cleaning = [zygote.control.fileno() for zygote in self._idle]
                short = not self._idle and not self._booting  # all serving or lost: one more
            for zygote in stuck:
                self._replace(zygote)
            if found is not None:
                try:
                    found.collect()
                    return found
                except (ZygoteLost, ChildTimeout) as exc:
                    log.debug("sandbox fork server replaced after its clean-up: %s", exc)
                    self._replace(found)
                    continue
            if short:
                self._boot()
            if time.monotonic() > give_up:
                raise OSError(f"no sandbox fork server was ready within {TAKE_TIMEOUT_S:.0f} s")
            if cleaning:
                poll_any(cleaning, TAKE_POLL_S)
            else:
                time.sleep(TAKE_POLL_S)

    def _new_zygote(self) -> Zygote | None:
        """A zygote started (not yet ready); None, logged, when it could not be."""
        try:
            return Zygote(self.launcher, self.limits, self._launch)
        except OSError as exc:
            if not self._closed:
                log.warning("a sandbox fork server failed to start: %s", exc)
            return None

    def _ready(self, zygote: Zygote) -> bool:
        """Wait for a new zygote to be ready; False (logged, unless the server closed meanwhile) when it failed."""
        try:
            zygote.wait_ready(self.limits)
        except (ZygoteLost, ChildTimeout, OSError) as exc:
            if not self._closed:
                log.warning("a sandbox fork server failed to start: %s", exc)
            zygote.close()
            return False
        return True

    def _boot(self) -> None:
        """Start one more zygote in the background; it joins the idle ones once ready."""
        with self._lock:
            if self._closed:
                return
            self._booting += 1
        threading.Thread(target=self._boot_one, name="sandbox-zygote-boot", daemon=True).start()

    def _boot_one(self) -> None:
        zygote = self._new_zygote()
        ready = zygote is not None and self._ready(zygote)
        self._keep(zygote if ready else None, booted=True)

    def _keep(self, zygote: Zygote | None, booted: bool = False) -> None:
        """Make ``zygote`` idle (``booted``: one that ``_boot`` started is done, ready or not)."""
        with self._lock:
            if booted:
                self._booting -= 1
                self._failed_boots = 0 if zygote is not None else self._failed_boots + 1
            closed = self._closed
            if zygote is not None and not closed:
                self._idle.append(zygote)
        if zygote is not None and closed:
            zygote.close()

    def _give_back(self, child: ForkedChild) -> None:
        zygote = child.zygote
        if not child.zygote_lost and zygote.popen.poll() is None:
            self._keep(zygote)
            return
        child.zygote_lost = True
        self._replace(zygote)

    def _replace(self, zygote: Zygote) -> None:
        """Close a failed zygote and boot another in its place, both in the background, off every program's clock."""
        with self._lock:
            self.restarts += 1
        threading.Thread(target=zygote.close, name="sandbox-zygote-close", daemon=True).start()
        self._boot()
