"""The job's tools as TRL calls them: every call runs in a helper process, held to a time limit, its reply capped.

TRL's GRPOTrainer calls a tool in the training process. There, a tool that spins keeps a thread holding
the interpreter lock past any time limit, so training and a Ctrl-C wait on it; one that returns 100 MB
puts 100 MB into the rollout; one that raises KeyboardInterrupt or SystemExit ends the run; an
``async def`` returns a coroutine that nobody awaits. So TRL gets a stand-in for each tool (same name,
signature and docstring: the model sees the same schema) that sends the call to a helper interpreter
(``grpo_exp.helper_process``, as the math reward does), which imports the tools and runs them:

- a call past ``agent.tool_timeout_s`` kills the helper's process group (the tool and the processes it
  started) and fails; the next call starts a fresh helper;
- a reply (or error) longer than ``agent.tool_reply_max_chars`` is cut to that length in the helper, with a
  marker the model reads, and counted in ``tools/truncated_frequency`` (the share of calls cut short);
- whatever the tool raises (KeyboardInterrupt and SystemExit too), and a result that can't become text,
  is the tool's error; an ``async def`` tool is awaited;
- the helper, with every process a tool left in its group, ends with the job (``ToolRunner.close``), or
  by itself when the trainer dies.

A failed call raises ``ToolFailed`` in the stand-in: TRL sends its message to the model as the tool's
``{"error": ...}`` reply and counts it in ``tools/failure_frequency``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import sys
import threading
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from grpo_exp.agents.tools import Tool, check_tool, resolve_tool
from grpo_exp.config.schema import AgentSettings
from grpo_exp.errors import UserError
from grpo_exp.helper_process import Handler, Helper, HelperGone, Unavailable
from grpo_exp.helper_process import serve as serve_requests

TRUNCATED = "tools/truncated_frequency"  # the metric: the share of a batch's tool calls whose reply was cut
CUT_MARKER = "\n[tool reply cut: the first {kept} of {total} characters]"  # appended to a reply cut short


class ToolFailed(RuntimeError):
    """A call that raised, outlived its time limit or gave no text; the message is what the model reads."""


class CallHung(ToolFailed):
    """A call that outlived its time limit: the helper was killed, and everything living in it with it."""


def ask_helper(helper: Helper, request: dict[str, Any], what: str, timeout_s: float) -> dict[str, Any]:
    """The helper's answer to ``request`` (a call of ``what``); ``ToolFailed`` with what the model should read
    when the call hung (``CallHung``), ended the process, or had arguments JSON can't carry."""
    try:
        return helper.ask(request, timeout_s or None)
    except HelperGone as gone:
        if gone.exit_code is None:
            raise CallHung(f"{what} gave no result within {timeout_s:g} s") from None
        raise ToolFailed(f"{what} ended its process (exit code {gone.exit_code})") from None
    except (TypeError, ValueError) as exc:  # arguments JSON can't carry (nothing was sent)
        raise ToolFailed(f"{what} was called with arguments that aren't JSON: {exc}") from None


@dataclass(frozen=True)
class Toolset:
    """The job's tools as TRL takes them, and the helper process their calls run in (None: no tools)."""

    tools: tuple[Tool, ...] = ()
    runner: ToolRunner | None = None


def build_tools(settings: AgentSettings) -> Toolset:
    """The configured tools, each checked as TRL will show it; nothing starts until the first call."""
    specs: dict[str, str] = {}
    functions = []
    for spec in settings.tools:
        fn = resolve_tool(spec)
        check_tool(fn, spec)
        if fn.__name__ in specs:
            raise UserError(
                f"agent.tools: {spec!r} and {specs[fn.__name__]!r} are both called {fn.__name__!r}; the model "
                "calls tools by name, so give each its own"
            )
        specs[fn.__name__] = spec
        functions.append(fn)
    if not functions:
        return Toolset()
    runner = ToolRunner(specs, settings.tool_timeout_s, settings.tool_reply_max_chars)
    return Toolset(tuple(stand_in(fn, runner) for fn in functions), runner)


def stand_in(fn: Tool, runner: ToolRunner) -> Tool:
    """What TRL calls for ``fn``: a plain function with its name, signature and docstring (so TRL builds the
    same schema, and takes an ``async def`` for a plain one) that runs the call in ``runner``."""

    @functools.wraps(fn)
    def call(**arguments: Any) -> str:
        return runner.call(fn.__name__, arguments)

    return call


