"""The alerts that running the article's scenarios on a small model called for: truncation and flat parts."""

from __future__ import annotations

import pytest

from grpo_exp.config.schema import MonitorSettings, RewardPart, RewardSettings
from grpo_exp.rewards.compose import build_rewards, group_std
from grpo_exp.tracking.monitor import HealthMonitor
from tests.conftest import feed

WINDOW = 4


def step(clipped: float = 0.0, **group_stds: float) -> dict:
    row = {"reward": 0.5, "reward_std": 0.3, "kl": 0.02, "frac_reward_zero_std": 0.1}
    row["completions/clipped_ratio"] = clipped
    return row | {f"rewards/{part}/group_std": value for part, value in group_stds.items()}


def test_truncation_is_raised_once_when_most_completions_hit_the_limit():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, max_clipped_ratio=0.5))
    alerts = feed(monitor, [step(clipped=0.25)] * 6 + [step(clipped=1.0)] * 8)
    assert [a.kind for a in alerts] == ["truncated"]
    assert alerts[0].step == 8  # window (0.25, 0.25, 1, 1) has mean 0.62
    assert "grpo.max_completion_length" in alerts[0].message


def test_some_truncated_completions_are_no_alert():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, max_clipped_ratio=0.5))
    assert feed(monitor, [step(clipped=0.4)] * 10) == []


def test_a_part_that_never_varies_is_named_and_the_others_are_not():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    alerts = feed(monitor, [step(format=0.3, information=0.0)] * 6)
    assert [a.kind for a in alerts] == ["flat_part/information"]
    assert alerts[0].step == WINDOW
    assert "'information'" in alerts[0].message and "reward.parts.information" in alerts[0].message


def test_a_penalty_listed_in_flat_ok_may_stay_at_zero_and_the_others_are_still_checked():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, flat_ok=["overlong"]))
    alerts = feed(monitor, [step(format=0.3, overlong=0.0, information=0.0)] * 6)
    assert [a.kind for a in alerts] == ["flat_part/information"]


def test_a_part_that_varied_then_converged_is_no_alert():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    assert feed(monitor, [step(format=0.4)] * 3 + [step(format=0.0)] * 10) == []


def test_a_part_held_back_is_judged_from_its_start():
    """A part before its start_step logs nothing, so its window fills only once it counts."""
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    rows = [step(format=0.3)] * 10 + [step(format=0.3, tone=0.0)] * (WINDOW - 1)
    assert feed(monitor, rows) == []
    assert [a.kind for a in monitor.observe(14, step(format=0.3, tone=0.0))] == ["flat_part/tone"]


def test_group_std_averages_the_spread_inside_runs_of_equal_prompts():
    prompts = ["a", "a", "b", "b", "c", "c"]
    assert group_std(prompts, [0.0, 1.0, 0.5, 0.5, None, 1.0]) == pytest.approx((0.5 + 0.0) / 2)
    assert group_std(["a", "b"], [1.0, 0.0]) is None  # no group of two


def test_each_reward_part_logs_its_spread_within_groups():
    parts = {
        "constant": RewardPart(fn="length_score", params={"target": 1}),
        "keywords": RewardPart(fn="keyword_share", params={"keywords": ["x"]}),
    }
    functions, _ = build_rewards(RewardSettings(parts=parts))
    logged: dict[str, float] = {}
    completions = ["x", "y", "y", "y"]  # every completion is one character long
    for function in functions:
        function(["p", "p", "q", "q"], completions, log_metric=logged.__setitem__)
    spreads = {k: v for k, v in logged.items() if k.endswith("/group_std")}
    assert spreads == {"rewards/constant/group_std": 0.0, "rewards/keywords/group_std": pytest.approx(0.25)}
