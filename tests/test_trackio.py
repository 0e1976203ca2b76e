"""``logger=trackio``: one local trackio run per job, read back with trackio's own CLI, and the sweep's
dashboard (``python -m grpo_exp.dashboard <sweep> --local``) opened in a real browser."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.config.schema import LoggerBackend, LoggerSettings
from grpo_exp.report.trackers import REPORT_RUN_SUFFIX
from grpo_exp.tracking.trackio_run import wandb_keys
from tests.conftest import ROOT
from tools.docs_images import BROWSER_ARGS, CHROMIUM  # the browser the docs picture is taken in

pytestmark = pytest.mark.skipif(not importlib.util.find_spec("trackio"), reason="trackio extra not installed")

STEPS = 3
DASHBOARD_WAIT_S = 60


def store_env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    return env | {"TRACKIO_DIR": str(store)}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, Path]:
    """A 2-job sweep logged to trackio only, in a store of its own."""
    root = tmp_path_factory.mktemp("trackio")
    sweep_dir, store = root / "sweep", root / "store"
    command = [
        sys.executable,
        "run.py",
        "-m",
        f"hydra.sweep.dir={sweep_dir}",
        "logger=trackio",
        "seed=1,2",
        f"grpo.max_steps={STEPS}",
    ]
    result = subprocess.run(command, cwd=ROOT, env=store_env(store), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir, store


def trackio_cli(store: Path, *args: str) -> dict:
    command = [str(Path(sys.executable).parent / "trackio"), *args, "--json"]
    result = subprocess.run(command, env=store_env(store), capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout)


def run_names(sweep_dir: Path) -> list[str]:
    return [json.loads((sweep_dir / str(n) / "summary.json").read_text())["name"] for n in (0, 1)]


@pytest.mark.e2e  # the sweep fixture: a real 2-job sweep logged to trackio
def test_each_job_is_one_trackio_run_with_every_step(sweep):
    sweep_dir, store = sweep
    names = run_names(sweep_dir)
    listed = trackio_cli(store, "list", "runs", "--project", "grpo-exp")["runs"]
    report_run = sweep_dir.name + REPORT_RUN_SUFFIX  # the sweep's interval table (report/trackers.py), beside the jobs
    assert report_run in listed
    assert sorted(n for n in listed if n != report_run) == sorted(names) and len(set(names)) == 2
    for name in names:
        got = trackio_cli(store, "get", "metric", "--project", "grpo-exp", "--run", name, "--metric", "train/reward")
        assert [v["step"] for v in got["values"]] == list(range(1, STEPS + 1))


@pytest.mark.e2e  # the sweep fixture: a real 2-job sweep logged to trackio
def test_runs_carry_w_and_b_keys_group_and_swept_values(sweep):
    sweep_dir, store = sweep
    runs = [trackio_cli(store, "get", "run", "--project", "grpo-exp", "--run", n) for n in run_names(sweep_dir)]
    for run in runs:
        keys = {"train/reward", "train/reward_std", "train/kl", "train/rewards/format/mean", "eval/reward"}
        assert keys <= set(run["metrics"]) and run["last_step"] == STEPS
    configs = [run["config"] for run in runs]
    assert {c["seed"] for c in configs} == {1, 2}  # the swept value on top, as in W&B
    assert all(c["grpo_exp"]["grpo"]["max_steps"] == STEPS for c in configs)
    groups = {c["_Group"] for c in configs}
    assert len(groups) == 1 and groups.pop() == f"sweep_seed-{sweep_dir.name}"


# Opens the job's trackio run as training does, logs trainer steps ``first``..``last`` and closes it;
# a second call with resumed=1 continues the same run (TRACKIO_DIR is read when trackio is imported).
LOG_STEPS = """
import sys
from grpo_exp.config.schema import LoggerBackend, LoggerSettings
from grpo_exp.tracking.trackio_run import trackio_run
from grpo_exp.tracking.wandb_run import RunIdentity
first, last, resumed = (int(a) for a in sys.argv[1:])
settings = LoggerSettings(backend=LoggerBackend.trackio)
with trackio_run(settings, RunIdentity("job-a", group="g"), {"seed": 1}, resumed=bool(resumed)) as run:
    for step in range(first, last + 1):
        run.log({"reward": step / 10, "eval_reward": 0.5, "train_runtime": 1.0}, step)
