"""Reward parts (registry), the article's rewards built from them, and user reward loading."""

from grpo_exp.rewards import agent, code, math, task, text  # noqa: F401  (importing them registers their parts)
from grpo_exp.rewards.registry import get, names, register

__all__ = ["get", "names", "register"]
