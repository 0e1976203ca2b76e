"""The 'reward barely improved' alert needs a first and a last window that do not overlap."""

from __future__ import annotations

import pytest

from grpo_exp.config.schema import MonitorSettings
from grpo_exp.tracking.monitor import HealthMonitor


def run(steps: int, window: int = 10) -> list[str]:
    monitor = HealthMonitor(MonitorSettings(window=window, min_improvement=0.05))
    for step in range(1, steps + 1):
        monitor.observe(step, {"reward": 0.5, "reward_std": 0.3, "kl": 0.01, "frac_reward_zero_std": 0.1})
    return [alert.kind for alert in monitor.finish(steps)]


@pytest.mark.parametrize("steps", [3, 10, 15, 19])
def test_short_runs_are_not_judged(steps):
    assert run(steps) == []


def test_a_flat_reward_over_two_whole_windows_is_judged():
    assert run(20) == ["weak_improvement"]
