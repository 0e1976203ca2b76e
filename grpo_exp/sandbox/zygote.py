"""Trusted fork server inside the sandbox: a ready interpreter that forks a process per program.

Starting an isolated interpreter costs ~25 ms of CPU; forking a ready one costs a small part of
that. So the sandbox keeps long-lived interpreters (zygotes) under the same bwrap namespaces a
fresh interpreter gets. A zygote runs only this trusted code: it imports the modules programs
commonly use, compiles and runs a sample program once (``_warm_up``), then serves the parent.
The parent runs it as ``python -I -S -c`` with child.py's source, this source and a call to
``_serve_forks()``; its arguments are the control socket's fd, the modules to import and the
most entries a clean-up may remove (``Limits.max_leftovers``).

The zygote forks the next program's process ahead of time (a spare) and hands the parent a
socket to it; the parent sends the spare its program's settings directly (``{"uid": ...,
"rlimits": [...]}``, marshal: the parent is trusted) with two fds (request read end, reply
write end). The spare closes every other fd as soon as it is forked, takes /dev/null as its
stdio (a graded program's output is never read) and starts its own session; given its settings
it drops to the program's uid (a root trainer leases one per program; without root it keeps the
zygote's), applies the program's rlimits and only then reads its job: from there on it is
child.py's ``_run_job``, exactly as in a fresh interpreter. The program never passes through
the zygote, so no process ever holds another program's code.

Every page a forked process writes is copied from the zygote's first, at a few microseconds
each, and that, not Python, is most of what a program costs. So the code between a fork and the
program's job does as little as it can: plain fds and syscalls, no file objects, no parsing.

After the parent has killed the program (and what it started) it sends ``{"uid": ...}`` on the
control socket: the zygote reaps the program and, if it left files in the working folder or
System V IPC objects (the only things a program can leave in the zygote's namespaces that
outlive its processes; POSIX message queues are refused by ``RLIMIT_MSGQUEUE = 0``, keyrings by
the seccomp filter), removes them from a process running as that uid, so it can remove nothing
else. Only then does it fork the next spare, and it answers "clean" with the spare's socket, or
"dirty" (something could not be removed) and the parent replaces it. What was left is counted
first, in one syscall whatever it is (the working folder is a tmpfs of its own, whose inode
count ``statvfs`` gives; a hard link costs tmpfs an inode too), and the walk that removes it
stops after as many entries: a program that left more than ``max_leftovers`` makes its zygote
"dirty" without a walk, and the parent discards the zygote, tmpfs and all, instead. So one
program's clean-up costs at most that many removals, never the seconds 200,000 folders take.

A program cannot reach back into the zygote: it runs as another uid under a root trainer, and
the zygote is not dumpable (no ptrace, no /proc/<pid>/mem) in either case. Without root it can
still kill the zygote, which takes its namespace, itself included, down: the parent grades it
again, once, on another zygote (see ``forkserver``).
"""

import contextlib
import ctypes
import itertools
import marshal
import os
import socket
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # in the sandbox these come from child.py, whose source runs first
    from grpo_exp.sandbox.child import _apply_limits, _Codec, _run_job

MAX_REQUEST_BYTES = 65536
FDS_PER_PROGRAM = 2  # the request pipe's read end and the reply pipe's write end
MAX_JOIN_FDS = 8  # the program cgroup's join files, one per hierarchy, with the first clean-up request
SYS_CLOSE_RANGE = 436  # close_range(2), Linux 5.9+: the same number on every architecture
LAST_FD = 0xFFFFFFFF  # close_range's "and every fd above"
PR_SET_DUMPABLE = 4
OOM_FIRST = b"1000"  # oom_score_adj of a program: the machine's OOM killer takes it before the trainer
IPC_RMID = 0
SYSV_IPC = ("shm", "msg", "sem")
_libc = ctypes.CDLL(None, use_errno=True)


