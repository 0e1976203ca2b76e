"""A memory and process budget for each snippet as a whole, in a cgroup of its own.

rlimits are per process: a snippet that forks N children may hold N x ``memory_mb``. A cgroup
counts every process of the snippet together (page cache and tmpfs files included), and the
kernel's OOM killer acts inside it alone when the snippet goes over. Each sandboxed
interpreter gets a fresh cgroup (one directory per hierarchy), entered by a trusted shell step
that writes its own pid into it and then execs the isolation tool, so every process the
snippet will ever start is born inside. ``close()`` kills whatever is left in it and removes it.

Where the machine offers them (checked once per process, by really creating a cgroup):

- cgroup v2 with the memory and pids controllers delegated to the trainer's cgroup:
  ``memory.max``, ``memory.swap.max = 0``, ``pids.max``;
- else cgroup v1 memory (``memory.limit_in_bytes``, plus ``memory.memsw.limit_in_bytes`` where
  swap is accounted) and, if mounted, pids (``pids.max``) below the trainer's own cgroups.

Without either (no root, a read-only /sys/fs/cgroup) there is no budget for the whole snippet,
so ``Limits.rlimits`` forbids forking instead (RLIMIT_NPROC = 1): the total is then one
process's ``memory_mb``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass
from functools import cache

from grpo_exp.sandbox.reaper import kill_until_gone, pids_in

log = logging.getLogger("grpo_exp.sandbox")

ROOT = "/sys/fs/cgroup"
PREFIX = "grpo-sandbox"
KILL_ROUNDS = 100  # kill-and-rescan rounds before giving up on emptying a cgroup
KILL_PAUSE_S = 0.01
PROCS = "cgroup.procs"  # write a pid to move that process; read: the processes inside
V1_SELF_JOIN = "tasks"  # v1: write a thread id ("0": the writer) to move that thread alone
# the trusted step: join every cgroup named by the first arguments, then become the rest
JOIN_SCRIPT = (
    'unset PWD OLDPWD; n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1"; shift; n=$((n - 1)); done; exec "$@"'
)

_serial = itertools.count()


@dataclass(frozen=True)
class Hierarchy:
    """Where snippet cgroups of one kind are made, and the limit files they get."""

    parent: str  # the trainer's own cgroup in this hierarchy
    version: int
    controllers: tuple[str, ...]  # "memory", "pids"

    def settings(self, memory_bytes: int, processes: int) -> list[tuple[str, str, bool]]:
        """``(file, value, required)`` to write into a new cgroup of this hierarchy."""
        found: list[tuple[str, str, bool]] = []
        if "memory" in self.controllers:
            if self.version == 2:
                found += [("memory.max", str(memory_bytes), True), ("memory.swap.max", "0", False)]
            else:
                found += [("memory.limit_in_bytes", str(memory_bytes), True)]
                found += [("memory.memsw.limit_in_bytes", str(memory_bytes), False)]
        if "pids" in self.controllers:
            found.append(("pids.max", str(processes), True))
        return found


class SnippetCgroup:
    """One snippet's cgroups (a directory per hierarchy), made with their limits set."""

    def __init__(self, hierarchies: tuple[Hierarchy, ...], memory_bytes: int, processes: int) -> None:
        self.paths: list[str] = []
        self._versions = [hierarchy.version for hierarchy in hierarchies]
        name = f"{PREFIX}-{os.getpid()}-{next(_serial)}"
        try:
            for hierarchy in hierarchies:
                path = os.path.join(hierarchy.parent, name)
                os.mkdir(path)
                self.paths.append(path)
                for filename, value, required in hierarchy.settings(memory_bytes, processes):
                    _write(os.path.join(path, filename), value, required)
        except BaseException:
            self.close()
            raise

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started inside these cgroups."""
        procs = [os.path.join(path, PROCS) for path in self.paths]
        return ["/bin/sh", "-c", JOIN_SCRIPT, "cgroup-join", str(len(procs)), *procs, *argv]

    def self_join_files(self) -> list[str]:
        """Per hierarchy, the file a process writes "0" into to move itself in (see ``zygote_handle``).

        v1's ``tasks`` moves the writing thread alone, which spares the kernel the global lock that
        makes a move by pid cost ~0.3 ms of CPU here (a single-threaded process moves whole); v2
        has only ``cgroup.procs``.
        """
        return [
            os.path.join(path, V1_SELF_JOIN if version == 1 else PROCS)
            for path, version in zip(self.paths, self._versions, strict=True)
        ]

    def empty_but(self, keep: set[int]) -> bool:
        """Kill every process inside but ``keep`` (a program still exiting) until none is left; False if any survive."""
        return kill_until_gone(
            lambda: {pid for path in self.paths for pid in _members(path)} - keep, KILL_ROUNDS, KILL_PAUSE_S
        )

    def close(self) -> None:
        """Kill every process left inside, then remove the directories."""
        for path in reversed(self.paths):
            if not _empty_and_remove(path):
                log.error("sandbox cgroup %s could not be emptied and removed", path)
        self.paths = []


def _write(path: str, value: str, required: bool) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except OSError:
        if required:
            raise


def _members(path: str) -> list[int]:
    try:
        return pids_in(os.path.join(path, PROCS))
    except OSError:
        return []


def _empty_and_remove(path: str) -> bool:
    for _ in range(KILL_ROUNDS):
        for pid in _members(path):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:  # busy until the killed processes are reaped
            time.sleep(KILL_PAUSE_S)
    return False


@cache
def hierarchies() -> tuple[Hierarchy, ...]:
    """The hierarchies to budget snippets in here: v2, else v1 memory (+ pids); () when none works."""
    mounts = _mounts()
    own = _own_cgroups()
    v2 = [_v2(mount, own.get("")) for mount in mounts.get("cgroup2", [])]
    found = tuple(h for h in v2 if h is not None)
    if not found:
        memory = _v1(mounts, own, "memory")
        pids = _v1(mounts, own, "pids")
        found = tuple(h for h in (memory, pids) if h is not None) if memory else ()
    if found and not _works(found):
        found = ()
    for hierarchy in found:
        _remove_stale(hierarchy.parent)
    log.debug("sandbox cgroups: %s", found or "none usable")
    return found


def _remove_stale(parent: str) -> None:
    """Remove the empty cgroups that trainers killed before their clean-up left behind."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX + "-")]
    except OSError:
        return
    for name in names:
        owner = name[len(PREFIX) + 1 :].partition("-")[0]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(parent, name))  # refused while processes remain inside


