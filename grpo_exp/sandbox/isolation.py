"""Which Linux isolation a snippet runs under, and the command line that sets it up.

Modes (``auto`` picks the first that works on this machine, probing once per process):

- ``bwrap`` (bubblewrap): new PID, network, IPC, UTS and cgroup namespaces and a mount namespace
  whose only contents are read-only /usr, the interpreter's own folders, a /proc of its own,
  a minimal /dev and a size-capped tmpfs as working folder. No host file outside those, no host
  process, no network. The strongest mode. bwrap also installs the seccomp filter (``seccomp``:
  no kernel keyrings); under the other modes the child installs it itself.
- ``unshare`` (util-linux): new PID (with its own /proc), network, IPC, UTS and mount
  namespaces. Before dropping to the snippet's uid, a short trusted shell step mounts private,
  size-capped tmpfs folders over the host's world-writable ones (/tmp, /var/tmp, /dev/shm,
  /run/lock), so nothing written there reaches the host and /tmp is the working folder; it
  hides /root (re-binding the interpreter read-only where it lives below) and the password
  hashes (/etc/shadow, /etc/gshadow). The rest of the host's files stay visible, guarded only by
  permissions (the snippet never runs as root and holds no capability), so it can read
  world-readable host files. ``auto`` announces it once, loudly, with how to get bwrap.
- ``none``: limits only. The snippet can connect to the network, read what its uid may read and
  write world-writable folders (/tmp). Chosen by ``auto`` only when no namespace tool works,
  with one loud warning per process. Without root it is weaker still: the snippet runs as the
  trainer's own user, so it can also write and delete that user's files, read the environment
  of that user's processes through /proc, and a setsid() double fork escapes the final kill.

A root trainer never runs a snippet as root: ``setpriv`` switches to a leased uid (see
``identity``), sets no_new_privs (setuid binaries such as sudo stay powerless) and clears the
supplementary groups. Under ``none`` the interpreter may live where strangers cannot read
(pyenv under /root); then that uid keeps CAP_DAC_READ_SEARCH, which lets it read files but not
write, signal or trace anything, and does not lift the process limit.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from functools import cache

from grpo_exp.errors import UserError
from grpo_exp.sandbox import identity
from grpo_exp.sandbox.limits import MIB, Limits

log = logging.getLogger("grpo_exp.sandbox")

MODES = ("auto", "bwrap", "unshare", "none")
NAMESPACE_MODES = ("bwrap", "unshare")
SANDBOX_DIR = "/sandbox"  # the working folder as the snippet sees it under bwrap
PROBE_TIMEOUT_S = 20.0
TOP_LEVEL_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # usr-merge symlinks
BWRAP_NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
UNSHARE_NAMESPACES = ("--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts")
UNSHARE_WORKDIR = "/tmp"  # a private tmpfs under unshare
PRIVATE_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # world-writable on the host
HIDDEN_FOLDERS = ("/root",)
HIDDEN_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
STAGING = "/tmp/.grpo-interpreter"  # where an interpreter below a hidden folder waits to move back
INSTALL_BWRAP = "apt-get install -y bubblewrap"

_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)


@cache
def interpreter() -> str:
    """The interpreter snippets run on: the trainer's own, resolved past venv symlinks.

    Run with ``-I -S`` it sees the standard library only, in every isolation mode alike.
    """
    return os.path.realpath(sys.executable)


@cache
def interpreter_roots() -> tuple[str, ...]:
    """Folders the interpreter needs (its install prefix), outermost first, no duplicates."""
    roots = {os.path.realpath(sys.base_prefix), os.path.dirname(os.path.dirname(interpreter()))}
    kept: list[str] = []
    for root in sorted(roots):
        if not any(root == k or root.startswith(k + os.sep) for k in kept):
            kept.append(root)
    return tuple(kept)


@dataclass(frozen=True)
class Launcher:
    """Builds the command line that starts one isolated interpreter."""

    mode: str

    @property
    def host_workdir(self) -> bool:
        """Whether the working folder is a host temp folder (else a private tmpfs)."""
        return self.mode not in NAMESPACE_MODES

    @property
    def workdir(self) -> str | None:
        """The private working folder as the snippet sees it; None: a host temp folder."""
        return {"bwrap": SANDBOX_DIR, "unshare": UNSHARE_WORKDIR}.get(self.mode)

    @property
    def pid_namespace(self) -> bool:
        return self.mode in NAMESPACE_MODES

    def argv(self, python_args: list[str], uid: int | None, limits: Limits, seccomp_fd: int | None = None) -> list[str]:
        """``python_args`` (everything after the interpreter) wrapped in this mode's isolation.

        ``seccomp_fd``: bwrap installs the filter it holds (``seccomp``) before it starts anything.
        """
        python = [interpreter(), *python_args]
        if self.mode == "bwrap":
            bwrap = [*_bwrap_prefix(uid is None, limits.workdir_mb), *_seccomp(seccomp_fd), "--"]
            return [*bwrap, *self._drop(uid, read_search=False), *python]
        if self.mode == "unshare":
            user = () if uid is not None else ("--map-current-user",)
            inner = [*self._drop(uid, read_search=False), *python]
            return [_tool("unshare"), *user, *UNSHARE_NAMESPACES, "--", *_private_mounts(limits.workdir_mb), *inner]
        read_search = uid is not None and not _interpreter_public()
        return [*self._drop(uid, read_search), *python]

    def zygote_argv(self, python_args: list[str], limits: Limits, seccomp_fd: int | None = None) -> list[str]:
        """bwrap around a fork server (``forkserver``): the namespaces and filter a fresh interpreter gets.

        Under a root trainer it keeps uid 0 inside, with no capability but CAP_SETUID and
        CAP_SETGID, to drop each forked program to its own uid; no_new_privs holds for all.
        """
        if self.mode != "bwrap":
            raise ValueError(f"a fork server runs under bwrap, not {self.mode}")
        setpriv = _which("setpriv")
        no_new_privs = [setpriv, "--no-new-privs", "--"] if setpriv else []
        prefix = _bwrap_prefix(not identity.running_as_root(), limits.workdir_mb)
        return [*prefix, *_seccomp(seccomp_fd), "--", *no_new_privs, interpreter(), *python_args]

    @staticmethod
    def _drop(uid: int | None, read_search: bool) -> list[str]:
        setpriv = _which("setpriv")
        if uid is None:
            return [setpriv, "--no-new-privs", "--"] if setpriv else []
        if not setpriv:
            raise UserError("running as root needs setpriv (util-linux) to drop privileges: apt-get install util-linux")
        caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"] if read_search else []
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", *caps, "--"]


@cache
def _bwrap_prefix(unprivileged: bool, workdir_mb: int) -> tuple[str, ...]:
    """bwrap's options (computed once per settings: they only read the host); the caller ends them with ``--``."""
    # --die-with-parent follows the thread that starts bwrap, not the trainer: see launch_thread
    args = [_tool("bwrap"), *BWRAP_NAMESPACES, "--die-with-parent", "--new-session"]
    if unprivileged:
        args.append("--unshare-user")  # namespaces need a user namespace without root
    else:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for setpriv only
    args += ["--ro-bind", "/usr", "/usr"]
    for path in TOP_LEVEL_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    made: set[str] = set()
    for root in interpreter_roots():
        if root == "/usr" or root.startswith("/usr/"):
            continue
        parents = []
        parent = os.path.dirname(root)
        while parent != os.sep:
            parents.append(parent)
            parent = os.path.dirname(parent)
        for folder in reversed(parents):  # make them traversable whatever the host's modes
            if folder not in made:
                made.add(folder)
                args += ["--perms", "0755", "--dir", folder]
        args += ["--ro-bind", root, root]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--perms", "01777", "--size", str(workdir_mb * MIB), "--tmpfs", SANDBOX_DIR]
    args += ["--chdir", SANDBOX_DIR]
    return tuple(args)


