"""A sweep whose jobs run as Ray tasks (`+launcher=ray`), end to end on a local Ray instance.

Needs the `ray` extra (pip install -e '.[ray]'); without it the test is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# a real two-job Ray sweep (over a minute): make test-e2e
pytestmark = pytest.mark.e2e

pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="the Ray launcher needs pip install -e '.[ray]'")

STEPS = 2


def test_ray_runs_a_two_job_sweep_with_a_wandb_run_each_and_the_report(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY", "RAY_ADDRESS")}
    command = [
        sys.executable,
        "run.py",
        "-m",
        "+launcher=ray",
        "grpo.num_generations=4,6",
        f"grpo.max_steps={STEPS}",
        "logger.mode=offline",
        "save_model=false",
        f"hydra.sweep.dir={tmp_path}",
    ]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert "Ray Launcher is launching 2 jobs" in output and "(_run_job pid=" in output, "the jobs ran as Ray tasks"
    for job in ("0", "1"):
        summary = json.loads((tmp_path / job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["steps"] == STEPS
        runs = {path.resolve() for path in (tmp_path / job / "wandb").glob("offline-run-*")}
        assert len(runs) == 1, f"job {job}: one W&B run"
    report = (tmp_path / "report" / "report.md").read_text()
    assert "2 job(s): 2 completed" in report
