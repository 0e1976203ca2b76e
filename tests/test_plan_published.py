"""The memory plan against GPU runs others published (benchmarks/plan.md, "Published runs"), and the
parts of the plan those runs exercise: the verdict's three values, bf16 master weights, the QLoRA
adapter and base as TRL trains them, fused vs foreach AdamW, the launch's runtime, vLLM's sleep mode
and CUDA graphs, the CPU's libraries and prompts as long as the data's.

Planned from this CPU machine (``--gpu-memory``): the shapes ship in grpo_exp/data/architectures/;
the first plan of a shape measures one of its layers (some seconds), later ones read the cache.
"""

from __future__ import annotations

import json

import pytest
import yaml

from grpo_exp.memory import estimate
from grpo_exp.memory.estimate import GIB, plan_architecture
from grpo_exp.memory.target import Target
from grpo_exp.plan.__main__ import main
from tests.conftest import ROOT

# The published runs' settings (benchmarks/published_runs.yaml, which says where each comes from):
# TRL's QLoRA notebook on a Colab T4, and trl issue 2972's full fine-tune on 3 H20s.
_PUBLISHED = yaml.safe_load((ROOT / "benchmarks" / "published_runs.yaml").read_text(encoding="utf-8"))
NOTEBOOK_T4 = _PUBLISHED["settings"]["trl_notebook_t4"]
ISSUE_2972 = _PUBLISHED["settings"]["trl_issue_2972"]
_MEASURED = next(r for r in _PUBLISHED["runs"] if r["published"] == "max_memory_reserved")
NOTEBOOK_RESERVED = _MEASURED["published_gib"] * GIB  # the notebook's max_memory_reserved() after 500 steps
RUNTIME = "runtime"


def _plan(capsys, *argv: str) -> dict:
    assert main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _outside_pytorch(plan: dict) -> int:
    """What torch.cuda.max_memory_reserved doesn't see: the CUDA context (and NCCL's buffers)."""
    return sum(v for k, v in plan["items"].items() if k.startswith(RUNTIME))


def test_the_trl_notebooks_qwen2_7b_qlora_run_on_a_t4(capsys):
    plan = _plan(capsys, *NOTEBOOK_T4, "model.name_or_path=Qwen/Qwen2-7B-Instruct")
    reserved = plan["peak_bytes"] - _outside_pytorch(plan)  # what the notebook measured
    assert 0.85 <= reserved / NOTEBOOK_RESERVED <= 1.15
    assert 0.85 <= plan["peak_bytes"] / NOTEBOOK_RESERVED <= 1.15
    assert plan["verdict"] == "fits" and plan["fits"] is True
    # an fp16 GPU: the adapter trains in fp32 (the grad scaler can't unscale bf16 gradients)
    assert plan["inputs"]["adapter_dtype"] == "float32"


def test_qwen3_14b_with_the_notebooks_settings_does_not_fit_a_t4(capsys):
    """The notebook lists Qwen3-14B as out of memory with these settings."""
    plan = _plan(capsys, *NOTEBOOK_T4, "model.name_or_path=Qwen/Qwen3-14B")
    assert plan["verdict"] != "fits" and plan["fits"] is False


def test_trl_issue_2972_runs_out_of_memory_in_the_foreach_adamw_step(capsys):
    plan = _plan(capsys, *ISSUE_2972)
    assert plan["verdict"] == "does not fit"
    assert plan["peak_phase"] == "optimizer step"
    step = plan["phases"]["optimizer step"]["items"]
    assert "optimizer step temporaries (foreach)" in step
    assert step["runtime (CUDA context, NCCL)"] == estimate.NCCL_RUNTIME
    # bf16 master weights: weights, gradients and both Adam states at 2 bytes a parameter
    parameters = plan["architecture"]["parameters"]
    assert step["weights"] == step["gradients"] == parameters * 2
    assert step["optimizer states"] == parameters * 4
    # what was allocated when the temporary was asked for: the published 92.4 GiB, within 10 %
    before = sum(v for k, v in step.items() if k.startswith(("weights", "optimizer states", "reference", "DDP", "gr")))
    assert before == pytest.approx(92.4 * GIB, rel=0.10)
    fused = _plan(capsys, *ISSUE_2972, "optimizer.name=adamw_torch_fused")
    assert not any("temporaries" in k for k in fused["phases"]["optimizer step"]["items"])
    assert fused["peak_bytes"] < plan["peak_bytes"] and fused["verdict"] != "fits"


def test_bf16_master_weights_halve_what_full_fine_tuning_keeps(capsys):
    job = ["--gpu-memory", "80GiB", "model=qwen2_5_1_5b_instruct"]
    fp32, bf16 = (_plan(capsys, *job, f"model.master_weights={w}") for w in ("float32", "bfloat16"))
    for item in ("weights", "optimizer states", "gradients"):
        assert bf16["phases"]["optimizer step"]["items"][item] * 2 == fp32["phases"]["optimizer step"]["items"][item]
    assert bf16["target"]["weight_dtype"] == "bfloat16" and fp32["target"]["weight_dtype"] == "float32"


