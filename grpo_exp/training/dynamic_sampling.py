"""DAPO's dynamic sampling for TRL's GRPOTrainer (``grpo.dynamic_sampling``).

A group whose completions all score alike has zero advantage everywhere: it costs a forward and a
backward pass and teaches nothing. ``DynamicSampling`` drops such groups from each generation batch
before the loss, solved ones too as DAPO does (its "accuracy 1" groups; verl's ``filter_groups``),
and generates groups for more prompts, drawn seeded from the training set as the adaptive profile
draws them (profile.sample_rows), until the batch is full or ``grpo.max_sampling_rounds`` extra
rounds are spent; then dropped groups fill what is left, and the log says so once per such batch.
``grpo.dynamic_sampling_keep_solved`` keeps solved groups (every part that scored each completion at
its ceiling, rewards/solved.py) in the batch instead. Alike is judged on the scored completions, as
TRL leaves unscored ones out of a group's baseline and zeroes their advantage; a group none of whose
completions was scored is alike, and never solved.

Several processes. TRL scores every process's completions together (it gathers them to score, in
rank order) and a group may span two ranks, so each round's rows are gathered from every
rank too (widths padded alike) and groups are judged and picked on the whole batch: every rank makes
the same decisions, takes the same number of extra rounds, and keeps its own equal slice of the
trained batch. A round's new prompts are drawn alike on every rank, as many groups as make a whole
number of rows per rank, and each rank generates its share. ``num_items_in_batch`` is the whole
trained batch's loss tokens, as TRL counts them over its processes.

What a step logs. TRL appends its numbers once per generation round, so a step's would average the
rounds. The reward's are replaced by the trained batch's, recomputed from its scores as TRL and
rewards/ compute them: TRL's ``reward``, ``reward_std``, ``frac_reward_zero_std`` (of the trained
batch, not of everything generated: solved groups kept, and dropped ones filling the batch),
``rewards/<part>/mean`` and ``/std``, and ours, ``rewards/<part>/group_std``, ``frac_solved`` and
``frac_solved_groups``; the collapse detector and the monitor read them. Every other key keeps
TRL's values, round by round, and describes everything generated, dropped groups too
(``completions/*`` lengths, ``tools/*``, ``num_tokens``). Ours: ``dynamic_sampling/dropped_share``
(of the groups generated), ``dynamic_sampling/rounds`` (extra rounds), ``dynamic_sampling/completions``
(generated) and ``dynamic_sampling/trained_zero_std_share`` (the trained groups whose completions
all scored alike, solved or not).

Alike is TRL's rule (rewards/spread.py). ``DynamicSampling`` reaches TRL only through
``generate_and_score``, ``step_metrics`` and ``generation_batch``, which training/trl_private.py's
``TrlGeneration`` maps onto GRPOTrainer's private methods; the trainer mixes both in only when
``grpo.dynamic_sampling`` is on (training/trainer.py).
"""

from __future__ import annotations

import logging
import math
from typing import Any, NamedTuple

import torch
from trl.trainer.utils import nanstd

from grpo_exp.rewards.compose import group_std
from grpo_exp.rewards.solved import SOLVED, SOLVED_GROUPS, completion_solved, group_solved, judgeable, solved_shares
from grpo_exp.rewards.spread import alike, zero_spread
from grpo_exp.tracking.monitor import GROUP_STD_SUFFIX, PART_PREFIX
from grpo_exp.training.profile import sample_rows
from grpo_exp.training.trl_private import STD_EPSILON

log = logging.getLogger(__name__)

LEFT_PADDED = ("prompt_ids", "prompt_mask")  # TRL pads prompts on the left, completions on the right
# The per-row entries of TRL's generation output, gathered from every rank: a fixed list, so every rank
# gathers the same ones (a batch-wide value like pixel_values could match a rank's row count).
# tests/test_trl_contract.py checks it against the installed TRL's output.
PER_ROW_KEYS = (
    *LEFT_PADDED,
    "completion_ids",
    "completion_mask",
    "tool_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "token_type_ids",
    "mm_token_type_ids",
)
METRIC = "dynamic_sampling/"


