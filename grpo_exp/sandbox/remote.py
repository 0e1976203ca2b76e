"""The candidate's program, living in a sandboxed child, as the trusted grader sees it.

``RemoteSession`` owns a child serving the candidate (started on the first call), forwards
calls, enforces the per-test and per-snippet deadlines, and after a test killed the child
(timeout, crash, ``os._exit``) starts a fresh one for the next test, up to
``Limits.max_restarts`` times. Replies become plain data or opaque handles, nothing else.

``RemoteRef`` is the parent-side proxy of a name or object in the candidate's program. It can be
called, its attributes read, iterated or measured (the child sends ``list(obj)`` / ``len(obj)``:
more values the candidate chooses, like return values) and passed back into the child. Every
use that would let it see a test's value or decide a comparison (comparing, hashing,
truth-testing, ``in``, arithmetic, converting) raises ``OpaqueValue``. A test can therefore only
ever compare plain data decoded in the parent.

Faults of the sandbox (``SandboxFault`` and subclasses) derive from BaseException so that test
code such as ``try: ... except Exception: pass`` does not swallow a timeout or an opaque value,
and the session records each test's first fault, so even a bare ``except:`` cannot hide one.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterator
from types import CodeType
from typing import TYPE_CHECKING, Any

from grpo_exp.sandbox.codec import CodecError, decode, encode, unhex
from grpo_exp.sandbox.process import Channel, ChildTimeout, ProtocolError

if TYPE_CHECKING:
    from grpo_exp.sandbox.forkserver import ForkServer
    from grpo_exp.sandbox.spares import ChildSource

_NOT_MAPPED = (StopIteration, StopAsyncIteration)  # would change control flow in the grader
MAX_ERROR_NAME = 200
MAX_EXCEPTION_BASES = 16  # classes of a raised exception's MRO the child sends (as in child.py)
STAND_IN_CLASSES = 256  # stand-in exception classes kept for reuse


class SandboxFault(BaseException):
    """The candidate could not be asked or its answer cannot be used: the test fails."""


class TestTimeout(SandboxFault):
    """A call into the candidate outlived the test's or the snippet's time."""

    __test__ = False  # not a pytest class


class ChildLost(SandboxFault):
    """The child exited or crashed, or no fresh child may be started."""


class LoadFailed(SandboxFault):
    """Running the candidate's program (its definitions) failed, so every test fails."""


class NotPlain(SandboxFault):
    """A value that cannot cross the boundary, or a malformed reply."""


class OpaqueValue(SandboxFault):
    """The test tried to look inside a value that is not plain data."""


class CandidateError(Exception):
    """The candidate raised an exception with no counterpart the grader can name."""


def candidate_exception(classes: Any) -> Exception:
    """A parent-side exception for one the candidate raised, so tests expecting it work.

    ``classes`` is the raised class and its bases, most derived first, as the child names them
    (``module:qualname``). A standard-library class the grader has already imported is used as
    itself; any other (the candidate's own, or from a module the tests never imported) becomes a
    stand-in subclass of its nearest such bases, so ``except ValueError`` still catches a
    ``json.JSONDecodeError`` or a candidate-defined ``class Bad(ValueError)``. Only the class
    crosses, never the candidate's object: its constructor and message stay in the sandbox.
    """
    names = [_error_name(c) for c in classes[:MAX_EXCEPTION_BASES]] if type(classes) is list else []
    bases: list[type[Exception]] = []
    for name in names:
        kind = _parent_class(name)
        if kind is None:
            continue
        if not issubclass(kind, Exception) or issubclass(kind, _NOT_MAPPED):
            break  # SystemExit, StopIteration...: would change the grader's control flow
        if not any(issubclass(b, kind) for b in bases):
            bases.append(kind)
    if not bases:
        return CandidateError(f"raised by the candidate: {names[0] if names else '<malformed>'}")
    kind = bases[0] if _parent_class(names[0]) is bases[0] else _stand_in(names[0], tuple(bases))
    return _instantiate(kind, f"raised by the candidate ({names[0].partition(':')[2]})")


def _parent_class(name: str) -> type | None:
    """The grader's own class ``module:qualname``, if it is a standard-library exception already imported."""
    module_name, _, qualname = name.partition(":")
    module = sys.modules.get(module_name)
    top = module_name.partition(".")[0]
    if module is None or (top != "builtins" and top not in sys.stdlib_module_names):
        return None
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None) if part.isidentifier() else None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


