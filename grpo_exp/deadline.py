"""Calling user code under a time limit from a thread that must keep control (a reward part).

Python can't stop a thread: a call that outlives its limit is left behind, a daemon that doesn't
hold up the exit, and the caller goes on without its result. Code that must be stopped at its limit
runs in a helper process instead (``helper_process``: agent tools, the math checker).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Expired(Exception):
    """The call gave no result within its limit."""


def within(call: Callable[[], Any], seconds: float, name: str) -> Any:
    """``call()``'s result, its exception re-raised, or ``Expired`` after ``seconds`` (0: no limit)."""
    if not seconds:
        return call()
    done, outcome = threading.Event(), {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # handed to the caller, as if it had made the call itself
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(seconds):
        raise Expired(name)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
