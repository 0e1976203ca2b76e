"""The job's environments as TRL runs them: each rollout's instance lives in a helper process.

TRL's GRPOTrainer builds environment instances in the training process, pools them across batches and
calls ``reset`` before each rollout. There, an environment that hangs holds training past any limit,
one that returns 100 MB puts it in the rollout, and an instance reused across rollouts carries what
the previous one did into the next. So TRL gets a stand-in class (``stand_in_class``: the same name,
public methods, signatures and docstrings, so TRL builds the same tool schemas) whose instances hold
only an id; the user's class lives in a helper interpreter (``grpo_exp.helper_process``), one at a time:

- ``reset`` builds a fresh instance of the user's class for the rollout and calls its ``reset`` (the
  stand-in TRL reuses never carries state from one rollout to the next);
- a tool method's call runs on that rollout's instance, held to ``agent.tool_timeout_s`` and its reply
  cut to ``agent.tool_reply_max_chars``, failing as a tool's does (``ToolFailed``: TRL sends the message
  to the model and counts it in ``tools/failure_frequency``);
- ``get_reward`` is read by the ``environment_state`` reward part (``reward_for``), not by TRL: it is
  weighted and time-limited like any part. One that raises leaves its rollout unscored; one that
  returns no number fails the run in one line naming the class;
- a call that hangs kills the helper, and with it every instance living there: their rollouts' later
  calls fail, and they are left unscored (a reset that fails does the same to its own rollout).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from grpo_exp.agents.environments import check_environment, resolve_environment, tool_methods
from grpo_exp.agents.runner import CallHung, ToolFailed, ask_helper, capped, describe, run_call
from grpo_exp.config.schema import AgentSettings
from grpo_exp.errors import UserError
from grpo_exp.helper_process import Handler, Helper, Unavailable
from grpo_exp.helper_process import serve as serve_requests

log = logging.getLogger("grpo_exp.agents")

RESET_FAILED = "environments/reset_failure_frequency"  # share of a batch's resets that raised or hung
REWARD_FAILED = "environments/reward_failure_frequency"  # share of get_reward calls that raised or hung
TURNS = "episodes/turns"  # mean assistant turns per episode
CALLS_PREFIX = "episodes/tool_calls/"  # + a tool's name: its mean calls per episode
CALLS = CALLS_PREFIX + "{name}"


class RewardHung(Exception):
    """A ``get_reward`` outlived its time limit (the helper was killed)."""


@dataclass(frozen=True)
class EnvironmentSet:
    """What TRL takes as ``environment_factory`` (a stand-in class, or name -> class), the runner their
    instances live in, and each user class by name (None: no environment)."""

    factory: Any = None
    runner: EnvironmentRunner | None = None
    classes: tuple[type, ...] = ()

    def tools(self) -> tuple[Any, ...]:
        """The tools of one instance of each environment (bound methods, as TRL shows them), for counting
        prompt tokens; nothing runs until ``reset``."""
        factories = self.factory.values() if isinstance(self.factory, dict) else [self.factory] if self.factory else []
        tools: dict[str, Any] = {}
        for factory in factories:
            instance = factory()
            for name, _ in tool_methods(type(instance)):
                tools.setdefault(name, getattr(instance, name))
        return tuple(tools.values())


def build_environments(settings: AgentSettings) -> EnvironmentSet:
    """The configured environments, each checked as TRL will use it; nothing starts until the first reset."""
    if settings.environment and settings.environments:
        raise UserError(
            "agent.environment and agent.environments are both set: give one environment, or a dict of them "
            "picked by the dataset's `environment` column"
        )
    specs = {None: settings.environment} if settings.environment else dict(settings.environments)
    if not specs:
        return EnvironmentSet()
    classes: dict[str | None, type] = {}
    for name, spec in specs.items():
        cls = resolve_environment(spec)
        check_environment(cls, spec)
        classes[name] = cls
    runner = EnvironmentRunner(specs, settings.tool_timeout_s, settings.tool_reply_max_chars)
    stand_ins: dict[type, type] = {}
    for key, cls in classes.items():
        if cls not in stand_ins:
            stand_ins[cls] = stand_in_class(cls, key, runner)
    if settings.environment:
        factory: Any = stand_ins[classes[None]]
    else:
        factory = {name: stand_ins[cls] for name, cls in classes.items()}
    return EnvironmentSet(factory, runner, tuple(stand_ins))


def stand_in_class(cls: type, key: str | None, runner: EnvironmentRunner) -> type:
    """A class TRL can take for ``cls``: same name and tool methods (signature, docstring), each call
    run on this rollout's instance in ``runner``; ``reset`` starts that instance."""

    def __init__(self: Any) -> None:
        self._env_id = runner.new_id()

    def reset(self: Any, **row: Any) -> str | None:
        return runner.reset(self._env_id, key, row)

    def reward(self: Any) -> float | None:
        return runner.reward(self._env_id)

    namespace: dict[str, Any] = {
        "__init__": __init__,
        "reset": reset,
        "_reward": reward,
        "_runner": runner,
        "_owns_reward": callable(getattr(cls, "get_reward", None)),
        "__doc__": cls.__doc__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
    }
    for name, fn in tool_methods(cls):
        namespace[name] = _forwarded(name, fn, runner)
    return type(cls.__name__, (), namespace)


