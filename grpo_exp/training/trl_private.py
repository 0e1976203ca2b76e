"""Every private name of TRL's and transformers' that grpo-exp uses, here and in no other module.

A default run stands on TRL's public surface: GRPOTrainer's arguments (reward functions, which log
through ``log_metric``/``log_extra``, callbacks, tools), a few public methods of its own overridden
(``log``, ``train``, ``create_model_card``). Four things have no public hook, so they reach into the
trainers here:

- dynamic sampling (``grpo.dynamic_sampling``; training/dynamic_sampling.py) sits between TRL's
  generation and its loss. ``TrlGeneration`` overrides ``GRPOTrainer._generate_and_score_completions``
  (so the batch goes through ``generation_batch``, DynamicSampling's) and ``_calculate_rewards`` (to keep
  the scores of every rank's rows, gathered), and hands out the step's metric lists (``_metrics``),
  whose reward numbers dynamic sampling rewrites. Only a trainer built with dynamic sampling on mixes it in.
- A stage with no step left to train loads its checkpoint with transformers'
  ``Trainer._load_from_checkpoint``, the loader ``train(resume_from_checkpoint=...)`` uses, so every
  format it resumes from (a full model, sharded or not, a LoRA adapter, FSDP) loads alike.
- vLLM's CPU build (``grpo.use_vllm=true`` without a GPU) packs each linear layer's weight for oneDNN
  once loaded and leaves the layer an empty weight, so TRL's colocate sync, one tensor at a time into
  ``model.load_weights``, fails at the first step. ``sync_vllm_by_reload`` hands the same tensors (TRL's
  ``VLLMGeneration._iter_named_params``) to vLLM's own ``reload_weights``, which unpacks, loads and packs again.
- TRL prints its completions table from ``GRPOTrainer.log`` through the module global
  ``print_prompt_completions_sample`` of ``trl.trainer.grpo_trainer``; ``completions_table_off`` swaps it
  out for one call.

tests/test_trl_contract.py checks each of these against the installed TRL and transformers (names,
signatures, the metric keys rewritten, the per-row entries of a real generation output);
tests/test_layout.py checks that no other module of grpo_exp/ names a private attribute of theirs.
Moving to a newer TRL (docs/stack.md): raise pyproject's pin, ``make lock``, run the contract test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# The private methods named here and the parameters the code here passes them, in order.
OVERRIDDEN = {  # GRPOTrainer's, overridden by TrlGeneration
    "_generate_and_score_completions": ("self", "inputs"),
    "_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
}
CALLED = {"_load_from_checkpoint": ("self", "resume_from_checkpoint", "model")}  # transformers' Trainer's
METRICS = "_metrics"  # GRPOTrainer's {"train" | "eval": {key: [one value per generation batch]}}
# What TRL adds to a standard deviation it divides by (normalize_then_sum's per-part scaling); dynamic
# sampling's recount of frac_reward_zero_std uses it, and tests/test_trl_contract.py holds the two equal.
STD_EPSILON = 1e-4
TABLE_PRINTER = "print_prompt_completions_sample"  # looked up in trl.trainer.grpo_trainer at each log
NAMED_PARAMS = "_iter_named_params"  # VLLMGeneration's: the policy's weights under vLLM's names, gathered


class TrlGeneration:
    """Mixed in before GRPOTrainer (after DynamicSampling): TRL's generation-and-scoring step reached
    through names of ours. TRL calls ``_generate_and_score_completions`` once per generation batch;
    it goes to ``generation_batch`` (DynamicSampling's), which asks ``generate_and_score`` for TRL's own."""

    _round_scores: Any = None  # the last round's scores, every rank's rows (TRL gathers them to score)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        return self.generation_batch(inputs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._round_scores = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._round_scores

    def generation_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """What the step trains on; TRL's own output unless a subclass decides otherwise."""
        return self.generate_and_score(inputs)[0]

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
        """TRL's generation output for ``inputs`` (this rank's rows) and the scores of every rank's rows
        (completions by reward parts, NaN where a part gave None), in rank order."""
        self._round_scores = None
        output = super()._generate_and_score_completions(inputs)
        return output, self._round_scores

    def step_metrics(self) -> dict[str, list[float]]:
        """The training metrics TRL has gathered since the last log: key -> one value per generation batch."""
        return getattr(self, METRICS)["train"]


def load_checkpoint_weights(trainer: Any, checkpoint: str) -> None:
    """The checkpoint's weights into ``trainer``'s model, as ``train(resume_from_checkpoint=...)`` loads them."""
    trainer._load_from_checkpoint(checkpoint)


def sync_vllm_by_reload(trainer: Any) -> None:
    """``trainer``'s colocated vLLM (its CPU build) takes each weight sync through vLLM's ``reload_weights``.

    TRL's own sync fails there (AttributeError: 'Parameter' object has no attribute 'weight_loader'):
    vLLM's CPU linear layers keep their weights only in oneDNN's packed form. The reload restores the
    layers, loads every tensor and packs them again, the output head too; then, as TRL does, the prefix
    cache is reset. tests/test_vllm_cpu_e2e.py checks that vLLM samples from the trained policy."""
    generation = trainer.vllm_generation

    def sync_weights() -> None:
        runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner  # TRL's own route to it
        runner.reload_weights(weights_iterator=getattr(generation, NAMED_PARAMS)(), is_checkpoint_format=True)
        # A head tied to the embeddings loads nothing of its own, so the reload leaves its packed copy of
        # them stale: the completions would come from the new body and the old head (measured: the
        # per-token log-prob gap to the trained policy grew with the KL, 0.01 -> 0.16 in 50 steps).
        head = getattr(runner.get_model(), "lm_head", None)
        if head is not None and hasattr(head, "quant_method"):
            head.quant_method.process_weights_after_loading(head)
        generation.llm.reset_prefix_cache()

    generation.sync_weights = sync_weights


@contextlib.contextmanager
def completions_table_off() -> Iterator[None]:
    """TRL's completions table goes unprinted inside (W&B still gets it)."""
    import trl.trainer.grpo_trainer as grpo_module

    printer = getattr(grpo_module, TABLE_PRINTER)
    setattr(grpo_module, TABLE_PRINTER, _no_print)
    try:
        yield
    finally:
        setattr(grpo_module, TABLE_PRINTER, printer)


def _no_print(*args: Any, **kwargs: Any) -> None:
    return None
