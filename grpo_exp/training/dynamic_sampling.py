"""DAPO's dynamic sampling for TRL's GRPOTrainer (``grpo.dynamic_sampling``).

A group whose completions all score alike has zero advantage everywhere: it costs a forward and a
backward pass and teaches nothing. ``DynamicSampling`` drops such groups from each generation batch
before the loss, unless the group is solved (every part that scored each completion at its ceiling,
rewards/solved.py: a converged group is success, and DAPO's "accuracy 1" groups stay out of the
count the monitor watches too), and generates groups for more prompts, drawn seeded from the training
set as the adaptive profile draws them (profile.sample_rows), until the batch is full or
``grpo.max_sampling_rounds`` extra rounds are spent; then dropped groups fill what is left. Each step
logs ``dynamic_sampling/dropped_share`` (of the groups generated), ``dynamic_sampling/rounds`` (extra
rounds), ``dynamic_sampling/completions`` (generated) and ``dynamic_sampling/trained_zero_std_share``
(of the groups trained on).

One process only: TRL scores the groups of every process together and hands each its slice.
"""

from __future__ import annotations

from typing import Any

import torch

from grpo_exp.errors import UserError
from grpo_exp.rewards.solved import at_ceiling
from grpo_exp.training.profile import sample_rows

LEFT_PADDED = ("prompt_ids", "prompt_mask")  # TRL pads prompts on the left, completions on the right
METRIC = "dynamic_sampling/"


class DynamicSampling:
    """Mix in before GRPOTrainer; ``enable_dynamic_sampling`` turns it on."""

    dynamic_rounds: int | None = None  # extra generation rounds allowed per batch; None: off
    ceilings: tuple[float | None, ...] = ()
    _scored: torch.Tensor | None = None

    def enable_dynamic_sampling(self, max_rounds: int, ceilings: list[float | None]) -> None:
        if self.accelerator.num_processes > 1:
            raise UserError("grpo.dynamic_sampling=true runs in one process: drop it, or train on one device")
        self.dynamic_rounds, self.ceilings = max_rounds, tuple(ceilings)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._scored = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._scored

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if self.dynamic_rounds is None or not self.model.training:
            return super()._generate_and_score_completions(inputs)
        size, group = len(inputs), self.num_generations
        kept: list[dict[str, Any]] = []
        spare: list[dict[str, Any]] = []
        generated = dropped = rounds = 0
        batch = inputs
        while True:
            output = super()._generate_and_score_completions(batch)
            for index, useless in enumerate(self._useless_groups()):
                (spare if useless else kept).append(_rows(output, slice(index * group, (index + 1) * group)))
                dropped += useless
                generated += 1
            missing = size // group - len(kept)
            if missing <= 0 or rounds >= self.dynamic_rounds:
                break
            rounds += 1
            batch = self._more_prompts(missing, rounds)
        trained = (kept + spare)[: size // group]
        metrics = self._metrics["train"]
        metrics[METRIC + "dropped_share"].append(dropped / generated)
        metrics[METRIC + "rounds"].append(float(rounds))
        metrics[METRIC + "completions"].append(float(generated * group))  # generated, kept or not
        metrics[METRIC + "trained_zero_std_share"].append(max(0, len(trained) - len(kept)) / len(trained))
        return _merged(trained, self._tokenizer.pad_token_id)

    def _useless_groups(self) -> list[bool]:
        """Per group of the batch just scored: all its completions alike and not solved."""
        scores = self._scored
        totals = (scores * self.reward_weights.to(scores.device).unsqueeze(0)).nansum(dim=1)
        groups = totals.view(-1, self.num_generations)
        alike = (groups.max(dim=1).values - groups.min(dim=1).values).abs() <= 1e-6 * groups.abs().max().clamp(min=1)
        per_group = scores.view(groups.shape[0], self.num_generations, -1)
        return [bool(same) and not self._solved(per_group[i]) for i, same in enumerate(alike.tolist())]

    def _solved(self, group: torch.Tensor) -> bool:
        """Every completion's scored parts at their ceilings (never when a weighted part's ceiling is unknown)."""
        if any(c is None for c, w in zip(self.ceilings, self.reward_weights.tolist(), strict=True) if w):
            return False
        return all(
            all(at_ceiling(s, c) for s, c in zip(row, self.ceilings, strict=True) if s == s)  # s != s: NaN, unscored
            for row in group.tolist()
        )

    def _more_prompts(self, groups: int, round_: int) -> list[dict[str, Any]]:
        """``groups`` training prompts drawn seeded by step and round, each repeated for its group."""
        rows = self.train_dataset
        seed = self.args.seed + 1000 * self.state.global_step + round_
        picked = sample_rows(len(rows), groups, seed)
        return [rows[i] for i in picked for _ in range(self.num_generations)]


def _rows(output: dict[str, Any], rows: slice) -> dict[str, Any]:
    """The batch's entries for ``rows`` (per-row tensors sliced; a batch-wide value kept as is)."""
    size = output["advantages"].shape[0]
    return {k: v[rows] if torch.is_tensor(v) and v.dim() and v.shape[0] == size else v for k, v in output.items()}


def _merged(parts: list[dict[str, Any]], pad: int) -> dict[str, Any]:
    """One batch from groups generated in different rounds: tensors padded to a common width, the
    token count TRL normalises by recomputed."""
    merged: dict[str, Any] = {}
    for key, first in parts[0].items():
        values = [p[key] for p in parts]
        if key == "num_items_in_batch" or not torch.is_tensor(first) or first.dim() == 0:
            merged[key] = first
            continue
        if first.dim() >= 2:
            width = max(v.shape[1] for v in values)
            fill = pad if key.endswith("_ids") else 0
            left = key in LEFT_PADDED
            values = [_pad(v, width, fill, left) for v in values]
        merged[key] = torch.cat(values)
    merged["num_items_in_batch"] = merged["completion_mask"].sum()
    return merged


def _pad(tensor: torch.Tensor, width: int, fill: float, left: bool) -> torch.Tensor:
    extra = width - tensor.shape[1]
    if not extra:
        return tensor
    block = torch.full((tensor.shape[0], extra, *tensor.shape[2:]), fill, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([block, tensor] if left else [tensor, block], dim=1)
