"""User-facing errors: one line that names the problem and the fix, never a traceback.

``UserError`` is raised by our own checks; ``describe_failure`` gives any failure its one line.
Config errors from Hydra and OmegaConf are described in config/errors.py.
"""

from __future__ import annotations


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
