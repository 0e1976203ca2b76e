"""Faults that are not ours: two jobs for one folder, a broken line in a prompt file, a damaged record."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from grpo_exp.errors import UserError
from grpo_exp.folder import FolderInUse, JobFolder
from grpo_exp.spec import build_spec
from grpo_exp.tracking.metrics import read_metrics
from tests.test_cli import run_py
from tests.test_long_runs import WAIT_S, start


@pytest.mark.e2e  # a real run stopped or refused, then resumed
def test_two_jobs_started_a_second_apart_on_one_folder_run_as_one(tmp_path):
    """Both pass the preflight (the folder holds no run yet); the folder's lock lets one of them train."""
    job = tmp_path / "job"
    overrides = ("grpo.max_steps=6", "logger=none", "save_model=false", f"hydra.run.dir={job}")
    first = start(*overrides)
    time.sleep(1)
    second = start(*overrides)
    outcomes = {}
    for process in (first, second):
        _, err = process.communicate(timeout=WAIT_S)
        outcomes[process.pid] = (process.returncode, err)
    codes = sorted(code for code, _ in outcomes.values())
    assert codes == [0, 2], {pid: err[-2000:] for pid, (_, err) in outcomes.items()}
    (winner,) = [pid for pid, (code, _) in outcomes.items() if code == 0]
    (refused,) = [err for code, err in outcomes.values() if code == 2]
    lines = [line for line in refused.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{job} is in use by the job of pid {winner} on " in lines[0], refused[-2000:]
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == list(range(1, 7))
    assert not (job / "error.txt").exists(), "the refused job wrote nothing into the folder"


@pytest.mark.e2e  # a run held while a resume is refused
def test_a_resume_of_a_folder_whose_job_still_runs_is_refused(tmp_path):
    from tests.test_long_runs import last_step, wait_for

    job = tmp_path / "job"
    running = start("grpo.max_steps=40", "logger=none", "save_model=false", f"hydra.run.dir={job}")
    try:
        wait_for(lambda: last_step(job) >= 1, running)
        refused = run_py(f"resume={job}")
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert f"is in use by the job of pid {running.pid} on " in refused.stderr
        assert running.poll() is None, "the running job goes on"
    finally:
        running.kill()
        running.communicate(timeout=WAIT_S)


def test_the_lock_is_free_again_once_its_holder_is_gone(tmp_path):
    folder = JobFolder(tmp_path / "job")
    with folder.lock(), pytest.raises(FolderInUse, match="is in use by the job of pid"), folder.lock():
        pass
    with folder.lock():  # released on the way out
        pass


def test_a_broken_line_of_a_json_lines_file_is_named_by_its_line(settings, tmp_path):
    data = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"question {i}"}) for i in range(17)] + ['{"prompt": "cut sho']
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UserError) as error:
        build_spec(settings("dataset=json", f"dataset.path={data}"))
    assert f"{data} is not valid JSON Lines: line 18:" in str(error.value)


def test_a_damaged_config_yaml_on_resume_is_one_line_naming_it(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "config.yaml").write_text("model: [unclosed\n  grpo: {\n", encoding="utf-8")
    result = run_py(f"resume={job}")
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{job / 'config.yaml'} can't be read as the run's config" in lines[0], lines


@pytest.mark.parametrize("record", ["run_info.json", "summary.json"])
def test_a_damaged_record_on_resume_is_one_line_naming_it_and_nothing_is_overwritten(settings, tmp_path, record):
    """Read as absent, a torn run_info.json lost the W&B run to continue, and was then written over."""
    import dataclasses

    from omegaconf import OmegaConf

    from grpo_exp.job import resume

    job = tmp_path / "job"
    job.mkdir()
    (job / "config.yaml").write_text(OmegaConf.to_yaml(dataclasses.asdict(settings())), encoding="utf-8")
    torn = '{"wandb": {"id": "4xzf'
    (job / record).write_text(torn, encoding="utf-8")
    recorded = resume.recorded_settings(job, [])
    with pytest.raises(UserError) as error:
        resume.plan(dataclasses.replace(recorded, resume=str(job)), job)
    assert str(error.value).startswith(f"{job / record} is damaged (not a JSON object)") and "\n" not in str(
        error.value
    )
    assert (job / record).read_text(encoding="utf-8") == torn