def _seccomp(fd: int | None) -> list[str]:
    return [] if fd is None else ["--seccomp", str(fd)]


@cache
def _private_mounts(workdir_mb: int) -> tuple[str, ...]:
    """A ``sh -c`` prefix that, as root of a fresh mount namespace, hides the host's shared folders.

    It runs before the snippet's code and before the uid drop, then execs the rest of the line.
    """
    size = f"size={workdir_mb * MIB},mode=1777,nosuid,nodev"
    steps = ["set -e"]
    roots = [r for r in interpreter_roots() if any(_below(r, h) for h in HIDDEN_FOLDERS)]
    private = [f for f in PRIVATE_FOLDERS if os.path.isdir(f) and not os.path.islink(f)]
    steps += [f"mount -t tmpfs -o {size} tmpfs {shlex.quote(f)}" for f in private]
    for n, root in enumerate(roots):  # park it on the private /tmp, hide its parent, move it back
        stage = shlex.quote(f"{STAGING}{n}")
        steps += [f"mkdir {stage}", f"mount --bind {shlex.quote(root)} {stage}", f"mount -o remount,bind,ro {stage}"]
    steps += [
        f"mount -t tmpfs -o size={MIB},mode=0755 tmpfs {shlex.quote(h)}" for h in HIDDEN_FOLDERS if os.path.isdir(h)
    ]
    for n, root in enumerate(roots):
        stage = shlex.quote(f"{STAGING}{n}")
        steps += [f"mkdir -p {shlex.quote(root)}", f"mount --move {stage} {shlex.quote(root)}", f"rmdir {stage}"]
    steps += [f"mount --bind /dev/null {shlex.quote(f)}" for f in HIDDEN_FILES if os.path.isfile(f)]
    steps += [f"cd {UNSHARE_WORKDIR}", "unset PWD OLDPWD", 'exec "$@"']
    return (_tool("sh"), "-c", "\n".join(steps), "sandbox-mounts")