"""


def test_a_resumed_job_continues_its_trackio_run_with_each_step_once(tmp_path):
    """trackio_run without training (the sweep above is the same run from real jobs): a job stopped
    after step 3 and resumed from its checkpoint at step 2 sends steps 3-4 once."""
    store = tmp_path / "store"
    for first, last, resumed in ((1, 3, 0), (3, 4, 1)):
        command = [sys.executable, "-c", LOG_STEPS, str(first), str(last), str(resumed)]
        done = subprocess.run(command, cwd=ROOT, env=store_env(store), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
    assert trackio_cli(store, "list", "runs", "--project", "grpo-exp")["runs"] == ["job-a"]
    got = trackio_cli(store, "get", "metric", "--project", "grpo-exp", "--run", "job-a", "--metric", "train/reward")
    assert [v["step"] for v in got["values"]] == [1, 2, 3, 4]
    run = trackio_cli(store, "get", "run", "--project", "grpo-exp", "--run", "job-a")
    assert {"train/reward", "eval/reward"} <= set(run["metrics"]) and "train/train_runtime" not in run["metrics"]
    assert run["config"]["seed"] == 1 and run["config"]["_Group"] == "g"


def test_both_trackers_at_once_and_none():
    assert LoggerSettings(backends=[LoggerBackend.wandb, LoggerBackend.trackio]).trackers() == {"wandb", "trackio"}
    assert LoggerSettings(backend=LoggerBackend.trackio).trackers() == {"trackio"}
    assert LoggerSettings(backend=LoggerBackend.none).trackers() == set()


def test_trainer_keys_become_w_and_b_names():
    logs = {"reward": 0.5, "eval_reward": 0.25, "rewards/format/mean": 1.0, "train_runtime": 3.0, "flag": True}
    assert wandb_keys(logs) == {"train/reward": 0.5, "eval/reward": 0.25, "train/rewards/format/mean": 1.0}


def test_the_local_dashboard_refuses_a_sweep_without_trackio_runs(tmp_path):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "config.yaml").write_text("logger:\n  project: grpo-exp\n")
    command = [sys.executable, "-m", "grpo_exp.dashboard", str(tmp_path), "--local"]
    result = subprocess.run(command, env=store_env(tmp_path / "store"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no trackio run of" in result.stderr and "logger=trackio" in result.stderr


def browser_missing() -> str | None:
    if not importlib.util.find_spec("playwright"):
        return "Playwright's Python package is not installed (pip install -e '.[browser]')"
    if not CHROMIUM.is_file() and not shutil.which("chromium"):
        return "no Chromium here (apt-get install chromium)"
    return None


@pytest.mark.e2e  # the sweep fixture: a real 2-job sweep logged to trackio
@pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")
def test_the_sweeps_dashboard_shows_both_runs_and_a_reward_curve_in_a_browser(sweep, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    sweep_dir, store = sweep
    command = [sys.executable, "-m", "grpo_exp.dashboard", str(sweep_dir), "--local"]
    server = subprocess.Popen(command, env=store_env(store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()
        assert first.startswith("trackio dashboard: http://127.0.0.1:"), first + server.stderr.read()
        url = first.split(": ", 1)[1].strip()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}&metric_filter=train/reward$", timeout=DASHBOARD_WAIT_S * 1000)
            for name in run_names(sweep_dir):
                expect(page.get_by_text(name, exact=True).first).to_be_visible(timeout=DASHBOARD_WAIT_S * 1000)
            plot = page.locator("div", has=page.get_by_text("reward", exact=True)).filter(has=page.locator("svg path"))
            expect(plot.first).to_be_visible(timeout=DASHBOARD_WAIT_S * 1000)
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            browser.close()
        assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
