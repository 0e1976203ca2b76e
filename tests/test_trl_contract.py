"""The contract with the installed TRL and transformers, checked against the real libraries (no fakes):
every private name training/trl_private.py uses exists as it expects, dynamic sampling gathers every
per-row entry of a real generation output and rewrites only metric keys TRL logs, and what it logs
for a batch it drops nothing from equals TRL's own numbers for that batch.

Run it after raising pyproject's TRL pin (docs/stack.md): ``pytest tests/test_trl_contract.py``.
"""

from __future__ import annotations

import inspect
import math
import re
from typing import Any

import pytest
import torch
from trl.trainer.utils import nanstd

from grpo_exp.rewards.solved import SOLVED, SOLVED_GROUPS
from grpo_exp.tracking.monitor import GROUP_STD_SUFFIX, PART_PREFIX
from grpo_exp.training import dynamic_sampling, trl_private
from grpo_exp.training.dynamic_sampling import DynamicSampling
from grpo_exp.training.trl_private import STD_EPSILON

GROUP = 2
# What the next generation's completions score, per part, in row order (None: the part gives none).
PLAN: dict[str, list[float | None]] = {"p": [], "q": []}
# The per-row entries the tiny model's real generation below must hold: it runs with a reference model
# (beta > 0), old log-probabilities (num_iterations 2) and a tool (tool_mask).
GENERATED = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "tool_mask",
)
# Entries of TRL's generation output that are not one per row: dynamic sampling keeps this rank's value
# (the token count is recomputed; a multimodal batch's image entries are not merged across rounds).
NOT_PER_ROW = (
    "num_items_in_batch",
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "image_sizes",
    "image_position_ids",
    "num_images",
    "num_tiles",
)


def part_p(completions: list[Any], **kwargs: Any) -> list[float | None]:
    return PLAN["p"][: len(completions)]


def part_q(completions: list[Any], **kwargs: Any) -> list[float | None]:
    return PLAN["q"][: len(completions)]


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any, Any]:
    """The embedded default model, its tokenizer and its training prompts, as a default job loads them."""
    from hydra import compose, initialize_config_dir

    from grpo_exp import dataset, models
    from grpo_exp.config.loading import to_settings
    from grpo_exp.config.schema import CONF_DIR, register_schema

    register_schema()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        settings = to_settings(compose("config", overrides=["logger=none"]))
    model, tokenizer = models.load(settings.model, models.model_path(settings.model))
    prompts, _ = dataset.load_splits(settings.dataset, tokenizer, ())
    return model, tokenizer, prompts


def build(tiny: tuple[Any, Any, Any], cls: type, output_dir: Any, tools: list[Any] | None = None, **fields: Any) -> Any:
    from trl import GRPOConfig

    model, tokenizer, prompts = tiny
    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        report_to="none",
        num_generations=GROUP,
        per_device_train_batch_size=4,
        max_completion_length=6,
        seed=0,
        **fields,
    )
    trainer = cls(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[part_p, part_q],
        args=args,
        train_dataset=prompts,
        tools=tools,
    )
    trainer.model.train()
    return trainer


def batch(prompts: Any, groups: int) -> list[dict[str, Any]]:
    return [dict(prompts[g]) for g in range(groups) for _ in range(GROUP)]


@pytest.fixture(scope="module")
def generated(tiny, tmp_path_factory) -> tuple[Any, dict[str, Any]]:
    """A plain GRPOTrainer (with a tool) and its own output for one generation batch of two groups."""
    from trl import GRPOTrainer

    from grpo_exp.agents.tools import lookup_order

    trainer = build(
        tiny, GRPOTrainer, tmp_path_factory.mktemp("plain"), beta=0.04, num_iterations=2, tools=[lookup_order]
    )
    PLAN.update(p=[0.0, 1.0, 0.5, 0.5], q=[1.0, None, 0.0, 1.0])
    return trainer, trainer._generate_and_score_completions(batch(tiny[2], 2))


def uncovered(output: dict[str, Any]) -> list[str]:
    """The per-row entries of ``output`` that dynamic sampling would not gather from every rank."""
    rows = output["advantages"].shape[0]
    per_row = [k for k, v in output.items() if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == rows]
    return sorted(set(per_row) - set(dynamic_sampling.PER_ROW_KEYS) - {"num_items_in_batch"})


def test_the_private_methods_the_fence_names_exist_with_the_parameters_it_passes():
    from transformers import Trainer
    from trl import GRPOTrainer

    for name, parameters in trl_private.OVERRIDDEN.items():
        assert tuple(inspect.signature(getattr(GRPOTrainer, name)).parameters) == parameters, name
    for name, parameters in trl_private.CALLED.items():
        assert tuple(inspect.signature(getattr(Trainer, name)).parameters) == parameters, name


