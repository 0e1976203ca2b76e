"""Successive halving (``sweep.halving.enabled=true``): rungs, survivors, stopped jobs, and a real sweep."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from grpo_exp.config.checks import check_halving
from grpo_exp.config.schema import CONF_DIR, register_schema
from grpo_exp.errors import UserError
from grpo_exp.folder import COMPLETED, FAILED, HALVING_FILE, STOPPED_EARLY, JobFolder, read_json
from grpo_exp.report.halving import halving_section
from grpo_exp.sweep import halving
from tests.conftest import ROOT
from tests.wandb_records import read_run

MAX_STEPS, FIRST_RUNG = 4, 2


def test_rungs_grow_by_eta_and_end_at_max_steps():
    assert halving.rungs(100, 3, None) == [11, 33, 100]  # 100 // 9 = 11, x3 while 3x the rung fits in 100
    assert halving.rungs(100, 3, 10) == [10, 30, 100]
    assert halving.rungs(4, 2, 2) == [2, 4]
    assert halving.rungs(9, 3, 1) == [1, 3, 9]


def test_the_best_third_goes_on_and_a_configuration_without_a_score_is_last():
    scores = {"a": 0.2, "b": None, "c": 0.9, "d": 0.5}
    assert halving.survivors(scores, 3) == ["c", "d"]  # ceil(4 / 3)
    assert halving.survivors({"a": None, "b": 0.1}, 3) == ["b"]


def test_seeds_are_one_configuration():
    jobs = [["optimizer.lr=1e-3", f"seed={seed}", "logger.mode=offline"] for seed in (1, 2)]
    varied = halving.varied_keys(jobs)
    assert varied == {"seed"}
    assert halving.configuration(jobs[0], varied) == halving.configuration(jobs[1], varied) == "defaults"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["sweep.halving.eta=1"], "eta must be 2 or more"),
        (["sweep.halving.min_steps=100"], "min_steps=100 must lie between 0 and grpo.max_steps/eta=33"),
        (["sweep.halving.min_steps=34"], "min_steps=34 must lie between 0 and grpo.max_steps/eta=33"),
        (["optimizer.scheduler=cosine"], "use optimizer.scheduler=constant"),
        (["adaptive.enabled=true"], "those runs end their stages on their own"),
        (["monitor.on_collapse=rollback"], "monitor.on_collapse=rollback"),
    ],
)
def test_settings_halving_cant_run_with_are_one_line(overrides, message):
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", ["grpo.max_steps=100", *overrides])
    with pytest.raises(UserError, match=message):
        check_halving(cfg)


def test_a_bad_halving_setting_stops_the_sweep_before_any_job(tmp_path):
    result = multirun(tmp_path / "sweep", "sweep.halving.enabled=true", "sweep.halving.eta=1", "seed=1,2")
    assert result.returncode == 2 and "error: sweep.halving.eta=1" in result.stderr
    assert not (tmp_path / "sweep").exists()


def multirun(sweep_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    command = [sys.executable, "run.py", "-m", f"hydra.sweep.dir={sweep_dir}", "logger.mode=offline", *overrides]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def trained_steps(job: Path) -> list[int]:
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "reward" in r]


@pytest.mark.e2e  # a real halving sweep and its resume; the decisions are unit-tested above with a fake launcher
def test_a_halving_sweep_stops_the_loser_at_its_rung_and_resumes_the_winner(tmp_path):
    sweep_dir = tmp_path / "sweep"
    command = (
        "sweep.halving.enabled=true",
        "sweep.halving.eta=2",
        f"sweep.halving.min_steps={FIRST_RUNG}",
        "optimizer.lr=1e-4,3e-3",
        f"grpo.max_steps={MAX_STEPS}",
    )
    result = multirun(sweep_dir, *command)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((sweep_dir / "halving.json").read_text())
    first, last = record["rungs"]
    assert (first["steps"], last["steps"]) == (FIRST_RUNG, MAX_STEPS)
    (winner,) = first["kept"]
    assert first["scores"][winner] == max(first["scores"].values())
    summaries = {n: json.loads((sweep_dir / str(n) / "summary.json").read_text()) for n in (0, 1)}
    kept = next(n for n, s in summaries.items() if s["status"] == "completed")
    stopped = 1 - kept
    assert summaries[stopped]["status"] == "stopped_early" and summaries[stopped]["stopped_at_step"] == FIRST_RUNG
    assert summaries[stopped]["final_eval_reward"] in first["scores"].values()  # its held-out reward at the rung
    assert trained_steps(sweep_dir / str(kept)) == list(range(1, MAX_STEPS + 1))  # resumed, every step once
    assert trained_steps(sweep_dir / str(stopped)) == list(range(1, FIRST_RUNG + 1))
    kept_runs = [read_run(p) for p in sorted((sweep_dir / str(kept) / "wandb").glob("offline-run-*"))]
    assert len({r.run_id for r in kept_runs}) == 1  # one W&B run, continued
    marked = read_run(sorted((sweep_dir / str(stopped) / "wandb").glob("offline-run-*"))[-1])
    assert "stopped_early" in marked.tags and marked.summary.get("stopped_at_step") == FIRST_RUNG
    made, full = record["completions"]["generated"], record["completions"]["full_sweep"]
    assert made == full * (FIRST_RUNG + MAX_STEPS) // (2 * MAX_STEPS)  # 2 + 4 steps of the 8 a full sweep trains
    report = (sweep_dir / "report" / "report.md").read_text()
    assert "## Successive halving" in report and f"job {stopped}" in report and "Stopped early" in report
    verdict = report.split("## Verdict\n\n")[1].splitlines()[0]
    assert verdict.startswith("- **Only configuration that completed:**") and f"job {kept});" in verdict

    before = {n: (sweep_dir / str(n) / "metrics.jsonl").read_text() for n in (0, 1)}
    again = multirun(sweep_dir, *command, "resume=auto")  # the same command resumes it: nothing left to train
    assert again.returncode == 0, again.stderr[-3000:]
    assert {n: (sweep_dir / str(n) / "metrics.jsonl").read_text() for n in (0, 1)} == before
    assert json.loads((sweep_dir / "halving.json").read_text())["rungs"][0]["kept"] == [winner]


class FakeSweep:
    """A launcher that trains nothing: each job's ``summary.json`` at a rung is the score this test gives it
    (``None``: the job failed there), and a job already done at that step is left as it is (``resume=auto``)."""

    def __init__(self, sweep_dir: Path, scores: dict[tuple[int, int], float | None]) -> None:
        self.sweep_dir, self.scores, self.batches = sweep_dir, scores, []

    def launch(self, batch: list[list[str]], first: int) -> list:
        self.batches.append(batch)
        for overrides in batch:
            values = dict(o.split("=", 1) for o in overrides)
            number, steps = int(values["hydra.sweep.subdir"]), int(values.get(halving.RUNG_KEY, MAX_STEPS))
            folder = JobFolder(self.sweep_dir / str(number))
            before = folder.summary() or {}
            if before.get("status") in (COMPLETED, STOPPED_EARLY) and before["steps"] >= steps:
                continue
            score = self.scores.get((number, steps))
            folder.path.mkdir(parents=True, exist_ok=True)
            status = {"status": FAILED} if score is None else {"status": COMPLETED, "final_eval_reward": score}
            folder.write_summary({**status, "steps": steps})
        return []

    def trained(self, batch: int) -> list[int]:
        """The jobs a launch of this sweep ran, by number."""
        return [int(dict(o.split("=", 1) for o in job)["hydra.sweep.subdir"]) for job in self.batches[batch]]


def halving_config(overrides: list[str]):
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            "config",
            [
                "sweep.halving.enabled=true",
                "sweep.halving.eta=2",
                f"sweep.halving.min_steps={FIRST_RUNG}",
                f"grpo.max_steps={MAX_STEPS}",
                "optimizer.scheduler=constant",
                *overrides,
            ],
        )


LRS = [["optimizer.lr=1e-4"], ["optimizer.lr=3e-3"]]


def test_a_rung_where_no_job_has_a_score_eliminates_nobody_and_says_so(tmp_path, caplog):
    """Issue 39, item 3: every job of the first rung failed; ranking their missing scores kept job 0 blindly."""
    fake = FakeSweep(tmp_path, {(0, FIRST_RUNG): None, (1, FIRST_RUNG): None})
    with caplog.at_level(logging.INFO, logger="grpo_exp"):
        halving.run(LRS, tmp_path, halving_config([]), fake.launch)
    assert len(fake.batches) == 1  # no second rung
    assert not (read_json(tmp_path / HALVING_FILE) or {}).get("rungs")  # no decision recorded: resume decides it
    refusals = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(refusals) == 1 and "\n" not in refusals[0].getMessage()
    assert "no job has a score" in refusals[0].getMessage() and "resume=auto" in refusals[0].getMessage()
    assert all(JobFolder(tmp_path / str(n)).summary()["status"] == FAILED for n in (0, 1))  # neither marked stopped


def test_a_rung_decided_without_a_failed_job_is_decided_again_once_it_is_re_run(tmp_path, caplog):
    """Issue 39, item 3: job 1 failed at the first rung, so its configuration ranked last and stopped; re-run
    with resume=auto it scores best there, and the rung is decided again instead of reusing the record."""
    fake = FakeSweep(tmp_path, {(0, FIRST_RUNG): 0.5, (1, FIRST_RUNG): None, (0, MAX_STEPS): 0.6})
    cfg = halving_config([])
    with caplog.at_level(logging.INFO, logger="grpo_exp"):
        halving.run(LRS, tmp_path, cfg, fake.launch)
    first = read_json(tmp_path / HALVING_FILE)["rungs"][0]
    assert first["kept"] == ["optimizer.lr=1e-4"] and fake.trained(1) == [0]
    assert "rung 0 (step 2): no score from job(s) 1 (failed, or no summary.json)" in caplog.text
    caplog.clear()

    fake.scores |= {(1, FIRST_RUNG): 0.9, (1, MAX_STEPS): 0.95}
    fake.batches.clear()
    with caplog.at_level(logging.INFO, logger="grpo_exp"):
        halving.run([[*o, "resume=auto"] for o in LRS], tmp_path, cfg, fake.launch)
    first = read_json(tmp_path / HALVING_FILE)["rungs"][0]
    assert first["kept"] == ["optimizer.lr=3e-3"]
    assert first["scores"] == {"optimizer.lr=1e-4": 0.5, "optimizer.lr=3e-3": 0.9}  # job 0's score at the rung, kept
    assert fake.trained(1) == [1]  # the re-run configuration goes on
    assert JobFolder(tmp_path / "0").summary()["status"] == STOPPED_EARLY
    assert "rung 0 (step 2) decided again: the decision recorded in halving.json lacked job(s) 1" in caplog.text
    assert first["missing"] == []


def test_a_rung_whose_every_job_has_a_score_keeps_its_recorded_decision_on_resume(tmp_path, caplog):
    fake = FakeSweep(tmp_path, {(0, FIRST_RUNG): 0.5, (1, FIRST_RUNG): 0.4, (0, MAX_STEPS): 0.6})
    cfg = halving_config([])
    halving.run(LRS, tmp_path, cfg, fake.launch)
    fake.scores[1, FIRST_RUNG] = 0.9  # would win now; a complete decision is not taken again
    with caplog.at_level(logging.INFO, logger="grpo_exp"):
        halving.run([[*o, "resume=auto"] for o in LRS], tmp_path, cfg, fake.launch)
    assert read_json(tmp_path / HALVING_FILE)["rungs"][0]["kept"] == ["optimizer.lr=1e-4"]
    assert "rung 0 (step 2): the decision recorded in halving.json stands" in caplog.text


def test_the_report_shows_each_configurations_score_per_rung_and_where_it_stopped(tmp_path):
    fake = FakeSweep(tmp_path, {(0, FIRST_RUNG): 0.4, (1, FIRST_RUNG): 0.9, (1, MAX_STEPS): 0.95})
    halving.run(LRS, tmp_path, halving_config([]), fake.launch)

    section = halving_section(tmp_path)

    assert section[1] == "## Successive halving"
    assert f"Rungs end at steps {FIRST_RUNG}, {MAX_STEPS}" in section[3]
    assert section[3].endswith("0 completions generated against 0 for the full sweep.")  # the fake trains none
    table = [line for line in section if line.startswith("| `")]
    assert table == [
        f"| `optimizer.lr=1e-4` | 0.400 ✗ | — | rung 0 (step {FIRST_RUNG}) |",
        f"| `optimizer.lr=3e-3` | 0.900 | 0.950 | step {MAX_STEPS} (the end) |",
    ]
    assert halving_section(tmp_path / "no-halving") == []


# Four configurations over three seeds, eta 2: the rung keeps the best two by score; c's interval overlaps a's.
SEEDED = {
    "optimizer.lr=1e-3": (0.80, 0.85, 0.90),
    "optimizer.lr=2e-3": (0.78, 0.84, 0.86),
    "optimizer.lr=3e-3": (0.60, 0.81, 0.88),
    "optimizer.lr=4e-3": (0.10, 0.12, 0.15),
}


def seeded_sweep(tmp_path: Path) -> tuple[FakeSweep, list[list[str]]]:
    jobs = [[config, f"seed={seed}"] for config in SEEDED for seed in range(3)]
    scores = {(n, FIRST_RUNG): SEEDED[job[0]][n % 3] for n, job in enumerate(jobs)}
    scores |= {(n, MAX_STEPS): 0.9 for n in range(len(jobs))}
    return FakeSweep(tmp_path, scores), jobs


def test_with_several_seeds_a_configuration_whose_interval_overlaps_the_best_is_kept(tmp_path):
    fake, jobs = seeded_sweep(tmp_path)
    halving.run(jobs, tmp_path, halving_config([]), fake.launch)
    first = read_json(tmp_path / HALVING_FILE)["rungs"][0]
    assert first["kept"] == ["optimizer.lr=1e-3", "optimizer.lr=2e-3", "optimizer.lr=3e-3"]  # ceil(4/2) = 2, and one
    assert first["reasons"]["optimizer.lr=3e-3"] == "kept: its interval over 3 seeds overlaps the best's"
    assert first["reasons"]["optimizer.lr=4e-3"] == "stopped: its interval lies clear below the best's"
    low, high = first["intervals"]["optimizer.lr=1e-3"]
    assert first["scores"]["optimizer.lr=1e-3"] == pytest.approx(0.85) and low < 0.85 < high
    assert first["seeds"] == dict.fromkeys(SEEDED, 3)
    assert fake.trained(1) == list(range(9))  # the three kept configurations' nine jobs go on
    assert all(JobFolder(tmp_path / str(n)).summary()["status"] == STOPPED_EARLY for n in (9, 10, 11))


def test_with_one_seed_each_the_rung_keeps_the_best_1_over_eta_only(tmp_path):
    jobs = [[config] for config in SEEDED]
    scores = {(n, FIRST_RUNG): SEEDED[job[0]][2] for n, job in enumerate(jobs)} | {(0, MAX_STEPS): 0.9}
    fake = FakeSweep(tmp_path, scores | {(n, MAX_STEPS): 0.9 for n in range(4)})
    halving.run(jobs, tmp_path, halving_config([]), fake.launch)
    first = read_json(tmp_path / HALVING_FILE)["rungs"][0]
    assert first["kept"] == ["optimizer.lr=1e-3", "optimizer.lr=3e-3"]  # 0.90 and 0.88: the best two
    assert first["reasons"]["optimizer.lr=2e-3"] == "stopped: outside the best 1/2, and one seed gives no interval"


def test_the_report_shows_each_rungs_intervals_and_reasons(tmp_path):
    fake, jobs = seeded_sweep(tmp_path)
    halving.run(jobs, tmp_path, halving_config([]), fake.launch)
    text = "\n".join(halving_section(tmp_path))
    low, high = read_json(tmp_path / HALVING_FILE)["rungs"][0]["intervals"]["optimizer.lr=3e-3"]
    kept = f"| `optimizer.lr=3e-3` | 0.763 [{low:.3f}, {high:.3f}] | 0.900 [0.900, 0.900] | step {MAX_STEPS} "
    assert kept + "(the end) |" in text
    assert "| `optimizer.lr=4e-3` | 0.123 " in text and f"✗ | — | rung 0 (step {FIRST_RUNG}) |" in text
    reasons = next(line for line in text.splitlines() if line.startswith(f"- Rung 0 (step {FIRST_RUNG}):"))
    assert "`optimizer.lr=3e-3` kept: its interval over 3 seeds overlaps the best's" in reasons
    assert "`optimizer.lr=4e-3` stopped: its interval lies clear below the best's" in reasons
