"""What Linux's /proc says about processes: a process's state and parent, and the tree below a process.

``/proc/<pid>/stat`` is parsed here and nowhere else. Its second field, the command name in
parentheses, may itself hold spaces and parentheses, so the fields are read after the *last* ``)``.
"""

from __future__ import annotations

import os
from typing import NamedTuple

PROC = "/proc"
READ_CHUNK = 4096  # a stat line is well under 1 KiB


class Stat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` this project reads."""

    state: str  # R running, S sleeping, D disk wait, Z zombie, T stopped, ...
    parent: int


def stat(pid: int | str) -> Stat | None:
    """``pid``'s state and parent; None when it has exited (or its file can't be read or parsed).

    Read with ``os.open``/``os.read`` rather than a file object: the sandbox reads it per snippet."""
    try:
        fd = os.open(f"{PROC}/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = b""
        while chunk := os.read(fd, READ_CHUNK):
            data += chunk
        state, parent = data.rpartition(b")")[2].split()[:2]
        return Stat(state.decode("ascii"), int(parent))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` has ended: a zombie, or no longer listed at all."""
    found = stat(pid)
    return found is None or found.state == "Z"


def parents() -> dict[int, int]:
    """Every listed process's parent, by pid, from one scan of /proc (processes gone meanwhile left out)."""
    found = {}
    for name in os.listdir(PROC):
        if name.isdigit() and (entry := stat(name)) is not None:
            found[int(name)] = entry.parent
    return found


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, whichever of its threads started them."""
    return [child for child, parent in parents().items() if parent == pid]


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, parents before their children, from one scan of /proc."""
    below: dict[int, list[int]] = {}
    for child, parent in parents().items():
        below.setdefault(parent, []).append(child)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += below.get(pid, [])
    return tree
