"""Trusted fork server inside the sandbox: one per worker, forking one child per program.

Starting an isolated interpreter costs ~25 ms of CPU; forking a ready one costs well under
2 ms. So a worker keeps one long-lived interpreter (the zygote) under the same bwrap namespaces
a fresh interpreter gets. It runs only this trusted code: it imports the modules programs
commonly use, then waits for the parent. The parent runs it as ``python -I -S -c`` with
child.py's source, this source and a call to ``_serve_forks()``; its arguments are the control
socket's fd and the modules to import.

Per program the parent sends, on the control socket (SOCK_SEQPACKET, marshal frames: the
parent is trusted), ``{"op": "fork", "uid": ..., "rlimits": [...]}`` with four fds (request
read end, reply write end, stdout, stderr). The zygote answers "forked" (the parent finds the
child as the zygote's only child in /proc). The forked child closes the control socket before
anything else, starts its own session, takes the pipes as its stdio, drops to the program's uid
(a root trainer leases one per program; without root it keeps the zygote's), applies the
program's rlimits and only then reads its job: from there on it is child.py's ``_run_job``,
exactly as in a fresh interpreter. It was born in the zygote's cgroup (see ``forkserver``).
The program never passes through the zygote, so no child ever holds another program's code.

After the parent has killed the program (and emptied its cgroup) it sends ``{"op": "clean",
"uid": ...}``: the zygote reaps the child and, if the program left files in the working folder
or System V IPC objects (the only things a child can leave in the zygote's namespaces that
outlive its processes; POSIX message queues are refused by ``RLIMIT_MSGQUEUE = 0``), removes
them from a process running as that uid, so it can remove nothing else. Replies are one word;
"dirty" (something could not be removed) makes the parent replace this zygote.

A child cannot reach back into the zygote: it runs as another uid under a root trainer, and
the zygote is not dumpable (no ptrace, no /proc/<pid>/mem) in either case. Without root it can
still kill the zygote, which costs only a restart (see ``forkserver``).
"""

import contextlib
import ctypes
import marshal
import os
import socket
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # in the sandbox these come from child.py, whose source runs first
    from grpo_exp.sandbox.child import _apply_limits, _Codec, _run_job

MAX_REQUEST_BYTES = 65536
FDS_PER_FORK = 4  # as in forkserver.py
PR_SET_DUMPABLE = 4
OOM_FIRST = "1000"  # oom_score_adj of a program: the OOM killer takes it before the zygote
IPC_RMID = 0
SYSV_IPC = ("shm", "msg", "sem")
_libc = ctypes.CDLL(None, use_errno=True)


def _serve_forks():
    control = socket.socket(fileno=int(sys.argv[1]))
    for name in sys.argv[2].split(","):
        if name:
            __import__(name)
    _warm_up()
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, no /proc/<pid>/mem: see the docstring
    workdir = os.getcwd()
    child = None
    control.send(b"ready")  # the kernel attaches our pid: the parent moves us into the cgroup
    while True:
        data, fds, _flags, _address = socket.recv_fds(control, MAX_REQUEST_BYTES, FDS_PER_FORK)
        if not data:
            os._exit(0)  # the parent is gone
        request = marshal.loads(data)
        if request["op"] == "fork":
            if child is not None:  # the parent always cleans first; a broken promise is fatal
                os._exit(1)
            child = os.fork()
            if child == 0:
                control.close()
                _become_program(request, fds)
            for fd in fds:
                os.close(fd)
            control.send(b"forked")
        else:
            if child is not None:
                os.waitpid(child, 0)  # the parent has killed it
                child = None
            control.send(b"clean" if _clean(workdir, request["uid"]) else b"dirty")


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
        req_r, resp_w, out_w, err_w = fds
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (null, out_w, err_w):
            os.close(fd)
        _close_other_fds({0, 1, 2, req_r, resp_w})
        _become(request["uid"])
        _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as after an exec: its own /proc files are its own
        with open("/proc/self/oom_score_adj", "w") as fh:  # in the shared cgroup, the program goes first
            fh.write(OOM_FIRST)
        _apply_limits(request["rlimits"])
        _run_job(req_r, resp_w)
    finally:
        os._exit(0)


def _become(uid):
    """Drop to ``uid`` for good (setresuid from root also clears every capability)."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)


def _close_other_fds(keep):
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):  # the listing's own fd, already closed
                os.close(fd)


def _clean(workdir, uid):
    """Remove what the last program left in the working folder and in System V IPC; False if some stays."""
    leftovers = os.listdir(workdir)
    ipc = _ipc_ids()
    if not leftovers and not ipc:
        return True
    cleaner = os.fork()
    if cleaner == 0:
        try:
            _become(uid)
            for name in leftovers:
                with contextlib.suppress(OSError, RecursionError):  # what stays makes this zygote "dirty"
                    _remove(os.path.join(workdir, name))
            for kind, ipc_id in ipc:
                if kind == "sem":
                    _libc.semctl(ipc_id, 0, IPC_RMID)
                else:
                    getattr(_libc, kind + "ctl")(ipc_id, IPC_RMID, None)
        finally:
            os._exit(0)
    os.waitpid(cleaner, 0)
    return not os.listdir(workdir) and not _ipc_ids()


def _remove(path):
    """Remove ``path`` and what is below it, whatever modes the program left; errors are for the caller."""
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)
        for name in os.listdir(path):
            _remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def _ipc_ids():
    """``(kind, id)`` of every System V IPC object in this namespace."""
    found = []
    for kind in SYSV_IPC:
        try:
            with open("/proc/sysvipc/" + kind) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        found += [(kind, int(line.split()[1])) for line in lines if line.strip()]
    return found
