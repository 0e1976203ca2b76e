"""The reward probe: before a run spends its steps, can each reward part teach the base model anything?

GRPO learns only from differences inside a group: a part that scores every completion of a group
alike gives no gradient, whether because the model can't produce what it rewards (flat), because
the model already earns it everywhere (at its ceiling), or because completions are cut at
``grpo.max_completion_length`` before they can earn it (truncated). The monitor finds these during
training; the probe finds them first, from a few seconds of sampling.

The base model answers a seeded sample of the training prompts (``probe.prompts``, seeded by
``seed``, never the held-out ones) as TRL's trainer would (the adaptive profile's ``Sampler``: an
agent through its tool calls, each rollout in its own environment instance), as many times as the
largest group size asked about; every part scores them, staged parts included
(the question is whether each could teach once it counts). Each prompt's answers are cut into
disjoint groups of each size (``grpo.num_generations`` and ``probe.group_sizes``), so the share of
groups that score all alike is measured, not estimated, at each size. The verdicts use the
monitor's thresholds and quote its remedies, so the advice before training is the advice during it.

A sample's shares move from one CPU to another (the sampled lengths follow its float arithmetic), so
a verdict rests on evidence that holds beyond the sample drawn: shares are judged by their 95 %
(Wilson) interval, not their point value, and a part that pays for a reply length (``length_score``'s
``target``) is checked against what the limit holds, the characters of the completions it cut.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from grpo_exp.config.schema import MonitorSettings
from grpo_exp.errors import UserError
from grpo_exp.quiet import library_bars_off
from grpo_exp.rewards.compose import group_std
from grpo_exp.rewards.solved import at_ceiling
from grpo_exp.rewards.spread import alike_lists
from grpo_exp.spec import JobSpec
from grpo_exp.tracking.monitor import CEILING_REMEDY, FLAT_REMEDY, TRUNCATED_REMEDY

LEARNABLE, FLAT, CEILING, TRUNCATED = "learnable", "flat", "ceiling", "truncated"
# What each verdict means, for the printed table (the remedies are the monitor's).
MEANING = {
    LEARNABLE: "groups differ: GRPO has something to compare",
    FLAT: "no group differs: no signal at this group size",
    CEILING: "most groups are already at the part's best score",
    TRUNCATED: "cut at grpo.max_completion_length: the part asks for more, or the cut ones score best",
}
Z95 = 1.96  # the normal quantile of a two-sided 95 % interval
PREFERS_CUT = 0.5  # a part whose best completion is a cut one in more groups than not pays for length


def probe(spec: JobSpec) -> dict[str, Any]:
    """Sample the base model on training prompts and judge every reward part (see the module docstring).

    Returns ``{"parts": {name: {"verdict", "mean", "group_std", "alike": {size: share}, "truncated",
    "remedy", ...}}, "prompts", "samples_per_prompt", "num_generations", ...}``, all JSON-ready."""
    from grpo_exp import dataset, models
    from grpo_exp.training.profile import Sampler, sample_rows

    started = time.perf_counter()
    settings = spec.settings
    group = settings.grpo.num_generations
    sizes = group_sizes(settings.probe.group_sizes, group)
    samples = sizes[-1]
    spec.layout.claim()
    _seed(settings.seed, settings.threads)
    try:
        with library_bars_off():  # the probe's table is the output
            model, tokenizer = models.load(settings.model, models.model_path(settings.model), spec.layout)
            # the prompts the trainer keeps, their length counted with every tool the model is shown
            prompts = dataset.load_splits(settings.dataset, tokenizer, spec.shown_tools())[0]
        if spec.layout.gpu and not settings.model.quantization.load_in_4bit:
            model = model.to(f"cuda:{spec.layout.local_rank}")
        rows = [prompts[i] for i in sample_rows(len(prompts), settings.probe.prompts, settings.seed)]
        sampler = Sampler(
            model,
            tokenizer,
            list(spec.rewards),
            list(spec.weights),
            settings.grpo,
            settings.probe.generation_batch,
            spec.tools,
            spec.environments,
        )
        sampled = sampler.sample(rows, samples, step=None)
    finally:
        spec.close_helpers()  # the processes the tools' and environments' calls ran in, with all they started
    cut = [s.truncated for s in sampled]
    parts = {
        reward.__name__: judge_part(
            reward.__name__,
            [s.parts[reward.__name__] for s in sampled],
            cut,
            sizes=sizes,
            group=group,
            monitor=settings.monitor,
            ceiling=reward.ceiling,
            chars=[s.chars for s in sampled],
            asks_chars=reward.asks_chars,
        )
        for reward in spec.rewards
    }
    lengths = [n for s in sampled for n in s.lengths]
    return {
        "parts": parts,
        "prompts": len(rows),
        "samples_per_prompt": samples,
        "num_generations": group,
        "max_completion_length": settings.grpo.max_completion_length,
        "truncated": _share([c for row in cut for c in row]),
        "truncated_interval": _interval([c for row in cut for c in row]),
        "mean_length": sum(lengths) / len(lengths) if lengths else None,
        "seconds": round(time.perf_counter() - started, 2),
    }


def group_sizes(asked: Sequence[int], group: int) -> list[int]:
    """The sizes to measure: ``probe.group_sizes`` and the run's own, in order; a group needs two completions."""
    if any(size < 2 for size in asked):
        raise UserError(f"probe.group_sizes={list(asked)}: a group needs at least 2 completions to differ")
    return sorted({*asked, group})


