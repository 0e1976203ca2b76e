"""TRL's GRPOTrainer with a quieter console: completions tables only when asked, no model card, no
library progress bars beside the training bar.

TRL prints a rich table of sampled completions on every logging step whenever ``log_completions``
is on (hundreds of lines for a short run), though the same table also goes to W&B; and it writes a
hub model card (linking ``https://huggingface.co/None`` when nothing is pushed) into the job folder
with every checkpoint. Neither has a setting of its own, hence this small subclass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import trl.trainer.grpo_trainer as grpo_module
from transformers.utils import logging as hf_logging
from trl import GRPOTrainer


class JobTrainer(GRPOTrainer):
    """``print_completions``: also print TRL's completions table to the console (W&B gets it either way)."""

    def __init__(self, *args: Any, print_completions: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.print_completions = print_completions

    def train(self, *args: Any, **kwargs: Any) -> Any:
        with library_bars_off():  # checkpoints would each draw "Writing model shards" bars
            return super().train(*args, **kwargs)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.print_completions or not self.log_completions:
            return super().log(logs, start_time)
        printer = grpo_module.print_prompt_completions_sample
        grpo_module.print_prompt_completions_sample = _no_print
        try:
            return super().log(logs, start_time)
        finally:
            grpo_module.print_prompt_completions_sample = printer

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        """A card only for a model that goes to the hub; a local job folder has config.yaml instead."""
        if self.args.push_to_hub:
            super().create_model_card(*args, **kwargs)


def _no_print(*args: Any, **kwargs: Any) -> None:
    return None


@contextlib.contextmanager
def library_bars_off() -> Iterator[None]:
    """No transformers/hub progress bars (loading, saving) inside the block; the training bar is not one of them."""
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
