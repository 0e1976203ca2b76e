"""benchmarks/harness.py: the one place benchmarks start processes, stop them with everything they
started, keep a time budget and read job folders."""

from __future__ import annotations

import ast
import os
import time

from benchmarks import harness
from grpo_exp import proc
from tests.conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
# What starts a process: a module, or a name in os.
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty"}
PROCESS_CALLS = {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp"}


def starts_processes(path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in PROCESS_MODULES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROCESS_MODULES:
            return True
        if (
            isinstance(node, ast.Attribute)
            and getattr(node.value, "id", None) == "os"
            and (node.attr in PROCESS_CALLS or node.attr.startswith(("spawn", "exec")))
        ):
            return True
    return False


def test_only_the_harness_starts_processes():
    found = sorted(p.name for p in BENCHMARKS.rglob("*.py") if starts_processes(p))
    assert found == ["harness.py"], found


def test_the_gpu_check_stays_a_script_of_its_cases():
    assert (BENCHMARKS / "gpu_check.py").read_text(encoding="utf-8").count("\n") < 600


def test_a_command_past_its_time_is_stopped_with_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    # the grandchild starts a session of its own, as torchrun's workers do: a group kill would miss it
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    started = time.monotonic()
    finished = harness.python("-c", code, timeout_s=2, until=pid_file.exists)
    assert finished.returncode == harness.TIMED_OUT and "timed out" in finished.failure()
    assert finished.reached_s is not None and finished.reached_s < finished.wall_s < 10
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not proc.is_zombie(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.is_zombie(grandchild)  # killed (reaped by init, or about to be)


def test_output_and_exit_come_back(tmp_path):
    finished = harness.python("-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
    assert (finished.returncode, finished.stdout, finished.stderr) == (3, "out\n", "err\n")
    assert "exit 3" in finished.failure() and finished.cpu_s >= 0
    log = tmp_path / "logs" / "console.log"
    finished = harness.python("-c", "import sys; print('out'); print('err', file=sys.stderr)", log=log)
    assert finished.ok and sorted(log.read_text().split()) == ["err", "out"] == sorted(finished.stdout.split())


def test_the_budget_limits_each_part_to_what_is_left():
    budget = harness.Budget(100.0, started=time.monotonic() - 70)
    assert 29 < budget.left() <= 30 and budget.fits(20) and not budget.fits(40)
    assert budget.limit(10) == 10 and 29 < budget.limit(50) <= 30


def test_a_job_folder_reads_back_through_the_folder_module(tmp_path):
    (tmp_path / "summary.json").write_text('{"status": "completed", "steps": 2}')
    (tmp_path / "run_info.json").write_text('{"layout": {"processes": 1}}')
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 1, "eval/reward": 0.7}\n{"ste')
    job = harness.Job(tmp_path)
    assert job.ok and job.layout() == {"processes": 1} and job.plan() == {}
    assert job.steps() == [{"step": 1, "reward": 0.5}] and job.evaluations() == [{"step": 1, "eval/reward": 0.7}]
    assert harness.logged(tmp_path)() and not harness.logged(tmp_path / "absent")()


def test_timers_reach_a_job_through_its_environment(tmp_path):
    # a module nothing imports at start-up: the shim wraps the method when the job first imports it
    env = harness.timed_env(tmp_path / "timings", {"fractions:Fraction.limit_denominator": "limit_s"})
    code = "from fractions import Fraction; Fraction(1, 3).limit_denominator(2); Fraction(1, 7).limit_denominator(3)"
    assert harness.python("-c", code, env=env, check=True).ok
    assert len(harness.timings(tmp_path / "timings")["limit_s"]) == 2
    assert "BENCH_TIMINGS" not in os.environ  # this process's own environment is left alone