def _serve_forks():
    os.environ.pop("LD_BIND_NOW", None)  # zygote_handle.ZYGOTE_ENV: the zygote's alone
    control = socket.socket(fileno=int(sys.argv[1]))
    max_leftovers = int(sys.argv[3])
    null = os.open("/dev/null", os.O_RDWR)  # every spare's stdio
    closes_range = _close_range(LAST_FD - 1) == 0  # on an fd never open: does the kernel (and seccomp) allow it?
    for name in sys.argv[2].split(","):
        if name:
            __import__(name)
    _warm_up()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, no /proc/<pid>/mem: see the docstring
    workdir = os.getcwd()
    baseline = _inodes_used(workdir)  # the empty folder's own
    spare = None  # forked at the parent's first clean-up request, which brings the cgroup's join files
    joins = []
    _answer(control, b"ready", None)  # the kernel attaches our pid for the parent
    while True:
        try:
            data, fds, _flags, _address = socket.recv_fds(control, MAX_REQUEST_BYTES, MAX_JOIN_FDS)
        except OSError:
            data, fds = b"", []
        joins += fds
        if not data:
            os._exit(0)  # the parent is gone (an unused spare follows: its socket closes)
        request = marshal.loads(data)  # the only request: clean up after the spare's program
        if spare is not None:
            os.waitpid(spare[0], 0)  # the parent has killed it
            spare = None
        if _clean(workdir, baseline, request["uid"], max_leftovers):
            spare = _fork_spare(null, closes_range, joins)
            _answer(control, b"clean", spare)
        else:
            _answer(control, b"dirty", None)


def _answer(control, word, spare):
    """Send ``word``, and the spare's socket if there is one (the parent then talks to it directly)."""
    try:
        socket.send_fds(control, [word], [spare[1].fileno()] if spare else [])
    except OSError:
        os._exit(0)  # the parent is gone
    if spare:
        spare[1].close()


def _fork_spare(null, closes_range, joins):
    """Fork the next program's process ahead of its request: (pid, socket its request comes on).

    It is forked only after the last program was cleaned up and runs nothing but this trusted
    code while it waits for the request, which the parent sends it directly. First it moves
    itself into the program cgroup (``joins``: see zygote_handle), or exits.
    """
    line, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            for fd in joins:
                os.write(fd, b"0")  # this thread, the process's only one
            kept = theirs.fileno()
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, kept)  # the zygote's sockets and /dev/null among them
            _close_from(kept + 1, closes_range)
            os.setsid()
            data, fds, _flags, _address = socket.recv_fds(theirs, MAX_REQUEST_BYTES, FDS_PER_PROGRAM)
            if data:
                theirs.close()
                _become_program(marshal.loads(data), fds)
        finally:
            os._exit(0)
    theirs.close()
    return pid, line


WARM_UP = """
from typing import List
class Pair:
    def __init__(self, a: int, b: int) -> None:
        self.a, self.b = a, b
def solve(xs: List[int]) -> dict:
    total = sum(x * x for x in xs if x % 2 == 0)
    seen = {x: [y for y in range(x)] for x in xs[:3]}
    try:
        label = f"{total:>4}" + str(len(seen))
    except ValueError:
        label = ""
    return {"total": total, "label": label, "sorted": sorted(xs, key=lambda x: -x)}
"""


def _warm_up():
    """Compile and run a typical program once: a forked child then starts ~4x cheaper.

    The parser and compiler set themselves up on first use; done here, every child inherits
    that instead of paying for it (and for copying the pages it touches) itself.
    """
    names = {"__name__": "warm_up"}
    exec(compile(WARM_UP, "<warm-up>", "exec"), names)
    _Codec({}).enc(names["solve"]([1, 2, 3, 4]))