class SampledGroup(NamedTuple):
    """One prompt's completions from a round: its rows of the whole batch, its scores (completions by
    parts), whether they all scored alike."""

    rows: dict[str, Any]
    scores: torch.Tensor
    alike: bool


class DynamicSampling:
    """Mix in before trl_private.TrlGeneration and GRPOTrainer; ``enable_dynamic_sampling`` turns it on."""

    dynamic_rounds: int | None = None  # extra generation rounds allowed per batch; None: off
    keep_solved: bool = False
    ceilings: tuple[float | None, ...] = ()
    _batches: tuple[int | None, int] = (None, 0)  # (global step, generation batches begun at it)

    def enable_dynamic_sampling(self, max_rounds: int, ceilings: list[float | None], keep_solved: bool = False) -> None:
        self.dynamic_rounds, self.ceilings, self.keep_solved = max_rounds, tuple(ceilings), keep_solved

    def generation_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The batch the step trains on, from ``inputs`` (this rank's rows)."""
        if self.dynamic_rounds is None or not self.model.training:
            return self.generate_and_score(inputs)[0]
        group, processes = self.num_generations, self.accelerator.num_processes
        wanted = len(inputs) * processes // group  # groups of the whole batch (TRL: whole groups only)
        metrics = self.step_metrics()
        logged = {key: len(values) for key, values in metrics.items()}  # by earlier batches of this step
        index_in_step = self._next_batch()
        kept: list[SampledGroup] = []
        spare: list[SampledGroup] = []
        generated = rounds = 0
        batch = inputs
        while True:
            output, scores = self.generate_and_score(batch)  # scores: every rank's rows
            output = self._every_rank(output)
            for index, same in enumerate(alike(self._totals(scores), group)):
                rows = slice(index * group, (index + 1) * group)
                member = SampledGroup(_rows(output, rows), scores[rows], same)
                kept_anyway = same and self.keep_solved and self._solved(member.scores)
                (spare if same and not kept_anyway else kept).append(member)
                generated += 1
            missing = wanted - len(kept)  # from gathered scores: the same on every rank
            if missing <= 0 or rounds >= self.dynamic_rounds:
                break
            rounds += 1
            batch = self._more_prompts(groups_to_draw(missing, group, processes), index_in_step, rounds)
        trained = (kept + spare)[:wanted]
        alike_trained = sum(g.alike for g in trained)
        if missing > 0:
            log.warning(
                "dynamic sampling: step %d's batch filled %d of its %d groups with dropped ones that scored "
                "alike: %d extra round(s) (grpo.max_sampling_rounds) ran out",
                self.state.global_step + 1,
                missing,
                wanted,
                rounds,
            )
        self._describe_trained(torch.cat([g.scores for g in trained]), logged)
        metrics[METRIC + "dropped_share"].append(len(spare) / generated)
        metrics[METRIC + "rounds"].append(float(rounds))
        metrics[METRIC + "completions"].append(float(generated * group))  # generated, kept or not
        metrics[METRIC + "trained_zero_std_share"].append(alike_trained / len(trained))
        whole = _merged([g.rows for g in trained], self._pad_id())
        return _rows(whole, rank_rows(len(inputs), self.accelerator.process_index))

    def _every_rank(self, output: dict[str, Any]) -> dict[str, Any]:
        """A round's output with every rank's rows, in rank order as TRL gathers the scores: per-row
        tensors padded to the widest rank's width and gathered; other values are this rank's (images'
        tensors among them: a multimodal batch is not merged across rounds either)."""
        if self.accelerator.num_processes == 1:
            return output
        from accelerate.utils import gather, pad_across_processes

        whole = dict(output)
        for key in sorted(k for k in PER_ROW_KEYS if torch.is_tensor(output.get(k))):  # alike on every rank
            value = output[key]
            if value.dim() >= 2:
                fill = _fill(key, self._pad_id())
                value = pad_across_processes(value, dim=1, pad_index=fill, pad_first=key in LEFT_PADDED)
            whole[key] = gather(value)
        return whole

    def _pad_id(self) -> int:
        """The pad token of the trainer's tokenizer (a processor's own, for a vision-language model)."""
        return getattr(self.processing_class, "tokenizer", self.processing_class).pad_token_id

    def _next_batch(self) -> int:
        """This generation batch's index within the optimizer step: a step generates several when
        gradient accumulation spans more than ``steps_per_generation``, and each draws its own prompts."""
        step, begun = self._batches
        now = self.state.global_step
        self._batches = (now, begun + 1 if step == now else 1)
        return self._batches[1] - 1

    def _totals(self, scores: torch.Tensor, parts: torch.Tensor | None = None) -> torch.Tensor:
        """Each completion's weighted sum of ``parts`` (default: its scores) as TRL sums it; NaN where
        no part scored it."""
        parts = scores if parts is None else parts
        totals = (parts * self.reward_weights.to(scores.device).unsqueeze(0)).nansum(dim=1)
        totals[torch.isnan(scores).all(dim=1)] = torch.nan
        return totals

    def _solved(self, group: torch.Tensor) -> bool:
        """Solved as rewards/solved.py judges a group: every scored completion's weighted parts at
        their ceilings; never when a weighted part's ceiling is unknown or no completion was scored."""
        weights = self.reward_weights.tolist()
        if not judgeable(self.ceilings, weights):
            return False
        return group_solved(self._verdicts(group)) is True

    def _verdicts(self, scores: torch.Tensor) -> list[bool | None]:
        """Per completion: solved (rewards/solved.completion_solved, over the weighted parts)."""
        weighted = [i for i, w in enumerate(self.reward_weights.tolist()) if w]
        ceilings = [self.ceilings[i] for i in weighted]
        return [completion_solved([_score(row[i]) for i in weighted], ceilings) for row in scores.tolist()]

    def _describe_trained(self, scores: torch.Tensor, logged: dict[str, int]) -> None:
        """Replace the reward numbers this batch's rounds appended with the trained batch's."""
        metrics = self.step_metrics()
        for key, value in self._reward_metrics(scores).items():
            values = metrics.get(key)
            if values is None or len(values) <= logged.get(key, 0):
                continue  # not logged by these rounds (a part without scores, no ceilings known)
            del values[logged.get(key, 0) :]
            if value is not None:
                values.append(value)

    def _reward_metrics(self, scores: torch.Tensor) -> dict[str, float | None]:
        """The reward's numbers for ``scores`` (completions by parts, NaN: unscored), as TRL's generation
        step and rewards/ log them for a batch; None: nothing to log."""
        group = self.num_generations
        totals = self._totals(scores)
        groups = [i // group for i in range(scores.shape[0])]  # group_std's runs of equal prompts
        numbers: dict[str, float | None] = {}
        for i, name in enumerate(self.reward_func_names):
            numbers[f"rewards/{name}/mean"] = torch.nanmean(scores[:, i]).item()
            numbers[f"rewards/{name}/std"] = nanstd(scores[:, i]).item()
            part = [_score(s) for s in scores[:, i].tolist()]
            numbers[PART_PREFIX + name + GROUP_STD_SUFFIX] = group_std(groups, part)
        numbers["reward"] = torch.nanmean(totals).item()
        numbers["reward_std"] = nanstd(totals).item()
        numbers["frac_reward_zero_std"] = self._zero_std_share(scores, totals)
        if judgeable(self.ceilings, self.reward_weights.tolist()):
            bounds = [(start, start + group) for start in range(0, scores.shape[0], group)]
            numbers.update({SOLVED: None, SOLVED_GROUPS: None, **solved_shares(self._verdicts(scores), bounds)})
        return numbers

    def _zero_std_share(self, scores: torch.Tensor, totals: torch.Tensor) -> float:
        """TRL's frac_reward_zero_std: the share of completions whose reward's standard deviation has no
        spread (rewards/spread.zero_spread), their group's (scale_rewards group or none) or the batch's
        (batch; normalize_then_sum, on the totals of the parts each scaled within its group)."""
        if self.multi_objective_aggregation == "normalize_then_sum":
            grouped = scores.view(-1, self.num_generations, scores.shape[1])
            mean, std = torch.nanmean(grouped, dim=1, keepdim=True), nanstd(grouped, dim=1, keepdim=True)
            totals = self._totals(scores, ((grouped - mean) / (std + STD_EPSILON)).view_as(scores))
        if self.multi_objective_aggregation == "normalize_then_sum" or self.scale_rewards == "batch":
            std = nanstd(totals)
        else:
            std = nanstd(totals.view(-1, self.num_generations), dim=1)
        return zero_spread(std).float().mean().item()

    def _more_prompts(self, groups: int, index_in_step: int, round_: int) -> list[dict[str, Any]]:
        """This rank's share of ``groups`` training prompts, each repeated for its group: drawn alike on
        every rank, seeded by step, generation batch and round; a draw larger than the training set
        takes it whole, repeated, so each rank still gets an equal share."""
        rows = self.train_dataset
        picked = sample_rows(len(rows), groups, f"{self.args.seed}/{self.state.global_step}/{index_in_step}/{round_}")
        processes = self.accelerator.num_processes
        if processes > 1 and len(picked) < groups:
            picked = (picked * math.ceil(groups / len(picked)))[:groups]
        drawn = [rows[i] for i in picked for _ in range(self.num_generations)]
        share = len(drawn) // processes
        return drawn[rank_rows(share, self.accelerator.process_index)]


def groups_to_draw(missing: int, group: int, processes: int) -> int:
    """The fewest groups, at least ``missing``, whose rows split evenly over ``processes``: TRL slices
    the gathered scores by equal shares per rank."""
    step = processes // math.gcd(group, processes)
    return math.ceil(missing / step) * step


def rank_rows(share: int, rank: int) -> slice:
    """The rows of the whole batch (ranks' rows in rank order) that rank ``rank`` holds, ``share`` each."""
    return slice(rank * share, (rank + 1) * share)


def _score(value: float) -> float | None:
    """A score from TRL's tensor of them: NaN is an unscored completion (None)."""
    return None if value != value else value


def _per_row(value: Any, size: int) -> bool:
    """A tensor with one entry per row of a batch of ``size`` rows (not a batch-wide value)."""
    return torch.is_tensor(value) and value.dim() > 0 and value.shape[0] == size


def _fill(key: str, pad: int) -> int:
    """What pads a per-row tensor's width: the pad token for token ids, 0 (masked out) otherwise."""
    return pad if key.endswith("_ids") else 0


def _rows(output: dict[str, Any], rows: slice) -> dict[str, Any]:
    """The batch's entries for ``rows`` (per-row tensors sliced; a batch-wide value kept as is)."""
    size = output["advantages"].shape[0]
    return {k: v[rows] if _per_row(v, size) else v for k, v in output.items()}


def _merged(parts: list[dict[str, Any]], pad: int) -> dict[str, Any]:
    """One batch from groups generated in different rounds: tensors padded to a common width, the
    token count TRL normalises by recomputed (over every rank's rows when ``parts`` hold them)."""
    merged: dict[str, Any] = {}
    for key, first in parts[0].items():
        values = [p[key] for p in parts]
        if key == "num_items_in_batch" or not torch.is_tensor(first) or first.dim() == 0:
            merged[key] = first
            continue
        if first.dim() >= 2:
            width = max(v.shape[1] for v in values)
            values = [_pad(v, width, _fill(key, pad), key in LEFT_PADDED) for v in values]
        merged[key] = torch.cat(values)
    loss_mask = merged["completion_mask"] * merged.get("tool_mask", 1)  # as TRL: tool results are no loss tokens
    merged["num_items_in_batch"] = loss_mask.sum()
    return merged


def _pad(tensor: torch.Tensor, width: int, fill: float, left: bool) -> torch.Tensor:
    extra = width - tensor.shape[1]
    if not extra:
        return tensor
    block = torch.full((tensor.shape[0], extra, *tensor.shape[2:]), fill, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([block, tensor] if left else [tensor, block], dim=1)