@pytest.mark.e2e  # W&B killed mid-run (test_wandb_repair does it in the fast tier)
def test_w_and_b_dying_mid_run_is_one_warning_and_training_goes_on(tmp_path):
    """W&B's service process is killed by its pid at step 5 of 30: the run completes, every step is in
    metrics.jsonl, the console has one warning and no traceback, and the summary says what W&B lost."""
    import os
    import signal
    import subprocess

    from tests.test_long_runs import last_step, wait_for

    job = tmp_path / "job"
    process = start("grpo.max_steps=30", "logger.mode=offline", "save_model=false", f"hydra.run.dir={job}")
    wait_for(lambda: last_step(job) >= 5, process)
    found = subprocess.run(["pgrep", "-f", f"wandb-core.*--pid {process.pid}"], capture_output=True, text=True)
    (service,) = [int(pid) for pid in found.stdout.split()]
    os.kill(service, signal.SIGKILL)
    out, err = process.communicate(timeout=WAIT_S)

    assert process.returncode == 0, err[-3000:]
    assert "Traceback" not in err and err.count("W&B failed") == 1
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl")] == list(range(1, 31))
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["wandb_lost"].startswith("ConnectionResetError")
    assert "W&B     failed during the run" in out


HANGING = "+reward.parts.api={fn: tests.fixtures.slow_rewards.hangs_from_the_third_call, weight: 0.1}"


@pytest.mark.parametrize("on_timeout", ["skip", "fail"])
def test_a_reward_call_past_its_limit_scores_none_or_fails_in_one_line(settings, caplog, on_timeout):
    from grpo_exp.rewards.compose import build_rewards
    from tests.fixtures import slow_rewards

    cfg = settings(HANGING, "reward.timeout_s=0.2", f"reward.on_timeout={on_timeout}")
    rewards, _ = build_rewards(cfg.reward)
    api = next(r for r in rewards if r.__name__ == "api")
    slow_rewards.CALLS["n"] = 2  # the next call hangs
    if on_timeout == "fail":
        with pytest.raises(UserError) as error:
            api(prompts=["p", "p"], completions=["a", "b"])
        assert str(error.value).startswith("reward part 'api' (tests.fixtures.slow_rewards.") and "\n" not in str(
            error.value
        )
        assert "took over 0.2 s; raise reward.timeout_s" in str(error.value)
    else:
        assert api(prompts=["p", "p"], completions=["a", "b"]) == [None, None]
        assert (
            "reward part 'api' (tests.fixtures.slow_rewards.hangs_from_the_third_call) took over 0.2 s" in caplog.text
        )
    assert slow_rewards.CALLS["n"] == 3, "the hung call is still under way: nothing waited for it"


def test_a_part_may_set_its_own_limit(settings):
    from grpo_exp.rewards.compose import build_rewards

    part = "+reward.parts.api={fn: tests.fixtures.slow_rewards.hangs_from_the_third_call, timeout_s: 5}"
    rewards, _ = build_rewards(settings(part, "reward.timeout_s=600").reward)
    assert {r.__name__: r.timeout_s for r in rewards} == {"format": 600, "api": 5}
    with pytest.raises(UserError, match=r"^reward.parts.api.timeout_s=-1.0: give seconds, or 0 for no limit$"):
        build_rewards(settings(part.replace("timeout_s: 5", "timeout_s: -1"), "reward.timeout_s=600").reward)


NEVER = "+reward.parts.api={fn: tests.fixtures.slow_rewards.never_returns, weight: 1}"


