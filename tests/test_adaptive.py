"""Adaptive group size: the chooser, the settings check, and a real staged run on the tiny model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from grpo_exp.config import checks
from grpo_exp.errors import UserError
from grpo_exp.folder import PROFILES_FILE
from grpo_exp.spec import build_spec
from grpo_exp.tracking.metrics import read_eval_metrics, read_metrics
from grpo_exp.training.group_choice import choose, mixed_share
from tests.conftest import ROOT
from tests.test_cli import run_py
from tests.wandb_records import read_run

SIZES = list(range(4, 17))


def test_mixed_share_is_the_chance_a_group_is_not_all_alike():
    assert mixed_share([0.5], 2) == pytest.approx(0.5)
    assert mixed_share([0.0, 1.0], 8) == 0.0
    assert mixed_share([0.1], 4) < mixed_share([0.1], 8) < mixed_share([0.1], 16)


def test_choice_is_the_smallest_group_reaching_the_target():
    choice = choose([0.5, 0.5], SIZES, target=0.8)
    assert choice.num_generations == 4 and choice.reached  # 1 - 2 * 0.5**4 = 0.875
    hard = choose([0.1, 0.2], SIZES, target=0.8)
    assert hard.num_generations == next(g for g in SIZES if mixed_share([0.1, 0.2], g) >= 0.8)
    assert hard.num_generations > 4 and mixed_share([0.1, 0.2], hard.num_generations - 1) < 0.8
    assert "smallest" in hard.reason


def test_rarely_solved_prompts_need_larger_groups():
    assert choose([0.3] * 4, SIZES, 0.8).num_generations < choose([0.05] * 4, SIZES, 0.8).num_generations


def test_unreachable_target_takes_the_largest_size_and_says_so():
    choice = choose([0.01], [4, 6, 8], target=0.9)
    assert choice.num_generations == 8 and not choice.reached
    assert "no size in 4..8 reaches" in choice.reason


def test_always_and_never_solved_prompts_are_dropped_when_asked():
    rates = [1.0, 0.0, 0.5, 0.25, 0.0]
    choice = choose(rates, SIZES, 0.8)
    assert choice.dropped_solved == [0] and choice.dropped_unsolved == [1, 4] and choice.kept == [2, 3]
    assert "dropped 1 always solved and 2 never solved" in choice.reason
    kept_all = choose(rates, SIZES, 0.8, drop_solved=False, drop_unsolved=False)
    assert kept_all.kept == [0, 1, 2, 3, 4] and not kept_all.dropped_solved
    assert choose(rates, SIZES, 0.8, drop_solved=False).kept == [0, 2, 3]


def test_dropping_keeps_enough_prompts_for_a_step():
    choice = choose([1.0, 0.0, 0.5], SIZES, 0.8, min_kept=2)
    assert choice.kept == [0, 1, 2] and "kept all" in choice.reason


def test_group_sizes_keep_whole_groups(settings):
    assert (
        checks.allowed_groups(settings("adaptive.enabled=true"), processes=1) == SIZES
    )  # hold_fixed=prompts: any size
    fixed = settings("adaptive.enabled=true", "grpo.hold_fixed=completions", "grpo.completions_per_step=24")
    assert checks.allowed_groups(fixed, processes=1) == [4, 6, 8, 12]
    stage = checks.with_group(fixed, 6, processes=1)
    assert stage.grpo.num_generations == 6 and stage.grpo.per_device_train_batch_size == 24
    assert fixed.grpo.num_generations == 6 and stage.grpo is not fixed.grpo  # the job's settings stay as they are


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("adaptive.min_generations=1", "adaptive.min_generations=1: GRPO compares"),
        ("adaptive.max_generations=3", "adaptive.max_generations=3 is below adaptive.min_generations=4"),
        ("adaptive.target_mixed_share=1.5", "adaptive.target_mixed_share=1.5 must lie in (0, 1)"),
        ("adaptive.samples_per_prompt=1", "a success rate needs at least 2 samples"),
        ("adaptive.interval=0", "adaptive.interval=0 must be at least 1"),
        ("grpo.max_steps=-1", "set grpo.max_steps"),
        ("grpo.hold_fixed=none", "use grpo.hold_fixed=prompts or completions"),
        ("adaptive.max_generations=5", "no group size in adaptive.min_generations..max_generations = 4..5"),
    ],
)
def test_bad_adaptive_settings_fail_in_one_line(settings, override, message):
    extra = ("grpo.hold_fixed=completions", "grpo.completions_per_step=14") if "4..5" in message else ()
    with pytest.raises(UserError) as error:
        build_spec(settings("adaptive.enabled=true", *extra, override))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bad_adaptive_setting_on_the_command_line_exits_2_before_torch():
    result = run_py("adaptive.enabled=true", "adaptive.max_generations=2")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "adaptive.max_generations=2 is below" in lines[0]
    assert "torch" not in result.stdout.split("HEAVY=")[-1]


def test_adaptive_run_changes_its_group_size_and_continues_weights_and_optimizer(tmp_path):
    """Two stages of 2 steps: the first profile moves the group off 4 (a target 4 can't reach), and the second
    stage continues the first's weights (KL > 0 at once), optimizer (its step count) and step numbers."""
    job = tmp_path / "job"
    command = [
        sys.executable,
        "run.py",
        "logger.mode=offline",  # the W&B run gets the adaptive keys too
        "save_model=false",
        "grpo.max_steps=4",
        "grpo.num_generations=4",
        "adaptive.enabled=true",
        "adaptive.interval=2",
        "adaptive.profile_prompts=8",
        "adaptive.max_generations=8",
        "adaptive.target_mixed_share=0.9",  # above 1 - 2 * 0.5**4, so never met by groups of 4
        "grpo.eval_on_start=true",  # held out: once before step 1, not again when stage 2 starts
        f"hydra.run.dir={job}",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)  # generous: shared CPUs
    assert result.returncode == 0, result.stderr[-3000:]

    profiles = [json.loads(line) for line in (job / PROFILES_FILE).read_text().splitlines()]
    assert [p["step"] for p in profiles] == [0, 2]
    assert profiles[0]["changed"] and profiles[0]["previous"] == 4 and profiles[0]["num_generations"] > 4
    assert all(p["reason"] and 4 <= p["num_generations"] <= 8 for p in profiles)
    assert "adaptive, step 0: num_generations changes 4 ->" in result.stderr
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    logged = [(r["step"], r["adaptive/num_generations"]) for r in rows if "adaptive/num_generations" in r]
    assert logged == [(p["step"], p["num_generations"]) for p in profiles]

    (wandb_dir,) = (job / "wandb").glob("offline-run-*")
    wandb_run = read_run(wandb_dir)
    assert {"adaptive/num_generations", "adaptive/dropped_prompts", "train/reward"} <= wandb_run.history_keys
    assert wandb_run.exit_code == 0
    assert [row["step"] for row in read_eval_metrics(job / "metrics.jsonl")] == [0, 4]  # held-out: start, end

    trained = read_metrics(job / "metrics.jsonl")
    assert [r["step"] for r in trained] == [1, 2, 3, 4]
    # Stage 2 starts from stage 1's weights, not the reference's: once stage 1 moved them (a step with a learning
    # rate, Adam's moments holding a gradient from it or a step before), policy and reference part at stage 2's
    # first step; when every group of stage 1 scored alike (it happens), no gradient, nothing moved, and KL is 0.
    moved = any(
        r["learning_rate"] > 0 and any(q["grad_norm"] > 0 for q in trained[: i + 1]) for i, r in enumerate(trained[:2])
    )
    assert (trained[2]["kl"] > 0) == moved, trained[:3]
    import torch

    optimizer = torch.load(job / "checkpoint-4" / "optimizer.pt", weights_only=False)
    assert {int(s["step"]) for s in optimizer["state"].values()} == {4}
    state = json.loads((job / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["train_batch_size"] == 2 * profiles[-1]["num_generations"]  # prompts_per_step x the stage's group


@pytest.mark.e2e  # a staged run stopped or extended, resumed
def test_adaptive_run_stopped_mid_stage_resumes_in_that_stage_with_every_step_once(tmp_path):
    """Ctrl-C inside the second of three stages, then resume=: the stage goes on with the group size and prompts
    its profile chose (no second profile at the stop), the third stage is profiled as usual, every step is in
    metrics.jsonl once, and both processes log to one W&B run."""
    from grpo_exp.training import checkpoints
    from tests.test_long_runs import last_step, run, start, wait_for

    job = tmp_path / "job"
    process = start(
        "logger.mode=offline",
        "save_model=false",
        "grpo.max_steps=9",
        "grpo.num_generations=4",
        "adaptive.enabled=true",
        "adaptive.interval=3",
        "adaptive.profile_prompts=8",
        "adaptive.max_generations=8",
        "adaptive.target_mixed_share=0.9",  # groups of 4 can't reach it: the first profile changes the size
        f"hydra.run.dir={job}",
    )
    wait_for(lambda: last_step(job) >= 4, process)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 130, err[-3000:]
    stopped = checkpoints.latest(job)
    assert stopped is not None and 3 < stopped.step < 6, "the stop must land inside the second stage"
    assert f"resume with: python run.py resume={job}" in err
    first_id = json.loads((job / "run_info.json").read_text())["wandb"]["id"]

    resumed = run(f"resume={job}")

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    profiles = [json.loads(line) for line in (job / PROFILES_FILE).read_text().splitlines()]
    assert [p["step"] for p in profiles] == [0, 3, 6]
    assert f"adaptive, step {stopped.step}" not in resumed.stderr  # the stopped stage was not profiled again
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == list(range(1, 10))
    logged = [(r["step"], r["adaptive/num_generations"]) for r in rows if "adaptive/num_generations" in r]
    assert logged == [(p["step"], p["num_generations"]) for p in profiles]
    end_of_stage_2 = json.loads((job / "checkpoint-6" / "trainer_state.json").read_text())
    assert end_of_stage_2["train_batch_size"] == 2 * profiles[1]["num_generations"]  # the stage's own group
    info = json.loads((job / "run_info.json").read_text())
    assert info["wandb"]["id"] == first_id and [r["from_step"] for r in info["resumes"]] == [stopped.step]
    runs = sorted(job.glob("wandb/offline-run-*"))
    assert len(runs) == 2 and {path.name.rsplit("-", 1)[1] for path in runs} == {first_id}


def test_a_profile_after_a_resume_reads_the_checkpoints_weights(settings, tmp_path):
    """Resumed at a stage's end, the next profile samples the trained policy, not the base model."""
    import torch

    from grpo_exp import models
    from grpo_exp.training.schedule import load_policy

    cfg = settings().model
    trained, _ = models.load(cfg, models.model_path(cfg))
    with torch.no_grad():
        trained.model.embed_tokens.weight.mul_(0.5)
    trained.save_pretrained(tmp_path / "checkpoint-3")
    base, _ = models.load(cfg, models.model_path(cfg))
    assert not torch.equal(base.model.embed_tokens.weight, trained.model.embed_tokens.weight)
    restored, _ = load_policy(cfg, tmp_path / "checkpoint-3")
    assert torch.equal(restored.model.embed_tokens.weight, trained.model.embed_tokens.weight)
    assert torch.equal(restored.lm_head.weight, trained.lm_head.weight)  # tied, as the base model's


def test_every_rank_starts_the_next_stage_from_rank_0s_checkpoint(tmp_path, settings, monkeypatch):
    """Rank 0 seals a stage's last checkpoint after the other ranks have passed the save's barrier, so
    another rank may find it unsealed and would start the next stage from the one before (here: from
    scratch). Every rank takes rank 0's choice."""
    from types import SimpleNamespace

    from datasets import Dataset

    from grpo_exp.folder import JobFolder
    from grpo_exp.training import ranks
    from grpo_exp.training.checkpoints import Checkpoint
    from grpo_exp.training.schedule import AdaptiveStages
    from grpo_exp.training.stops import StopRequest
    from tests.test_rollback import FromRank0

    interval = 2
    s = settings("adaptive.enabled=true", f"adaptive.interval={interval}", f"grpo.max_steps={3 * interval}")
    folder = JobFolder(tmp_path)
    folder.checkpoint(interval).mkdir()  # as this rank sees it: rank 0 has not sealed it yet
    spec = SimpleNamespace(settings=s, layout=SimpleNamespace(processes=2, primary=False))
    stages = AdaptiveStages(spec, folder, None, StopRequest())
    stages.prompts = Dataset.from_list([{"prompt": "p"}])  # never loaded: the stage's prompts are not under test
    profile = dict(step=interval, num_generations=s.grpo.num_generations, dropped_solved=[], dropped_unsolved=[])
    monkeypatch.setattr(stages, "_profile", lambda *args: profile)
    sealed = Checkpoint(folder.checkpoint(interval), interval, {"monitor": {}})
    monkeypatch.setattr(ranks, "_rank", lambda: 1)
    monkeypatch.setattr(ranks, "_group", lambda: FromRank0(sealed))
    previous = SimpleNamespace(state=SimpleNamespace(global_step=interval), model=object(), processing_class=None)
    stage = stages.next_stage(previous)
    assert stage.resume_from is sealed, "rank 0's sealed checkpoint, not this rank's older (or no) one"


@pytest.mark.e2e  # a staged run stopped or extended, resumed
def test_a_finished_adaptive_run_extended_profiles_its_trained_policy_at_the_boundary(tmp_path):
    """resume= with a higher grpo.max_steps: a new stage starts at the old end, with a profile of its own."""
    from tests.test_long_runs import run

    job = tmp_path / "job"
    common = ("logger=none", "save_model=false", "adaptive.enabled=true", "adaptive.interval=2")
    first = run(*common, "grpo.max_steps=2", "adaptive.profile_prompts=8", f"hydra.run.dir={job}")
    assert first.returncode == 0, first.stderr[-3000:]
    extended = run(f"resume={job}", "grpo.max_steps=4")
    assert extended.returncode == 0, extended.stderr[-3000:]
    profiles = [json.loads(line) for line in (job / PROFILES_FILE).read_text().splitlines()]
    assert [p["step"] for p in profiles] == [0, 2]
    assert "adaptive, step 2: num_generations" in extended.stderr
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == [1, 2, 3, 4]