def test_the_qlora_adapter_and_base_as_trl_trains_them(capsys):
    bf16 = _plan(capsys, "--gpu-memory", "24GiB", "model=mistral_7b_instruct", "+recipe=low_memory")
    fp16 = _plan(capsys, "--gpu-memory", "24GiB", "model=mistral_7b_instruct", "+recipe=low_memory", "grpo.fp16=true")
    assert bf16["inputs"]["adapter_dtype"] == "bfloat16"  # TRL casts a quantized model's adapter to bf16
    assert fp16["inputs"]["adapter_dtype"] == "float32"  # cast back on a GPU without native bf16
    adapter = {k: v for k, v in bf16["items"].items() if k.startswith("LoRA adapter")}
    assert list(adapter) == ["LoRA adapter (bfloat16)"]
    assert adapter["LoRA adapter (bfloat16)"] == bf16["trainable_parameters"] * 2
    # the unquantized embeddings and head in the 16-bit compute dtype, not upcast to fp32
    embeddings = 2 * 32768 * 4096
    assert bf16["items"]["weights (frozen base)"] < 0.53 * 7_248_023_552 + 2.1 * embeddings
    assert bf16["inputs"]["activations"]["mode"] == "16-bit"


@pytest.mark.parametrize(("share", "verdict"), [(0.80, "fits"), (0.95, "tight"), (1.05, "does not fit")])
def test_the_verdicts_line(share, verdict, settings):
    cfg = settings("model=qwen2_5_0_5b_instruct", "grpo.per_device_train_batch_size=8")
    from grpo_exp.memory.architectures import architecture

    arch = architecture(cfg.model)
    probe = plan_architecture(cfg, arch, Target(True, 80 * GIB, "test", 1, "none", "bf16", "float32", "bfloat16"))
    memory = int(probe.peak_bytes / share)
    plan = plan_architecture(cfg, arch, Target(True, memory, "test", 1, "none", "bf16", "float32", "bfloat16"))
    assert plan.verdict == verdict
    assert plan.fits is (verdict == "fits")
    assert plan.to_dict()["verdict"] == verdict


def test_vllm_sleep_mode_frees_its_share_while_training(capsys):
    job = ["--gpu-memory", "80GiB", "model=qwen2_5_0_5b_instruct", "grpo.use_vllm=true", "grpo.vllm_mode=colocate"]
    awake = _plan(capsys, *job)
    asleep = _plan(capsys, *job, "grpo.vllm_enable_sleep_mode=true")
    share = "vLLM (colocate share)"
    assert share in awake["phases"]["loss/backward"]["items"]
    assert share not in asleep["phases"]["loss/backward"]["items"]
    assert share in asleep["phases"]["generation"]["items"]
    for phase in asleep["phases"].values():  # its CUDA graphs lie outside the share, and stay
        assert phase["items"]["vLLM CUDA graphs"] == estimate.VLLM_CUDA_GRAPHS


def test_a_launch_of_several_processes_holds_nccl_outside_pytorch(capsys):
    alone = _plan(capsys, "--gpu-memory", "80GiB", "model=qwen2_5_0_5b_instruct")
    ddp = _plan(capsys, "--gpu-memory", "80GiB", "--launcher", "ddp", "--processes", "2", "model=qwen2_5_0_5b_instruct")
    assert _outside_pytorch(alone) == estimate.CUDA_RUNTIME
    assert _outside_pytorch(ddp) == estimate.NCCL_RUNTIME > estimate.CUDA_RUNTIME
    assert any(k.startswith("allocator slack") for k in alone["items"])


def test_the_cpu_plan_counts_the_libraries(capsys):
    plan = _plan(capsys)
    assert plan["target"]["gpu"] is False
    assert plan["items"]["libraries (torch, transformers, TRL)"] == estimate.CPU_LIBRARIES
    assert not any(k.startswith("allocator slack") for k in plan["items"])  # the CPU's malloc returns big blocks


def test_prompts_are_as_long_as_the_datas_longest(capsys, settings):
    """The default job's shipped prompts, counted with its tokenizer and chat template as the job
    loads them (grpo_exp.dataset, long prompts dropped), against the plan's padded length."""
    from grpo_exp.dataset import load_prompts, prompt_tokens
    from grpo_exp.models import load_tokenizer, model_path

    cfg = settings("dataset.max_prompt_tokens=40")  # below the longest shipped prompt: the filter drops some
    tokenizer = load_tokenizer(cfg.model, model_path(cfg.model))
    longest = max(prompt_tokens(p, tokenizer) for p in load_prompts(cfg.dataset, tokenizer)["prompt"])
    plan = _plan(capsys, "dataset.max_prompt_tokens=40")
    assert plan["inputs"]["prompt_tokens"] == longest <= 40
    assert "longest prompt" in plan["inputs"]["prompt_source"]
    capped = _plan(capsys, "dataset.source=hub", "dataset.name=some/dataset", "dataset.max_prompt_tokens=300")
    assert capped["inputs"]["prompt_tokens"] == 300 and "max_prompt_tokens" in capped["inputs"]["prompt_source"]
