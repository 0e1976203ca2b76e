"""The grpo group mirrors the installed TRL: regenerated schema equals the committed one, and options reach TRL."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from grpo_exp import schema_gen
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.config.trl_map import SET_ELSEWHERE
from grpo_exp.config.trl_schema import TrlGrpoFields


def test_generated_schema_matches_the_installed_trl():
    """Fails after a TRL upgrade that adds, drops or retypes a field: run `python -m grpo_exp.schema_gen`.

    The versions it was generated from are left out: a fresh install takes the newest releases the
    pins allow (a transformers 5.25 in place of 5.24, say), which need not change a field.
    """
    committed = schema_gen.TARGET.read_text(encoding="utf-8")
    rendered = schema_gen.render()
    assert _unversioned(rendered) == _unversioned(committed), (
        "grpo_exp/trl_schema.py is stale: run python -m grpo_exp.schema_gen"
    )


def _unversioned(schema: str) -> str:
    """The generated schema with the TRL and transformers versions it names replaced by a placeholder."""
    return re.sub(r'(\btrl\s+|\btransformers\s+|"trl": "|"transformers": ")\d[\w.+-]*', r"\1<version>", schema)


def test_every_grpo_config_field_is_settable_or_pointed_elsewhere():
    from trl import GRPOConfig

    exposed = {f.name for f in dataclasses.fields(TrlGrpoFields)} | set(SET_ELSEWHERE)
    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig) if f.init and not f.name.startswith("_")}
    from grpo_exp.config.trl_schema import NOT_EXPOSED

    assert trl_fields - exposed == set(NOT_EXPOSED)


@pytest.mark.parametrize("name", sorted(schema_gen.CHOICES))
def test_hand_kept_choices_are_the_ones_trl_documents(name):
    """TRL lists these values only in its help text: every value we accept must be named there."""
    from trl import GRPOConfig

    help_text = next(f for f in dataclasses.fields(GRPOConfig) if f.name == name).metadata["help"]
    named = set(re.findall(r"[`']([a-z_]+)[`']", help_text))
    assert set(schema_gen.CHOICES[name]) <= named


def test_trl_accepts_our_grpo_defaults(settings, tmp_path: Path):
    """The whole grpo group, as composed by default, builds a GRPOConfig (no field TRL refuses)."""
    from grpo_exp.config.layout import Layout, Precision
    from grpo_exp.spec import build_spec
    from grpo_exp.training.trainer import grpo_config

    cpu = Layout("cpu", Precision.fp32, "float32", "float32", processes=1, rank=0)
    cfg: ExperimentConfig = settings("grpo.top_k=5", "grpo.epsilon_high=0.28", "grpo.save_total_limit=2")
    checked = build_spec(cfg)
    args = grpo_config(cfg, cpu, tmp_path, list(checked.weights), report_to_wandb=False)
    assert (args.top_k, args.epsilon_high, args.save_total_limit) == (5, 0.28, 2)
    assert args.per_device_train_batch_size == 12 and args.num_generations == 6
    assert args.learning_rate == cfg.optimizer.lr and not args.bf16
    assert (args.save_strategy, args.save_steps) == ("steps", cfg.grpo.save_steps)  # checkpoints on by default
    no_checkpoints = settings("grpo.save_steps=0")
    build_spec(no_checkpoints)
    off = grpo_config(no_checkpoints, cpu, tmp_path, list(checked.weights), report_to_wandb=False)
    assert off.save_strategy == "no"


def test_options_that_were_never_mapped_reach_the_trainer(settings, tmp_path: Path):
    """Built by build_trainer on the tiny model as a job does, then read back from the trainer."""
    from grpo_exp.folder import JobFolder
    from grpo_exp.spec import build_spec
    from grpo_exp.tracking.monitor import HealthMonitor
    from grpo_exp.training.schedule import Stage
    from grpo_exp.training.stops import StopRequest
    from grpo_exp.training.trainer import build_trainer

    cfg = settings("grpo.top_k=5", "grpo.epsilon_high=0.28", "grpo.repetition_penalty=1.1", "logger=none")
    spec = build_spec(cfg)
    stage = Stage(spec.settings, resume_from=None, final=True)
    trainer = build_trainer(spec, stage, JobFolder(tmp_path), HealthMonitor(cfg.monitor), StopRequest(), tracked=False)
    assert (trainer.args.top_k, trainer.args.epsilon_high, trainer.args.repetition_penalty) == (5, 0.28, 1.1)
    assert trainer.top_k == 5 and trainer.epsilon_high == 0.28
    assert trainer.generation_config.top_k == 5