def test_a_part_past_its_limit_on_many_calls_in_a_row_fails_the_run_in_one_line(settings):
    """Issue 51: a part that never returned left a run that 'completed' having scored nothing with it."""
    from grpo_exp.rewards.compose import build_rewards

    cfg = settings(NEVER, "reward.timeout_s=0.1", "reward.max_timeouts_in_a_row=3")
    api = next(r for r in build_rewards(cfg.reward)[0] if r.__name__ == "api")
    for _ in range(2):
        assert api(prompts=["p"], completions=["a"]) == [None]
    with pytest.raises(UserError) as error:
        api(prompts=["p"], completions=["a"])
    message = str(error.value)
    assert message.startswith(
        "reward part 'api' (tests.fixtures.slow_rewards.never_returns) took over 0.1 s (reward.timeout_s) on 3 calls "
        "in a row (reward.max_timeouts_in_a_row)"
    )
    assert "\n" not in message


def test_a_part_that_never_returned_in_a_whole_run_fails_it(settings):
    from grpo_exp.rewards.compose import build_rewards, check_answered
    from tests.fixtures import slow_rewards

    part = NEVER.replace("weight: 1", "weight: 1, timeout_s: 0.1")
    rewards, _ = build_rewards(settings(part, "reward.timeout_s=600").reward)
    check_answered(rewards)  # not called yet: nothing to say
    api = next(r for r in rewards if r.__name__ == "api")
    for _ in range(2):
        api(prompts=["p"], completions=["a"])
    with pytest.raises(UserError, match=r"^reward part 'api' \(tests.fixtures.slow_rewards.never_returns\) never "
                       r"returned within 0.1 s \(reward.parts.api.timeout_s\) in 2 calls: "):  # fmt: skip
        check_answered(rewards)
    sometimes = HANGING.replace("weight: 0.1", "weight: 0.1, timeout_s: 0.1")
    rewards, _ = build_rewards(settings(sometimes).reward)
    slow_rewards.CALLS["n"] = 0
    for _ in range(3):  # scored twice, then past its limit
        next(r for r in rewards if r.__name__ == "api")(prompts=["p"], completions=["a"])
    check_answered(rewards)  # a part that scored some of the run is the on_timeout policy's to judge


@pytest.mark.e2e  # real runs that fail
@pytest.mark.parametrize(("steps", "in_a_row"), [(3, 2), (2, 10)], ids=["stretch", "whole_run"])
def test_a_run_whose_reward_part_never_returns_fails_in_one_line(tmp_path, steps, in_a_row):
    from grpo_exp.report.jobs import load_job
    from tests.test_long_runs import run

    job = tmp_path / "job"
    overrides = (NEVER, "reward.timeout_s=1", f"reward.max_timeouts_in_a_row={in_a_row}", f"grpo.max_steps={steps}")
    result = run(*overrides, "logger=none", "save_model=false", f"hydra.run.dir={job}")
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and "reward part 'api' (tests.fixtures.slow_rewards.never_returns)" in errors[0]
    said = "took over 1 s (reward.timeout_s) on 2 calls" if in_a_row == 2 else "never returned within 1 s"
    assert said in errors[0]
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed" and "reward part 'api'" in summary["error"]
    record = load_job(job)  # as the sweep report reads it: a failed job, with its line
    assert record.status == "failed" and "reward part 'api'" in record.error


@pytest.mark.e2e  # a real run stopped or refused, then resumed
def test_ctrl_c_during_a_hung_reward_call_stops_within_the_limit_with_a_checkpoint(tmp_path):
    """The third call of a part never returns: a Ctrl-C there stops the job once the 3 s limit passes,
    after the step, with its checkpoint; without the limit it would wait for the call forever."""
    import os
    import signal

    from grpo_exp.training import checkpoints
    from tests.test_long_runs import last_step, wait_for

    job = tmp_path / "job"
    process = start(HANGING, "reward.timeout_s=3", "grpo.max_steps=20", "logger=none", f"hydra.run.dir={job}")
    wait_for(lambda: last_step(job) >= 2, process)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 130, err[-3000:]
    assert "reward part 'api' (tests.fixtures.slow_rewards.hangs_from_the_third_call) took over 3 s" in err
    stopped = checkpoints.latest(job)
    summary = json.loads((job / "summary.json").read_text())
    assert stopped is not None and stopped.step == summary["steps"] >= 3
    assert summary["status"] == "interrupted"


