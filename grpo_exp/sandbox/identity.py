"""Throw-away user ids for snippets when the trainer runs as root.

Root ignores RLIMIT_NPROC, may raise its own limits and may write anywhere, so a snippet must
never run as root. Each running snippet borrows a uid of its own from a high, unused range:
the process limit then counts only that snippet's processes, and every process left with that
uid after the run is known to be the snippet's and can be killed. Borrowing is guarded by
``flock`` on a per-uid lock file, so concurrent workers and concurrent trainer processes (one
per GPU rank) never share a uid.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from grpo_exp import proc
from grpo_exp.sandbox.reaper import kill_until_gone

SANDBOX_UID_BASE = 2_000_000_000  # far above regular, system and container-remapped ids
SANDBOX_UID_SLOTS = 4096
LOCK_DIR_NAME = "grpo-sandbox-uids"
SWEEP_ROUNDS = 200  # kill-and-rescan rounds before giving up on a uid's processes
SWEEP_PAUSE_S = 0.005

_next_slot = itertools.count()


def running_as_root() -> bool:
    """Whether this process can (and so must) hand snippets a uid of their own."""
    return os.geteuid() == 0


@dataclass
class UidLease:
    """One borrowed uid; release it only after every process that used it is gone."""

    uid: int
    _lock_fd: int

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = -1


def _lock_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), LOCK_DIR_NAME)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    return path


def lease_uid() -> UidLease:
    """Borrow a free sandbox uid; raises RuntimeError when every slot is taken."""
    lock_dir = _lock_dir()
    start = next(_next_slot)
    for offset in range(SANDBOX_UID_SLOTS):
        uid = SANDBOX_UID_BASE + (start + offset) % SANDBOX_UID_SLOTS
        fd = os.open(os.path.join(lock_dir, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise RuntimeError(f"all {SANDBOX_UID_SLOTS} sandbox uids are in use")


def _pids_of(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid and not proc.is_zombie(int(name)):
                    pids.append(int(name))
            except OSError:
                continue  # exited while we looked
    return pids


def kill_uid(uid: int) -> bool:
    """SIGKILL every process running as ``uid`` until none is left; False if some survive.

    Catches what ``killpg`` misses without PID namespaces: a grandchild that called setsid().
    """
    return kill_until_gone(lambda: _pids_of(uid), SWEEP_ROUNDS, SWEEP_PAUSE_S)


def traversable_by_others(paths: Iterable[str]) -> bool:
    """Whether an unprivileged stranger can reach and read every one of ``paths``.

    When it cannot (an interpreter under /root, say), a root trainer without a mount namespace
    must let the snippet's uid keep CAP_DAC_READ_SEARCH to run the interpreter at all.
    """
    for path in paths:
        real = os.path.realpath(path)
        ancestors = [os.path.dirname(real)]
        while ancestors[-1] != os.sep:
            ancestors.append(os.path.dirname(ancestors[-1]))
        try:
            if not all(os.stat(a).st_mode & stat.S_IXOTH for a in ancestors):
                return False
            mode = os.stat(real).st_mode
        except OSError:
            return False
        if not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH):
            return False
    return True
