"""The seccomp filter every sandboxed program runs under: the kernel's keyrings are out of reach.

Keyrings are not namespaced, and nothing the sandbox does cleans them: a key a program adds to
its session keyring (the trainer's, inherited) is read by later programs under other uids, one
added to its user keyring outlives the run in the kernel, where the next run's program with the
same leased uid finds it, and both show in the host's ``/proc/keys``. So ``add_key``,
``request_key`` and ``keyctl`` fail with EPERM, as under Docker's default profile, and so does
every syscall of another ABI (x32, or i386 through ``int 0x80``), where they have other numbers.

The filter is classic BPF, written out here (no libseccomp needed). bwrap installs it from an fd
(``--seccomp``) just before it starts the interpreter, fresh or zygote, whose forks inherit it;
under unshare and none the child installs it itself (``child._deny_syscalls``) before it runs
anything untrusted. Architectures without syscall numbers below get no filter, with one warning.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import platform
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

log = logging.getLogger("grpo_exp.sandbox")

INSTRUCTION = struct.Struct("=HBBI")  # struct sock_filter: code, jump if true, jump if false, k
# seccomp_data: int nr at offset 0, __u32 arch at offset 4
NR_OFFSET = 0
ARCH_OFFSET = 4
LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_IF_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
FAIL = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO with EPERM
X32_SYSCALL_BIT = 0x40000000
CHILD_ARG = "SECCOMP"  # a fresh child's argv item SECCOMP=<hex> (as child.SECCOMP_ARG): install this filter


@dataclass(frozen=True)
class Abi:
    """One architecture's audit id and its keyring syscall numbers."""

    audit_arch: int
    denied: tuple[int, ...]  # add_key, request_key, keyctl
    other_abi_bit: int | None = None  # syscall numbers from this bit up belong to another ABI (x86-64's x32)


ABIS = {
    "x86_64": Abi(0xC000003E, (248, 249, 250), X32_SYSCALL_BIT),
    "aarch64": Abi(0xC00000B7, (217, 218, 219)),
}


def program(abi: Abi) -> bytes:
    """The filter for ``abi`` as ``struct sock_filter`` array: deny its keyring calls and any other ABI."""
    other_abi = abi.other_abi_bit is not None
    # a jump skips that many instructions: FAIL is the last instruction, ALLOW the one before it
    steps = [(LOAD_WORD, 0, 0, ARCH_OFFSET), (JUMP_IF_EQUAL, 0, 1 + other_abi + len(abi.denied) + 1, abi.audit_arch)]
    steps.append((LOAD_WORD, 0, 0, NR_OFFSET))
    if other_abi:
        steps.append((JUMP_IF_AT_LEAST, len(abi.denied) + 1, 0, abi.other_abi_bit))
    for n, number in enumerate(abi.denied):
        steps.append((JUMP_IF_EQUAL, len(abi.denied) - n, 0, number))
    steps += [(RETURN, 0, 0, ALLOW), (RETURN, 0, 0, FAIL)]
    return b"".join(INSTRUCTION.pack(*step) for step in steps)


@cache
def keyring_filter() -> bytes | None:
    """This machine's filter, or None (with one warning) where the sandbox has none for its architecture."""
    abi = ABIS.get(platform.machine())
    if abi is None:
        log.warning(
            "no sandbox seccomp filter for %s: sandboxed programs can use the kernel keyrings", platform.machine()
        )
        return None
    return program(abi)


def child_args(bwrap: bool) -> list[str]:
    """The argv items that have a fresh child install the filter itself: none where bwrap does it, or none is known."""
    compiled = keyring_filter()
    return [] if bwrap or compiled is None else [f"{CHILD_ARG}={compiled.hex()}"]


@contextlib.contextmanager
def filter_fd() -> Iterator[int | None]:
    """A pipe's read end holding the filter, for bwrap's ``--seccomp`` (None: no filter); closed afterwards.

    A pipe, not a file: each start reads its own copy, so threads starting sandboxes never share an offset.
    """
    compiled = keyring_filter()
    if compiled is None:
        yield None
        return
    read, write = os.pipe()
    try:
        os.write(write, compiled)  # a few hundred bytes: well within the pipe's buffer
        os.close(write)
        write = -1
        yield read
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
