"""Health alerts with the article's remedies, the run summary, and W&B's mode choice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.config.schema import LoggerSettings, MonitorSettings
from grpo_exp.folder import JobFolder, append_line
from grpo_exp.tracking import wandb_run as tracking
from grpo_exp.tracking.metrics import LOGP_DIFFERENCE, metrics_row, read_metrics, summarize
from grpo_exp.tracking.monitor import SAMPLER_DRIFT, HealthMonitor
from tests.conftest import ROOT, feed

WINDOW = 4


def healthy(reward: float = 0.5) -> dict:
    return {"reward": reward, "reward_std": 0.3, "kl": 0.02, "frac_reward_zero_std": 0.1}


def test_healthy_run_raises_nothing():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    assert feed(monitor, [healthy(0.1 + 0.05 * i) for i in range(20)]) == []
    assert monitor.finish(20) == []


def test_kl_drift_is_raised_once_when_the_window_mean_passes_the_threshold():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, kl_threshold=0.1))
    rows = [healthy() for _ in range(4)] + [{**healthy(), "kl": 0.3} for _ in range(10)]
    alerts = feed(monitor, rows)
    assert [a.kind for a in alerts] == ["kl_drift"]
    assert alerts[0].step == 6  # window (0.02, 0.02, 0.3, 0.3) has mean 0.16
    assert "raise grpo.beta" in alerts[0].message


def test_one_spike_inside_a_window_is_not_an_alert():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, kl_threshold=0.1))
    rows = [healthy() for _ in range(6)] + [{**healthy(), "kl": 0.2}] + [healthy() for _ in range(6)]
    assert feed(monitor, rows) == []


def test_homogeneous_generations_and_unstable_reward():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, reward_drop=0.3))
    flat = {"reward": 0.2, "reward_std": 0.0, "kl": 0.01, "frac_reward_zero_std": 1.0}
    kinds = [a.kind for a in feed(monitor, [flat] * 5)]
    assert kinds == ["low_reward_std", "zero_std_groups"]
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, reward_drop=0.3))
    alerts = feed(monitor, [healthy(0.9)] * 4 + [healthy(0.1)] * 4)
    assert [a.kind for a in alerts] == ["reward_unstable"]
    assert "optimizer.lr=1e-5" in alerts[0].message


def test_weak_improvement_at_the_end():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, min_improvement=0.05))
    feed(monitor, [healthy(0.30)] * 8 + [healthy(0.32)] * 4)
    (alert,) = monitor.finish(12)
    assert alert.kind == "weak_improvement" and "bigger batch" in alert.message


def test_summary_uses_first_and_last_tenth_and_counts_kl_excursions(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for step in range(1, 21):
        append_line(
            path, metrics_row(step, {"reward": step / 20, "reward_std": 0.2, "kl": 0.05 * step, "note": "text"})
        )
    append_line(path, metrics_row(20, {"train_runtime": 12.0}))  # the trainer's closing log, no reward
    with path.open("a") as handle:
        handle.write('{"step": 21, "rew')  # a line cut short by a killed job
    rows = read_metrics(path)
    assert len(rows) == 20 and "note" not in rows[0]
    summary = summarize(rows, kl_threshold=0.1)
    assert summary["first_reward"] == pytest.approx((0.05 + 0.10) / 2)
    assert summary["final_reward"] == pytest.approx((0.95 + 1.0) / 2)
    assert summary["steps_above_kl_threshold"] == 18
    assert summary["max_kl"] == pytest.approx(1.0)
    json.dumps(summary)


def test_steps_count_every_step_trained_not_only_those_that_generated():
    """grpo.num_iterations=2: a loss at every step, a reward at every other; an evaluation row is no step."""
    rows = [{"step": s, "loss": 0.1, **({"reward": 0.5} if s % 2 else {})} for s in range(1, 5)]
    rows.append({"step": 4, "eval/loss": 0.2, "eval/reward": 0.4})
    summary = summarize(rows, kl_threshold=0.1)
    assert (summary["steps"], summary["logged_steps"]) == (4, 2)


def test_summary_without_kl_leaves_excursions_unknown():
    rows = [{"step": 1, "reward": 0.5}]
    assert summarize(rows, kl_threshold=0.1)["steps_above_kl_threshold"] is None


@pytest.mark.parametrize(
    ("mode", "env", "netrc_login", "expected"),
    [
        ("auto", {}, False, "offline"),
        ("auto", {"WANDB_API_KEY": "x" * 40}, False, "online"),
        ("auto", {}, True, "online"),
        ("auto", {"WANDB_MODE": "disabled"}, True, "disabled"),
        ("offline", {"WANDB_API_KEY": "x" * 40}, True, "offline"),
    ],
)
def test_wandb_mode_follows_login_and_environment(monkeypatch, mode, env, netrc_login, expected):
    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    import wandb.sdk.lib.wbauth as wbauth

    monkeypatch.setattr(wbauth, "read_netrc_auth", lambda host: "key" if netrc_login else None)
    assert tracking.resolve_mode(LoggerSettings(mode=mode)) == expected
    assert tracking.resolve_mode(LoggerSettings(backend="none", mode=mode)) == "disabled"


def test_a_nan_loss_stops_the_job_after_recording_the_step(tmp_path):
    from types import SimpleNamespace

    from grpo_exp.errors import UserError
    from grpo_exp.training.callbacks import JobCallback

    callback = JobCallback(JobFolder(tmp_path), HealthMonitor(MonitorSettings()), run=None)
    state = SimpleNamespace(is_world_process_zero=True, global_step=7)
    callback.on_log(None, state, None, logs={"loss": 0.5, "reward": 0.2})
    with pytest.raises(UserError, match="training diverged at step 7: loss is nan"):
        callback.on_log(None, state, None, logs={"loss": float("nan"), "reward": 0.2})
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [7, 7]


def converging(step: int) -> dict:
    """A 0/1 reward learnt by step 10: groups all wrong at first, then mixed, then all right (solved)."""
    solved = min(1.0, step / 10)
    mixed = 0.5 if 3 < step < 10 else 0.0  # the share of groups whose completions differ
    return {
        "reward": solved,
        "reward_std": 0.5 if mixed else 0.0,
        "kl": 0.02,
        "frac_reward_zero_std": 1.0 - mixed,
        "frac_solved": solved,
        "frac_solved_groups": 1.0 if step >= 10 else 0.0,
    }


def test_groups_alike_because_solved_are_converged_not_homogeneous():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    assert feed(monitor, [converging(step) for step in range(10, 40)]) == []  # at its ceiling: no alarm
    assert monitor.finish(40) == []  # nor weak improvement: a reward at its ceiling has nothing left to gain


def test_groups_alike_below_the_ceiling_still_raise_the_alarm():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    stuck = {**converging(1), "reward": 0.0, "frac_solved": 0.0}  # every group all wrong
    kinds = [a.kind for a in feed(monitor, [stuck] * 6)]
    assert kinds == ["low_reward_std", "zero_std_groups"]
    (zero,) = [a for a in monitor.alerts if a.kind == "zero_std_groups"]
    assert "100% of groups scored every completion the same below the reward's ceiling" in zero.message


def test_a_run_that_reaches_its_ceiling_raises_nothing_after_it():
    """The default run's shape: mixed groups while it learns, then solved groups; one alike-but-solved
    stretch must not read as homogeneous generations."""
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    rows = [{**converging(step), "frac_reward_zero_std": 0.0} for step in range(1, 10)]
    rows += [converging(10)] * 30
    assert feed(monitor, rows) == []


def test_without_ceilings_alike_groups_are_judged_as_before():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    solved_but_unknown = {k: v for k, v in converging(20).items() if not k.startswith("frac_solved")}
    kinds = [a.kind for a in feed(monitor, [solved_but_unknown] * 5)]
    assert kinds == ["low_reward_std", "zero_std_groups"]


def test_partly_solved_groups_count_only_the_unsolved_alike_ones():
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, max_zero_std_fraction=0.5))
    row = {"reward": 0.6, "reward_std": 0.4, "kl": 0.02, "frac_solved": 0.6}
    # 80 % alike, 40 % solved whole: 40 % alike below the ceiling, under the threshold
    assert feed(monitor, [{**row, "frac_reward_zero_std": 0.8, "frac_solved_groups": 0.4}] * 5) == []
    # 90 % alike, 30 % solved: 60 % stuck
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, max_zero_std_fraction=0.5))
    alerts = feed(monitor, [{**row, "frac_reward_zero_std": 0.9, "frac_solved_groups": 0.3}] * 5)
    assert [a.kind for a in alerts] == ["zero_std_groups"] and alerts[0].message.startswith("60% of groups")


def test_every_built_in_part_declares_its_ceiling():
    from grpo_exp.rewards import names
    from grpo_exp.rewards.registry import ceiling

    assert all(ceiling(name) is not None for name in names())
    assert (ceiling("regex_match"), ceiling("length_score"), ceiling("soft_overlong")) == (1.0, 0.0, 0.0)


def test_a_reward_logs_the_share_of_solved_completions_and_groups(settings):
    from grpo_exp.rewards.compose import build_rewards

    parts, _ = build_rewards(settings("reward=customer_service_multi").reward)
    good = "您好，请稍候。问题已解决，谢谢。退款"
    prompts = ["a", "a", "b", "b"]
    completions = [good, good, good, "no"]
    logged: dict[str, float] = {}
    columns = {"required_answers": [["退款"]] * 4}
    for part in parts:
        part(prompts=prompts, completions=completions, log_metric=logged.__setitem__, **columns)
    assert logged["frac_solved"] == 0.75 and logged["frac_solved_groups"] == 0.5


def test_a_user_part_without_a_ceiling_leaves_solved_unknown(settings, tmp_path):
    from grpo_exp.rewards.compose import build_rewards

    (tmp_path / "r.py").write_text("def one(completions):\n    return [1.0 for _ in completions]\n")
    fn = f"{tmp_path / 'r.py'}:one"
    for overrides, logs in (
        (["reward=custom", f"reward.parts.main.fn={fn}"], False),
        (["reward=custom", f"reward.parts.main.fn={fn}", "reward.parts.main.ceiling=1"], True),
    ):
        (part,), _ = build_rewards(settings(*overrides).reward)
        logged: dict[str, float] = {}
        part(prompts=["a", "a"], completions=["x", "y"], log_metric=logged.__setitem__)
        assert ("frac_solved" in logged) is logs


def sampled(gap: float, reward: float = 0.5) -> dict:
    """A vLLM step: TRL's per-token log-prob gap between vLLM's sampling and the policy, beside the usual signals."""
    return {**healthy(reward), LOGP_DIFFERENCE: gap}


def test_a_sampler_gap_at_bf16_noise_raises_nothing():
    """bf16 sampling against fp32 training: 0.005-0.02 per step (tests/test_vllm_cpu_e2e.py); one noisy step
    inside a window is no drift."""
    monitor = HealthMonitor(MonitorSettings(window=WINDOW))
    gaps = [0.005, 0.012, 0.02, 0.008, 0.015, 0.12, 0.01, 0.007, 0.018, 0.011, 0.009, 0.014]
    assert feed(monitor, [sampled(g) for g in gaps]) == []


def test_sampler_drift_is_raised_once_when_the_gap_stays_above_the_threshold():
    """A sampler left on the base weights: the gap grows as the policy moves away from them."""
    monitor = HealthMonitor(MonitorSettings(window=WINDOW, max_logp_difference=0.05))
    gaps = [0.01, 0.01, 0.01, 0.01, 0.05, 0.09, 0.13, 0.17, 0.21, 0.25]
    alerts = feed(monitor, [sampled(g) for g in gaps])
    assert [a.kind for a in alerts] == [SAMPLER_DRIFT]
    assert alerts[0].step == 7  # window (0.01, 0.05, 0.09, 0.13): mean 0.07; the one before it, 0.04, is not
    assert "by 0.070 per token (mean of 4 steps), above 0.05" in alerts[0].message
    assert "weight sync" in alerts[0].message and "bf16" in alerts[0].message


def test_sampler_drift_threshold_is_the_configured_one(settings):
    assert settings().monitor.max_logp_difference == MonitorSettings().max_logp_difference
    loose = settings("monitor.max_logp_difference=0.2").monitor
    assert feed(HealthMonitor(loose), [sampled(0.1)] * 12) == []
    assert [a.kind for a in feed(HealthMonitor(settings().monitor), [sampled(0.1)] * 12)] == [SAMPLER_DRIFT]


def test_a_negative_sampler_threshold_is_refused(settings):
    from grpo_exp.config.checks import check
    from grpo_exp.errors import UserError

    with pytest.raises(UserError, match=r"monitor\.max_logp_difference=-0\.1 is out of range"):
        check(settings("monitor.max_logp_difference=-0.1"))


def test_alerts_reach_the_trackio_run(tmp_path):
    """An alert the job reports goes into the job's trackio run, which ``trackio get alerts`` lists."""
    pytest.importorskip("trackio")
    script = (
        "from grpo_exp.config.schema import LoggerBackend, LoggerSettings\n"
        "from grpo_exp.tracking.trackio_run import trackio_run\n"
        "from grpo_exp.tracking.wandb_run import RunIdentity\n"
        "settings = LoggerSettings(backend=LoggerBackend.trackio)\n"
        "with trackio_run(settings, RunIdentity('job-a', group='g'), {}, resumed=False) as run:\n"
        "    run.log({'reward': 0.5}, 1)\n"
        "    run.alert('sampler_drift', 12, 'the sampler drifted')\n"
    )
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "store")}
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TRACKIO" not in done.stdout  # trackio's own terminal copy: the job's warning line says it already
    command = [str(Path(sys.executable).parent / "trackio"), "get", "alerts", "--project", "grpo-exp", "--json"]
    got = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=True)
    listed = json.loads(got.stdout)
    assert [(a["title"], a["step"], a["text"]) for a in listed["alerts"]] == [
        ("sampler_drift", 12, "the sampler drifted")
    ]


def test_the_sweep_report_names_a_job_whose_sampler_drifted():
    from grpo_exp.report.compare import verdict
    from grpo_exp.report.jobs import JobRecord
    from grpo_exp.report.sweep import Sweep

    alert = {"kind": SAMPLER_DRIFT, "step": 24, "message": "..."}
    jobs = [
        JobRecord(name=str(n), path=Path(str(n)), status="completed", stats=stats, rows=[], overrides={"seed": n})
        for n, stats in ((0, {"alerts": [alert]}), (1, {"alerts": [{"kind": "kl_drift", "step": 9, "message": ""}]}))
    ]
    lines = [line for line in verdict(Sweep(Path("."), jobs, swept=["seed"])) if "Sampler drift" in line]
    assert len(lines) == 1 and "job 0 (`seed=0`), from step 24" in lines[0] and "weight sync" in lines[0]
