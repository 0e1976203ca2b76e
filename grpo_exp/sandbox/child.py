"""Trusted start-up code of a sandboxed interpreter; it runs before any untrusted code.

The parent passes this file's source with ``python -I -S -c`` (the child cannot see this
repository), followed by a call to ``_main()`` (a fresh interpreter for one program, whose
arguments are the request and response pipe fds, then ``RLIMIT_X=soft,hard`` items) or to the
fork server of ``zygote.py`` (which forks a child per program and calls the same functions in it).
The child sets the limits on itself, reads a job from the request pipe and then either

- ``run``: compiles and executes the snippet as ``__main__`` (standalone use; its exit status is
  the result), or
- ``serve``: executes the candidate's program once (bytecode the parent compiled with this same
  interpreter, see ``grading.compile_candidate``), then answers calls from the parent.

Parent to child: length-prefixed ``marshal`` frames (the parent is trusted, and marshal is
built in: importing ``json`` would cost this interpreter ~12 ms of its ~13 ms start-up).
Child to parent: one JSON line per message, written by hand from ASCII-only pieces (text travels
as hex), which the parent parses strictly. Values cross as tagged plain data; anything that is
not an exact builtin type (int, float, str, bool, None, bytes, complex, list, tuple, dict, set,
frozenset) stays here and the parent only gets an opaque handle to it. Nothing the untrusted
code does after it gains control is trusted by the parent: at worst it sends other plain
values, which is no more than a candidate returning them.
"""

import builtins
import marshal
import os
import resource
import sys

MAX_DEPTH = 100
MAX_EXCEPTION_BASES = 16  # as in remote.py
_CONVERSIONS = {"list": list, "len": len}
READ_CHUNK = 65536
LENGTH_BYTES = 4
SECCOMP_ARG = "SECCOMP"  # as seccomp.CHILD_ARG: argv item SECCOMP=<hex>, the filter to install
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
FILTER_INSTRUCTION_BYTES = 8  # struct sock_filter


def _read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(READ_CHUNK, size - len(data)))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read(fd):
    head = _read_exact(fd, LENGTH_BYTES)
    body = None if head is None else _read_exact(fd, int.from_bytes(head, "big"))
    return None if body is None else marshal.loads(body)


def _write(fd, text):
    data = text.encode("ascii") + b"\n"
    while data:
        try:
            data = data[os.write(fd, data) :]
        except OSError:
            os._exit(0)


def _hex(text):
    return text.encode("utf-8", "surrogatepass").hex()


def _q(text):
    return '"' + text + '"'  # only ever called on ASCII hex, digits, tags and float reprs


class _Codec:
    """Plain data <-> tagged values; everything else becomes a handle kept in ``refs``."""

    def __init__(self, names):
        self.names = names
        self.refs = {}

    def enc(self, x, depth=0):
        t = type(x)
        if x is None:
            return '["n"]'
        if t is bool:
            return '["b",true]' if x else '["b",false]'
        if t is int:
            return '["i",' + _q(format(x, "x")) + "]"
        if t is float:
            return '["f",' + _q(repr(x)) + "]"
        if t is str:
            return '["s",' + _q(_hex(x)) + "]"
        if t is bytes:
            return '["y",' + _q(x.hex()) + "]"
        if t is complex:
            return '["c",' + _q(repr(x.real)) + "," + _q(repr(x.imag)) + "]"
        if depth > MAX_DEPTH:
            raise RecursionError("value nested too deeply")
        if t is list or t is tuple or t is set or t is frozenset:
            tag = {list: "l", tuple: "t", set: "S", frozenset: "F"}[t]
            return '["' + tag + '",[' + ",".join([self.enc(v, depth + 1) for v in x]) + "]]"
        if t is dict:
            pairs = ["[" + self.enc(k, depth + 1) + "," + self.enc(v, depth + 1) + "]" for k, v in x.items()]
            return '["d",[' + ",".join(pairs) + "]]"
        key = len(self.refs)
        self.refs[key] = x
        return '["r",' + str(key) + "]"

    def dec(self, v, depth=0):
        tag = v[0]
        if depth > MAX_DEPTH:
            raise RecursionError("value nested too deeply")
        if tag == "n":
            return None
        if tag in ("b", "s"):
            return v[1]
        if tag == "i":
            return int(v[1], 16)
        if tag == "f":
            return float(v[1])
        if tag == "y":
            return bytes.fromhex(v[1])
        if tag == "c":
            return complex(float(v[1]), float(v[2]))
        if tag in ("l", "t", "S", "F"):
            kind = {"l": list, "t": tuple, "S": set, "F": frozenset}[tag]
            return kind(self.dec(e, depth + 1) for e in v[1])
        if tag == "d":
            return {self.dec(k, depth + 1): self.dec(e, depth + 1) for k, e in v[1]}
        if tag == "r":
            return self.refs[v[1]]
        if tag == "g":
            if v[1] in self.names:
                return self.names[v[1]]
            return getattr(builtins, v[1])
        raise ValueError(tag)


