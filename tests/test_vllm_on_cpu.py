"""vLLM asked for on a machine without a GPU: one line, then generation with transformers."""

from __future__ import annotations

import pytest

from grpo_exp.config.layout import Layout, Precision
from grpo_exp.spec import build_spec
from grpo_exp.training.trainer import grpo_config
from tests.machines import CPU_ONLY


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_vllm_without_a_gpu_is_turned_off_with_one_line(settings, monkeypatch, tmp_path, mode):
    monkeypatch.setattr("grpo_exp.hardware.machine", lambda *a, **k: CPU_ONLY)
    cfg = settings("grpo.use_vllm=true", f"grpo.vllm_mode={mode}")
    warnings = build_spec(cfg).warnings
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "grpo.use_vllm=true needs a GPU" in warnings[0]
    cpu = Layout("cpu", Precision.fp32, "float32", "float32", processes=1, rank=0)
    assert grpo_config(cfg, cpu, tmp_path, [1.0], report_to_wandb=False).use_vllm is False
