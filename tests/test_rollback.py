"""monitor.on_collapse: what a collapse is (the detector), and rollbacks for real on the tiny model:
an injected NaN reward, a KL spike with max_rollbacks reached, and a rollback then SIGKILL then resume;
what rank 0 decides for every rank, and what W&B is sent after a rollback."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_exp.tracking.metrics import read_metrics
from grpo_exp.training import checkpoints
from grpo_exp.training.collapse.detector import CollapseDetector, rollback_records
from tests.test_long_runs import last_step, run, start, wait_for, wandb_history

LR = 1e-3
# A reward that scores by length and diverges for every completion of its calls numbered in bad_calls,
# each once per job (a marker file beside it says it has), so a resume meets none again: a score past
# float32's range, which TRL logs as a reward of -inf (all-NaN scores are an unscored step, no collapse).
DIVERGING_REWARD = """
from pathlib import Path

calls = 0


def reward(completions, **kwargs):
    global calls
    calls += 1
    marker = Path({marker!r} + str(calls))
    if calls in {bad_calls} and not marker.exists():
        marker.touch()
        return [-1e39] * len(completions)
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [min(len(t), 60) / 60 for t in texts]
"""
SHORT = ("dataset.eval_fraction=0", "save_model=false", "threads=1", f"optimizer.lr={LR}")
QUIET = ("logger=none", *SHORT)


def rows_for(rise: list[float], fall: list[float]) -> list[dict]:
    return [{"reward": r, "kl": 0.01, "loss": 0.1} for r in rise + fall]


def observe_all(detector: CollapseDetector, rows: list[dict]):
    for step, row in enumerate(rows, start=1):
        if (collapse := detector.observe(step, row)) is not None:
            return collapse
    return None


def test_a_reward_that_rises_then_stays_down_is_a_collapse_back_to_its_peak(settings):
    s = settings("monitor.window=2", "monitor.collapse_window=3", "monitor.collapse_drop=0.5")
    collapse = observe_all(CollapseDetector(s.monitor), rows_for([0.1, 0.1, 0.5, 0.9, 0.9], [0.2] * 6))
    assert collapse is not None and collapse.cause == "reward_collapse"
    assert collapse.healthy_step == 5  # the windowed mean peaked at step 5 (0.9, 0.9)
    assert collapse.step == 9  # down (mean under 0.9 - 0.5 x 0.8) from step 7, for 3 steps


def test_a_dip_that_recovers_or_a_rise_within_noise_is_no_collapse(settings):
    s = settings("monitor.window=2", "monitor.collapse_window=3")
    dip = rows_for([0.1, 0.1, 0.9, 0.9], [0.2, 0.2, 0.9, 0.9, 0.9, 0.9])
    assert observe_all(CollapseDetector(s.monitor), dip) is None
    noise = rows_for([0.50, 0.52, 0.53], [0.50] * 10)  # a rise of 0.02 < monitor.min_improvement
    assert observe_all(CollapseDetector(s.monitor), noise) is None


def test_a_kl_spike_or_a_nan_is_a_collapse_back_to_the_step_before(settings):
    s = settings("monitor.kl_threshold=0.1", "monitor.collapse_kl_multiple=10")
    spike = [*rows_for([0.1] * 3, []), {"reward": 0.1, "kl": 1.5, "loss": 0.1}]
    collapse = observe_all(CollapseDetector(s.monitor), spike)
    assert (collapse.cause, collapse.healthy_step) == ("kl_spike", 3)
    assert CollapseDetector(s.monitor).observe(4, {"reward": 0.1, "kl": 0.9}) is None  # 9 x, under 10 x
    nan = CollapseDetector(s.monitor)
    nan.observe(6, {"reward": 0.2, "loss": 0.1})
    collapse = nan.observe(7, {"reward": math.nan, "loss": 0.1})
    assert (collapse.cause, collapse.healthy_step) == ("non_finite", 6)


def test_an_unscored_step_is_no_collapse_but_an_infinite_reward_or_a_nan_loss_is(settings):
    """Issue 39: TRL logs the reward of a step nothing scored (a timed-out part under on_timeout=skip) as None."""
    s = settings("monitor.window=2")
    detector = CollapseDetector(s.monitor)
    assert observe_all(detector, [*rows_for([0.5] * 3, []), {"reward": None, "kl": 0.01, "loss": 0.1}]) is None
    assert list(detector.rewards) == [0.5, 0.5] and detector.healthy  # the unscored step weighed on nothing
    for bad in ({"reward": math.inf, "loss": 0.1}, {"reward": None, "loss": math.nan}, {"reward": 0.5, "loss": None}):
        collapse = CollapseDetector(s.monitor).observe(5, bad)
        assert collapse is not None and collapse.cause == "non_finite", bad


def test_warn_is_the_default_and_rollback_needs_checkpoints(settings):
    from grpo_exp.config import checks
    from grpo_exp.errors import UserError

    assert settings().monitor.on_collapse == "warn"
    with pytest.raises(UserError, match=r"set grpo\.save_steps above 0"):
        checks.check(settings("monitor.on_collapse=rollback", "grpo.save_steps=0"))


def diverging_reward(tmp_path: Path, *bad_calls: int) -> tuple[str, ...]:
    module = tmp_path / "diverges_once.py"
    source = DIVERGING_REWARD.format(bad_calls=set(bad_calls), marker=str(tmp_path / "divergence_given"))
    module.write_text(source, encoding="utf-8")
    return ("reward=custom", f"reward.parts.main.fn={module}:reward", "reward.parts.main.ceiling=1.0")


def assert_every_step_once(job: Path, steps: int) -> list[dict]:
    rows = read_metrics(job / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    assert all(math.isfinite(r["reward"]) for r in rows)
    return rows


def test_an_injected_diverging_reward_rolls_back_to_the_last_healthy_checkpoint(tmp_path):
    job = tmp_path / "job"
    result = run(
        *QUIET,
        *diverging_reward(tmp_path, 7),
        "grpo.max_steps=12",
        "monitor.on_collapse=rollback",
        "monitor.healthy_every=2",
        "monitor.remedy.warmup_steps=4",
        f"hydra.run.dir={job}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = assert_every_step_once(job, 12)  # step 7 trained again, logged once: the NaN one is gone
    (rollback,) = rollback_records(json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines())
    assert (rollback["cause"], rollback["from_step"], rollback["to_step"]) == ("non_finite", 7, 6)
    assert "optimizer.lr 0.001 -> 0.0005" in rollback["change"]
    lr = {r["step"]: r["learning_rate"] for r in rows}
    assert lr[7] < lr[6] / 2  # halved, and warmed up again from step 6
    assert all(lr[s] <= LR / 2 + 1e-12 for s in range(7, 13))
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "completed" and [r["to_step"] for r in summary["rollbacks"]] == [6]
    assert "rollback" in result.stdout and "back to step 6" in result.stdout


@pytest.mark.e2e  # rollbacks in a long real run
def test_a_collapse_again_from_the_same_checkpoint_goes_back_one_further(tmp_path):
    """Step 7 is NaN twice (reward calls 7 and 8): back to step 6, then, as 6 collapsed again, to an older
    checkpoint; both rollbacks stay on record though the second rewinds past the first's row."""
    job = tmp_path / "job"
    result = run(
        *SHORT,
        "logger.mode=offline",
        *diverging_reward(tmp_path, 7, 8),
        "grpo.max_steps=10",
        "monitor.on_collapse=rollback",
        "monitor.healthy_every=2",
        f"hydra.run.dir={job}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert_every_step_once(job, 10)
    records = rollback_records(json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines())
    assert [(r["from_step"], r["to_step"]) for r in records[:1]] == [(7, 6)]
    assert records[1]["from_step"] == 7 and records[1]["to_step"] < 6
    assert "optimizer.lr 0.0005 -> 0.00025" in records[1]["change"]
    summary = json.loads((job / "summary.json").read_text())
    assert [r["index"] for r in summary["rollbacks"]] == [1, 2]
    ((_, trained),) = wandb_history(job)
    assert trained == list(range(1, 11)), "W&B gets each step once: the collapsed stages sent theirs up to step 7"


@pytest.mark.e2e  # the injected-divergence rollback stays in the fast tier
def test_a_kl_spike_rolls_back_and_max_rollbacks_reached_stops_with_one_line(tmp_path):
    """A KL limit any update passes: the first spike rolls back, the second ends the run."""
    job = tmp_path / "job"
    result = run(
        *QUIET,
        "grpo.max_steps=10",
        "monitor.on_collapse=rollback",
        "monitor.max_rollbacks=1",
        "monitor.kl_threshold=1e-5",
        "monitor.collapse_kl_multiple=1",
        "monitor.healthy_every=1",
        f"hydra.run.dir={job}",
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "max_rollbacks=1 reached" in line]
    assert len(lines) == 1 and "KL" in lines[0], result.stderr[-3000:]
    (rollback,) = json.loads((job / "summary.json").read_text())["rollbacks"]
    assert rollback["cause"] == "kl_spike" and rollback["to_step"] < rollback["from_step"]


@pytest.mark.e2e  # rollbacks in a long real run
def test_a_run_killed_after_a_rollback_resumes_with_every_step_once(tmp_path):
    job = tmp_path / "job"
    steps = (*QUIET, *diverging_reward(tmp_path, 5), "grpo.max_steps=14", "monitor.on_collapse=rollback")
    steps += ("monitor.healthy_every=2", f"hydra.run.dir={job}")
    process = start(*steps)
    after = job / "checkpoint-8" / checkpoints.SEAL_FILE  # a healthy checkpoint after the rollback to step 4
    wait_for(lambda: after.is_file() and last_step(job) >= 9, process)
    process.kill()
    process.wait()

    resumed = run(f"resume={job}")

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = assert_every_step_once(job, 14)
    all_rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [r["to_step"] for r in rollback_records(all_rows)] == [4]
    assert all(r["learning_rate"] <= LR / 2 + 1e-12 for r in rows if r["step"] > 4)  # the remedy holds after resume
    summary = json.loads((job / "summary.json").read_text())
    assert summary["resumed_from"] >= 8 and len(summary["rollbacks"]) == 1


def test_stop_ends_the_run_at_the_collapse_with_one_line(tmp_path):
    job = tmp_path / "job"
    result = run(
        *QUIET,
        *diverging_reward(tmp_path, 3),
        "grpo.max_steps=8",
        "monitor.on_collapse=stop",
        f"hydra.run.dir={job}",
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "monitor.on_collapse=stop" in line]
    assert len(lines) == 1 and "reward -inf at step 3" in lines[0], result.stderr[-3000:]
    assert json.loads((job / "summary.json").read_text())["steps"] <= 3


class StageTrainer:
    """What ``Trackers.follow`` touches of a stage's trainer: its callbacks, transformers' W&B one among them."""

    def __init__(self) -> None:
        self.callback_handler = SimpleNamespace(callbacks=[])
        self.added: list = []

    def pop_callback(self, kind: type) -> type:
        return kind

    def add_callback(self, callback) -> None:
        self.added.append(callback)


def test_the_stage_after_a_rollback_sends_w_and_b_only_the_steps_it_lacks(monkeypatch):
    """Collapsed at step 7, back to 6: the next stage trains 7-12 again, and W&B, which keeps one value
    per step, already holds 7. A step's evaluation (12 twice: training, then held-out) still goes."""
    from transformers.integrations import WandbCallback

    from grpo_exp.training.lifecycle import Trackers

    sent: list[int] = []
    monkeypatch.setattr(
        WandbCallback, "on_log", lambda self, args, state, control, **kw: sent.append(state.global_step)
    )
    trackers = Trackers(opening=None, trackio=None, mode="offline", sent=0)
    for steps in ([1, 2, 3, 4, 5, 6, 7], [7, 8, 9, 10, 11, 12, 12]):
        trainer = StageTrainer()
        trackers.follow(trainer)
        (guard,) = trainer.added
        for step in steps:
            guard.on_log(SimpleNamespace(report_to=["wandb"]), SimpleNamespace(global_step=step), None, logs={})
    assert sent == [*range(1, 13), 12]


class FromRank0:
    """torch.distributed as rank 1 sees it in ``ranks``: rank 0's answer arrives by broadcast."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def broadcast_object_list(self, box: list, src: int) -> None:
        box[0] = (True, self.answer)


def test_every_rank_trains_the_stage_rank_0_decided(tmp_path, settings, monkeypatch):
    """Under torchrun rank 0 alone rewinds metrics.jsonl (on resume and at a rollback) and deletes
    checkpoints; another rank may still read the old file. Each stage comes from rank 0's decision:
    its checkpoint, its remedy (learning rate, group size), the rows its detector replays; this rank
    neither reads its folder for them nor touches it."""
    from grpo_exp.folder import JobFolder
    from grpo_exp.tracking.monitor import HealthMonitor
    from grpo_exp.training import ranks
    from grpo_exp.training.checkpoints import Checkpoint, ResumePoint
    from grpo_exp.training.collapse.detector import Collapse
    from grpo_exp.training.collapse.rollback import LearningRateRemedy, RollbackStages, StageStart
    from grpo_exp.training.stops import StopRequest

    s = settings("monitor.on_collapse=rollback", "grpo.save_steps=2", "monitor.remedy.num_generations=8")
    folder = JobFolder(tmp_path)
    stale = rows_for([0.1] * 9, [])  # this rank's copy: steps 1-9, neither rewound nor holding the rollback
    for step, row in enumerate(stale, start=1):
        folder.append_row({"step": step, **row})
    folder.checkpoint(8).mkdir()
    spec = SimpleNamespace(settings=s, layout=SimpleNamespace(processes=2))
    resumed = Checkpoint(folder.checkpoint(6), 6, {"monitor": {}})
    stages = RollbackStages(spec, folder, HealthMonitor(s.monitor), ResumePoint(resumed, {}), StopRequest())
    monkeypatch.setattr(ranks, "_rank", lambda: 1)

    history = [{"step": step, **row} for step, row in enumerate(stale[:6], start=1)]
    monkeypatch.setattr(ranks, "_group", lambda: FromRank0(StageStart(resumed, [], history)))
    first = stages.next_stage(None)
    assert first.resume_from.step == 6 and first.settings.grpo.num_generations == s.grpo.num_generations
    assert first.callbacks[0].detector.last_step == 6, "rank 0's rows replayed, not this rank's up to step 9"

    record = {"index": 1, "to_step": 4, "from_step": 7, "cause": "non_finite", "message": "NaN", "change": "lr"}
    target = Checkpoint(folder.checkpoint(4), 4, {"monitor": {}})
    monkeypatch.setattr(ranks, "_group", lambda: FromRank0(StageStart(target, [record], history[:4], record)))
    stages.watch.collapse = Collapse("non_finite", 7, 6, "reward NaN at step 7")
    second = stages.next_stage(object())
    assert second.resume_from is target and second.settings.grpo.num_generations == 8
    (remedy,) = [c for c in second.callbacks if isinstance(c, LearningRateRemedy)]
    assert (remedy.factor, remedy.since) == (s.monitor.remedy.lr_factor, 4)
    assert second.callbacks[0].detector.last_step == 4 and stages.pending == [record]
    assert len(folder.rows()) == len(stale) and folder.checkpoint(8).is_dir(), "rank 0 alone writes the folder"