def _forwarded(name: str, fn: Any, runner: EnvironmentRunner) -> Any:
    @functools.wraps(fn)  # signature, hints, docstring: TRL builds the schema from these
    def call(self: Any, **arguments: Any) -> str:
        return runner.call(self._env_id, name, arguments)

    return call


class EnvironmentRunner:
    """Runs every rollout's instance in one helper process, one call at a time; counts what a batch did."""

    def __init__(self, specs: dict[str | None, str], timeout_s: float, max_reply_chars: int) -> None:
        setup = json.dumps({"environments": {str(k): v for k, v in specs.items()}, "max_reply_chars": max_reply_chars})
        argv = [sys.executable, "-P", "-c", "from grpo_exp.agents.env_runner import serve; serve()", setup]
        self.helper = Helper(argv, "the agent's environment process", stderr=None)
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._started: dict[int, int] = {}  # instance id -> the helper's restart count when it was reset
        self._broken: dict[int, str] = {}  # instance id -> why its reset failed
        self._calls: Counter[str] = Counter()
        self._resets = self._reset_failed = self._rewards = self._reward_failed = 0
        self._warned: set[str] = set()

    def new_id(self) -> int:
        return next(self._ids)

    def reset(self, env_id: int, key: str | None, row: dict[str, Any]) -> str | None:
        """A fresh instance for ``env_id`` and what its ``reset`` returned (cut to the cap); on a failure,
        None, the rollout's instance marked broken (its calls fail, it is unscored)."""
        with self._lock:
            self._resets += 1
            self._broken.pop(env_id, None)
        try:
            answer = self._ask({"op": "reset", "env": env_id, "key": str(key), "row": row})
        except ToolFailed as exc:
            answer = {"error": str(exc)}
        with self._lock:
            self._started[env_id] = self.helper.restarts
            if "error" in answer:
                self._reset_failed += 1
                self._broken[env_id] = answer["error"]
        if "error" in answer:
            self._warn_once("reset", f"an environment's reset failed (its rollout is left unscored): {answer['error']}")
            return None
        return answer.get("result")

    def call(self, env_id: int, name: str, arguments: dict[str, Any]) -> str:
        """The method's reply; ``ToolFailed`` with what the model should read."""
        with self._lock:
            self._calls[name] += 1
        self._check_alive(env_id)
        answer = self._ask({"op": "call", "env": env_id, "method": name, "arguments": arguments})
        if "error" in answer:
            raise ToolFailed(answer["error"])
        return answer["result"]

    def reward(self, env_id: int) -> float | None:
        """The instance's ``get_reward()``: a number, or None where it raised or the instance is gone;
        ``RewardHung`` past the time limit; a ``UserError`` for a value that is no number."""
        with self._lock:
            self._rewards += 1
        try:
            self._check_alive(env_id)
            answer = self._ask({"op": "reward", "env": env_id})
        except CallHung as exc:
            raise RewardHung(str(exc)) from None
        except ToolFailed as exc:
            answer = {"error": str(exc)}
        if "not_number" in answer:
            raise UserError(
                f"environment {answer['cls']}.get_reward returned {answer['not_number']}, not a number: "
                "return a float (or None to leave the rollout unscored)"
            )
        if "error" in answer:
            with self._lock:
                self._reward_failed += 1
            self._warn_once("reward", f"get_reward failed (its rollout is left unscored): {answer['error']}")
            return None
        return answer["reward"]

    def take_metrics(self, episodes: int) -> dict[str, float]:
        """The batch's failure shares and tool calls per episode; the counts start again."""
        with self._lock:
            calls, self._calls = self._calls, Counter()
            resets, failed, self._resets, self._reset_failed = self._resets, self._reset_failed, 0, 0
            rewards, lost, self._rewards, self._reward_failed = self._rewards, self._reward_failed, 0, 0
        metrics = {RESET_FAILED: failed / resets if resets else 0.0, REWARD_FAILED: lost / rewards if rewards else 0.0}
        metrics.update({CALLS.format(name=n): c / episodes for n, c in sorted(calls.items()) if episodes})
        return metrics

    def close(self) -> None:
        """End the helper, every instance in it, and every process they started."""
        self.helper.close()

    def _check_alive(self, env_id: int) -> None:
        with self._lock:
            broken = self._broken.get(env_id)
            started = self._started.get(env_id)
        if broken is not None:
            raise ToolFailed(f"the environment did not start: {broken}")
        if started is None:
            raise ToolFailed("the environment was not reset before this call")
        if started != self.helper.restarts:
            raise ToolFailed("the environment's state was lost: its process was restarted after a call failed")

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        what = request.get("method") or ("get_reward" if request["op"] == "reward" else request["op"])
        return ask_helper(self.helper, request, what, self.timeout_s)

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(message)


