"""grpo-exp: run, sweep and compare GRPO experiments from one Hydra command."""

__version__ = "0.1.0"
