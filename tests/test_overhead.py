"""What keeps the framework's overhead honest: the hand-written TRL baseline matches it, and
start-up paths load nothing they don't use (benchmarks/overhead.py measures the times)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest

from grpo_exp import models
from grpo_exp.tracking.metrics import read_metrics
from grpo_exp.tracking.wandb_run import system_stats
from tests.conftest import ROOT

STEPS = 3
SANDBOX_PROBE = (
    "import sys\n"
    "from grpo_exp.job.command import preflight\n"
    "preflight(sys.argv[1:])\n"
    "print('SANDBOX=' + ','.join(m for m in sys.modules if m.startswith('grpo_exp.sandbox')))\n"
)


def _run(command: list[str]) -> None:
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.e2e  # two real runs side by side
def test_trl_baseline_reproduces_the_frameworks_rewards_and_loss(settings, tmp_path):
    model = models.model_path(settings().model)
    _run(
        [
            sys.executable,
            "run.py",
            f"hydra.run.dir={tmp_path / 'framework'}",
            "logger=none",
            "dataset.eval_fraction=0",  # the baseline trains on every prompt and evaluates none
            f"grpo.max_steps={STEPS}",
        ]
    )
    baseline = [sys.executable, "benchmarks/trl_baseline.py", "--model", model, "--out", str(tmp_path / "baseline")]
    _run([*baseline, "--max-steps", str(STEPS)])
    framework = read_metrics(tmp_path / "framework" / "metrics.jsonl")
    by_hand = [json.loads(line) for line in (tmp_path / "baseline" / "metrics.jsonl").read_text().splitlines()]
    by_hand = [row for row in by_hand if "reward" in row]
    assert len(framework) == len(by_hand) == STEPS
    for ours, theirs in zip(framework, by_hand, strict=True):
        assert ours["step"] == theirs["step"]
        assert (
            ours["reward"] == theirs["reward"] and ours["rewards/format/mean"] == theirs["rewards/format_reward/mean"]
        )
        assert ours["loss"] == theirs["loss"] and ours["kl"] == theirs["kl"]
    # Equal zeros would prove nothing: the steps compared must have trained (a reward and a KL).
    assert any(row["reward"] != 0 for row in framework) and any(row["kl"] != 0 for row in framework)


def test_checking_a_job_leaves_the_code_sandbox_unloaded():
    """The sandbox's machinery loads when the first completion is graded, not when a command starts.

    Checking a code job loads only what checks the code reward's params: the limits and the names
    of the isolation modes.
    """

    def loaded(*overrides: str) -> set[str]:
        result = subprocess.run(
            [sys.executable, "-c", SANDBOX_PROBE, *overrides], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return set(filter(None, result.stdout.split("SANDBOX=")[-1].strip().split(",")))

    assert loaded() == set()
    settings = {f"grpo_exp.sandbox{m}" for m in ("", ".limits", ".isolation", ".identity", ".reaper")}
    code_job = loaded("model=tiny_code", "+recipe=code_generation")
    assert "grpo_exp.sandbox.limits" in code_job and code_job <= settings


def test_wandb_samples_system_stats_only_with_a_gpu_or_when_asked(monkeypatch):
    monkeypatch.delenv("WANDB_X_DISABLE_STATS", raising=False)
    monkeypatch.delenv("WANDB__DISABLE_STATS", raising=False)
    assert system_stats(gpu=False) == {"x_disable_stats": True}
    monkeypatch.setenv("WANDB_X_DISABLE_STATS", "false")
    assert system_stats(gpu=False) == {}
    monkeypatch.delenv("WANDB_X_DISABLE_STATS")
    assert system_stats(gpu=True) == {}


@pytest.mark.parametrize("where", ["job.command._freeze_startup", "training.lifecycle._freeze_libraries"])
def test_a_process_freezes_once_and_later_jobs_do_not(where):
    """Start-up's objects and the training libraries leave the collector's full passes once
    (benchmarks/startup.md); a later job in the same process must not freeze what the previous job
    left behind. (The frozen count can only fall in between: frozen objects still die by refcount.)"""
    import importlib

    module, name = where.rsplit(".", 1)
    freeze = getattr(importlib.import_module(f"grpo_exp.{module}"), name)
    gc.unfreeze()
    freeze.cache_clear()
    try:
        freeze()
        frozen = gc.get_freeze_count()
        left_by_a_job = [[] for _ in range(1000)]
        freeze()
        assert frozen > 0 and gc.get_freeze_count() <= frozen and left_by_a_job
    finally:
        gc.unfreeze()