def test_an_atomic_write_that_fails_keeps_the_old_file_and_leaves_no_partial(tmp_path, monkeypatch):
    """A full disk mid-write (simulated ENOSPC at fsync): summary.json keeps its old content whole."""
    import errno
    import os

    from grpo_exp.folder import write_json

    path = tmp_path / "summary.json"
    write_json(path, {"status": "completed", "steps": 10})

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_json(path, {"status": "failed", "steps": 11})
    assert json.loads(path.read_text()) == {"status": "completed", "steps": 10}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_an_atomic_write_the_disk_took_short_keeps_the_old_file(tmp_path, monkeypatch):
    """A write that reports success but left fewer bytes on disk never replaces the record (no 0-byte summary)."""
    import os

    from grpo_exp.folder import write_json

    path = tmp_path / "summary.json"
    write_json(path, {"status": "completed", "steps": 10})
    real = os.fstat

    def short(fd: int) -> os.stat_result:
        found = real(fd)
        return os.stat_result((*found[:6], 0, *found[7:]))  # st_size 0: nothing reached the disk

    monkeypatch.setattr(os, "fstat", short)
    with pytest.raises(OSError, match="holds fewer bytes than were written"):
        write_json(path, {"status": "failed", "steps": 11})
    assert json.loads(path.read_text()) == {"status": "completed", "steps": 10}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


# A disk that holds one checkpoint of the tiny model (about 14 MiB) but not two.
SMALL_DISK = "24m"
LARGER_DISK = "64m"


@pytest.fixture
def small_disk(tmp_path, request):
    """A tmpfs of ``SMALL_DISK`` (or the size a test gives it, ``indirect``), where this machine lets the
    test mount one (as root)."""
    import os
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    size = getattr(request, "param", SMALL_DISK)
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("no tmpfs can be mounted here; test_a_full_disk_is_one_line_naming_the_space simulates it")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.e2e  # a real run stopped or refused, then resumed
def test_a_full_disk_during_a_checkpoint_is_one_line_keeps_the_last_and_resumes(small_disk):
    """The checkpoint at step 4 doesn't fit: one line with its own exit code, checkpoint-2 kept whole."""
    import subprocess

    from tests.test_long_runs import run

    job = small_disk / "job"
    overrides = ("grpo.max_steps=4", "grpo.save_steps=2", "logger=none", "dataset.eval_fraction=0")
    full = run(*overrides, f"hydra.run.dir={job}")
    assert full.returncode == 28, full.stderr[-3000:]
    errors = [line for line in full.stderr.splitlines() if "ERROR" in line or "Traceback" in line]
    assert len(errors) == 1 and f"the disk holding {job} is full: a checkpoint of this job takes 13 MiB" in errors[0]
    assert (
        f"resume with: python run.py resume={job} (checkpoint-2 is kept, the unfinished checkpoint-4 removed)"
        in (errors[0])
    )
    assert [p.name for p in job.glob("checkpoint-*")] == ["checkpoint-2"]
    # issue 31: the summary is written once the cut checkpoint's space is free (it was missing, or 0 bytes)
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "failed" and f"the disk holding {job} is full" in summary["error"]
    assert "the unfinished checkpoint-4 removed" in summary["error"] and summary["steps"] >= 2
    subprocess.run(["mount", "-o", f"remount,size={LARGER_DISK}", str(small_disk)], check=True)
    resumed = run(f"resume={job}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl") if "loss" in r] == [1, 2, 3, 4]
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"


