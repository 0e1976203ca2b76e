"""Two real training processes on the CPU (torchrun, gloo): one job, one record, one stop.

``torchrun --nproc_per_node 2`` starts two ranks that train the tiny model together. A reward part
(tests/fixtures/rank_rewards.py) notes from inside each process its rank, WORLD_SIZE, the share
of the batch it scored and the learning rate it trains at, so these tests see that there were two
processes, not one, and that they agree.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_exp.folder import JobFolder
from grpo_exp.tracking.metrics import read_metrics, training_rows
from grpo_exp.training.collapse.detector import rollback_records
from tests.conftest import ROOT

TORCHRUN = str(Path(sys.executable).parent / "torchrun")
RANK_PART = "+reward.parts.ranks={fn: tests.fixtures.rank_rewards.note_rank, weight: 0.0}"
QUICK = ("logger=none", "dataset.eval_fraction=0", "grpo.max_completion_length=24", RANK_PART)
WAIT_S = 600  # a run of a dozen steps on two ranks takes 1-3 minutes on 2 busy cores


def launch(out: Path, *overrides: str, command: list[str] | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "RANK_LOG_DIR": str(out.parent), "OMP_NUM_THREADS": "1"}
    words = command or [TORCHRUN, "--nproc_per_node", "2", "run.py", f"hydra.run.dir={out}", *QUICK, *overrides]
    return subprocess.Popen(
        words, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def finish(process: subprocess.Popen[str], timeout: float = WAIT_S) -> tuple[int, str]:
    """The launch's exit code and console; a launch that hangs (ranks waiting on each other) is killed."""
    try:
        console, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        console, _ = process.communicate()
        raise AssertionError(f"the ranks hung: no end within {timeout:.0f} s; {console[-3000:]}") from None
    return process.returncode, console


def noted(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("ranks-*.jsonl")) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("two") / "job"
    code, console = finish(launch(out, "grpo.max_steps=3", "grpo.save_steps=3"))
    assert code == 0, console[-3000:]
    return out, console


@pytest.mark.e2e  # two torchrun ranks train (the two_ranks fixture is shared)
def test_two_processes_train_the_job(two_ranks):
    out, _ = two_ranks
    calls = noted(out.parent)
    assert {c["rank"] for c in calls} == {0, 1} and {c["world_size"] for c in calls} == {2}
    # 12 completions per step, split over the two ranks: each scores its own 6
    assert {c["completions"] for c in calls} == {6}
    assert "per_device_train_batch_size: 6" in (out / "config.yaml").read_text()


@pytest.mark.e2e  # two torchrun ranks train (the two_ranks fixture is shared)
def test_each_file_of_the_job_is_written_once(two_ranks):
    out, console = two_ranks
    assert [r["step"] for r in training_rows(read_metrics(out / "metrics.jsonl"))] == [1, 2, 3]
    log = (out / "run.log").read_text().splitlines()
    assert log and len(log) == len(set(log)), "a second rank wrote run.log too"
    assert console.count("training on the CPU, 2 processes") == 1, "the layout line comes from rank 0 alone"
    assert console.count("status  completed") == 1, "one end-of-run block"
    assert console.count("loaded 256 prompts") == 1
    info = json.loads((out / "run_info.json").read_text())
    assert info["layout"]["processes"] == 2 and info["layout"]["device"] == "cpu"
    assert (out / "checkpoint-3" / "rng_state_1.pth").is_file(), "rank 1 saved its part of the checkpoint"


def wait_for_rows(out: Path, rows: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if (out / "metrics.jsonl").is_file() and len(read_metrics(out / "metrics.jsonl")) >= rows:
            return
        time.sleep(0.2)
    raise AssertionError(f"the run did not reach {rows} logged steps")


def rank_pid(launcher: subprocess.Popen[str], rank: int) -> int:
    """The pid of the worker with ``rank``: torchrun's children, whose environment names their rank."""
    children = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True).stdout.split()
    for pid in children:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no worker of rank {rank} among {children}")


