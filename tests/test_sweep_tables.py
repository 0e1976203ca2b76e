"""The report's interval table in the sweep's trackers: a W&B table in an offline run, a trackio table; and the
configuration and seed keys every job run carries, so the dashboards group a configuration's seeds."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_exp.report.compare import write_report
from grpo_exp.report.trackers import log_intervals
from grpo_exp.tracking.wandb_run import RunIdentity, configuration_label, run_config
from tests.conftest import ROOT
from tests.test_intervals import two_arm_sweep
from tests.wandb_records import read_run

GROUP = "aa-2026-12-04_05-00-00"


def with_wandb_runs(sweep: Path, offline: bool = True) -> Path:
    """The run_info.json (and offline run folder) a job that logged to W&B leaves."""
    for job in sorted(p for p in sweep.iterdir() if p.is_dir()):
        info = {"wandb": {"id": f"run-{job.name}", "name": job.name, "group": GROUP, "project": "grpo-exp-test"}}
        (job / "run_info.json").write_text(json.dumps(info))
        if offline:
            (job / "wandb" / f"offline-run-20261204_050000-run-{job.name}").mkdir(parents=True)
    return sweep


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)


def test_the_interval_table_goes_to_an_offline_wandb_run_of_the_sweeps_group(tmp_path, offline_wandb):
    sweep = with_wandb_runs(two_arm_sweep(tmp_path / "sweep", random.Random(1)))
    write_report(sweep, plots=False)  # as the sweep's end does, before it logs the table
    (line,) = log_intervals(sweep)
    assert line.startswith(f"W&B table '{GROUP} report' (run report-") and "offline; upload with: wandb sync" in line
    (folder,) = (sweep / "report" / "wandb").glob("offline-run-*")
    run = read_run(folder)
    assert (run.group, run.job_type, run.name) == (GROUP, "sweep-report", f"{GROUP} report")
    (row,) = [h for h in run.history if "sweep/intervals/path" in h]
    assert row["sweep/intervals/_type"] == "table-file"
    table = json.loads((folder / "files" / row["sweep/intervals/path"]).read_text())
    assert table["columns"][:4] == ["configuration", "seeds", "statistic", "centre"]
    assert {r[0] for r in table["data"]} == {"tag=a", "tag=b"} and all(r[1] == 4 for r in table["data"])
    with (sweep / "report" / "intervals.csv").open(newline="") as handle:
        assert [r[0] for r in table["data"]] == [row["configuration"] for row in csv.DictReader(handle)]
    assert run.summary["outcome"] == "can't be told apart" and run.summary["objective"] == "final_reward"


def test_a_sweep_that_logged_to_no_tracker_logs_no_table(tmp_path):
    sweep = two_arm_sweep(tmp_path / "sweep", random.Random(1))
    assert log_intervals(sweep) == []
    assert not (sweep / "report" / "wandb").exists()


def test_every_job_run_carries_its_configuration_and_seed_as_keys_of_their_own():
    identity = RunIdentity(
        name="optimizer.lr=0.003,seed=2",
        overrides={"optimizer.lr": 3e-3, "seed": 2},
        configuration=configuration_label({"optimizer.lr": 3e-3}),
    )
    config = run_config(identity, {"seed": 2, "optimizer": {"lr": 3e-3}})
    assert config["configuration"] == "optimizer.lr=0.003"  # as the report labels it
    assert config["seed"] == 2 and config["grpo_exp"]["optimizer"]["lr"] == 3e-3
    assert run_config(RunIdentity(name="defaults"), {"seed": 42})["seed"] == 42  # not swept: still its own key
    assert configuration_label({}) == "defaults"


@pytest.mark.skipif(not importlib.util.find_spec("trackio"), reason="trackio extra not installed")
def test_a_sweep_logged_to_trackio_gets_the_table_in_a_trackio_run(tmp_path):
    sweep = two_arm_sweep(tmp_path / "sweep", random.Random(1))
    for job in sweep.iterdir():
        config = job / "config.yaml"
        config.write_text(config.read_text() + "logger:\n  backend: trackio\n  project: grpo-exp-test\n")
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")} | {
        "TRACKIO_DIR": str(store)
    }
    command = [sys.executable, "-m", "grpo_exp.report", str(sweep), "--no-plots", "--log-table"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "intervals: trackio table 'sweep report' (project grpo-exp-test)" in result.stdout
    read = (
        "from trackio.sqlite_storage import SQLiteStorage as S; import json; "
        "logs = S.get_logs('grpo-exp-test', 'sweep report'); print(json.dumps(logs[-1]['sweep/intervals']))"
    )
    logged = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=120)
    assert logged.returncode == 0, logged.stderr[-3000:]
    table = json.loads(logged.stdout)
    assert table["_type"] == "trackio.table" and len(table["_value"]) == 2
    assert {row["configuration"] for row in table["_value"]} == {"tag=a", "tag=b"}


@pytest.mark.e2e  # a real 2 x 2 sweep (2 steps a job), W&B offline
def test_a_real_sweep_over_seeds_tags_its_runs_and_logs_the_table_when_it_ends(tmp_path):
    sweep_dir = tmp_path / "sweep"
    overrides = ["optimizer.lr=1e-3,3e-3", "seed=1,2", "grpo.max_steps=2", "threads=1", "logger.mode=offline"]
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", "-m", f"hydra.sweep.dir={sweep_dir}", *overrides]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [read_run(next((sweep_dir / str(n) / "wandb").glob("offline-run-*"))) for n in range(4)]
    assert [(r.config["configuration"], r.config["seed"]) for r in runs] == [
        ("optimizer.lr=0.001", 1),
        ("optimizer.lr=0.001", 2),
        ("optimizer.lr=0.003", 1),
        ("optimizer.lr=0.003", 2),
    ]
    (folder,) = (sweep_dir / "report" / "wandb").glob("offline-run-*")
    table_run = read_run(folder)
    assert (table_run.job_type, table_run.group) == ("sweep-report", runs[0].group)
    assert table_run.summary["outcome"] == "not enough seeds" and table_run.summary["configurations"] == 2
    assert "sweep intervals: W&B table" in result.stdout + result.stderr  # Hydra logs the sweep's end on stdout