# -- inside the helper -----------------------------------------------------------------------------


def serve() -> None:
    """The helper's loop: the environment classes of ``sys.argv[1]`` imported once, then one request a line."""
    serve_requests(lambda: _handler(json.loads(sys.argv[1])))


def _handler(setup: dict[str, Any]) -> Handler:
    try:
        classes = {key: resolve_environment(spec) for key, spec in setup["environments"].items()}
    except UserError as exc:
        raise Unavailable(str(exc)) from None
    max_chars = setup["max_reply_chars"]
    instances: dict[int, Any] = {}

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        env_id, op = request["env"], request["op"]
        if op == "reset":
            instances.pop(env_id, None)  # the last rollout's state goes, whatever happens next
            try:
                instance = classes[request["key"]]()
            except BaseException as exc:  # the constructor is the user's code too
                return capped("error", f"{classes[request['key']].__name__}() failed: {describe(exc)}", max_chars)
            answer = run_call(instance.reset, request["row"], max_chars, allow_none=True)
            if "error" not in answer:
                instances[env_id] = instance
            return answer
        instance = instances.get(env_id)
        if instance is None:
            return {"error": "the environment was not reset before this call"}
        if op == "call":
            return run_call(getattr(instance, request["method"]), request["arguments"], max_chars)
        return _reward(instance, max_chars)

    return handle


def _reward(instance: Any, max_chars: int) -> dict[str, Any]:
    """``{"reward": number or None}``, ``{"error": ...}`` where it raised, or ``{"not_number": what}``."""
    try:
        value = instance.get_reward()
        if hasattr(value, "__await__"):
            import asyncio

            async def awaited() -> Any:
                return await value

            value = asyncio.run(awaited())
    except BaseException as exc:
        return capped("error", describe(exc), max_chars)
    if value is None:
        return {"reward": None}
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            shown = repr(value)[:60]
        except BaseException:
            shown = "?"
        return {"not_number": f"a {type(value).__name__} ({shown})", "cls": type(instance).__name__}
    return {"reward": float(value) if math.isfinite(value) else None}
