"""The reward probe: before a run spends its steps, can each reward part teach the base model anything?

GRPO learns only from differences inside a group: a part that scores every completion of a group
alike gives no gradient, whether because the model can't produce what it rewards (flat), because
the model already earns it everywhere (at its ceiling), or because completions are cut at
``grpo.max_completion_length`` before they can earn it (truncated). The monitor finds these during
training; the probe finds them first, from a few seconds of sampling.

The base model answers a seeded sample of the training prompts (``probe.prompts``, seeded by
``seed``, never the held-out ones) as TRL's trainer would (the adaptive profile's ``Sampler``), as
many times as the largest group size asked about; every part scores them, staged parts included
(the question is whether each could teach once it counts). Each prompt's answers are cut into
disjoint groups of each size (``grpo.num_generations`` and ``probe.group_sizes``), so the share of
groups that score all alike is measured, not estimated, at each size. The verdicts use the
monitor's thresholds and quote its remedies, so the advice before training is the advice during it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from grpo_exp.config.schema import MonitorSettings
from grpo_exp.errors import UserError
from grpo_exp.rewards.compose import group_std
from grpo_exp.rewards.solved import FLOAT_NOISE, at_ceiling
from grpo_exp.spec import JobSpec
from grpo_exp.tracking.monitor import CEILING_REMEDY, FLAT_REMEDY, TRUNCATED_REMEDY

LEARNABLE, FLAT, CEILING, TRUNCATED = "learnable", "flat", "ceiling", "truncated"
# What each verdict means, for the printed table (the remedies are the monitor's).
MEANING = {
    LEARNABLE: "groups differ: GRPO has something to compare",
    FLAT: "no group differs: no signal at this group size",
    CEILING: "most groups are already at the part's best score",
    TRUNCATED: "cut at grpo.max_completion_length: most can't finish, or the cut ones score higher",
}


def probe(spec: JobSpec) -> dict[str, Any]:
    """Sample the base model on training prompts and judge every reward part (see the module docstring).

    Returns ``{"parts": {name: {"verdict", "mean", "group_std", "alike": {size: share}, "truncated",
    "remedy", ...}}, "prompts", "samples_per_prompt", "num_generations", ...}``, all JSON-ready."""
    from grpo_exp import data, models
    from grpo_exp.training.profile import Sampler, sample_rows

    started = time.perf_counter()
    settings = spec.settings
    group = settings.grpo.num_generations
    sizes = group_sizes(settings.probe.group_sizes, group)
    samples = sizes[-1]
    spec.layout.claim()
    _seed(settings.seed, settings.threads)
    model, tokenizer = models.load(settings.model, models.model_path(settings.model), spec.layout)
    if spec.layout.gpu and not settings.model.quantization.load_in_4bit:
        model = model.to(f"cuda:{spec.layout.local_rank}")
    prompts = data.load_splits(settings.dataset, tokenizer)[0]
    rows = [prompts[i] for i in sample_rows(len(prompts), settings.probe.prompts, settings.seed)]
    sampler = Sampler(
        model, tokenizer, list(spec.rewards), list(spec.weights), settings.grpo, settings.probe.generation_batch
    )
    sampled = sampler.sample(rows, samples, step=None)
    cut = [s.truncated for s in sampled]
    parts = {
        reward.__name__: judge_part(
            reward.__name__,
            [s.parts[reward.__name__] for s in sampled],
            [s.lengths for s in sampled],
            cut,
            reward.ceiling,
            sizes,
            group,
            settings.monitor,
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
    lengths: list[list[int]],
    cut: list[list[bool]],
    ceiling: float | None,
    sizes: list[int],
    group: int,
    monitor: MonitorSettings,
) -> dict[str, Any]:
    """One part's figures and verdict from its scores, the completions' token counts and whether each was cut
    (a list per prompt, the prompt's completions in order).

    ``alike``: per group size, the share of groups whose scored completions all score the same;
    ``at_ceiling``: at the run's group size, the share of groups at the part's ceiling. First match wins:

    - ceiling: more groups solved whole than ``monitor.max_zero_std_fraction`` (the monitor's converged groups);
    - flat: no group of the run's size differs;
    - truncated: more completions cut than ``monitor.max_clipped_ratio`` (they can't finish), or a cut
      one in more groups than that while the score clearly rises with length (a correlation above two
      standard errors of none, 2 / sqrt(completions)): the part pays for length, GRPO favours the
      longest, and training grows replies into the limit (the content-creation reward at 48 tokens);
    - learnable.
    """
    rows = [
        [(s, n, c) for s, n, c in zip(*row, strict=True) if s is not None]
        for row in zip(scores, lengths, cut, strict=True)
    ]
    scored = [item for row in rows for item in row]
    groups = {size: _groups(rows, size) for size in sizes}
    values = {size: [[s for s, _, _ in g] for g in chunks] for size, chunks in groups.items()}
    alike = {str(size): _share([_alike(g) for g in chunks]) for size, chunks in values.items()}
    solved = _share([all(at_ceiling(s, ceiling) for s in g) for g in values[group]])
    truncated = _share([c for _, _, c in scored])
    cut_groups = _share([any(c for _, _, c in g) for g in groups[group]])
    rise = _correlation([n for _, n, _ in scored], [s for s, _, _ in scored])
    pays_for_length = rise is not None and rise > 2 / math.sqrt(len(scored))
    if solved is not None and solved > monitor.max_zero_std_fraction:
        verdict, remedy = CEILING, CEILING_REMEDY.format(part=name)
    elif not groups[group] or alike[str(group)] == 1.0:
        verdict, remedy = FLAT, FLAT_REMEDY.format(part=name)
    elif truncated is not None and (
        truncated > monitor.max_clipped_ratio
        or (cut_groups is not None and cut_groups > monitor.max_clipped_ratio and pays_for_length)
    ):
        verdict, remedy = TRUNCATED, TRUNCATED_REMEDY
    else:
        verdict, remedy = LEARNABLE, None
    return {
        "verdict": verdict,
        "mean": _mean([s for s, _, _ in scored]),
        "group_std": _group_std(values[group]),
        "alike": alike,
        "truncated": truncated,
        "groups_with_cut": cut_groups,
        "length_correlation": rise,
        "ceiling": ceiling,
        "at_ceiling": solved if ceiling is not None else None,
        "remedy": remedy,
    }


def format_probe(result: dict[str, Any]) -> str:
    """The probe as a table: one line per part, then each verdict's meaning and remedy."""
    sizes = sorted({int(k) for part in result["parts"].values() for k in part["alike"]})
    group = result["num_generations"]
    size_label = "/".join(f"{s}*" if s == group else str(s) for s in sizes)
    header = (
        f"reward probe: {result['prompts']} training prompts x {result['samples_per_prompt']} completions of the "
        f"base model, group size {group}, up to {result['max_completion_length']} tokens "
        f"({_pct(result['truncated'])} cut), {result['seconds']:.1f} s"
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
                _pct(part["truncated"]),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [
        header,
        *("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table),
    ]
    for name, part in result["parts"].items():
        if part["verdict"] != LEARNABLE:
            lines.append(f"  {name}: {part['verdict']}, {MEANING[part['verdict']]}; {part['remedy']}")
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


def _correlation(x: list[float], y: list[float]) -> float | None:
    """Pearson's correlation of two series; None when either doesn't vary."""
    if len(x) < 2:
        return None
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sx, sy = math.sqrt(sum((a - mx) ** 2 for a in x)), math.sqrt(sum((b - my) ** 2 for b in y))
    if not sx or not sy:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True)) / (sx * sy)


def _alike(values: list[float]) -> bool:
    """Whether a group scores all the same (TRL's zero std, up to float noise)."""
    return max(values) - min(values) <= FLOAT_NOISE * max(1.0, abs(max(values)))


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
