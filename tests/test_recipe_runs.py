"""The article's scenarios on the embedded model: real GRPO runs through run.py.

Short runs check the new alerts where a user meets them; the slow ones check that every reward
part of every shipped recipe learns (first tenth vs last tenth of the steps it is scored).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.metrics import read_metrics
from tests.conftest import ROOT

SHORT = ("grpo.max_steps=8", "monitor.window=5", "logger=none")


def run(out: Path, *overrides: str) -> dict:
    """Run one job; its summary.json."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", f"hydra.run.dir={out}", *overrides]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def alert_kinds(summary: dict) -> set[str]:
    return {a["kind"] for a in summary["alerts"]}


def part_edges(out: Path) -> dict[str, tuple[float, float]]:
    """Each reward part's mean over the first and last tenth of the steps it was scored."""
    rows = read_metrics(out / "metrics.jsonl")
    edges = {}
    for key in {k for row in rows for k in row if k.startswith("rewards/") and k.endswith("/mean")}:
        series = [r[key] for r in rows if isinstance(r.get(key), int | float) and math.isfinite(r[key])]
        n = max(1, math.ceil(len(series) / 10))
        edges[key.split("/")[1]] = (sum(series[:n]) / n, sum(series[-n:]) / n)
    return edges


def test_writing_without_the_recipe_is_cut_at_48_tokens_and_the_monitor_says_so(tmp_path):
    summary = run(tmp_path, "reward=content_creation", "dataset=content_creation", *SHORT)
    (alert,) = [a for a in summary["alerts"] if a["kind"] == "truncated"]
    assert "grpo.max_completion_length" in alert["message"]


def test_the_default_run_is_not_truncated_and_a_constant_part_is_named(tmp_path):
    never = "+reward.parts.never={fn: keyword_share, weight: 0.1, params: {keywords: [NEVER_SAID]}}"
    summary = run(tmp_path, never, *SHORT)
    kinds = alert_kinds(summary)
    assert "flat_part/never" in kinds
    assert "truncated" not in kinds and "flat_part/format" not in kinds


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "goals"),
    [
        (("+recipe=customer_service_bot",), {"information": 0.5}),
        (("+recipe=content_creation",), {"length": -0.1}),
        (("model=tiny_code", "+recipe=code_generation"), {}),
    ],
    ids=["customer_service_bot", "content_creation", "code_generation"],
)
def test_every_part_of_a_recipe_learns(tmp_path, overrides, goals):
    run(tmp_path, *overrides, "logger=none")
    edges = part_edges(tmp_path)
    for part, (first, last) in edges.items():
        assert last > first, f"{part}: {first:.3f} -> {last:.3f}"
    for part, goal in goals.items():
        assert edges[part][1] >= goal, f"{part} ended at {edges[part][1]:.3f}, below {goal}"
