"""benchmarks/gpu_check.py, the parts that run without a GPU: its refusal, its offline tokenizer, the
precision control, and a --smoke run that goes through run.py on the CPU (precision and LoRA jobs)."""

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
    script = load_script()
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
            script.skipped("vllm", "vLLM is not installed"),
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
    assert "| vllm | skipped | - | - | - | - | - | - | - | vLLM is not installed |" in table
    assert (
        "| lora | ok | 3.0 | cuda bf16, bfloat16 weights | lora_B nonzero 1.0 | 1.00 | - | - | plan.json missing |"
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