@functools.lru_cache(maxsize=STAND_IN_CLASSES)
def _stand_in(name: str, bases: tuple[type[Exception], ...]) -> type[Exception]:
    """A class named like the candidate's, deriving from the grader's classes it derives from."""
    short = name.rpartition(".")[2].rpartition(":")[2]
    short = short if short.isidentifier() else "CandidateException"
    namespace = {"__module__": "sandboxed_candidate"}
    try:
        return type(short, bases, namespace)
    except TypeError:  # bases whose instance layouts conflict (KeyError and OSError, say)
        return type(short, bases[:1], namespace)


def _instantiate(kind: type[Exception], message: str) -> Exception:
    """An instance of ``kind`` whatever its constructor wants (UnicodeDecodeError, ExceptionGroup...)."""
    if issubclass(kind, BaseExceptionGroup):
        return kind(message, [CandidateError(message)])
    try:
        return kind(message)
    except Exception:
        exc = kind.__new__(kind)
        exc.args = (message,)
        return exc


class RemoteSession:
    """One snippet's candidate program behind a (re)startable child."""

    def __init__(
        self, source: ChildSource | ForkServer, program: CodeType, test_timeout_s: float | None = None
    ) -> None:
        """``program``: the candidate's, compiled here (see ``grading.compile_candidate``)."""
        self.source = source
        self.limits = limits = source.limits
        self.test_timeout_s = test_timeout_s or limits.test_timeout_s
        self.busy_s = 0.0  # this test's time waiting on the candidate's answers (loading excluded)
        self._job = {"mode": "serve", "code": program}
        self._deadline = time.monotonic() + limits.timeout_s
        self._test_deadline = self._deadline
        self._child: Channel | None = None
        self._generation = 0
        self._load_error: str | None = None
        self._next_id = 0
        self.starts = 0
        self.fault: SandboxFault | None = None
        self.server_lost = False  # a fork server died under one of its programs: grade again

    # -- the grader's side -----------------------------------------------------------------------

    def begin_test(self) -> None:
        """Start the clock of one test and forget the previous test's fault."""
        self._test_deadline = min(self._deadline, time.monotonic() + self.test_timeout_s)
        self.fault = None
        self.busy_s = 0.0

    def out_of_time(self) -> bool:
        return time.monotonic() >= self._deadline

    def record(self, fault: SandboxFault) -> SandboxFault:
        """Remember the test's first fault, so it fails even if its code swallowed the exception."""
        if self.fault is None:
            self.fault = fault
        return fault

    def call(self, target: tuple, args: tuple, kwargs: dict) -> Any:
        def ask() -> Any:
            child = self._ensure_child()
            message = {
                "op": "call",
                "f": self._target(target),
                "a": [encode(a, self._target_of) for a in args],
                "k": [[key, encode(v, self._target_of)] for key, v in kwargs.items()],
            }
            return self._request(child, message)

        return self._guarded(ask)

    def getattr(self, target: tuple, name: str) -> Any:
        return self._guarded(
            lambda: self._request(self._ensure_child(), {"op": "attr", "o": self._target(target), "n": name})
        )

    def apply(self, conversion: str, target: tuple) -> Any:
        """``list(obj)`` or ``len(obj)`` computed in the child: more values the candidate picks."""
        return self._guarded(
            lambda: self._request(self._ensure_child(), {"op": "apply", "fn": conversion, "o": self._target(target)})
        )

    def close(self) -> None:
        self._drop_child()

    # -- internals -------------------------------------------------------------------------------

    def _guarded(self, ask: Callable[[], Any]) -> Any:
        try:
            return ask()
        except CodecError as exc:
            raise self.record(NotPlain(str(exc))) from None
        except SandboxFault as exc:
            raise self.record(exc) from None

    def _ensure_child(self) -> Channel:
        if self._load_error is not None:
            raise LoadFailed(self._load_error)
        if self._child is not None:
            return self._child
        if self.out_of_time():
            raise TestTimeout("the snippet's time is used up")
        if self.starts > self.limits.max_restarts:
            raise ChildLost("no fresh interpreter left for this snippet")
        self.starts += 1
        self._generation += 1
        asked = time.monotonic()
        budget_s = min(self._deadline - asked, self.limits.test_timeout_s)  # loading: the full per-test limit
        child: Channel | None = None
        reply: dict | None = None
        try:
            child = self.source.start(self._job, budget_s)
            # waiting for a process (a zygote still cleaning up after another program) is not this program's time
            waited = child.started - asked
            self._deadline += waited
            self._test_deadline += waited
            reply = child.recv(child.started + budget_s)
            reason = "exited while loading" if reply is None else _error_name(reply.get("load_error"))
        except ChildTimeout:
            reason = "timeout while loading"
        except (OSError, ProtocolError) as exc:
            reason = f"{type(exc).__name__} while loading"
        if child is None or reply is None or reply.get("ready") is not True:
            if child is not None:
                child.close()
                self.server_lost |= child.zygote_lost
            self._load_error = reason
            raise LoadFailed(reason)
        # loading has its own budget: the test's clock restarts once the program is ready
        self._test_deadline = min(self._deadline, self._test_deadline + time.monotonic() - child.started)
        self._child = child
        return child

    def _request(self, child: Channel, message: dict) -> Any:
        self._next_id += 1
        message["i"] = self._next_id
        asked = time.monotonic()
        try:
            child.send(message, self._test_deadline)
            reply = child.recv(self._test_deadline)
        except ChildTimeout:
            self._drop_child()
            raise TestTimeout("the candidate did not answer in time") from None
        except OSError:
            self._drop_child()
            raise ChildLost("the candidate's interpreter is gone") from None
        except ProtocolError as exc:
            self._drop_child()
            raise NotPlain(str(exc)) from None
        finally:
            self.busy_s += time.monotonic() - asked
        if reply is None:
            self._drop_child()
            raise ChildLost("the candidate's interpreter exited")
        if reply.get("i") != self._next_id:
            self._drop_child()
            raise NotPlain("reply does not match the request")
        if "e" in reply:
            raise candidate_exception(reply["e"])
        generation = self._generation
        try:
            return decode(reply.get("v"), lambda key: RemoteRef(self, ("r", generation, key)))
        except CodecError as exc:
            raise NotPlain(str(exc)) from None

    def _drop_child(self) -> None:
        if self._child is not None:
            child, self._child = self._child, None
            child.close()
            self.server_lost |= child.zygote_lost

    def _target(self, target: tuple) -> list:
        if target[0] == "g":
            return ["g", target[1]]
        if target[1] != self._generation:
            raise ChildLost("value from an interpreter that was replaced")
        return ["r", target[2]]

    def _target_of(self, value: Any) -> list | None:
        if isinstance(value, RemoteRef) and object.__getattribute__(value, "_session") is self:
            return self._target(object.__getattribute__(value, "_target"))
        return None


