"""Whether a group's completions all scored alike: TRL's rule, the one place grpo-exp decides it.

GRPO learns from differences within a group; a group with none has zero advantage everywhere. TRL
judges "no spread" by ``torch.isclose(std, 0)`` on the standard deviation of the group's scored
totals (NaN-aware, with Bessel's correction: ``trl.trainer.utils.nanstd``), that is a standard
deviation within 1e-8 of zero, and counts such groups in ``frac_reward_zero_std``. Dynamic sampling
drops the groups this judges alike and the reward probe counts them (plan/probe.py); both call
``alike`` on float32 totals, as TRL scores in float32.

A group with fewer than two scored completions has no standard deviation (NaN: TRL's log does not
count it) and no advantage either (TRL zeroes a NaN advantage), so it is alike here too: it teaches
nothing. tests/test_trl_contract.py holds the rule equal to TRL's on a real batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def zero_spread(std: Any) -> Any:
    """TRL's test on standard deviations (a tensor of them): ``torch.isclose(std, 0)``; NaN is not zero."""
    import torch

    return torch.isclose(std, torch.zeros_like(std))


def alike(totals: Any, group: int) -> list[bool]:
    """Per run of ``group`` consecutive ``totals`` (a 1-D tensor; NaN: unscored): no spread as TRL judges
    it, or fewer than two scored completions."""
    from trl.trainer.utils import nanstd

    if not totals.numel():
        return []
    std = nanstd(totals.view(-1, group), dim=1)
    return (zero_spread(std) | std.isnan()).tolist()


def alike_lists(groups: Sequence[Sequence[float | None]]) -> list[bool]:
    """``alike`` for each group given as a list of scores (None: unscored), in float32 as TRL scores."""
    import torch

    nan = float("nan")
    values = [torch.tensor([nan if s is None else s for s in g], dtype=torch.float32) for g in groups]
    return [alike(v, len(v))[0] if len(v) else True for v in values]