class ToolRunner:
    """Runs each tool call in one helper process, one call at a time; counts the calls and the replies cut."""

    def __init__(self, specs: dict[str, str], timeout_s: float, max_reply_chars: int) -> None:
        setup = json.dumps({"tools": specs, "max_reply_chars": max_reply_chars})
        # -P: the current folder stays off the path; a `module:fn` spec puts it back, as in the trainer
        argv = [sys.executable, "-P", "-c", "from grpo_exp.agents.runner import serve; serve()", setup]
        self.helper = Helper(argv, "the agent's tool process", stderr=None)  # what a tool prints stays visible
        self.timeout_s = timeout_s
        self._counts = threading.Lock()
        self._calls = self._cut = 0

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The tool's reply (cut to the cap, with the marker); ``ToolFailed`` with what the model should read."""
        try:
            answer = ask_helper(self.helper, {"tool": name, "arguments": arguments}, name, self.timeout_s)
        finally:
            with self._counts:
                self._calls += 1
        if answer.get("cut"):
            with self._counts:
                self._cut += 1
        if "error" in answer:
            raise ToolFailed(answer["error"])
        return answer["result"]

    def take_metrics(self) -> dict[str, float]:
        """The batch's ``tools/truncated_frequency`` (0.0 without calls, as TRL logs its tool metrics); the
        counts start again. Logged by the reward's first part through TRL's ``log_metric``."""
        with self._counts:
            calls, cut, self._calls, self._cut = self._calls, self._cut, 0, 0
        return {TRUNCATED: cut / calls if calls else 0.0}

    def close(self) -> None:
        """End the helper and every process a tool left in its group."""
        self.helper.close()


# -- inside the helper -----------------------------------------------------------------------------


def serve() -> None:
    """The helper's loop: the tools of ``sys.argv[1]`` imported once, then one call per request."""
    serve_requests(lambda: _calls(json.loads(sys.argv[1])))


def _calls(setup: dict[str, Any]) -> Handler:
    try:
        tools = {name: resolve_tool(spec) for name, spec in setup["tools"].items()}
    except UserError as exc:
        raise Unavailable(str(exc)) from None
    max_chars = setup["max_reply_chars"]
    return lambda request: run_call(tools[request["tool"]], request["arguments"], max_chars)


def run_call(fn: Tool, arguments: dict[str, Any], max_chars: int, allow_none: bool = False) -> dict[str, Any]:
    """One call's answer: ``{"result": text}`` or ``{"error": message}``, each cut to ``max_chars``
    (``"cut": true`` when it was); with ``allow_none`` (an environment's ``reset``), None stays None."""
    try:
        result = fn(**arguments)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
    except BaseException as exc:  # KeyboardInterrupt, SystemExit too: the tool failed, the model is told why
        return capped("error", describe(exc), max_chars)
    if result is None and allow_none:
        return {"result": None}
    try:
        text = result if isinstance(result, str) else str(result)
    except BaseException as exc:  # a __str__ that raises
        why = f"{fn.__name__} returned a {type(result).__name__} that can't be shown as text: {describe(exc)}"
        return capped("error", why, max_chars)
    return capped("result", text, max_chars)


async def _awaited(result: Awaitable[Any]) -> Any:
    return await result


def capped(kind: str, text: str, max_chars: int) -> dict[str, Any]:
    """``{kind: text}``, the text cut to ``max_chars`` characters (0: no cap) with a marker that says so."""
    if not max_chars or len(text) <= max_chars:
        return {kind: text}
    return {kind: text[:max_chars] + CUT_MARKER.format(kept=max_chars, total=len(text)), "cut": True}


def describe(exc: BaseException) -> str:
    """The error as the model reads it: the message, as TRL would send it; the exception's name where
    there is no message (``KeyboardInterrupt()``, ``SystemExit(3)``) or the message itself fails."""
    try:
        message = str(exc) if isinstance(exc, Exception) else ""
    except BaseException:  # an exception whose __str__ raises
        message = ""
    if message:
        return message
    try:
        return repr(exc)
    except BaseException:
        return type(exc).__name__
