"""One sandboxed interpreter: start it, talk to it, and make sure nothing of it survives.

``close()`` always ends every process the snippet started, whatever it did:

- its session's process group gets SIGKILL (the child starts a new session);
- under bwrap/unshare the child is the init of a PID namespace: killing that init makes the
  kernel kill everything in the namespace, a setsid() double fork included, and the init only
  disappears once they are all gone, which ``close()`` waits for;
- without namespaces, a root trainer also kills everything still running as the snippet's
  leased uid (a non-root trainer has no way to find a setsid() escapee: see ``isolation``);
- whatever is still in the snippet's cgroup (see ``cgroups``) is killed and the cgroup removed;
- the private working folder is removed (a tmpfs under bwrap/unshare vanishes with its namespace).
"""

from __future__ import annotations

import contextlib
import json
import logging
import marshal
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grpo_exp import proc
from grpo_exp.sandbox import cgroups, identity, seccomp
from grpo_exp.sandbox.cgroups import SnippetCgroup
from grpo_exp.sandbox.isolation import Launcher
from grpo_exp.sandbox.limits import MIB, Limits
from grpo_exp.sandbox.reaper import pids_in

log = logging.getLogger("grpo_exp.sandbox")

CHILD_SOURCE = (Path(__file__).with_name("child.py")).read_text()
CHILD_PROGRAM = CHILD_SOURCE + "\n_main()\n"  # a fresh interpreter running one program
READ_CHUNK = 65536
FRAME_LENGTH_BYTES = 4  # as in child.py
CLEANUP_TIMEOUT_S = 5.0  # a killed namespace should be gone well within this
POLL_PAUSE_S = 0.002
EXIT_POLL_S = 0.05  # how often a standalone run checks whether the child has exited
CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"
_SCAN_JSON = json.JSONDecoder().scan_once  # (value, end) of the JSON value at an index


class ChildTimeout(Exception):
    """The child did not answer before the deadline."""


class ProtocolError(Exception):
    """The child sent something that is not a well-formed message."""


@dataclass
class _Output:
    """A capped capture of one output stream; the parent stops reading at the cap."""

    fd: int
    cap: int
    data: bytearray = field(default_factory=bytearray)
    truncated: bool = False


def _parse_message(line: bytes) -> dict:
    """One line from the child: exactly one JSON object, in ASCII (the child writes nothing else).

    The C scanner itself, without ``json.loads``'s layers: a message is read per call into the child.
    """
    try:
        text = line.decode("ascii")
        message, end = _SCAN_JSON(text, 0)
    except (ValueError, RecursionError, StopIteration) as exc:
        raise ProtocolError(f"unreadable message from child: {exc!r}") from None
    if type(message) is not dict or end != len(text):
        raise ProtocolError("message from child is not one JSON object")
    return message