def _below(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@cache
def _interpreter_public() -> bool:
    return identity.traversable_by_others(interpreter_roots())


_which = cache(shutil.which)


def _tool(name: str) -> str:
    path = _which(name)
    if path is None:
        raise FileNotFoundError(name)
    return path


@cache
def probe(mode: str) -> bool:
    """Whether ``mode`` really starts an interpreter here (tools present, namespaces allowed)."""
    if mode == "none":
        return True
    launcher = Launcher(mode)
    lease = identity.lease_uid() if identity.running_as_root() else None
    try:
        argv = launcher.argv(["-I", "-S", "-c", "pass"], lease.uid if lease else None, Limits())
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError, UserError) as exc:
        log.debug("isolation %s unavailable: %s", mode, exc)
        return False
    finally:
        if lease is not None:
            identity.kill_uid(lease.uid)
            lease.release()
    if done.returncode != 0:
        log.debug("isolation %s unavailable: %s", mode, done.stderr.decode(errors="replace").strip())
    return done.returncode == 0


def available_modes() -> list[str]:
    """Namespace modes that work on this machine, strongest first."""
    return [mode for mode in NAMESPACE_MODES if probe(mode)]


def resolve(requested: str) -> str:
    """The concrete mode for ``requested``; refuses a namespace mode that cannot work here."""
    if requested not in MODES:
        raise UserError(f"sandbox isolation must be one of {', '.join(MODES)}, got {requested!r}")
    if requested == "auto":
        found = available_modes()
        if found and found[0] != "bwrap":
            warn_once(
                "weaker-than-bwrap",
                "SANDBOX WITHOUT BUBBLEWRAP: bwrap does not work on this machine, so generated code runs "
                f"under {found[0]} and CAN READ WORLD-READABLE HOST FILES. Install bubblewrap "
                f"({INSTALL_BWRAP}) for a sandbox that sees no host files.",
            )
        if found:
            return found[0]
        warn_once(
            "no-namespaces",
            "SANDBOX WITHOUT NAMESPACES: neither bwrap nor unshare works on this machine, so "
            "generated code runs with resource limits only and CAN USE THE NETWORK AND READ HOST "
            f"FILES. Install bubblewrap ({INSTALL_BWRAP}) or allow user namespaces.",
        )
        return "none"
    if requested == "none":
        warn_once(
            "isolation-none",
            "sandbox isolation=none: generated code runs with resource limits only and can use "
            "the network and read host files.",
        )
        return "none"
    if not probe(requested):
        raise UserError(
            f"sandbox isolation={requested} does not work on this machine (tool missing or user "
            "namespaces disabled); install bubblewrap (apt-get install -y bubblewrap) or use isolation=auto"
        )
    return requested