@pytest.mark.e2e  # two ranks stopped and resumed: about 2 minutes
def test_a_signal_to_one_rank_stops_both_with_a_checkpoint_and_the_launch_resumes(tmp_path):
    out = tmp_path / "job"
    steps = 12
    run = launch(out, f"grpo.max_steps={steps}", "grpo.save_steps=50")
    wait_for_rows(out, 3, run)
    os.kill(rank_pid(run, 1), signal.SIGINT)
    code, console = finish(run)
    assert code != 0, "torchrun reports the ranks' exit code 130"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and 3 <= summary["steps"] < steps, console[-3000:]
    stopped = summary["steps"]
    assert (out / f"checkpoint-{stopped}" / "grpo_exp_state.json").is_file(), "the stop checkpoint is sealed"
    assert {p.name for p in out.glob("checkpoint-*")} == {f"checkpoint-{stopped}"}
    assert "Connection reset" not in console and "received by another process" in console
    # both ranks scored their last batch at the same step
    last = {r: max(c["step"] for c in noted(tmp_path) if c["rank"] == r) for r in (0, 1)}
    assert last[0] == last[1], last

    printed = re.search(r"resume with: (.+)", console)
    assert printed, console[-2000:]
    words = shlex.split(printed.group(1))
    assert words[:3] == ["torchrun", "--nproc_per_node", "2"] and words[3:] == ["run.py", f"resume={out}"], words
    code, console = finish(launch(out, command=[TORCHRUN, *words[1:]]))
    assert code == 0, console[-3000:]
    rows = training_rows(read_metrics(out / "metrics.jsonl"))
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), "every step exactly once"
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


DYNAMIC_ROUNDS = 8


@pytest.mark.e2e  # two torchrun ranks sample dynamically: about a minute
def test_two_ranks_sample_dynamically_in_lockstep(tmp_path):
    """Issue 38: dynamic sampling refused several processes. Groups of 4 over 2 ranks of 6 rows each,
    so one group spans both ranks; every extra round both ranks generate an equal share."""
    out, steps = tmp_path / "job", 4
    dynamic = ("grpo.dynamic_sampling=true", f"grpo.max_sampling_rounds={DYNAMIC_ROUNDS}", "grpo.num_generations=4")
    batch = ("grpo.prompts_per_step=3", f"grpo.max_steps={steps}", "save_model=false")
    code, console = finish(launch(out, *dynamic, *batch))
    assert code == 0, console[-3000:]
    calls = noted(tmp_path)
    assert {c["rank"] for c in calls} == {0, 1} and {c["world_size"] for c in calls} == {2}
    shares = {r: [c["completions"] for c in calls if c["rank"] == r] for r in (0, 1)}
    assert shares[0] == shares[1], "the ranks generated different shares or rounds"
    assert min(shares[0]) < 6, "no extra round drew fewer groups than the batch holds (seed 42 does)"
    rows = training_rows(read_metrics(out / "metrics.jsonl"))
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), "every step once"
    keys = ("dropped_share", "rounds", "completions", "trained_zero_std_share")
    assert all(f"dynamic_sampling/{key}" in row for row in rows for key in keys)
    assert sum(r["dynamic_sampling/completions"] for r in rows) == sum(shares[0]) * 2, "every round is counted"
    for row in rows:
        if row["dynamic_sampling/rounds"] < DYNAMIC_ROUNDS:
            assert row["dynamic_sampling/trained_zero_std_share"] == 0, row
    assert "per_device_train_batch_size: 6" in (out / "config.yaml").read_text()


ROLLBACK_LR = 1e-3
BAD_CALL = 5  # each rank's 5th batch scores past float32's range: step 5 collapses, the run goes back to step 4
ROLLBACK = (
    "reward=custom",
    "reward.parts.main.fn=tests.fixtures.rank_rewards.noted_divergence",
    f"+reward.parts.main.params.bad_call={BAD_CALL}",
    "reward.parts.main.ceiling=1.0",
    "monitor.on_collapse=rollback",
    "monitor.healthy_every=2",
    "monitor.remedy.warmup_steps=2",
    f"optimizer.lr={ROLLBACK_LR}",
    "save_model=false",
    "threads=1",
)


