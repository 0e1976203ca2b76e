"""The message a diverged run ends with (training/divergence.py): what was found, and the knob that helps.

Fed as the trainer logs (``JobCallback.on_log``), on layouts decided for made-up machines. Issue 59's
run is the first case: bf16 SDPA on an H200, gradients NaN at KL 0.0008, which the old message
blamed on the learning rate.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from grpo_exp.config.layout import decide
from grpo_exp.config.schema import MonitorSettings
from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.training.callbacks import JobCallback
from grpo_exp.training.divergence import MOVED_KL, STEEP_GRAD_MULTIPLE
from tests.machines import CPU_ONLY, H200

NAN = math.nan


def run_until_it_stops(tmp_path, layout, rows: list[dict], max_grad_norm: float = 1.0) -> str:
    """Each row logged at steps 1, 2, ...; the message of the UserError that ends the run."""
    tmp_path.mkdir(exist_ok=True)
    callback = JobCallback(JobFolder(tmp_path), HealthMonitor(MonitorSettings()), layout=layout)
    args = SimpleNamespace(max_grad_norm=max_grad_norm)
    with pytest.raises(UserError) as stopped:
        for step, row in enumerate(rows, start=1):
            callback.on_log(args, SimpleNamespace(is_world_process_zero=True, global_step=step), None, logs=row)
    return str(stopped.value)


def steady(kl: float, grad_norm: float = 0.4) -> dict:
    return {"loss": 0.01, "reward": 0.3, "kl": kl, "grad_norm": grad_norm}


def test_a_nan_gradient_at_negligible_kl_in_bf16_points_to_the_attention_not_the_lr(tmp_path, settings):
    layout = decide(settings("model.attn_implementation=sdpa"), H200)  # issue 59's run, before eager was chosen
    rows = [steady(0.0004), steady(0.0008), {"loss": 0.02, "reward": 0.3, "kl": 0.0008, "grad_norm": NAN}]
    message = run_until_it_stops(tmp_path, layout, rows)
    assert message.startswith("training diverged at step 3: grad_norm is nan (last finite KL 0.0008, ")
    assert "bf16 compute, sdpa attention" in message
    assert "model.attn_implementation=eager" in message and "grpo.bf16=false" in message
    assert "optimizer.lr" not in message and "\n" not in message


def test_with_eager_attention_already_the_knob_left_is_fp32(tmp_path, settings):
    layout = decide(settings(), H200)  # the embedded default: eager on a GPU in bf16
    message = run_until_it_stops(tmp_path, layout, [steady(0.001), {"loss": NAN, "kl": NAN, "grad_norm": NAN}])
    assert message.startswith("training diverged at step 2: kl is nan")  # the KL comes before the loss in a step
    assert "eager attention" in message and "grpo.bf16=false" in message
    assert "model.attn_implementation=eager" not in message and "optimizer.lr" not in message


def test_once_the_policy_has_moved_the_advice_is_the_learning_rate(tmp_path, settings):
    layout = decide(settings("model.attn_implementation=sdpa"), H200)
    rising = [steady(kl) for kl in (0.02, 0.09, 0.4, 2.5)]
    message = run_until_it_stops(tmp_path, layout, [*rising, {"loss": NAN, "reward": 0.3, "kl": NAN}])
    assert message.startswith("training diverged at step 5: kl is nan (last finite KL 2.5, gradient norm 0.4;")
    assert "lower optimizer.lr" in message and "attn_implementation" not in message
    assert 2.5 >= MOVED_KL > 0.0008


def test_a_steep_gradient_counts_as_moved_even_at_small_kl(tmp_path, settings):
    layout = decide(settings(), H200)
    steep = steady(0.001, grad_norm=STEEP_GRAD_MULTIPLE * 0.5)
    assert "lower optimizer.lr" in run_until_it_stops(tmp_path, layout, [steep, {"grad_norm": NAN}], 0.5)
    assert "lower optimizer.lr" not in run_until_it_stops(tmp_path / "2", layout, [steep, {"grad_norm": NAN}], 1.0)


def test_an_inf_reward_is_named_with_the_step_it_appeared_at(tmp_path, settings):
    rows = [steady(0.001), {**steady(0.001), "reward": math.inf, "rewards/format/mean": math.inf}, {"loss": NAN}]
    message = run_until_it_stops(tmp_path, decide(settings(), CPU_ONLY), rows)
    assert message.startswith("training diverged at step 3: reward is inf from step 2 (")
    assert "fp32 compute, sdpa attention" in message and "a reward function returned inf" in message


def test_in_fp32_at_negligible_kl_neither_the_lr_nor_bf16_is_blamed(tmp_path, settings):
    message = run_until_it_stops(tmp_path, decide(settings(), CPU_ONLY), [steady(0.001), {"loss": NAN}])
    assert "fp32 compute" in message and "model.attn_implementation=eager" in message
    assert "grpo.bf16" not in message and "optimizer.lr" not in message


def test_an_inf_gradient_norm_alone_does_not_stop_the_run(tmp_path, settings):
    """fp16's grad scaler skips such steps by design: only NaN stops."""
    callback = JobCallback(JobFolder(tmp_path), HealthMonitor(MonitorSettings()), layout=decide(settings(), H200))
    state = SimpleNamespace(is_world_process_zero=True, global_step=1)
    callback.on_log(SimpleNamespace(max_grad_norm=1.0), state, None, logs={**steady(0.0), "grad_norm": math.inf})
