"""Reward parts (registry), the article's rewards built from them, and user reward loading."""

import importlib
import importlib.util

from grpo_exp.rewards import text  # noqa: F401  (registers the text parts)
from grpo_exp.rewards.registry import get, names, register

# TEMPORARY until grpo_exp/rewards/code.py lands: the code-generation parts register on import.
if importlib.util.find_spec("grpo_exp.rewards.code"):
    importlib.import_module("grpo_exp.rewards.code")

__all__ = ["get", "names", "register"]