def test_trl_prints_its_completions_table_through_the_module_global_the_fence_swaps():
    import trl.trainer.grpo_trainer as grpo_module
    from trl import GRPOTrainer

    assert callable(getattr(grpo_module, trl_private.TABLE_PRINTER))
    assert re.search(rf"\b{trl_private.TABLE_PRINTER}\(", inspect.getsource(GRPOTrainer.log))
    with trl_private.completions_table_off():
        assert getattr(grpo_module, trl_private.TABLE_PRINTER) is trl_private._no_print
    assert getattr(grpo_module, trl_private.TABLE_PRINTER) is not trl_private._no_print


def test_trls_colocate_sync_is_what_the_cpu_reload_replaces():
    """Read from TRL's source (importing it needs vLLM): the trainer's ``vllm_generation``, its weight
    iterator (``NAMED_PARAMS``) and its sync, which feeds ``load_weights`` one tensor at a time through the
    route the fence's ``sync_vllm_by_reload`` takes to vLLM's model runner."""
    import importlib.util
    from pathlib import Path

    trl_root = Path(importlib.util.find_spec("trl").origin).parent
    generation = (trl_root / "generation" / "vllm_generation.py").read_text(encoding="utf-8")
    trainer = (trl_root / "trainer" / "grpo_trainer.py").read_text(encoding="utf-8")
    assert "self.vllm_generation = VLLMGeneration(" in trainer
    assert re.search(rf"def {trl_private.NAMED_PARAMS}\(self\)", generation)
    assert re.search(r"def sync_weights\(self\)", generation)
    route = "self.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights([(name, param)])"
    assert route in generation
    assert f"for name, param in self.{trl_private.NAMED_PARAMS}():" in generation


def test_every_entry_trl_writes_into_its_generation_output_is_known_to_dynamic_sampling():
    """Read from TRL's source: a key a new release adds fails here, even one a CPU run never produces
    (vLLM's, images')."""
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    written = set(re.findall(r'output\["(\w+)"\]', source))
    written |= set(re.findall(r'"(\w+)": \w+,', source.split("output = {", 1)[1].split("}", 1)[0]))
    assert set(dynamic_sampling.PER_ROW_KEYS) <= written, "PER_ROW_KEYS names an entry TRL no longer writes"
    assert written - set(dynamic_sampling.PER_ROW_KEYS) - set(NOT_PER_ROW) == set()


def test_per_row_keys_cover_every_per_row_entry_of_a_real_generation(generated):
    _, output = generated
    assert set(GENERATED) <= set(output), f"the tiny run's output lacks {set(GENERATED) - set(output)}"
    assert uncovered(output) == []


@pytest.mark.parametrize("left_out", GENERATED)
def test_a_per_row_key_left_out_is_caught(generated, monkeypatch, left_out):
    _, output = generated
    monkeypatch.setattr(
        dynamic_sampling, "PER_ROW_KEYS", tuple(k for k in dynamic_sampling.PER_ROW_KEYS if k != left_out)
    )
    assert uncovered(output) == [left_out]


def test_the_metric_keys_dynamic_sampling_rewrites_are_ones_trl_logs(generated):
    trainer, _ = generated
    logged = getattr(trainer, trl_private.METRICS)["train"]
    scores = torch.tensor([[0.0, 1.0], [1.0, math.nan]])
    sampler = type("Sampler", (DynamicSampling,), {})()
    for name in ("num_generations", "reward_weights", "reward_func_names", "multi_objective_aggregation"):
        setattr(sampler, name, getattr(trainer, name))
    sampler.scale_rewards, sampler.ceilings = trainer.scale_rewards, (1.0, 1.0)
    rewritten = set(sampler._reward_metrics(scores))
    ours = {SOLVED, SOLVED_GROUPS} | {PART_PREFIX + n + GROUP_STD_SUFFIX for n in trainer.reward_func_names}
    assert {"reward", "reward_std", "frac_reward_zero_std", "rewards/part_p/mean"} <= rewritten - ours
    assert rewritten - ours <= set(logged)


def test_the_tool_suffix_the_rollout_frames_is_trls(generated):
    from grpo_exp.agents.rollout import suffix_framer

    trainer, _ = generated
    replies = [{"role": "tool", "name": "lookup_order", "content": '{"status": "shipped"}'}]
    assert suffix_framer(trainer.processing_class)(replies) == list(trainer._get_tool_suffix_ids(replies))
    two = [*replies, {"role": "tool", "name": "lookup_order", "content": "not found"}]
    assert suffix_framer(trainer.processing_class)(two) == list(trainer._get_tool_suffix_ids(two))