def _become_program(request, fds):
    """In the forked child: take the program's pipes, uid and limits, then run its job."""
    try:
        req_r, resp_w = fds
        _become(request["uid"])
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as after an exec: its own /proc files are its own
        oom = os.open("/proc/self/oom_score_adj", os.O_WRONLY)  # should the machine run out of memory
        os.write(oom, OOM_FIRST)
        os.close(oom)
        _apply_limits(request["rlimits"])
        _run_job(req_r, resp_w, output_is_null=True)
    finally:
        os._exit(0)


def _become(uid):
    """Drop to ``uid`` for good (setresuid from root also clears every capability)."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)


def _close_range(first):
    """close_range(2) of every fd from ``first`` up: 0, or -1 where the kernel or a seccomp filter refuses it."""
    return _libc.syscall(SYS_CLOSE_RANGE, ctypes.c_uint(first), ctypes.c_uint(LAST_FD), ctypes.c_uint(0))


def _close_from(first, closes_range):
    """Close every fd from ``first`` up: one syscall where allowed, else each fd /proc lists.

    Not ``os.closerange(first, <huge>)``: a Python built without close_range (against an old glibc,
    as conda's are) or an old kernel falls back to calling close() on every number up to the end.
    """
    if closes_range:
        _close_range(first)
        return
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd >= first:
            with contextlib.suppress(OSError):  # the listing's own fd, already closed
                os.close(fd)


def _clean(workdir, baseline, uid, budget):
    """Remove what the last program left in the working folder and in System V IPC; False if some stays.

    At most ``budget`` entries in all (see the module docstring): beyond that it answers False
    without a walk, or stops walking.
    """
    left = _inodes_used(workdir) - baseline
    ipc = _ipc_ids()
    if not left and not ipc:
        return True
    if left + len(ipc) > budget:
        return False
    cleaner = os.fork()
    if cleaner == 0:
        try:
            _become(uid)
            with contextlib.suppress(OSError, RecursionError):  # what stays makes this zygote "dirty"
                _remove_below(workdir, budget - len(ipc))
            for kind, ipc_id in ipc:
                if kind == "sem":
                    _libc.semctl(ipc_id, 0, IPC_RMID)
                else:
                    getattr(_libc, kind + "ctl")(ipc_id, IPC_RMID, None)
        finally:
            os._exit(0)
    os.waitpid(cleaner, 0)
    return _inodes_used(workdir) == baseline and not _ipc_ids()


def _inodes_used(folder):
    """Inodes in use on ``folder``'s file system (the working folder's own tmpfs): one syscall, whatever is in it."""
    usage = os.statvfs(folder)
    return usage.f_files - usage.f_ffree


def _remove_below(folder, budget):
    """Remove everything below ``folder``, whatever modes the program left, reading at most ``budget`` entries.

    Returns what is left of the budget; raises OSError once it is spent, or for what cannot be removed.
    """
    with os.scandir(folder) as listing:
        entries = [(entry.path, entry.is_dir(follow_symlinks=False)) for entry in itertools.islice(listing, budget + 1)]
    if len(entries) > budget:
        raise OSError("more left than a clean-up removes")
    budget -= len(entries)
    for path, is_folder in entries:
        if is_folder:
            os.chmod(path, 0o700)
            budget = _remove_below(path, budget)
            os.rmdir(path)
        else:
            os.unlink(path)
    return budget


def _ipc_ids():
    """``(kind, id)`` of every System V IPC object in this namespace."""
    found = []
    for kind in SYSV_IPC:
        try:
            table = _read_file("/proc/sysvipc/" + kind)
        except OSError:
            continue
        found += [(kind, int(line.split()[1])) for line in table.splitlines()[1:] if line.strip()]
    return found


def _read_file(path):
    """The whole file as bytes, without a file object (see the docstring)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, MAX_REQUEST_BYTES)]
        while chunks[-1]:
            chunks.append(os.read(fd, MAX_REQUEST_BYTES))
    finally:
        os.close(fd)
    return b"".join(chunks)
