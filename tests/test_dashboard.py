"""The sweep's W&B view, built offline through wandb-workspaces' own objects, and its command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from grpo_exp.dashboard import publish
from grpo_exp.dashboard.__main__ import main
from grpo_exp.dashboard.sweep import read_sweep
from grpo_exp.dashboard.view import build_workspace, specification
from grpo_exp.sweep.hydra_callbacks import SweepDashboard
from tests.conftest import ROOT

wr = pytest.importorskip("wandb_workspaces.reports.v2")

GROUP = "group_size_lr_tiny-2026-11-30_06-00-00"
PARTS = ("format", "tone")
PART_KEYS = [f"rewards/{part}/mean" for part in PARTS]
GROUP_SIZE = "grpo_exp.grpo.num_generations"
LR = "grpo_exp.optimizer.lr"


def make_sweep(folder: Path, *, eval_rows: bool = True, wandb: bool = True) -> Path:
    """A 2 x 2 sweep folder as run.py -m leaves it: multirun.yaml, and per job the files the dashboard reads."""
    folder.mkdir(parents=True, exist_ok=True)
    task = ["grpo.num_generations=4,6", "optimizer.lr=1e-3,3e-3", "logger.mode=offline", "seed=1"]
    (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": task}}}))
    points = [(4, 1e-3), (4, 3e-3), (6, 1e-3), (6, 3e-3)]
    for num, (group_size, lr) in enumerate(points):
        job = folder / str(num)
        job.mkdir()
        config = {"grpo": {"num_generations": group_size}, "optimizer": {"lr": lr}, "logger": {"entity": None}}
        (job / "config.yaml").write_text(yaml.safe_dump(config))
        info = {"provenance": {}, "resumes": []}
        if wandb:
            name = f"grpo.num_generations={group_size},optimizer.lr={lr}"
            info["wandb"] = {"id": f"run{num}", "name": name, "group": GROUP, "project": "grpo-exp"}
        (job / "run_info.json").write_text(json.dumps(info))
        rows = [
            {
                "step": step,
                "reward": 0.1 * step,
                "reward_std": 0.2,
                "kl": 0.01,
                **{f"rewards/{p}/mean": 0.5 for p in PARTS},
            }
            for step in (1, 2)
        ]
        if eval_rows:
            rows.append({"step": 2, "eval_reward": 0.3, "eval_reward_std": 0.1, "eval_rewards/format/mean": 0.4})
        (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        summary = {"status": "completed", "final_reward": 0.2, "parts": dict.fromkeys(PARTS, 0.5)}
        (job / "summary.json").write_text(json.dumps(summary))
    return folder


def panels_of(workspace, section_name: str) -> list:
    (section,) = [s for s in workspace.sections if s.name == section_name]
    return section.panels


def test_view_groups_reward_std_and_kl_by_group_size_and_by_learning_rate(tmp_path):
    workspace = build_workspace(read_sweep(make_sweep(tmp_path)))
    for title, key in (("By num_generations (grpo.num_generations)", GROUP_SIZE), ("By lr (optimizer.lr)", LR)):
        plots = panels_of(workspace, title)
        assert [p.y for p in plots] == [["train/reward"], ["train/reward_std"], ["train/kl"], ["eval/reward"]]
        assert all(isinstance(p, wr.LinePlot) and p.groupby == wr.Config(key) for p in plots)
        assert {(p.groupby_aggfunc, p.groupby_rangefunc, p.x) for p in plots} == {
            ("mean", "minmax", "train/global_step")
        }
    # seed was swept too, but repeats are averaged, never an axis
    assert not any("seed" in s.name for s in workspace.sections)


def test_a_sweep_over_seeds_gets_one_line_per_configuration_first(tmp_path):
    folder = make_sweep(tmp_path)
    task = ["grpo.num_generations=4,6", "optimizer.lr=1e-3,3e-3", "seed=0,1,2,3"]
    (folder / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"overrides": {"task": task}}}))
    workspace = build_workspace(read_sweep(folder))
    assert workspace.sections[0].name == "By configuration (over seeds)"
    plots = workspace.sections[0].panels
    assert [p.y for p in plots] == [["train/reward"], ["train/reward_std"], ["train/kl"], ["eval/reward"]]
    assert {(p.groupby, p.groupby_aggfunc, p.groupby_rangefunc) for p in plots} == {
        (wr.Config("configuration"), "mean", "minmax")
    }
    assert "By configuration (over seeds)" not in [
        s.name for s in build_workspace(read_sweep(make_sweep(tmp_path / "one"))).sections
    ]


def test_view_has_parts_eval_parallel_coordinates_and_runs_table(tmp_path):
    workspace = build_workspace(read_sweep(make_sweep(tmp_path)))
    assert [p.y for p in panels_of(workspace, "Reward parts")] == [[f"train/rewards/{p}/mean"] for p in PARTS]
    evals = [p.y for p in panels_of(workspace, "Held-out evaluation")]
    assert evals == [["eval/reward"], ["eval/reward_std"], ["eval/rewards/format/mean"]]
    parallel, comparer, intervals = panels_of(workspace, "Sweep outcome")
    assert isinstance(comparer, wr.RunComparer)
    assert isinstance(intervals, wr.WeavePanelSummaryTable) and intervals.table_name == "sweep/intervals"
    assert [c.metric for c in parallel.columns] == [
        wr.Config(GROUP_SIZE),
        wr.Config(LR),
        wr.SummaryMetric("summary/final_reward"),
        wr.SummaryMetric("eval/reward"),
    ]
    table = workspace.runset_settings.pinned_columns
    assert table[:3] == ["run:displayName", "config:configuration.value", "config:seed.value"]
    assert {"config:grpo_exp.value.grpo.num_generations", "config:grpo_exp.value.optimizer.lr"} <= set(table)
    assert {"summary:summary/final_reward", "summary:eval/reward"} <= set(table)
    assert workspace.runset_settings.filters == f"Metric(\"Group\") == '{GROUP}'"


def test_without_held_out_set_there_is_no_eval_panel(tmp_path):
    workspace = build_workspace(read_sweep(make_sweep(tmp_path, eval_rows=False)))
    assert "Held-out evaluation" not in [s.name for s in workspace.sections]
    assert all("eval/reward" not in p.y for p in panels_of(workspace, "By lr (optimizer.lr)"))
    parallel, *_ = panels_of(workspace, "Sweep outcome")
    assert len(parallel.columns) == 3


def test_the_final_eval_reward_of_summary_json_feeds_the_outcome(tmp_path):
    folder = make_sweep(tmp_path)
    summary = folder / "0" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "final_eval_reward": 0.3}))
    parallel, *_ = panels_of(build_workspace(read_sweep(folder)), "Sweep outcome")
    assert parallel.columns[-1].metric == wr.SummaryMetric("summary/final_eval_reward")


def test_specification_is_the_wire_form_with_groupings(tmp_path):
    workspace = build_workspace(read_sweep(make_sweep(tmp_path)), entity="team")
    spec = json.loads(json.dumps(specification(workspace, entity_known=True)))
    assert (spec["entity"], spec["project"], spec["display_name"]) == ("team", "grpo-exp", f"GRPO sweep {GROUP}")
    sections = spec["spec"]["section"]["panelBankConfig"]["sections"]
    grouped = [p["config"] for s in sections for p in s["panels"] if p["config"].get("groupBy")]
    assert {c["groupBy"] for c in grouped} == {"grpo_exp.value.grpo.num_generations", "grpo_exp.value.optimizer.lr"}


def test_command_offline_writes_the_spec_beside_the_report_and_says_how_to_save(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: no login
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    folder = make_sweep(tmp_path / "sweep")
    assert main([str(folder)]) == 0
    spec = json.loads((folder / "report" / "wandb_view.json").read_text())
    assert spec["entity"] is None and spec["url"] is None
    assert len(spec["spec"]["section"]["panelBankConfig"]["sections"]) == 5
    out = capsys.readouterr().out
    assert "no W&B login here" in out and f"python -m grpo_exp.dashboard {folder}" in out


def test_command_logged_in_saves_the_view_and_prints_its_url(tmp_path, monkeypatch, capsys):
    """The server's side stands in for W&B (none here): what reaches it is the view built for this sweep."""
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    saved = []

    def save(workspace):
        saved.append(workspace)
        return "https://wandb.ai/team/grpo-exp?nw=abc"

    monkeypatch.setattr(publish, "save", save)
    monkeypatch.setattr(publish, "default_entity", lambda: "team")
    folder = make_sweep(tmp_path / "sweep")
    assert main([str(folder), "--project", "other"]) == 0
    assert "W&B view: https://wandb.ai/team/grpo-exp?nw=abc" in capsys.readouterr().out
    (workspace,) = saved
    assert (workspace.entity, workspace.project, len(workspace.sections)) == ("team", "other", 5)
    spec = json.loads((folder / "report" / "wandb_view.json").read_text())
    assert (spec["entity"], spec["url"]) == ("team", "https://wandb.ai/team/grpo-exp?nw=abc")


