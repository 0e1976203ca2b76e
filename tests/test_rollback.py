"""monitor.on_collapse: what a collapse is (the detector), and rollbacks for real on the tiny model:
an injected NaN reward, a KL spike with max_rollbacks reached, and a rollback then SIGKILL then resume;
what rank 0 decides for every rank, and what W&B is sent after a rollback."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from grpo_exp.folder import JobFolder
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
# Appended to the reward module (it is imported in the training process): after the remedy, at the start
# of a stage after a rollback, saves the trained (adapter) weights as the trainer holds them, the
# learning rate of the optimizer and of the scheduler, and a copy of the adapter of the checkpoint the
# stage resumed (a later save's rotation may delete the checkpoint itself).
SPY_ON_THE_REMEDY = """

import json
import shutil

from peft import get_peft_model_state_dict
from safetensors.torch import save_file

from grpo_exp.training.collapse.rollback import LearningRateRemedy

remedy = LearningRateRemedy.on_train_begin


def spy(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
    remedy(self, args, state, control, model=model, optimizer=optimizer, lr_scheduler=lr_scheduler, **kwargs)
    folder = Path(SPY_FOLDER)
    folder.mkdir(exist_ok=True)
    weights = {k: v.detach().cpu().contiguous() for k, v in get_peft_model_state_dict(model).items()}
    save_file(weights, str(folder / "trained.safetensors"))
    checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
    shutil.copy(checkpoint / "adapter_model.safetensors", folder / "checkpoint.safetensors")
    lrs = {"step": state.global_step, "optimizer": optimizer.param_groups[0]["lr"]}
    lrs["scheduler"] = lr_scheduler.get_last_lr()[0]
    (folder / "lr.json").write_text(json.dumps(lrs))


LearningRateRemedy.on_train_begin = spy
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


def test_a_save_while_the_reward_falls_keeps_the_checkpoint_its_collapse_goes_back_to(settings, tmp_path):
    """The trainer's own save during a fall rotates out old checkpoints; the one kept (transformers'
    ``best_model_checkpoint``) must be at or before where the collapse of that fall goes back to."""
    from grpo_exp.training.collapse.rollback import CollapseWatch

    s = settings(
        "monitor.on_collapse=rollback",
        "monitor.window=2",
        "monitor.collapse_window=3",
        "monitor.collapse_drop=0.5",
        "monitor.healthy_every=1",
    )
    watch = CollapseWatch(SimpleNamespace(settings=s), history=[], since=0)
    args, kept, collapse = SimpleNamespace(output_dir=str(tmp_path)), None, None
    for step, row in enumerate(rows_for([0.1, 0.1, 0.5, 0.9, 0.9], [0.2] * 6), start=1):
        state = SimpleNamespace(global_step=step, best_model_checkpoint=None)
        control = SimpleNamespace(should_save=step == 8, should_training_stop=False)  # 8: the trainer's save_steps
        watch.on_log(args, state, control, logs=row)
        if control.should_save:
            watch.on_save(args, state, control)
        kept = state.best_model_checkpoint if step == 8 else kept
        collapse = collapse or watch.collapse
    assert collapse is not None and collapse.step == 9 and collapse.healthy_step == 5  # falling since step 7
    assert kept == str(JobFolder(tmp_path).checkpoint(5))  # before the fix: checkpoint-6, after the fall began


def test_the_checkpoint_a_stage_starts_from_is_kept_until_a_healthy_one_can_stand_in(settings, tmp_path):
    """A stage after a rollback starts from checkpoint 4 and saves no healthy one of its own; the
    trainer's save at step 12, as the reward falls, must keep 4 out of the rotation: it is the only
    checkpoint from before the fall."""
    from grpo_exp.training.collapse.rollback import CollapseWatch

    s = settings("monitor.on_collapse=rollback", "monitor.window=2", "monitor.healthy_every=100")
    history = [{"step": step, **row} for step, row in enumerate(rows_for([0.1, 0.1, 0.9, 0.9], []), start=1)]
    watch = CollapseWatch(SimpleNamespace(settings=s), history=history, since=4)
    args, kept = SimpleNamespace(output_dir=str(tmp_path)), None
    for step, row in enumerate(rows_for([], [0.9] * 6 + [0.2] * 3), start=5):
        state = SimpleNamespace(global_step=step, best_model_checkpoint=None)
        control = SimpleNamespace(should_save=step == 12, should_training_stop=False)
        watch.on_log(args, state, control, logs=row)
        kept = state.best_model_checkpoint if step == 12 else kept
    assert kept == str(JobFolder(tmp_path).checkpoint(4))  # before: none kept, and the rotation took it


def test_warn_is_the_default_and_rollback_needs_checkpoints(settings):
    from grpo_exp.config import checks
    from grpo_exp.errors import UserError

    assert settings().monitor.on_collapse == "warn"
    with pytest.raises(UserError, match=r"set grpo\.save_steps above 0"):
        checks.check(settings("monitor.on_collapse=rollback", "grpo.save_steps=0"))


def diverging_reward(tmp_path: Path, *bad_calls: int, spy: Path | None = None) -> tuple[str, ...]:
    """The reward module's overrides; with ``spy``, the module also records each rollback stage's start there."""
    module = tmp_path / "diverges_once.py"
    source = DIVERGING_REWARD.format(bad_calls=set(bad_calls), marker=str(tmp_path / "divergence_given"))
    if spy is not None:
        source += SPY_ON_THE_REMEDY.replace("SPY_FOLDER", repr(str(spy)))
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


WARMUP, TOTAL = 4, 20  # the remedy's warm-up steps; the schedule's steps
# transformers' schedules as formulas (2 warm-up steps for the linear one), to check the code against
SCHEDULES = {"linear": lambda step: min(step / 2, (TOTAL - step) / (TOTAL - 2)), "constant": lambda step: 1.0}


def stepped_schedule(name: str, steps_taken: int, state: dict | None = None):
    """A transformers schedule stepped as the trainer steps it, or restored as a resume restores it
    (``state``: the optimizer's and scheduler's saved states)."""
    import torch
    from transformers import get_scheduler

    weight = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.AdamW([weight], lr=LR)
    scheduler = get_scheduler(name, optimizer, num_warmup_steps=2, num_training_steps=TOTAL)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    for _ in range(steps_taken):
        weight.grad = torch.ones_like(weight)
        optimizer.step()
        scheduler.step()
    return optimizer, scheduler


def remedied_lr(name: str, step: int, since: int, factor: float) -> float:
    """The learning rate at ``step`` under the remedy, from the formulas, not the code under test."""
    return LR * factor * SCHEDULES[name](step) * min(1.0, (step - since + 1) / WARMUP)


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "accelerate_wrapper"])
@pytest.mark.parametrize(("start", "name", "since"), [("resumed", "linear", 6), ("never_stepped", "constant", 0)])
def test_the_remedy_sets_the_learning_rate_the_optimizer_uses_and_the_scheduler_reports(start, name, since, wrapped):
    """Issue 38: through the scheduler's public step, not its private ``_last_lr``. The optimizer's rate
    (what trains) and ``get_last_lr()`` (what is logged) are both the remedied schedule's, at the
    stage's first step and after it, with no warning from torch about the order of steps (it warns
    when a scheduler never stepped steps before its optimizer)."""
    import warnings

    from grpo_exp.training.collapse.rollback import LearningRateRemedy

    optimizer, scheduler = stepped_schedule(name, since)
    if start == "resumed":  # as transformers restores them: a new optimizer and scheduler, then the states
        optimizer, scheduler = stepped_schedule(
            name, 0, {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
        )
    factor = 0.25
    remedy = LearningRateRemedy(factor, since=since, warmup_steps=WARMUP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        remedy.on_train_begin(
            SimpleNamespace(learning_rate=LR),
            None,
            None,
            optimizer=optimizer,
            lr_scheduler=SimpleNamespace(scheduler=scheduler) if wrapped else scheduler,
        )
    assert [str(w.message) for w in caught] == []
    assert scheduler.last_epoch == since, "the schedule's position is unchanged"
    expected = remedied_lr(name, since, since, factor)
    assert expected == pytest.approx(LR * factor * SCHEDULES[name](since) / WARMUP) and expected > 0
    assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12)
    assert scheduler.get_last_lr() == [pytest.approx(expected, rel=1e-12)]
    for step in (since + 1, since + WARMUP + 2):
        while scheduler.last_epoch < step:
            optimizer.step()
            scheduler.step()
        expected = remedied_lr(name, step, since, factor)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12), step
        assert scheduler.get_last_lr() == [pytest.approx(expected, rel=1e-12)], step


