"""GRPOConfig fields the installed TRL or transformers lack (transformers < 5.23 has no ``activation_checkpointing``,
which the ``grpo`` group mirrors from 5.24): left out at their default, refused in one line when set."""

from __future__ import annotations

import dataclasses

import pytest

from grpo_exp.errors import UserError
from grpo_exp.training import trl_fields


def test_a_field_the_installed_release_lacks_is_left_out_at_its_default():
    fields = {"activation_checkpointing": None, "learning_rate": 3e-4, "reward_weights": [1.0]}
    kept = trl_fields.accepted(fields, known={"learning_rate", "reward_weights"})
    assert kept == {"learning_rate": 3e-4, "reward_weights": [1.0]}


def test_a_field_the_installed_release_lacks_is_refused_when_set():
    with pytest.raises(UserError) as refused:
        trl_fields.accepted({"activation_checkpointing": True, "learning_rate": 3e-4}, known={"learning_rate"})
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("grpo.activation_checkpointing=True needs a newer release than the installed trl ")
    assert message.endswith("leave grpo.activation_checkpointing at its default (None)")


def test_an_enum_default_counts_as_the_default():
    """Schema defaults that are enums compare as the strings grpo_config passes (``_plain``)."""
    default = trl_fields.schema_defaults()["loss_type"]
    assert trl_fields.accepted({"loss_type": default}, known=set()) == {}
    with pytest.raises(UserError, match=r"grpo\.loss_type='grpo'"):
        trl_fields.accepted({"loss_type": "grpo"}, known=set())


def test_the_installed_grpo_config_takes_a_set_field_or_refuses_it_before_the_model_loads(settings, tmp_path):
    """Whichever end of the range is installed (make test runs the newest, make test-low the lowest)."""
    from trl import GRPOConfig

    from grpo_exp.config.layout import Layout, Precision
    from grpo_exp.spec import build_spec
    from grpo_exp.training.trainer import grpo_config

    cpu = Layout("cpu", Precision.fp32, "float32", "float32", processes=1, rank=0)
    cfg = settings("grpo.activation_checkpointing=true")
    weights = list(build_spec(cfg).weights)
    if "activation_checkpointing" in {f.name for f in dataclasses.fields(GRPOConfig)}:
        assert grpo_config(cfg, cpu, tmp_path, weights, report_to_wandb=False).activation_checkpointing is True
    else:
        with pytest.raises(UserError, match=r"grpo\.activation_checkpointing=True needs a newer release"):
            grpo_config(cfg, cpu, tmp_path, weights, report_to_wandb=False)
    default = settings()
    build_spec(default)  # sizes the batch, as a job does
    assert grpo_config(default, cpu, tmp_path, weights, report_to_wandb=False).max_steps > 0  # at its default: left out
