"""User-facing errors: one line that names the problem and the fix, never a traceback.

``UserError`` is raised by our own checks; ``describe_failure`` gives any failure its one line.
Config errors from Hydra and OmegaConf are described in config/errors.py.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

# The exit code of every command that refuses its input with a one-line error (run.py, plan, repair, dashboard).
EXIT_USER_ERROR = 2
# What a write to a full disk (or a full quota) raises.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
# safetensors (model.safetensors, adapter_model.safetensors) fails a write with its own exception, no
# OSError: "Error while serializing: I/O error: No space left on device (os error 28)", Rust's io::Error.
_SAFETENSORS_ERROR = "SafetensorError"
_SAFETENSORS_IO = "I/O error"
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class UserError(Exception):
    """A problem the user can fix; the message names it and the fix, on one line."""


def describe_failure(exc: BaseException) -> str:
    """The one line a user sees for a failed job: ours as is, others with their type and a hint."""
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = " ".join(str(exc).split()) or "(no message)"
    if "out of memory" in text.lower():
        return (
            f"out of memory ({text[:120]}); the article's remedies: optimizer.gradient_accumulation_steps=4 "
            "with a smaller grpo.per_device_train_batch_size, or model.quantization.load_in_4bit=true"
        )
    return f"{type(exc).__name__}: {text}"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it was raised from or while handling."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def no_space(exc: BaseException) -> bool:
    """Whether a disk (or quota) ran full somewhere on the way to ``exc``: an OSError's errno, or the
    one safetensors' write names in its message.

    torch's checkpoint writer reports a full disk as a bare RuntimeError; the caller judges that one
    from the free space it finds (``folder.JobFolder.space``)."""
    return any(_errno(e) in NO_SPACE for e in causes(exc))


def _errno(exc: BaseException) -> int | None:
    if isinstance(exc, OSError):
        return exc.errno
    found = _RUST_OS_ERROR.search(str(exc)) if _safetensors_write(exc) else None
    return int(found.group(1)) if found else None


def _safetensors_write(exc: BaseException) -> bool:
    """A safetensors write that the file system failed (matched by name: this module imports no safetensors)."""
    return type(exc).__name__ == _SAFETENSORS_ERROR and _SAFETENSORS_IO in str(exc)


class DiskFull(Exception):
    """A job that ran out of disk, raised once the checkpoints the disk cut short are removed (their
    space is what the resume and the job's summary need); the whole ones before are kept."""

    def __init__(self, folder: str, checkpoint_bytes: int, kept: str | None, removed: list[str]) -> None:
        self.folder, self.checkpoint_bytes, self.kept, self.removed = folder, checkpoint_bytes, kept, removed
        what = f"{kept} is kept" if kept else "no checkpoint had been finished"
        what += f", the unfinished {', '.join(removed)} removed" if removed else ""
        self.what = what
        super().__init__(
            f"the disk holding {folder} is full: a checkpoint of this job takes {checkpoint_bytes / 2**20:.0f} MiB "
            f"({what})"
        )

    def line(self, resume: str) -> str:
        """The one line on the console: what to free, and the command that resumes."""
        return (
            f"the disk holding {self.folder} is full: a checkpoint of this job takes "
            f"{self.checkpoint_bytes / 2**20:.0f} MiB; free that much, then resume with: {resume} ({self.what})"
        )


def disk_full(exc: BaseException, free: int, checkpoint_bytes: int) -> bool:
    """Whether ``exc`` came from a full disk: ENOSPC/EDQUOT on the way, or torch's writer failing with
    less free space than a checkpoint takes."""
    return no_space(exc) or (failed_write(exc) and free < checkpoint_bytes)


def failed_write(exc: BaseException) -> bool:
    """Whether torch's or safetensors' file writer failed somewhere on the way to ``exc`` (a full disk,
    or another fault): neither is an OSError with an errno to tell which."""
    return any(
        (isinstance(e, RuntimeError) and "inline_container" in str(e)) or _safetensors_write(e) for e in causes(exc)
    )