def _error_name(value: Any) -> str:
    """An exception name the child sent (hex), or a placeholder when it is malformed."""
    try:
        return unhex(value)[:MAX_ERROR_NAME]
    except (TypeError, ValueError):
        return "<malformed>"


def _opaque(self: RemoteRef, *_args: Any, **_kwargs: Any) -> Any:
    session = object.__getattribute__(self, "_session")
    raise session.record(OpaqueValue(f"{self!r} is not plain data; the grader does not look inside it"))


class RemoteRef:
    """A name or object of the candidate's program, seen from the trusted parent."""

    __slots__ = ("_session", "_target")

    def __init__(self, session: RemoteSession, target: tuple) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_target", target)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self._target, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._session.getattr(self._target, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._session.apply("list", self._target))

    def __len__(self) -> int:
        size = self._session.apply("len", self._target)
        if type(size) is not int:
            raise self._session.record(NotPlain("len() of a sandboxed value did not give an int"))
        return size

    def __repr__(self) -> str:
        if self._target[0] == "g":
            return f"<sandboxed {self._target[1]}>"
        return f"<sandboxed object #{self._target[2]}>"

    __setattr__ = __delattr__ = _opaque
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _opaque
    __reversed__ = __contains__ = __getitem__ = __setitem__ = __delitem__ = _opaque
    __int__ = __float__ = __complex__ = __index__ = __round__ = __trunc__ = __floor__ = __ceil__ = _opaque
    __neg__ = __pos__ = __abs__ = __invert__ = _opaque
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __matmul__ = __rmatmul__ = _opaque
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _opaque
    __divmod__ = __rdivmod__ = __pow__ = __rpow__ = __lshift__ = __rlshift__ = __rshift__ = _opaque
    __rrshift__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _opaque
    __enter__ = __exit__ = __format__ = __bytes__ = _opaque
    __copy__ = __deepcopy__ = __reduce__ = __reduce_ex__ = __getstate__ = _opaque
