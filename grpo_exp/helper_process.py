"""A helper interpreter that answers one JSON line per request, held to a time limit and killed whole.

Why a process: Python can't stop a thread. Code that spins (``while True: pass``) or is stuck in C keeps
running beside training, a thread holding the interpreter lock, and a stop signal can't end it. A helper
process can be killed at its limit, and with it every process it started (it leads a process group of
its own); the next request starts a fresh one. The math reward's checker (``rewards/math.py``) and agent
tools (``agents/runner.py``) run their work in one.

The exchange: the helper says ``{"ready": true}`` (or ``{"error": ...}``) once started; then each request
is a JSON object on its stdin with an ``id``, and its answer a JSON object on its stdout with the same
``id``. What the helper's code prints goes to stderr (``serve`` moves stdout there), so it can't break
the exchange. If the trainer ends without closing it (killed), the helper's stdin closes and the helper
kills its own process group, busy or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from grpo_exp.errors import UserError

STARTUP_S = 120.0  # a fresh helper's imports (about 1 s; more on a loaded machine) before it says it's ready
READ_CHUNK = 65536  # bytes read from the helper's stdout at a time

Handler = Callable[[dict[str, Any]], dict[str, Any]]  # a request -> its answer (the id is added)
Spawn = Callable[..., subprocess.Popen[bytes]]  # subprocess.Popen, or what starts it elsewhere (another thread)


class HelperGone(Exception):
    """The helper gave no answer: it outlived the request's time limit (and was killed), or it ended
    (``exit_code``)."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Unavailable(Exception):
    """What a helper's setup raises when it can't serve; the trainer gets its message as a ``UserError``."""


class Helper:
    """One helper process, started on first use and after every kill; thread-safe (one request at a time).

    ``name`` starts the error when it can't start ("the math reward's checker"); ``stderr``: where what it
    prints goes (``subprocess.DEVNULL``, or None for the trainer's own stderr); ``spawn``: what starts the
    process, given ``subprocess.Popen``'s arguments (a helper under bwrap's ``--die-with-parent`` must be
    started from a thread that outlives it, see ``sandbox/launch_thread.py``)."""

    def __init__(
        self, argv: list[str], name: str, stderr: int | None = subprocess.DEVNULL, spawn: Spawn = subprocess.Popen
    ) -> None:
        self.argv, self.name, self.stderr, self.spawn = argv, name, stderr, spawn
        self._proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._lock = threading.Lock()
        self._next_id = 0
        self.restarts = 0  # helpers killed at a time limit or found ended (for tests and logs)

    def ask(self, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        """The helper's answer to ``request`` within ``timeout_s`` seconds (None: no limit), counted from
        when a started helper has it; ``HelperGone`` when none comes (the helper is killed). A request
        JSON can't carry raises ``TypeError`` or ``ValueError`` before anything is sent."""
        with self._lock:
            self._next_id += 1
            request = {**request, "id": self._next_id}
            payload = json.dumps(request).encode() + b"\n"
            proc = self._started()
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            try:
                assert proc.stdin is not None
                proc.stdin.write(payload)
                proc.stdin.flush()
                answer = _parsed(self._read_line(deadline))
            except OSError:  # a broken pipe: it ended
                answer = None
            if answer is not None and answer.get("id") == request["id"]:
                return answer
            timed_out = deadline is not None and time.monotonic() >= deadline
            self._kill()  # stuck or gone: the next request starts a fresh helper
            self.restarts += 1
            if timed_out:
                raise HelperGone(f"gave no answer within {timeout_s:g} s")
            raise HelperGone(f"ended (exit code {proc.returncode})", proc.returncode)

    def close(self) -> None:
        """Stop the helper and every process it started (it also stops by itself when the trainer ends)."""
        with self._lock:
            self._kill()

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()
        root = str(Path(__file__).resolve().parents[1])  # the folder holding grpo_exp
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self._proc = self.spawn(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
            start_new_session=True,  # its own process group, killed whole; a Ctrl-C to the terminal passes it by
        )
        line = self._read_line(time.monotonic() + STARTUP_S)
        hello = json.loads(line) if line else {"error": f"no answer within {STARTUP_S:g} s"}
        if "error" in hello:
            self._kill()
            raise UserError(f"{self.name} did not start: {hello['error']}")
        return self._proc

    def _read_line(self, deadline: float | None) -> bytes | None:
        """The helper's next line, or None at ``deadline`` or when it has exited."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if (left is not None and left <= 0) or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _kill(self) -> None:
        proc, self._proc, self._buffer = self._proc, None, b""
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):  # the group is gone: the helper and all it started ended
            os.killpg(proc.pid, signal.SIGKILL)  # even after the helper ended: what it started may live on
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _parsed(line: bytes | None) -> dict[str, Any] | None:
    """An answer line as JSON; None for no line, or one that isn't an answer."""
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


# -- inside the helper -----------------------------------------------------------------------------


def serve(setup: Callable[[], Handler]) -> None:
    """The helper's loop: ``setup()`` once (``Unavailable``: its message is the start-up error), then one
    answer per request line, until the trainer closes stdin."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _die_with_trainer()
    try:
        handle = setup()
    except Unavailable as exc:
        _say(answers, {"error": str(exc)})
        return
    _say(answers, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        _say(answers, {**handle(request), "id": request["id"]})


def _die_with_trainer() -> None:
    """Kill this helper's process group once the trainer's end of stdin closes, even while a request runs.

    Only for a helper leading its own group (as ``Helper`` starts it): run by hand, it kills nothing."""
    if os.getpgrp() != os.getpid():
        return

    def watch() -> None:
        hangup = select.poll()
        hangup.register(sys.stdin.fileno(), 0)  # no events asked: poll still wakes on the writer's hang-up
        while not any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in hangup.poll()):
            pass
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="trainer-watch", daemon=True).start()


def _say(answers: IO[str], message: dict[str, Any]) -> None:
    answers.write(json.dumps(message) + "\n")
    answers.flush()