# what transformers' schedules need beside the step counts
SCHEDULE_KWARGS = {
    "cosine_with_min_lr": {"min_lr_rate": 0.1},
    "cosine_warmup_with_min_lr": {"min_lr_rate": 0.1},
    "warmup_stable_decay": {"num_decay_steps": 2},
}


def test_rollback_takes_every_step_schedule_and_refuses_one_that_follows_a_metric(settings):
    """The remedy scales a LambdaLR; transformers builds one for every lr_scheduler_type but those that
    follow a metric, which are refused before the model loads rather than at the first rollback."""
    import torch
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import get_scheduler
    from transformers.trainer_utils import SchedulerType

    from grpo_exp.config import checks
    from grpo_exp.errors import UserError

    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    rollback = settings("monitor.on_collapse=rollback")
    refused = []
    for kind in SchedulerType:
        chosen = replace(rollback, optimizer=replace(rollback.optimizer, scheduler=kind.value))
        if kind.value in checks.METRIC_SCHEDULERS:
            with pytest.raises(UserError, match=f"optimizer.scheduler={kind.value} follows a metric"):
                checks.check(chosen)
            refused.append(kind.value)
            continue
        built = get_scheduler(kind.value, optimizer, 1, 10, scheduler_specific_kwargs=SCHEDULE_KWARGS.get(kind.value))
        assert isinstance(built, LambdaLR), kind.value
        checks.check(chosen)
    assert sorted(refused) == sorted(checks.METRIC_SCHEDULERS), "each refused one is one transformers has"
    checks.check(settings("monitor.on_collapse=stop", "optimizer.scheduler=reduce_lr_on_plateau"))