def child_env(workdir: str) -> dict[str, str]:
    """The child's whole environment: nothing of the trainer's (no tokens, no keys)."""
    return {"PATH": CHILD_PATH, "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}


class Channel:
    """The trusted parent's end of one sandboxed program: its request and reply pipes, and its output's.

    ``child_fds`` are the ends the program needs (request read, reply write, then stdout and
    stderr where ``capture_output``); a subclass hands them to the process it starts and then
    calls ``_attach``, which closes them here.
    """

    zygote_lost = False  # a forked program's fork server died while it ran (see ``forkserver``)

    def __init__(self, limits: Limits, capture_output: bool = True) -> None:
        self.limits = limits
        # When the program's clocks start: its source sets it once the program has its process,
        # so waiting for one (a zygote still cleaning up, say) is never the program's time.
        self.started = time.monotonic()
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline
        self._eof = False
        req_r, self._req_w = os.pipe()
        self._resp_r, resp_w = os.pipe()
        self.child_fds: tuple[int, ...] = (req_r, resp_w)
        self._outputs: list[_Output] = []  # stdout, stderr
        for _ in range(2 if capture_output else 0):
            read, write = os.pipe()
            self._outputs.append(_Output(read, limits.max_output_bytes))
            self.child_fds += (write,)

    def _attach(self) -> None:
        """The program has its ends: close them here and start listening on ours."""
        self._close_child_fds()
        os.set_blocking(self._req_w, False)
        self._poll = select.poll()
        for fd in (self._resp_r, *(out.fd for out in self._outputs)):
            self._poll.register(fd, select.POLLIN)

    def _close_child_fds(self) -> None:
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds = ()

    def _close_fds(self) -> None:
        self._close_child_fds()
        for fd in (self._req_w, self._resp_r, *(out.fd for out in self._outputs)):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._req_w = self._resp_r = -1
        for out in self._outputs:
            out.fd = -1

    # -- talking -------------------------------------------------------------------------------

    def send(self, message: dict, deadline: float) -> None:
        """Write one length-prefixed marshal frame to the child; raises ChildTimeout or OSError."""
        body = marshal.dumps(message)
        data = memoryview(len(body).to_bytes(FRAME_LENGTH_BYTES, "big") + body)
        while data:
            try:
                data = data[os.write(self._req_w, data) :]
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ChildTimeout("child did not read its request in time") from None
                poll_one(self._req_w, select.POLLOUT, remaining)

    def recv(self, deadline: float) -> dict | None:
        """The next message from the child, or None once it closed its end (exited, crashed)."""
        while True:
            end = self._buf.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                self._scanned = 0
                return _parse_message(line)
            self._scanned = len(self._buf)
            if len(self._buf) > self.limits.max_message_bytes:
                raise ProtocolError(f"message from child exceeds {self.limits.max_message_bytes} bytes")
            if self._eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildTimeout("child did not answer in time")
            self._pump(remaining)

    def _pump(self, timeout_s: float) -> bool:
        """Read whatever arrives within ``timeout_s``; False when nothing did."""
        events = self._poll.poll(max(0.0, timeout_s) * 1000)
        for fd, _event in events:
            if fd == self._resp_r:
                chunk = os.read(fd, READ_CHUNK)
                if chunk:
                    self._buf += chunk
                else:
                    self._eof = True
                    self._poll.unregister(fd)
                    os.close(fd)
                    self._resp_r = -1
            else:
                self._read_output(next(out for out in self._outputs if out.fd == fd))
        return bool(events)

    def _read_output(self, out: _Output) -> None:
        chunk = os.read(out.fd, READ_CHUNK)
        room = out.cap - len(out.data)
        out.data += chunk[:room]
        if not chunk or len(chunk) > room:
            out.truncated = out.truncated or len(chunk) > room
            self._poll.unregister(out.fd)
            os.close(out.fd)  # a flood now gets EPIPE instead of the parent's time
            out.fd = -1

    @property
    def stdout(self) -> bytes:
        return bytes(self._outputs[0].data) if self._outputs else b""

    @property
    def stderr(self) -> bytes:
        return bytes(self._outputs[1].data) if self._outputs else b""

    @property
    def output_truncated(self) -> bool:
        return any(out.truncated for out in self._outputs)


class ChildProcess(Channel):
    """A fresh sandboxed interpreter started for one program (see ``spares``)."""

    def __init__(self, launcher: Launcher, limits: Limits) -> None:
        super().__init__(limits)
        self.launcher = launcher
        self._lease = identity.lease_uid() if identity.running_as_root() else None
        self._host_dir: str | None = None
        self._cgroup: SnippetCgroup | None = None
        self._closed = False
        self.returncode: int | None = None
        req_r, resp_w, out_w, err_w = self.child_fds
        try:
            if launcher.host_workdir:
                self._host_dir = tempfile.mkdtemp(prefix="grpo-sandbox-")
                if self._lease is not None:
                    os.chown(self._host_dir, self._lease.uid, self._lease.uid)
            workdir = self._host_dir or launcher.workdir or "/"
            if limits.cgroup and cgroups.hierarchies():
                self._cgroup = SnippetCgroup(cgroups.hierarchies(), limits.memory_mb * MIB, limits.max_processes)
            rlimits = limits.rlimits(whole_snippet_budget=self._cgroup is not None)
            args = [str(req_r), str(resp_w), *(f"{name}={soft},{hard}" for name, soft, hard in rlimits)]
            args += seccomp.child_args(bwrap=launcher.mode == "bwrap")
            uid = self._lease.uid if self._lease else None
            with seccomp.filter_fd() if launcher.mode == "bwrap" else contextlib.nullcontext() as filter_fd:
                argv = launcher.argv(["-I", "-S", "-c", CHILD_PROGRAM, *args], uid, limits, filter_fd)
                if self._cgroup is not None:
                    argv = self._cgroup.wrap(argv)
                self.popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out_w,
                    stderr=err_w,
                    pass_fds=(req_r, resp_w) if filter_fd is None else (req_r, resp_w, filter_fd),
                    cwd=self._host_dir or "/",
                    env=child_env(workdir),
                    start_new_session=True,
                )
        except BaseException:
            self._close_fds()
            self._release_dir()
            if self._cgroup is not None:
                self._cgroup.close()
            if self._lease is not None:
                self._lease.release()
            raise
        self._attach()

    def wait_exit(self, deadline: float) -> None:
        """Wait for the child to exit while draining its output; raises ChildTimeout.

        The child is not reaped here: ``close()`` still has to kill its process group, and the
        group id stays reserved only until the reaping. ``returncode`` is set by ``close()``.
        """
        while not _has_exited(self.popen.pid):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildTimeout("snippet did not finish in time")
            self._pump(min(remaining, EXIT_POLL_S))
        while self._pump(0):  # what it wrote before exiting
            pass

    def has_exited(self) -> bool:
        """Whether the child has exited (it is not reaped: ``close()`` still runs)."""
        return _has_exited(self.popen.pid)

    # -- ending --------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill every process of this snippet, wait until they are gone, remove its folder."""
        if self._closed:
            return
        self._closed = True
        try:
            self._kill_all()
            if self._cgroup is not None:
                self._cgroup.close()  # also kills anything the other ways missed
        finally:
            self._close_fds()
            self._release_dir()
            if self._lease is not None:
                self._lease.release()

    def _kill_all(self) -> None:
        self.returncode = end_process(self.popen, self.launcher.pid_namespace)
        if self._lease is not None and not self.launcher.pid_namespace and not identity.kill_uid(self._lease.uid):
            log.error("processes of sandbox uid %d survive SIGKILL", self._lease.uid)

    def _release_dir(self) -> None:
        if self._host_dir is not None:
            if sys.version_info >= (3, 12):
                shutil.rmtree(self._host_dir, onexc=_force_remove)
            else:
                shutil.rmtree(self._host_dir, onerror=_force_remove)
            self._host_dir = None