def test_command_without_a_reachable_server_falls_back_to_the_spec(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.delenv("WANDB_MODE", raising=False)

    def unreachable():
        raise ConnectionError("connection refused")

    monkeypatch.setattr(publish, "default_entity", unreachable)
    folder = make_sweep(tmp_path / "sweep")
    assert main([str(folder)]) == 0
    assert "not saved on W&B (ConnectionError: connection refused)" in capsys.readouterr().out
    assert json.loads((folder / "report" / "wandb_view.json").read_text())["url"] is None


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p / "missing", "no sweep folder at"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "holds no jobs"),
        (lambda p: make_sweep(p / "s", wandb=False), "no W&B group in"),
    ],
)
def test_bad_folders_exit_2_with_one_line(tmp_path, capsys, setup, message):
    assert main([str(setup(tmp_path)), "--offline"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_missing_library_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb_workspaces.workspaces", None)  # what an absent package raises
    assert main([str(make_sweep(tmp_path)), "--offline"]) == 2
    assert "pip install -e '.[dashboard]'" in capsys.readouterr().err


@pytest.mark.parametrize(("mode", "written"), [("off", False), ("spec", True)])
def test_multirun_end_writes_the_spec_only_when_asked(tmp_path, mode, written):
    folder = make_sweep(tmp_path / "sweep")
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(folder)}}})
    SweepDashboard(mode=mode).on_multirun_end(config)
    assert (folder / "report" / "wandb_view.json").is_file() == written


