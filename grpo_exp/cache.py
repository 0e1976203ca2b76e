"""Where grpo-exp keeps what it builds once per machine: the embedded model, the compiled schema."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "GRPO_EXP_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "grpo_exp"


def cache_root() -> Path:
    """$GRPO_EXP_CACHE, else ~/.cache/grpo_exp."""
    return Path(os.environ.get(CACHE_ENV, DEFAULT_CACHE))