def end_process(popen: subprocess.Popen, pid_namespace: bool) -> int | None:
    """SIGKILL a started sandbox and everything in its PID namespace, and reap it: its exit status.

    Under bwrap/unshare the isolation tool's child is the init of a PID namespace: its death
    makes the kernel kill every process of the namespace, and the tool exits only once its init
    is reaped, which happens only once all of them are gone: waiting for that (without reaping)
    is the proof.
    """
    pid = popen.pid
    inits = children_of(pid) if pid_namespace else []
    for init in inits:
        with contextlib.suppress(ProcessLookupError):
            os.kill(init, signal.SIGKILL)
    if inits and not _wait_exited(pid, CLEANUP_TIMEOUT_S):
        log.error("PID namespace of sandbox process %d still alive after %.0f s", pid, CLEANUP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # not reaped yet, so the group id cannot have been reused
    try:
        return popen.wait(CLEANUP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.error("sandbox process %d did not die within %.0f s of SIGKILL", pid, CLEANUP_TIMEOUT_S)
        return None


def _force_remove(func: Callable[[str], object], path: str, _exc: object) -> None:
    """rmtree helper: a snippet may leave folders without write permission."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        func(path)


def children_of(pid: int) -> list[int]:
    """Child processes of ``pid`` (the PID-namespace init under bwrap/unshare, a zygote's program)."""
    try:
        return pids_in(f"/proc/{pid}/task/{pid}/children")
    except OSError:  # kernel without CONFIG_PROC_CHILDREN: look for them
        return proc.children(pid)


def _has_exited(pid: int) -> bool:
    """Whether our child ``pid`` has exited, without reaping it (its pid stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _wait_exited(pid: int, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for our child ``pid`` to exit, without reaping it."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd (old kernel): poll
        deadline = time.monotonic() + timeout_s
        while not _has_exited(pid) and time.monotonic() < deadline:
            time.sleep(POLL_PAUSE_S)
        return _has_exited(pid)
    try:
        return poll_one(fd, select.POLLIN, timeout_s)
    finally:
        os.close(fd)


def poll_one(fd: int, event: int, timeout_s: float) -> bool:
    """Wait for ``event`` on ``fd`` (poll, not select: the trainer may hold fds above 1024)."""
    return poll_any([fd], timeout_s, event)


def poll_any(fds: list[int], timeout_s: float, event: int = select.POLLIN) -> bool:
    """Wait up to ``timeout_s`` until ``event`` (or a hang-up) happens on one of ``fds``."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, event)
    return bool(poller.poll(max(0.0, timeout_s) * 1000))


def hung_up(fd: int) -> bool:
    """Whether the other end of ``fd`` (a pipe or socket) is closed, without waiting."""
    poller = select.poll()
    poller.register(fd, 0)  # POLLHUP is reported whatever is asked for
    return any(event & (select.POLLHUP | select.POLLERR) for _fd, event in poller.poll(0))