@pytest.mark.e2e  # two ranks roll back a collapse: about a minute
def test_two_ranks_roll_back_together_at_one_learning_rate(tmp_path):
    """Rank 0 alone decides the rollback and rewrites metrics.jsonl; every rank trains on from the same
    checkpoint with the same remedy: the learning rates each rank logged agree step by step."""
    out, steps = tmp_path / "job", 8
    command = [TORCHRUN, "--nproc_per_node", "2", "run.py", f"hydra.run.dir={out}", *QUICK[:-1], *ROLLBACK]
    code, console = finish(launch(out, command=[*command, f"grpo.max_steps={steps}"]))
    assert code == 0, console[-3000:]
    all_rows = JobFolder(out).rows()
    rows = training_rows(all_rows)
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), "every step once"
    (rollback,) = rollback_records(all_rows)
    assert (rollback["from_step"], rollback["to_step"]) == (BAD_CALL, BAD_CALL - 1)
    calls = noted(tmp_path)
    assert {c["world_size"] for c in calls} == {2}
    lrs = {r: {c["lr_step"]: c["lr"] for c in calls if c["rank"] == r and c["lr_step"]} for r in (0, 1)}
    assert lrs[0] == lrs[1], "the ranks train at different learning rates"
    logged = {r["step"]: r["learning_rate"] for r in rows}  # rank 0's, in metrics.jsonl
    assert lrs[0] == {s: logged[s] for s in lrs[0]} and max(lrs[0]) == steps - 1
    assert all(lr <= ROLLBACK_LR / 2 for s, lr in lrs[1].items() if s >= BAD_CALL), "the remedy, on rank 1 too"


def test_a_launch_without_a_folder_is_refused_in_one_line():
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0"}
    result = subprocess.run(
        [sys.executable, "run.py", "grpo.max_steps=2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: under torchrun or accelerate launch, all processes write into one folder: add hydra.run.dir=<folder>"
    ]


def sealed_checkpoint(folder: Path, step: int) -> None:
    from grpo_exp.training.checkpoints import seal

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text("{}")
    seal(path, step, {})


@pytest.fixture(scope="module")
def decisions(tmp_path_factory) -> dict[str, tuple[Path, list[dict]]]:
    """tests/fixtures/rank_decisions.py's three cases on two ranks, in one launch: what each rank saw."""
    folder = tmp_path_factory.mktemp("decisions")
    modes = ("seal", "resume", "error")
    for mode in modes:
        (folder / mode).mkdir()
    sealed_checkpoint(folder / "resume", 2)
    (folder / "resume" / "checkpoint-4").mkdir()  # a checkpoint the job stopped while saving: never sealed
    script = str(ROOT / "tests" / "fixtures" / "rank_decisions.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [TORCHRUN, "--nproc_per_node", "2", script, str(folder), *modes],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = {m: [json.loads((folder / m / f"rank-{r}.json").read_text()) for r in (0, 1)] for m in modes}
    assert all([s["world_size"] for s in ranks] == [2, 2] for ranks in seen.values())
    return {m: (folder / m, seen[m]) for m in modes}


def test_a_checkpoint_is_sealed_only_once_every_rank_has_written_its_part(decisions):
    folder, _ = decisions["seal"]
    checkpoint = folder / "checkpoint-1"
    recorded = json.loads((checkpoint / "grpo_exp_state.json").read_text())["files"]
    assert recorded.get("rng_state_1.pth") == 1001, recorded
    from grpo_exp.training.checkpoints import problem

    assert problem(checkpoint) is None


def test_where_to_resume_is_decided_once_and_shared(decisions):
    folder, seen = decisions["resume"]
    assert [s["step"] for s in seen] == [2, 2]
    assert sorted(p.name for p in folder.iterdir() if "checkpoint" in p.name) == [
        "checkpoint-2",
        "damaged-checkpoint-4",
    ]


def test_a_decision_that_fails_on_rank_0_fails_on_every_rank(decisions):
    _, seen = decisions["error"]
    assert [s["raised"] for s in seen] == ["rank 0 refused", "rank 0 refused"]