def _mounts() -> dict[str, list[tuple[str, str, set[str]]]]:
    """cgroup mounts by type: ``(mount root, mount point, options)``."""
    found: dict[str, list[tuple[str, str, set[str]]]] = {}
    try:
        with open("/proc/self/mountinfo") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return found
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, extra = head.split(), tail.split()
        if len(fields) >= 5 and len(extra) >= 3 and extra[0] in ("cgroup", "cgroup2"):
            found.setdefault(extra[0], []).append((fields[3], fields[4], set(extra[2].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """The trainer's cgroup path per controller ("" for v2)."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh.read().splitlines():
                _, controllers, path = line.split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    found[controller] = path
    except (OSError, ValueError):
        pass
    return found


def _inside(mount: tuple[str, str, set[str]], path: str | None) -> str | None:
    root, point, _ = mount
    if path is None or not (path == root or path.startswith(root.rstrip("/") + "/")):
        return None
    return os.path.join(point, path[len(root) :].lstrip("/"))


def _v2(mount: tuple[str, str, set[str]], path: str | None) -> Hierarchy | None:
    parent = _inside(mount, path)
    if parent is None:
        return None
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as fh:
            enabled = set(fh.read().split())
    except OSError:
        return None
    if {"memory", "pids"} <= enabled:
        return Hierarchy(parent, 2, ("memory", "pids"))
    return None


def _v1(mounts: dict, own: dict[str, str], controller: str) -> Hierarchy | None:
    for mount in mounts.get("cgroup", []):
        if controller in mount[2]:
            parent = _inside(mount, own.get(controller))
            return Hierarchy(parent, 1, (controller,)) if parent else None
    return None


def _works(found: tuple[Hierarchy, ...]) -> bool:
    try:
        SnippetCgroup(found, 64 * 1024 * 1024, 4).close()
    except OSError as exc:
        log.debug("sandbox cgroups unusable: %s", exc)
        return False
    return True