def test_a_default_trainer_is_grpo_trainers_own_and_dynamic_sampling_mixes_the_fence_in(settings):
    from trl import GRPOTrainer

    from grpo_exp.training.trainer import JobTrainer, SamplingJobTrainer, trainer_class

    assert trainer_class(settings()) is JobTrainer
    assert trainer_class(settings("grpo.dynamic_sampling=true")) is SamplingJobTrainer
    for name in trl_private.OVERRIDDEN:
        assert getattr(JobTrainer, name) is getattr(GRPOTrainer, name), name
        assert getattr(SamplingJobTrainer, name) is getattr(trl_private.TrlGeneration, name), name
    privately = [
        f"{cls.__name__}.{name}"
        for cls in JobTrainer.__mro__
        if not cls.__module__.startswith(("trl.", "transformers.", "builtins"))
        for name in vars(cls)
        if name.startswith("_") and not name.startswith("__")
    ]
    assert privately == [], "a default run's trainer overrides private methods"


class Sampling(DynamicSampling, trl_private.TrlGeneration):
    """Mixed into the real GRPOTrainer below."""


# Round 1's scores, 4 groups of 2: solved alike (kept: keep_solved), mixed, mixed with a part silent on one
# completion, and one completion scored (at its ceilings: solved, kept) beside one unscored.
SOLVED_AND_MIXED = {"p": [1.0, 1.0, 0.0, 1.0, 0.2, 0.7, 1.0, None], "q": [1.0, 1.0, 1.0, 0.5, None, 0.4, 1.0, None]}


@pytest.mark.parametrize(
    ("aggregation", "scale"),
    [
        ("sum_then_normalize", "group"),
        ("sum_then_normalize", "batch"),
        ("sum_then_normalize", "none"),
        ("normalize_then_sum", "group"),
    ],
)
def test_with_nothing_dropped_dynamic_sampling_logs_trls_own_numbers(tiny, tmp_path, aggregation, scale):
    """Issue 53: the reward numbers dynamic sampling recomputes for the trained batch equal the ones TRL
    logged for the same batch, when that batch is all TRL generated (nothing dropped, no extra round)."""
    from trl import GRPOTrainer

    cls = type("SamplingTrainer", (Sampling, GRPOTrainer), {})
    trainer = build(tiny, cls, tmp_path, scale_rewards=scale, multi_objective_aggregation=aggregation)
    trainer.enable_dynamic_sampling(max_rounds=2, ceilings=[1.0, 1.0], keep_solved=True)
    seen: dict[str, list[float]] = {}
    describe = trainer._describe_trained

    def snapshot_then_describe(scores: torch.Tensor, logged: dict[str, int]) -> None:
        seen.update({key: list(values) for key, values in trainer.step_metrics().items()})  # TRL's, this round
        describe(scores, logged)

    trainer._describe_trained = snapshot_then_describe
    PLAN.update(SOLVED_AND_MIXED)
    trained = trainer._generate_and_score_completions(batch(tiny[2], 4))
    metrics = trainer.step_metrics()
    assert metrics["dynamic_sampling/dropped_share"] == [0.0] and metrics["dynamic_sampling/rounds"] == [0.0]
    keys = ("reward", "reward_std", "frac_reward_zero_std", "rewards/part_p/mean", "rewards/part_q/std")
    for key in keys:
        assert metrics[key] == pytest.approx(seen[key], rel=1e-6, abs=1e-7), key
    if scale == "group" and aggregation == "sum_then_normalize":
        assert seen["frac_reward_zero_std"] == [0.25]  # the solved group; the one-scored group has no std
    if aggregation == "normalize_then_sum":  # TRL's epsilon, as the fence copies it, gives TRL's advantages
        plan = [[math.nan if v is None else v for v in SOLVED_AND_MIXED[k]] for k in "pq"]
        scores = torch.tensor(plan, dtype=torch.float32).T
        grouped = scores.view(-1, GROUP, 2)
        parts = (grouped - torch.nanmean(grouped, 1, keepdim=True)) / (nanstd(grouped, 1, True) + STD_EPSILON)
        totals = trainer._totals(scores, parts.view_as(scores))
        advantages = ((totals - torch.nanmean(totals)) / (nanstd(totals) + STD_EPSILON)).nan_to_num(0.0)
        assert trained["advantages"].tolist() == pytest.approx(advantages.tolist(), rel=1e-5, abs=1e-6)
