"""Other libraries' progress bars off where our own output is the one to read.

transformers draws "Loading weights" and "Writing model shards" bars, datasets a "Filter" or "Map"
bar for each pass over the prompts: they take milliseconds on our data and would sit between the
training bar's lines or under the reward probe's table. The training bar itself is not one of them.
A base module, so the trainer and the probe (layers apart) switch off the same bars.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def library_bars_off() -> Iterator[None]:
    """No transformers/hub or datasets progress bars inside the block; each library's setting comes back after."""
    import datasets
    from transformers.utils import logging as hf_logging

    hf_was_on = hf_logging.is_progress_bar_enabled()
    data_was_on = not datasets.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if hf_was_on:
            hf_logging.enable_progress_bar()
        if data_was_on:
            datasets.enable_progress_bars()