def test_rollback_under_deepspeed_is_refused_in_one_line_before_the_model_loads(settings, monkeypatch):
    """Issue 38: a rollback trains on with a new trainer in the same process; a second DeepSpeed engine
    there keeps the first one's memory. FSDP and plain data parallel hold no such engine, and stop
    trains no second stage: those pass."""
    from grpo_exp import models
    from grpo_exp.errors import UserError
    from grpo_exp.spec import build_spec

    def no_model(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(models, "load_model", no_model)
    for name, value in (("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    rollback = ("device=cpu", "monitor.on_collapse=rollback")
    for stage in ("2", "3"):
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
        monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", stage)
        for lora in ("false", "true"):
            with pytest.raises(UserError) as refused:
                build_spec(settings(*rollback, f"model.lora.enabled={lora}"))
            line = str(refused.value)
            assert "\n" not in line and f"monitor.on_collapse=rollback under DeepSpeed (zero{stage})" in line
            assert "use monitor.on_collapse=stop, or launch with accelerate/ddp.yaml" in line
    assert build_spec(settings("device=cpu", "monitor.on_collapse=stop")).layout.sharding == "zero3"
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert build_spec(settings(*rollback)).layout.sharding == "fsdp"
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    assert build_spec(settings(*rollback)).layout.sharding is None  # torchrun, or accelerate/ddp.yaml


@pytest.mark.e2e  # a LoRA run with a rollback
def test_a_lora_run_rolls_back_to_its_adapter_checkpoint(tmp_path):
    """Issue 38: a LoRA checkpoint holds the adapter; the stage after the rollback trains from the
    checkpoint's adapter (read back from the trainer itself, compared tensor by tensor), with the remedy."""
    from safetensors.torch import load_file

    job, spy = tmp_path / "job", tmp_path / "stage_start"
    result = run(
        *QUIET,
        *diverging_reward(tmp_path, 7, spy=spy),
        "model.lora.enabled=true",
        "grpo.max_steps=10",
        "monitor.on_collapse=rollback",
        "monitor.healthy_every=2",
        f"monitor.remedy.warmup_steps={WARMUP}",
        f"hydra.run.dir={job}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = assert_every_step_once(job, 10)
    (rollback,) = rollback_records(json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines())
    assert (rollback["cause"], rollback["from_step"], rollback["to_step"]) == ("non_finite", 7, 6)
    assert all((path / "adapter_model.safetensors").is_file() for _, path in JobFolder(job).checkpoints())
    assert not list(job.glob("checkpoint-*/model.safetensors")), "a LoRA checkpoint holds the adapter alone"

    trained, saved = load_file(spy / "trained.safetensors"), load_file(spy / "checkpoint.safetensors")
    assert trained.keys() == saved.keys() and any("lora_B" in k for k in saved)
    assert any(saved[k].abs().sum() > 0 for k in saved if "lora_B" in k), "the checkpoint's adapter has trained"
    assert all(torch_equal(trained[k], saved[k]) for k in saved), "the stage starts from the checkpoint's adapter"

    lrs = json.loads((spy / "lr.json").read_text())
    assert lrs["step"] == 6 and lrs["optimizer"] == lrs["scheduler"]
    assert 0 < lrs["optimizer"] <= LR / 2 / WARMUP + 1e-12  # halved, and at the first of the warm-up's 4 steps
    lr = {r["step"]: r["learning_rate"] for r in rows}
    assert all(lr[s] <= LR / 2 + 1e-12 for s in range(7, 11)) and lr[6] > LR / 2


def torch_equal(a, b) -> bool:
    import torch

    return a.dtype == b.dtype and torch.equal(a, b)


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
