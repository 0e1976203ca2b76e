"""Run untrusted, model-generated Python and grade it against unit tests, safely.

In-process guards are no sandbox, and a verdict computed where the snippet runs can be forged.
So each snippet gets:

- a process of its own, in a new session, with no stdin, an environment holding nothing of the
  trainer's, and a private working folder emptied afterwards. Under bwrap it is forked from a
  ready interpreter (``zygote``, ``zygote_handle``, ``forkserver``): a long-lived ``python -I -S``
  (two per worker) that has run only trusted code, cleans up after each snippet (files, System V
  IPC; at most ``max_leftovers`` of them) before it forks the next, and is replaced when it
  cannot; waiting for one is never a snippet's time. Elsewhere it is a fresh interpreter started
  for it alone (``process``), booted one snippet ahead to hide the start-up latency (``spares``);
- kernel limits on CPU time, address space, file size, processes and open files, plus
  wall-clock timeouts per snippet and per test (per test: a multiple of the reference
  solution's time where the problem has one) and, for a standalone run, a cap on the output
  the parent reads (``limits``; a graded snippet's output goes to /dev/null); a cgroup holds
  the memory and processes of the whole snippet where the machine allows, else it may not fork
  (``cgroups``; a forked snippet runs alone in its zygote's program cgroup); every process it
  started is killed at the end (``process``, ``forkserver``);
- a seccomp filter: the kernel keyrings, which no namespace separates, are out of reach (``seccomp``);
- Linux namespaces where the machine allows: no network, no host processes, and under bwrap no
  host files; under unshare private /tmp-like folders and no /root or password hashes
  (``isolation``, which also lists what each weaker mode lets through); a root trainer runs it
  under a throw-away uid (``identity``);
- a verdict decided in the trusted parent (``grading``, ``remote``): the tests run in the
  parent and only the candidate's own calls cross into the sandbox, with plain data coming
  back, decoded in linear time (``codec``); helpers the tests use are the dataset's (``names``);
  exceptions come back by class and bases. Exiting early, printing "PASSED", forging the reply
  pipe, redefining a helper or returning an object whose ``__eq__`` is always true gains
  nothing.

Only the standard library is importable in the sandbox (the trainer's base interpreter with
``-I -S``; no site-packages).

Typical use::

    from grpo_exp.sandbox import Sandbox, TestSpec
    sandbox = Sandbox(isolation="auto", workers=4)
    result = sandbox.grade(code, TestSpec.mbpp(["assert add(1, 2) == 3"]))
    result.fraction  # 1.0
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grpo_exp.sandbox.extract import extract_code
    from grpo_exp.sandbox.grading import GradeResult, TestSpec
    from grpo_exp.sandbox.isolation import MODES, available_modes, resolve
    from grpo_exp.sandbox.limits import Limits
    from grpo_exp.sandbox.pool import Sandbox
    from grpo_exp.sandbox.runner import RunResult

# Each name loads with its module on first use: checking a job's config needs ``Limits`` and
# ``MODES``, not the machinery that starts processes (and reads the child's sources).
_MODULE_OF = {
    "extract_code": "extract",
    "GradeResult": "grading",
    "TestSpec": "grading",
    "MODES": "isolation",
    "available_modes": "isolation",
    "resolve": "isolation",
    "Limits": "limits",
    "Sandbox": "pool",
    "RunResult": "runner",
}

__all__ = [
    "MODES",
    "GradeResult",
    "Limits",
    "RunResult",
    "Sandbox",
    "TestSpec",
    "available_modes",
    "extract_code",
    "resolve",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
