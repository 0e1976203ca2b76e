"""The article's scenarios on the embedded model: real GRPO runs through run.py.

Short runs check the new alerts where a user meets them; the slow ones check what each shipped
recipe's reward parts learn (first tenth vs last tenth of the steps each part is scored), and hold
the issue's goals the embedded model does not reach yet as strict expected failures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.recipes import part_edges
from grpo_exp.tracking.metrics import read_metrics
from tests.conftest import ROOT

SHORT = ("grpo.max_steps=10", "monitor.window=5", "logger=none")


def run(out: Path, *overrides: str) -> dict:
    """Run one job; its summary.json."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", f"hydra.run.dir={out}", *overrides]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


def alert_kinds(summary: dict) -> set[str]:
    return {a["kind"] for a in summary["alerts"]}


@pytest.mark.e2e  # a writing run
def test_writing_without_the_recipe_is_cut_at_48_tokens_and_the_monitor_says_so(tmp_path):
    # About a third of these completions are cut in 10 steps at seed 42 (0.17-0.58 a step on an AMD EPYC, more
    # on the machine this was first written on): an alarm at a quarter says so on either; the default is half.
    cut = "monitor.max_clipped_ratio=0.25"
    summary = run(tmp_path, "reward=content_creation", "dataset=content_creation", cut, *SHORT)
    (alert,) = [a for a in summary["alerts"] if a["kind"] == "truncated"]
    assert "grpo.max_completion_length" in alert["message"]


@pytest.mark.e2e  # a 10-step run; the alerts themselves are unit-tested in test_monitoring.py
def test_the_default_run_is_not_truncated_and_a_constant_part_is_named(tmp_path):
    never = "+reward.parts.never={fn: keyword_share, weight: 0.1, params: {keywords: [NEVER_SAID]}}"
    summary = run(tmp_path, never, *SHORT)
    kinds = alert_kinds(summary)
    assert "flat_part/never" in kinds
    assert "truncated" not in kinds and "flat_part/format" not in kinds


RECIPES = {  # as benchmarks/recipes.py runs them
    "customer_service_bot": ("+recipe=customer_service_bot",),
    "content_creation": ("model=tiny_writing", "+recipe=content_creation", "optimizer.lr=1e-3"),
    "code_generation": ("model=tiny_code", "+recipe=code_generation"),
}


@pytest.fixture(scope="module")
def recipe_edges(tmp_path_factory):
    """recipe -> each part's (first tenth, last tenth), running each recipe once as the benchmark does."""
    done: dict[str, dict[str, tuple[float, float]]] = {}

    def edges(recipe: str) -> dict[str, tuple[float, float]]:
        if recipe not in done:
            out = tmp_path_factory.mktemp(recipe)
            run(out, *RECIPES[recipe], "seed=42", "threads=1", "logger=none")  # benchmarks/recipes.py's runs
            done[recipe] = part_edges(read_metrics(out / "metrics.jsonl"))
        return done[recipe]

    return edges


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "parts"),
    [
        ("customer_service_bot", ("format", "information", "tone")),
        ("content_creation", ("keywords", "length")),
        ("code_generation", ("syntax", "tests", "complexity")),
    ],
)
def test_the_recipes_parts_learn(recipe_edges, recipe, parts):
    edges = recipe_edges(recipe)
    for part in parts:
        first, last = edges[part]
        assert last > first, f"{part}: {first:.3f} -> {last:.3f}"


@pytest.mark.slow
def test_the_customer_service_bot_learns_the_required_answers(recipe_edges):  # seed 42: 0.34 -> 0.61
    first, last = recipe_edges("customer_service_bot")["information"]
    assert last > first and last >= 0.5, f"information: {first:.3f} -> {last:.3f}"


@pytest.mark.slow
def test_writing_reaches_the_target_length(recipe_edges):  # seed 42: -0.34 -> -0.08
    first, last = recipe_edges("content_creation")["length"]
    assert last >= -0.1, f"length: {first:.3f} -> {last:.3f}"


@pytest.mark.slow
def test_the_code_pass_rate_gains_a_fifth(recipe_edges):  # seed 42: 0.25 -> 0.57
    first, last = recipe_edges("code_generation")["tests"]
    assert last - first >= 0.2, f"tests: {first:.3f} -> {last:.3f}"
