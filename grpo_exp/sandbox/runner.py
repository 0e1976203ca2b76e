"""Run a snippet as a script in the sandbox (standalone use: no tests, just its output)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from grpo_exp.sandbox.process import ChildProcess, ChildTimeout
from grpo_exp.sandbox.spares import ChildSource


@dataclass(frozen=True)
class RunResult:
    """What a snippet did when run as ``__main__``; output is capped at ``max_output_bytes``."""

    returncode: int | None  # None when it was killed for running out of time
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_truncated: bool
    isolation: str
    wall_s: float


def run_code(code: str, source: ChildSource) -> RunResult:
    """Execute ``code`` once in a fresh sandboxed interpreter and collect what it printed."""
    started = time.monotonic()
    child: ChildProcess | None = None
    timed_out = False
    try:
        child = source.start({"mode": "run", "code": code}, source.limits.timeout_s)
        child.wait_exit(child.started + source.limits.timeout_s)
    except ChildTimeout:
        timed_out = True
    except OSError:
        pass  # it exited before reading the job: close() collects its status
    finally:
        if child is not None:
            child.close()
    return RunResult(
        returncode=None if timed_out or child is None else child.returncode,
        stdout=child.stdout if child else b"",
        stderr=child.stderr if child else b"",
        timed_out=timed_out,
        output_truncated=child.output_truncated if child else False,
        isolation=source.launcher.mode,
        wall_s=time.monotonic() - started,
    )