@pytest.mark.e2e  # a real run stopped by a full disk, then resumed
@pytest.mark.parametrize(
    ("small_disk", "kept", "removed"),
    [
        ("16m", "checkpoint-2", "checkpoint-4"),  # checkpoint-4's model.safetensors, the first file it writes
        ("28m", "checkpoint-4", None),  # both checkpoints fit; model/model.safetensors, the final model's, doesn't
    ],
    indirect=["small_disk"],
)
def test_a_full_disk_during_a_safetensors_write_is_one_line_and_resumes(small_disk, kept, removed):
    """Issue 39, item 4: the disk fills while safetensors writes model.safetensors (save_model=true)."""
    import subprocess

    from tests.test_long_runs import run

    job = small_disk / "job"
    overrides = ("grpo.max_steps=4", "grpo.save_steps=2", "save_model=true", "logger=none", "dataset.eval_fraction=0")
    full = run(*overrides, f"hydra.run.dir={job}")
    assert full.returncode == 28, full.stderr[-3000:]
    errors = [line for line in full.stderr.splitlines() if "ERROR" in line or "Traceback" in line]
    assert len(errors) == 1 and f"the disk holding {job} is full" in errors[0], full.stderr[-3000:]
    what = f"{kept} is kept" + (f", the unfinished {removed} removed" if removed else "")
    assert f"resume with: python run.py resume={job} ({what})" in errors[0]
    assert sorted(p.name for p in job.glob("checkpoint-*")) == sorted({"checkpoint-2", kept})
    assert not (job / "model" / "model.safetensors").exists()
    if kept == "checkpoint-4":
        # Not resumed here: a resume from a checkpoint at grpo.max_steps trains one step past it (transformers'
        # epoch loop trains a step before it checks max_steps), a defect of its own, not the full disk's.
        return
    subprocess.run(["mount", "-o", f"remount,size={LARGER_DISK}", str(small_disk)], check=True)
    resumed = run(f"resume={job}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in read_metrics(job / "metrics.jsonl") if "loss" in r] == [1, 2, 3, 4]
    assert json.loads((job / "summary.json").read_text())["status"] == "completed"
    assert (job / "model" / "model.safetensors").stat().st_size > 0


def test_a_full_disk_is_one_line_naming_the_space(tmp_path):
    """The same, with the disk's answer simulated: torch's writer fails, then ENOSPC on the way out."""
    import errno

    from grpo_exp.job.command import _disk_full
    from grpo_exp.training.checkpoints import seal

    job = JobFolder(tmp_path / "job")
    whole = job.checkpoint(2)
    whole.mkdir(parents=True)
    (whole / "optimizer.pt").write_bytes(b"o" * 3 * 2**20)
    seal(whole, 2, {})
    (job.checkpoint(4)).mkdir()
    (job.checkpoint(4) / "optimizer.pt").write_bytes(b"o" * 2**20)  # cut short
    try:
        try:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 6604352 vs 6604244")
        except RuntimeError:
            raise OSError(errno.ENOSPC, "No space left on device") from None
    except OSError as exc:
        line = _disk_full(exc, job, f"python run.py resume={job.path}")
    assert line is not None and "\n" not in line
    assert f"the disk holding {job.path} is full: a checkpoint of this job takes 3 MiB" in line
    assert "(checkpoint-2 is kept, the unfinished checkpoint-4 removed)" in line
    assert [p.name for _, p in job.checkpoints()] == ["checkpoint-2"]
    assert _disk_full(ValueError("another failure"), job, "") is None


# Holds a sealed checkpoint of 1 MiB, not a 4 MiB model.safetensors beside it.
TINY_DISK = "4m"


def _save_lora_adapter(folder: Path) -> None:
    """PEFT's own save of a LoRA adapter (adapter_model.safetensors, about 4 MiB)."""
    import torch
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(torch.nn.Sequential(torch.nn.Linear(1024, 1024)), LoraConfig(r=512, target_modules=["0"]))
    model.save_pretrained(str(folder))


def _save_model(folder: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2**20)}, str(folder / "model.safetensors"))


