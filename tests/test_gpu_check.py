"""benchmarks/gpu_check.py, the parts that run without a GPU: its refusal, its plan (--dry-run, --budget-s),
its offline tokenizer, the precision control, how it reads a sweep and the plain-TRL pair into rows, the
plain-TRL side's config against run.py's, and a --smoke run that goes through run.py on the CPU (precision
and LoRA jobs). No GPU result is made up here: the rows read below are parsing checks."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib import metadata

import pytest

from grpo_exp import hardware
from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
SMOKE_TIMEOUT_S = 300  # a hang guard for the --smoke run (model build and two run.py jobs: ~40-60 s on 2 cores)


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(hardware.cuda_available(), reason="this machine has a GPU: the check would run")
def test_without_a_gpu_it_names_the_versions_then_refuses_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    found, refusal = result.stderr.strip().splitlines()
    python = ".".join(map(str, sys.version_info[:3]))
    assert found.startswith(f"python {python}, torch {metadata.version('torch').split('+')[0]}")
    assert f"trl {metadata.version('trl')}," in found and f"accelerate {metadata.version('accelerate')}," in found
    assert refusal == "error: no CUDA GPU visible: this check needs one (on a CPU, --smoke checks the script itself)"
    assert not any(tmp_path.iterdir())  # nothing written


def test_its_report_goes_outside_the_repository_and_never_over_an_earlier_checks_jobs(tmp_path):
    script = load_script()
    assert not script.OUT_PARENT.resolve().is_relative_to(ROOT)
    assert script._occupied(tmp_path) is None
    (tmp_path / "jobs" / "precision").mkdir(parents=True)
    assert script._occupied(tmp_path) == f"{tmp_path / 'jobs'} holds an earlier check's job folders: give another --out"


def test_the_made_up_tokenizer_has_the_asked_size_and_round_trips_text():
    from benchmarks import random_qwen as script

    size = 256 + 256**2 + 8  # the bytes, every pair of them, a few triples
    tokenizer = script.build_tokenizer(size)
    assert len(tokenizer) == size + len(script.SPECIAL_TOKENS)
    text = "Question 3: explain step 3 of the plan. 您好"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text and len(ids) < len(text.encode())  # the merges apply
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == size + 2 and tokenizer.eos_token == "<|im_end|>"


def test_the_bf16_control_rounds_away_small_steps_on_qwen_sized_weights_only():
    import torch

    script = load_script()
    torch.manual_seed(0)
    qwen_like = torch.randn(256, 256) * 0.02  # Qwen's initialisation: most |w| far above lr / bf16 epsilon
    figures = script.bf16_control(qwen_like)
    assert figures["bf16_control_unchanged_share"] > 0.6 and figures["fp32_control_unchanged_share"] == 0.0
    tiny = torch.randn(256, 256) * 1e-4  # a step of lr is many bf16 ulps here: the control must see it move
    assert script.bf16_control(tiny)["bf16_control_unchanged_share"] < 0.05


def test_the_table_shows_skipped_cases_and_a_missing_plan():
    from benchmarks import gpu_check_jobs as jobs
    from benchmarks import gpu_check_report as script

    report = {
        "date": "2026-01-01T00:00:00+00:00",
        "smoke": False,
        "gpu": "NVIDIA H200",
        "versions": {
            **{name: None for name in script.VERSIONS_OF},
            **{"python": "3.12.3", "torch": "2.13", "cuda": "13.0", "rocm": None, "trl": "1.16", "transformers": "5"},
        },
        "wall_s": 1.0,
        "model_build_s": 0.5,
        "cases": [
            jobs.skipped("vllm", "vLLM is not installed"),
            {
                "case": "lora",
                "status": "ok",
                "wall_s": 3.0,
                "layout": {"device": "cuda", "precision": "bf16", "weight_dtype": "bfloat16", "processes": 1},
                "figures": {"lora_b_nonzero_share": 1.0},
                "memory": {
                    "measure": "torch.cuda.max_memory_allocated",
                    "peak_bytes": 2**30,
                    "plan": "plan.json missing",
                },
            },
        ],
    }
    table = script.markdown(report)
    assert "- python 3.12.3, torch 2.13 (CUDA 13.0), transformers 5, trl 1.16, peft not installed," in table
    assert "| vllm | skipped | - | - | - | - | - | - | - | - | vLLM is not installed |" in table
    assert (
        "| lora | ok | - | 3.0 | cuda bf16, bfloat16 weights | lora_B nonzero 1.0 | 1.00 | - | - | plan.json missing |"
        in table
    )


@pytest.mark.slow  # two run.py jobs (about 25 s): the benchmark's plumbing, not the project's behaviour
def test_smoke_runs_precision_and_lora_through_run_py(tmp_path):
    shipped = ROOT / "benchmarks" / "gpu_check.md"
    before = shipped.read_bytes() if shipped.exists() else None
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=SMOKE_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    rows = {row["case"]: row for row in report["cases"]}
    assert report["smoke"] and list(rows) == ["precision", "lora"]

    precision = rows["precision"]
    assert precision["status"] == "ok", precision
    assert precision["layout"]["device"] == "cpu" and precision["layout"]["weight_dtype"] == "float32"
    assert precision["steps"] == 1 and precision["timed_generations"] == 1  # run.py's trainer, seen by the shim
    figures = precision["figures"]
    assert figures["trained_dtype"] == "float32" and figures["tensors_compared"] > 0
    assert figures["changed_share"] > 0.5  # fp32 master weights keep lr-sized updates
    assert figures["bf16_control_unchanged_share"] > 0.5  # pure bf16 rounds most of them away
    assert figures["changed_share_if_stored_bf16"] < figures["changed_share"]
    assert precision["memory"]["peak_bytes"] > 0

    lora = rows["lora"]
    assert lora["status"] == "ok", lora
    assert lora["figures"]["lora_b_nonzero_share"] > 0.5

    for case in ("precision", "lora"):  # each job's folder stays, with its logs
        assert {"run.log", "console.log", "metrics.jsonl"} <= {p.name for p in (tmp_path / "jobs" / case).iterdir()}

    table = (tmp_path / "gpu_check.md").read_text()
    assert "| precision | ok |" in table and "| lora | ok |" in table and table in result.stdout
    assert (shipped.read_bytes() if shipped.exists() else None) == before  # the shipped table is untouched


def test_the_plan_skips_what_no_longer_fits_the_budget_and_needs_no_gpu(tmp_path):
    script = load_script()
    cases = list(script.CASES)
    assert cases[:3] == ["default_run", "sweep", "vs_trl"]  # what users run comes first
    first_two = script.MODEL_BUILD_ESTIMATE_S + sum(script.CASE_ESTIMATE_S[c] for c in cases[:2])
    assert [fits for _, _, fits in script.plan(cases, first_two)] == [True, True] + [False] * (len(cases) - 2)
    default = script.plan(cases, script.TOTAL_BUDGET_S)
    assert script.TOTAL_BUDGET_S < 8 * 60 and all(fits for case, _, fits in default if case in cases[:3])

    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--budget-s", str(first_two), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    planned = result.stdout.strip().splitlines()[1:]
    assert [line.split()[0] for line in planned] == cases
    assert [("runs" in line) for line in planned] == [True, True] + [False] * (len(cases) - 2)
    assert "python run.py -m +launcher=parallel seed=1,2,3,4 logger=none" in planned[1]
    assert not (tmp_path / "out").exists()  # a plan writes nothing


def test_a_sweeps_row_reads_the_launch_line_and_counts_the_completed_jobs(tmp_path):
    """The parser only: a made-up sweep folder with one failed job of four."""
    from benchmarks import gpu_check_user_runs as script
    from benchmarks import harness

    for n, status in enumerate(["completed", "completed", "failed", "completed"]):
        (tmp_path / str(n)).mkdir()
        summary = {"status": status, "final_eval_reward": 0.5 + n / 10}
        (tmp_path / str(n) / "summary.json").write_text(json.dumps(summary))
    said = "[INFO] launching 4 jobs, 4 at a time on GPU 0: the cores, into /x\n"
    finished = harness.Finished(["python", "run.py", "-m"], 1, 42.0, said, "")
    row = script.sweep_row(finished, tmp_path)
    assert row["figures"]["jobs_completed"] == 3 and row["figures"]["jobs_at_a_time"] == 4
    assert row["figures"]["launch_line"].startswith("launching 4 jobs, 4 at a time on GPU 0: the cores")
    assert row["figures"]["held_out_after"] == [0.5, 0.6, 0.7, 0.8]
    assert row["status"] == "failed" and row["checks"] == {
        "the launch line names the jobs at a time": True,
        "4 of 4 jobs completed": False,
    }


def test_the_pair_with_plain_trl_compares_the_train_loop_and_the_whole_process():
    """The parser only: made-up trainer logs of both sides."""
    from benchmarks import gpu_check_report as report
    from benchmarks import gpu_check_user_runs as script
    from benchmarks import harness

    ours = {"case": "vs_trl_grpo_exp", "status": "ok", "wall_s": 61.7, "figures": {}, "checks": {}}
    our_logs = [{"step": 1, "reward": 0.1}, {"step": 5, "train_runtime": 32.17, "train_loss": 0.001377}]
    plain = harness.Finished(["python", "trl_random_qwen.py"], 0, 57.2, "", "")
    plain_logs = [{"step": 5, "reward": 0.1}, {"step": 5, "train_runtime": 32.17, "train_loss": 0.001377}]
    mine, theirs = script.vs_trl_rows(ours, our_logs, plain, plain_logs)
    assert mine["figures"]["loop_over_plain"] == 1.0 and mine["figures"]["process_over_plain"] == round(61.7 / 57.2, 3)
    assert theirs["figures"] == {"train_loop_s": 32.17, "train_loss": 0.001377, "process_s": 57.2}
    assert mine["checks"] == {"both train losses logged": True}
    table = report.markdown(
        {
            "date": "2026-12-04T00:00:00+00:00",
            "smoke": False,
            "gpu": "NVIDIA H200",
            "versions": {**{n: None for n in report.VERSIONS_OF}, "python": "3.12", "torch": "2.11", "cuda": "13.0"},
            "wall_s": 1.0,
            "model_build_s": 0.5,
            "cases": [{**mine, "layout": {"device": "cuda", "precision": "bf16", "weight_dtype": "float32"}}, theirs],
        }
    )
    assert "train loop s 32.17; process s 61.7; loop / plain TRL 1.0; process / plain TRL 1.079" in table
    assert "| vs_trl_plain | ok | - | 57.2 | - | train loop s 32.17; process s 57.2; train loss 0.001377 |" in table


def test_the_plain_trl_side_gets_the_config_run_py_composes(settings, monkeypatch):
    """vs_trl is fair only if trl_random_qwen.py trains what run.py trains: every GRPOConfig field run.py
    sets away from TRL's default is in the plain script, with the same value (an H200 layout, simulated)."""
    import dataclasses

    from trl import GRPOConfig

    from benchmarks import gpu_check_jobs as jobs
    from benchmarks import gpu_check_user_runs as script
    from benchmarks import trl_random_qwen as plain
    from grpo_exp import hardware
    from grpo_exp.spec import build_spec
    from grpo_exp.training import trainer, trl_fields
    from tests.machines import H200

    workload = script.VS_TRL_WORKLOAD
    monkeypatch.setattr(hardware, "machine", lambda *a, **k: H200)
    spec = build_spec(settings(*jobs.random_model_job("random", smoke=False), *script.vs_trl_overrides(workload)))
    handed = {}
    accepted = trl_fields.accepted
    monkeypatch.setattr(trl_fields, "accepted", lambda f, known: handed.update(accepted(f, known)) or handed)
    with pytest.raises(ValueError, match="bf16"):  # this CPU can't build a bf16 GPU config: the fields suffice
        trainer.grpo_config(spec.settings, spec.layout, ROOT, [1.0], report_to_wandb=False)
    cli = {
        "max_steps": workload.steps,
        "num_generations": workload.num_generations,
        "per_device_train_batch_size": workload.prompts_per_step * workload.num_generations,
        "max_completion_length": workload.max_completion_length,
    }
    theirs = {**plain.CONFIG, **plain.GPU, **cli}
    default = {f.name: f.default for f in dataclasses.fields(GRPOConfig) if f.init}
    ignored = {
        *("output_dir", "report_to", "disable_tqdm"),  # where it writes, what it shows
        *("reward_weights", "num_train_epochs", "ddp_find_unused_parameters"),  # one reward, max_steps, one process
        *("save_steps", "save_total_limit"),  # neither side saves (save_strategy "no" on both)
        *("eval_steps", "per_device_eval_batch_size", "num_generations_eval", "include_for_metrics"),  # no evaluation
    }
    differ = {
        name: (value, theirs.get(name, "TRL's default"))
        for name, value in handed.items()
        if name not in ignored and (name in theirs or value != default.get(name)) and theirs.get(name) != value
    }
    assert differ == {}, sorted(differ.items())
    assert plain.TARGET_CHARS == jobs.LENGTH_TARGET_CHARS