def _exception_classes(exc):
    """The raised exception's classes, most derived first, as a JSON list of hex "module:qualname"."""
    names = []
    for kind in type(exc).__mro__[:MAX_EXCEPTION_BASES]:
        names.append(_q(_hex(str(getattr(kind, "__module__", "?")) + ":" + str(getattr(kind, "__qualname__", "?")))))
    return "[" + ",".join(names) + "]"


def _serve(job, in_fd, out_fd):
    names = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(job["code"], names)  # bytecode: the parent compiled it
    except BaseException as exc:
        _write(out_fd, '{"load_error":' + _q(_hex(type(exc).__name__)) + "}")
        os._exit(0)
    _write(out_fd, '{"ready":true}')
    codec = _Codec(names)
    while True:
        req = _read(in_fd)
        if req is None:
            os._exit(0)
        head = '{"i":' + str(req["i"]) + ","
        try:
            if req["op"] == "call":
                fn = codec.dec(req["f"])
                args = [codec.dec(a) for a in req["a"]]
                kwargs = {k: codec.dec(a) for k, a in req["k"]}
                value = fn(*args, **kwargs)
            elif req["op"] == "attr":
                value = getattr(codec.dec(req["o"]), req["n"])
            else:  # "apply": a conversion the parent asks for, e.g. list(obj) to iterate it
                value = _CONVERSIONS[req["fn"]](codec.dec(req["o"]))
            reply = head + '"v":' + codec.enc(value) + "}"
        except BaseException as exc:
            reply = head + '"e":' + _exception_classes(exc) + "}"
        _write(out_fd, reply)


def _apply_limits(limits):
    """Set each ``(name, soft, hard)`` rlimit on this process, before any untrusted code runs."""
    for name, soft, hard in limits:
        resource.setrlimit(getattr(resource, name), (soft, hard))


def _deny_syscalls(compiled):
    """Install the parent's seccomp filter (``seccomp.py``) on this process for good, or raise OSError.

    Only under unshare and none, where no bwrap did it: this is the one place the child needs ctypes.
    """
    import ctypes

    class _Program(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    program = _Program(len(compiled) // FILTER_INSTRUCTION_BYTES, compiled)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(
        PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0
    ):
        raise OSError(ctypes.get_errno(), "the sandbox's seccomp filter was refused")


def _run_job(in_fd, out_fd, output_is_null=False):
    """Read the job from the parent and run it; returns only when there was no job.

    A graded program's output goes to /dev/null (grading never reads it), in a fresh
    interpreter as in a forked one (``output_is_null``: the zygote saw to it already).
    """
    job = _read(in_fd)
    if job is None:
        os._exit(0)
    if job["mode"] == "serve":
        if not output_is_null:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.close(null)
        _serve(job, in_fd, out_fd)
        return
    os.close(in_fd)
    os.close(out_fd)
    exec(compile(job["code"], "<snippet>", "exec"), {"__name__": "__main__", "__builtins__": builtins})


def _main():
    """A fresh interpreter: argv holds the pipe fds, the limits and maybe a filter; one program, then exit."""
    limits = []
    for item in sys.argv[3:]:  # RLIMIT_X=soft,hard or SECCOMP=<hex>
        name, _, values = item.partition("=")
        if name == SECCOMP_ARG:
            _deny_syscalls(bytes.fromhex(values))
            continue
        soft, hard = values.split(",")
        limits.append((name, int(soft), int(hard)))
    _apply_limits(limits)
    _run_job(int(sys.argv[1]), int(sys.argv[2]))