def test_an_unknown_callback_mode_is_said_when_the_sweep_starts_and_makes_no_view(tmp_path, caplog):
    folder = make_sweep(tmp_path / "sweep")
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(folder)}}})
    callback = SweepDashboard(mode="yes")
    callback.on_multirun_start(config)
    callback.on_multirun_end(config)
    assert "sweep_dashboard.mode=yes is not one of off, spec, save" in caplog.text
    assert not (folder / "report").exists()


@pytest.mark.slow
def test_a_real_sweep_writes_its_view_when_the_multirun_ends(tmp_path):
    """Two 1-step jobs, W&B offline: the callback reads the group the runs really got."""
    sweep = tmp_path / "sweep"
    command = [
        sys.executable,
        "run.py",
        "-m",
        f"hydra.sweep.dir={sweep}",
        "logger.mode=offline",
        "grpo.num_generations=4,6",
        "grpo.max_steps=1",
        "save_model=false",
        "hydra.callbacks.sweep_dashboard.mode=spec",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    spec = json.loads((sweep / "report" / "wandb_view.json").read_text())
    group = json.loads((sweep / "0" / "run_info.json").read_text())["wandb"]["group"]
    assert spec["display_name"] == f"GRPO sweep {group}"
    sections = [s["name"] for s in spec["spec"]["section"]["panelBankConfig"]["sections"]]
    # the default job holds out a tenth of its prompts, so the view has their section too
    expected = ["By num_generations (grpo.num_generations)", "Reward parts", "Held-out evaluation", "Sweep outcome"]
    assert sections == expected
