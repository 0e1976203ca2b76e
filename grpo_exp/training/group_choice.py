"""Which group size the next stage uses, and which prompts it keeps, from per-prompt success rates.

A group whose completions all score alike has zero advantage everywhere and gives GRPO no gradient
(the DAPO observation). With a success rate p, a group of g completions is all-alike with chance
p^g + (1-p)^g, so a larger g buys more informative groups on prompts that are almost always or almost
never solved (sGPO sizes rollouts from the success rate the same way). Prompts solved in every
profiled sample or in none are the ones that carry no signal at any affordable g: they may be dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Choice:
    """A stage's group size and kept prompts (indices into the profiled rates), with the reason why."""

    num_generations: int
    kept: list[int]
    dropped_solved: list[int] = field(default_factory=list)
    dropped_unsolved: list[int] = field(default_factory=list)
    mixed_share: float = 0.0  # expected share of kept groups that are not all-alike at num_generations
    reached: bool = True  # whether mixed_share reaches the target
    reason: str = ""


def mixed_share(rates: Sequence[float], group: int) -> float:
    """Expected share of groups of ``group`` completions that don't all succeed or all fail."""
    if not rates:
        return 0.0
    return 1.0 - sum(p**group + (1.0 - p) ** group for p in rates) / len(rates)


def choose(
    rates: Sequence[float],
    candidates: Sequence[int],
    target: float,
    drop_solved: bool = True,
    drop_unsolved: bool = True,
    min_kept: int = 1,
) -> Choice:
    """The smallest candidate group size whose expected mixed share over the kept prompts reaches ``target``.

    ``rates``: success rate per profiled prompt; ``candidates``: the group sizes the batch rules allow,
    within bounds. Drops always/never-solved prompts when asked, unless fewer than ``min_kept`` would
    remain (then all are kept and the reason says so). Without a size that reaches the target, the
    largest candidate is used.
    """
    if not candidates:
        raise ValueError("no candidate group sizes")
    sizes = sorted(set(candidates))
    solved = [i for i, p in enumerate(rates) if p >= 1.0] if drop_solved else []
    unsolved = [i for i, p in enumerate(rates) if p <= 0.0] if drop_unsolved else []
    gone = set(solved) | set(unsolved)
    kept = [i for i in range(len(rates)) if i not in gone]
    notes = []
    if gone and len(kept) < min_kept:
        notes.append(f"kept all: dropping {len(gone)} would leave {len(kept)} prompts, fewer than {min_kept}")
        kept, solved, unsolved = list(range(len(rates))), [], []
    kept_rates = [rates[i] for i in kept]
    group = next((g for g in sizes if mixed_share(kept_rates, g) >= target), None)
    reached = group is not None
    group = group if group is not None else sizes[-1]
    share = mixed_share(kept_rates, group)
    mean = sum(rates) / len(rates) if rates else 0.0
    notes.insert(0, f"mean success {mean:.2f} over {len(rates)} profiled prompts")
    if solved or unsolved:
        notes.append(f"dropped {len(solved)} always solved and {len(unsolved)} never solved")
    bounds = f"{sizes[0]}..{sizes[-1]}"
    if reached:
        notes.append(f"g={group} is the smallest in {bounds} whose expected mixed groups {share:.2f} >= {target:g}")
    else:
        notes.append(f"no size in {bounds} reaches mixed groups {target:g}, the largest: g={group} gives {share:.2f}")
    return Choice(group, kept, solved, unsolved, share, reached, "; ".join(notes))