@pytest.mark.parametrize("save", [_save_model, _save_lora_adapter], ids=["model", "lora_adapter"])
@pytest.mark.parametrize("small_disk", [TINY_DISK], indirect=True)
def test_a_safetensors_write_to_a_full_disk_is_a_full_disk(small_disk, save):
    """Issue 39, item 4: safetensors' SafetensorError is no OSError and has no errno; its write to a full
    disk must still be the one line with the resume command, its cut checkpoint removed."""
    from grpo_exp.errors import failed_write, no_space
    from grpo_exp.job.command import _disk_full
    from grpo_exp.training.checkpoints import seal

    job = JobFolder(small_disk / "job")
    whole = job.checkpoint(2)
    whole.mkdir(parents=True)
    (whole / "optimizer.pt").write_bytes(b"o" * 2**20)
    seal(whole, 2, {})
    job.checkpoint(4).mkdir()
    with pytest.raises(Exception, match="I/O error: No space left on device") as raised:
        save(job.checkpoint(4))
    assert type(raised.value).__name__ == "SafetensorError" and not isinstance(raised.value, OSError)
    assert no_space(raised.value) and failed_write(raised.value)
    line = _disk_full(raised.value, job, f"python run.py resume={job.path}")
    assert line is not None and "\n" not in line
    assert f"the disk holding {job.path} is full" in line and f"resume with: python run.py resume={job.path}" in line
    assert "(checkpoint-2 is kept, the unfinished checkpoint-4 removed)" in line
    assert [p.name for _, p in job.checkpoints()] == ["checkpoint-2"]


def test_a_safetensors_error_that_is_no_write_fault_is_not_a_full_disk():
    from safetensors import SafetensorError

    from grpo_exp.errors import failed_write, no_space

    header = SafetensorError("Error while deserializing header: HeaderTooLarge")
    assert not no_space(header) and not failed_write(header)
    other = SafetensorError("Error while serializing: I/O error: No such file or directory (os error 2)")
    assert not no_space(other) and failed_write(other)


@pytest.mark.e2e  # a real model build stopped by a signal
def test_a_stop_signal_during_the_model_build_stops_at_once(tmp_path, monkeypatch):
    """Issue 27, finding 7: a SIGTERM while the embedded model was being built waited for the build to end."""
    import signal

    from tests.test_long_runs import WAIT_S, start, wait_for

    cache = tmp_path / "cache"
    monkeypatch.setenv("GRPO_EXP_CACHE", str(cache))  # a machine that has never built the model
    job = tmp_path / "job"
    log = job / "run.log"
    process = start("logger=none", "grpo.max_steps=3", f"hydra.run.dir={job}")
    wait_for(lambda: log.is_file() and "building the embedded tiny model" in log.read_text(), process)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM received before training started: stopping now" in err and "Traceback" not in err
    assert "stopped at step 0, no checkpoint" in err
    assert not list(cache.glob("tiny-*/config.json")), "the build was abandoned, not finished"
    assert not [p for p in cache.glob("tiny-*") if p.is_dir()], "and its staging folder removed"
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] == 0


@pytest.mark.e2e  # a training run; the non-finite reward's handling is unit-tested too
def test_a_reward_part_returning_inf_trains_on(tmp_path):
    """Issue 31: a third of the completions scored inf ended the run after one step with an internal error."""
    from tests.conftest import FIXTURES
    from tests.test_long_runs import run

    part = f"+reward.parts.inf={{fn:'{FIXTURES / 'infinite_rewards.py'}:inf_for_a_third',weight:1}}"
    job = tmp_path / "job"
    done = run(
        "logger=none", "grpo.max_steps=3", "save_model=false", "dataset.eval_fraction=0", part, f"hydra.run.dir={job}"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("returned inf or -inf") == 1 and "Traceback" not in done.stderr
    rows = [r for r in read_metrics(job / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(math.isfinite(r["rewards/inf/mean"]) for r in rows), "the scored two thirds, averaged"