def judge_part(
    name: str,
    scores: list[list[float | None]],
    cut: list[list[bool]],
    *,
    sizes: list[int],
    group: int,
    monitor: MonitorSettings,
    ceiling: float | None = None,
    chars: list[list[int]] | None = None,
    asks_chars: int | None = None,
) -> dict[str, Any]:
    """One part's figures and verdict from its scores, whether each completion was cut, and each one's
    characters (a list per prompt, the prompt's completions in order).

    ``alike``: per group size, the share of groups whose scored completions all score the same
    (TRL's rule, rewards/spread.py);
    ``at_ceiling``: at the run's group size, the share of groups at the part's ceiling. First match wins:

    - ceiling: more groups solved whole than ``monitor.max_zero_std_fraction`` (the monitor's converged groups);
    - flat: no group of the run's size differs;
    - truncated, on any of three kinds of evidence, each judged so that another sample would agree:
      the part asks for a reply longer than the limit holds (``asks_chars`` above the median characters
      of the cut completions); the cut share's 95 % interval lies above ``monitor.max_clipped_ratio``
      (most can't finish); or, of the groups with cut and whole completions, the 95 % interval of the
      share whose best is a cut one lies above ``PREFERS_CUT`` (the part pays for what the limit cuts);
    - learnable.
    """
    chars = chars or [[0] * len(row) for row in cut]
    rows = [
        [(s, c, n) for s, c, n in zip(*row, strict=True) if s is not None]
        for row in zip(scores, cut, chars, strict=True)
    ]
    scored = [item for row in rows for item in row]
    groups = {size: _groups(rows, size) for size in sizes}
    values = {size: [[s for s, _, _ in g] for g in chunks] for size, chunks in groups.items()}
    alike = {str(size): _share(alike_lists(chunks)) for size, chunks in values.items()}
    solved = _share([all(at_ceiling(s, ceiling) for s in g) for g in values[group]])
    cut_flags = [c for _, c, _ in scored]
    mixed = [g for g in groups[group] if any(c for _, c, _ in g) and not all(c for _, c, _ in g)]
    best_cut = [max(g, key=lambda item: item[0])[1] for g in mixed]
    cut_chars = sorted(n for _, c, n in scored if c)
    reach = cut_chars[len(cut_chars) // 2] if cut_chars else None  # what the limit holds, in characters
    why = _truncated_why(asks_chars, reach, _interval(cut_flags), _interval(best_cut), len(best_cut), monitor)
    if solved is not None and solved > monitor.max_zero_std_fraction:
        verdict, remedy = CEILING, CEILING_REMEDY.format(part=name)
    elif not groups[group] or alike[str(group)] == 1.0:
        verdict, remedy = FLAT, FLAT_REMEDY.format(part=name)
    elif why is not None:
        verdict, remedy = TRUNCATED, TRUNCATED_REMEDY
    else:
        verdict, remedy = LEARNABLE, None
    return {
        "verdict": verdict,
        "mean": _mean([s for s, _, _ in scored]),
        "group_std": _group_std(values[group]),
        "alike": alike,
        "truncated": _share(cut_flags),
        "truncated_interval": _interval(cut_flags),
        "groups_with_cut": _share([any(c for _, c, _ in g) for g in groups[group]]),
        "best_is_cut": _share(best_cut),
        "best_is_cut_interval": _interval(best_cut),
        "asks_chars": asks_chars,
        "reach_chars": reach,
        "why": why if verdict == TRUNCATED else None,
        "ceiling": ceiling,
        "at_ceiling": solved if ceiling is not None else None,
        "remedy": remedy,
    }


def _truncated_why(
    asks: int | None,
    reach: int | None,
    cut: tuple[float, float] | None,
    best_cut: tuple[float, float] | None,
    mixed: int,
    monitor: MonitorSettings,
) -> str | None:
    """Why the part is truncated, in words, or None when no evidence says so."""
    if asks is not None and reach is not None and asks > reach:
        return f"it asks for {asks} characters; the limit holds about {reach} (the cut completions' median)"
    if cut is not None and cut[0] > monitor.max_clipped_ratio:
        return (
            f"{cut[0]:.0%}-{cut[1]:.0%} of completions are cut (95 % interval), above {monitor.max_clipped_ratio:.0%}"
        )
    if best_cut is not None and best_cut[0] > PREFERS_CUT:
        return f"in {best_cut[0]:.0%}-{best_cut[1]:.0%} of the {mixed} groups with a cut completion, the best is cut"
    return None


def format_probe(result: dict[str, Any]) -> str:
    """The probe as a table: one line per part, then each verdict's meaning and remedy."""
    sizes = sorted({int(k) for part in result["parts"].values() for k in part["alike"]})
    group = result["num_generations"]
    size_label = "/".join(f"{s}*" if s == group else str(s) for s in sizes)
    header = (
        f"reward probe: {result['prompts']} training prompts x {result['samples_per_prompt']} completions of the "
        f"base model, group size {group}, up to {result['max_completion_length']} tokens "
        f"({_pct(result['truncated'])}{_pct_interval(result['truncated_interval'])} cut), {result['seconds']:.1f} s"
    )
    table = [("part", "verdict", "mean", "group std", f"alike at {size_label}", "cut")]
    for name, part in result["parts"].items():
        table.append(
            (
                name,
                part["verdict"],
                _num(part["mean"]),
                _num(part["group_std"]),
                " ".join(_num(part["alike"].get(str(s)), 2) for s in sizes),
                _pct(part["truncated"]) + _pct_interval(part["truncated_interval"]),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        header,
        *("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table),
    ]
    for name, part in result["parts"].items():
        if part["verdict"] != LEARNABLE:
            because = f" ({part['why']})" if part.get("why") else ""
            lines.append(f"  {name}: {part['verdict']}, {MEANING[part['verdict']]}{because}; {part['remedy']}")
    lines.append(f"  (alike: share of groups whose completions all score the same; * the run's group size {group})")
    return "\n".join(lines)


def _seed(seed: int, threads: int | None) -> None:
    """Sampling as reproducible as a run's (the same seed), on the job's threads."""
    from transformers import set_seed

    set_seed(seed)
    if threads:
        import torch

        torch.set_num_threads(threads)


def _groups(rows: list[list[Any]], size: int) -> list[list[Any]]:
    """Each prompt's scored completions (unscored ones dropped first, as TRL leaves them out of a group's
    spread) cut into disjoint groups of ``size``; a shorter rest is left out."""
    return [row[start : start + size] for row in rows for start in range(0, len(row) - size + 1, size)]


def _interval(flags: list[bool]) -> tuple[float, float] | None:
    """The Wilson score 95 % interval of a share: where the share of another sample of this size would lie."""
    n = len(flags)
    if not n:
        return None
    share = sum(flags) / n
    centre = (share + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(share * (1 - share) / n + Z95**2 / (4 * n * n)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _group_std(chunks: list[list[float]]) -> float | None:
    """Mean spread within groups, as the trainer logs it (``rewards/<part>/group_std``)."""
    labels = [i for i, chunk in enumerate(chunks) for _ in chunk]
    return group_std(labels, [s for chunk in chunks for s in chunk])


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _pct_interval(bounds: tuple[float, float] | list[float] | None) -> str:
    return "" if bounds is None else f" [{bounds[0]:.0%}-{bounds[1]:.0%}]"
