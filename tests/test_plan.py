"""The memory plan (python -m grpo_exp.plan): parameter counts, LoRA counts, sharding, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from grpo_exp import hardware
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.errors import UserError
from grpo_exp.memory import architectures
from grpo_exp.memory.architectures import from_config, lora_parameters, meta_parameters, shipped_configs
from grpo_exp.memory.estimate import GIB, plan_architecture
from grpo_exp.memory.target import Target
from grpo_exp.plan.__main__ import main, parse_size, parser, run

ROOT = Path(__file__).resolve().parents[1]
SMALL_QWEN = {
    "model_type": "qwen2",
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
SMALL_LLAMA = {**SMALL_QWEN, "model_type": "llama", "tie_word_embeddings": False, "attention_bias": True}
CLI_JOBS = [
    [],
    ["model=qwen2_5_0_5b_instruct"],
    ["model=qwen2_5_1_5b_instruct"],
    ["model=mistral_7b_instruct", "+recipe=low_memory"],
]


def _plan(capsys, *argv: str) -> dict:
    assert main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def _small_model(config: dict):
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in config.items() if k != "model_type"}
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(config["model_type"], **fields))


@pytest.mark.parametrize("config", [SMALL_QWEN, SMALL_LLAMA], ids=["qwen2", "llama-untied-bias"])
def test_counts_match_a_real_model(config):
    model = _small_model(config)
    assert from_config(config).parameters == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_shipped_counts_match_the_meta_device(name):
    config = json.loads(shipped_configs()[name].read_text())
    counted, linears = meta_parameters(config)
    arch = from_config(config)
    assert arch.parameters == counted
    assert {(x.name, x.inputs, x.outputs, x.bias, x.count) for x in arch.linears} == {
        (x.name, x.inputs, x.outputs, x.bias, x.count) for x in linears
    }


def test_published_sizes():
    """The shipped configs give the published models' sizes (their model cards' counts)."""
    sizes = {name: from_config(json.loads(path.read_text())).parameters for name, path in shipped_configs().items()}
    assert sizes["Qwen/Qwen2.5-0.5B-Instruct"] == 494_032_768
    assert sizes["Qwen/Qwen2.5-1.5B-Instruct"] == 1_543_714_304
    assert sizes["mistralai/Mistral-7B-Instruct-v0.3"] == 7_248_023_552
    assert sizes["codellama/CodeLlama-7b-Instruct-hf"] == 6_738_546_688
    assert sizes["Qwen/Qwen2-7B-Instruct"] == sizes["Qwen/Qwen2.5-7B-Instruct"] == 7_615_616_512
    assert sizes["Qwen/Qwen3-0.6B"] == 596_049_920  # Qwen3: q/k norms, queries wider than the hidden size
    assert sizes["Qwen/Qwen3-8B"] == 8_190_735_360
    assert sizes["Qwen/Qwen3-14B"] == 14_768_307_200
    assert sizes["meta-llama/Llama-3.1-8B-Instruct"] == 8_030_261_248
    assert sizes["meta-llama/Llama-3.2-3B-Instruct"] == 3_212_749_824


@pytest.mark.parametrize(
    ("config", "targets"),
    [
        (SMALL_QWEN, "all-linear"),
        (SMALL_LLAMA, "all-linear"),  # an untied lm_head, left out
        (SMALL_QWEN, ["q_proj", "v_proj"]),
        (SMALL_LLAMA, r".*\.(q_proj|down_proj)"),
        (SMALL_QWEN, r".*layers\.0\..*_proj"),  # the first layer only
    ],
)
def test_lora_counts_match_peft(config, targets):
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(_small_model(config), LoraConfig(r=8, target_modules=targets, task_type="CAUSAL_LM"))
    trainable, _ = peft_model.get_nb_trainable_parameters()  # the numbers print_trainable_parameters prints
    assert lora_parameters(from_config(config), 8, targets) == trainable


def test_the_tiny_model_comes_from_its_recipe_unbuilt(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path))  # no built model there
    from grpo_exp.config.schema import ModelSettings

    recipe = TinyRecipe()
    config, source = architectures.model_config(ModelSettings(source="tiny", name_or_path="tiny", recipe=recipe))
    assert "recipe" in source
    assert config["vocab_size"] == recipe.vocab_size and config["hidden_size"] == recipe.hidden_size


def _settings(*overrides: str):
    from grpo_exp.plan.jobs import composed_jobs

    [(_, settings)] = list(composed_jobs(list(overrides), multirun=False))
    return settings


def test_zero3_divides_by_the_process_count():
    from grpo_exp.config import batch

    settings = _settings("model=qwen2_5_0_5b_instruct", "grpo.per_device_train_batch_size=12")
    batch.size_batch(settings, 4)
    arch = architectures.architecture(settings.model)
    one = Target(True, 80 * GIB, "test", 4, "ddp", "bf16", "float32", "bfloat16")
    four = Target(True, 80 * GIB, "test", 4, "zero3", "bf16", "float32", "bfloat16")
    ddp, zero3 = (
        {p.name: p for p in plan_architecture(settings, arch, t).phases}["optimizer step"].items for t in (one, four)
    )
    assert zero3["optimizer states"] * 4 == pytest.approx(arch.parameters * 2 * 4, abs=8)
    assert zero3["weights"] == arch.parameters * 2 // 4  # DeepSpeed keeps 16-bit weights, a quarter each
    assert ddp["weights"] == arch.parameters * 4
    assert zero3["gradients"] == arch.parameters * 2 // 4


def test_cli_processes_and_launcher(capsys):
    zero3 = _plan(
        capsys, "--gpu-memory", "80GiB", "--launcher", "zero3", "--processes", "2", "model=qwen2_5_0_5b_instruct"
    )
    alone = _plan(capsys, "--gpu-memory", "80GiB", "model=qwen2_5_0_5b_instruct")
    assert zero3["target"]["sharding"] == "zero3" and zero3["target"]["processes"] == 2
    assert zero3["phases"]["optimizer step"]["items"]["optimizer states"] * 2 == pytest.approx(
        alone["phases"]["optimizer step"]["items"]["optimizer states"], rel=0.01
    )


def test_a_sweep_plans_each_job(capsys):
    result = _plan(capsys, "-m", "model=qwen2_5_0_5b_instruct", "grpo.num_generations=4,8")
    jobs = result["jobs"]
    assert [job["overrides"][-1] for job in jobs] == ["grpo.num_generations=4", "grpo.num_generations=8"]
    kv = [job["phases"]["generation"]["items"]["KV cache"] for job in jobs]
    assert kv[1] == 2 * kv[0]  # twice the completions per step, generated at once
    assert result["peak_bytes"] == max(job["peak_bytes"] for job in jobs)


def test_a_sweeps_verdict_is_its_worst_jobs(capsys):
    result = _plan(capsys, "-m", "--gpu-memory", "24GiB", "model=qwen2_5_0_5b_instruct,qwen2_5_1_5b_instruct")
    assert [job["verdict"] for job in result["jobs"]] == ["fits", "does not fit"]
    assert result["verdict"] == "does not fit" and result["fits"] is False


@pytest.mark.parametrize("job", CLI_JOBS, ids=lambda j: " ".join(j) or "default")
def test_cli_prints_a_plan_offline_without_torch(job, capsys):
    """Offline, and once a shape's layer is measured and its prompts counted (both cached), without
    importing torch (which alone takes ~3 s here): the command stays under 3 s."""
    assert main(job) == 0  # the first plan of a shape measures it (torch) and caches the figures
    assert "peak:" in capsys.readouterr().out
    code = (
        "import sys; from grpo_exp.plan.__main__ import main; code = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules and 'trl' not in sys.modules, 'torch imported'; sys.exit(code)"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", code, *job], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "peak:" in run.stdout and "per device" in run.stdout
    as_json = subprocess.run(
        [sys.executable, "-m", "grpo_exp.plan", "--json", *job], cwd=ROOT, env=env, capture_output=True, text=True
    )
    plan = json.loads(as_json.stdout)
    assert {"peak_bytes", "fits", "items"} <= set(plan)
    assert plan["peak_bytes"] == max(phase["total_bytes"] for phase in plan["phases"].values())
    assert sum(plan["items"].values()) == plan["peak_bytes"]


def test_planned_for_a_gpu_on_a_cpu_machine(capsys):
    plan = _plan(capsys, "--gpu-memory", "24GiB", "model=qwen2_5_0_5b_instruct")
    assert plan["target"]["gpu"] and plan["target"]["precision"] == "bf16"
    assert plan["target"]["weight_dtype"] == "float32"  # fp32 master weights under bf16 autocast
    assert plan["memory_bytes"] == 24 * GIB and plan["fits"] is True
    qlora = _plan(capsys, "model=mistral_7b_instruct", "+recipe=low_memory")  # 4-bit: a GPU job, size unknown
    assert qlora["target"]["gpu"] and qlora["fits"] is None
    assert qlora["items"]["weights (frozen base)"] < 5 * GIB  # 4-bit, not 14 GB of bf16


def test_an_over_budget_job_lists_remedies_each_lower(capsys):
    plan = _plan(capsys, "--gpu-memory", "8GiB", "model=mistral_7b_instruct", "model.lora.enabled=false")
    assert plan["fits"] is False
    names = [r["name"] for r in plan["remedies"]]
    assert names[:2] == ["LoRA", "4-bit QLoRA"] and "DeepSpeed ZeRO-3" in names
    assert all(r["peak_bytes"] < plan["peak_bytes"] for r in plan["remedies"])
    assert main(["--gpu-memory", "8GiB", "model=mistral_7b_instruct", "model.lora.enabled=false"]) == 0
    assert "does not fit" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--gpu-memory", "banana"], "--gpu-memory banana"),
        (["model=no_such_preset"], "no_such_preset"),
        (["--launcher", "nope"], "--launcher nope"),
        (["-m", "--cores", "0"], "--cores 0: give 1 or more"),
        (["-m", "--gpus", "0"], "--gpus 0: give 1 or more"),
        (["-m", "--host-memory", "lots"], "--host-memory lots: give a size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, says):
    run = subprocess.run([sys.executable, "-m", "grpo_exp.plan", *argv], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2
    assert says in run.stderr and len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


SWEEP_ON_AN_H200 = ["-m", "seed=0,1", "+launcher=parallel", "--gpu-memory", "141GB", "--gpus", "1", "--cores", "16"]


def test_a_tiny_sweep_on_a_planned_h200_runs_as_many_jobs_as_cores(capsys):
    """Issue 59: GPU memory alone allowed 156 of the default's jobs at a time on one H200 with 16 cores."""
    assert main(SWEEP_ON_AN_H200) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("launch (+launcher=parallel): 2 jobs, 16 at a time on GPU 0: the cores (16 cores")
    planned = _plan(capsys, *SWEEP_ON_AN_H200)
    launch, by_memory = planned["launch"], int(0.9 * 141e9 // planned["peak_bytes"])
    assert (launch["at_once"], launch["bound"], launch["gpus"]) == (16, "the cores", {"0": by_memory})
    assert by_memory > 100  # GPU memory alone would start them all
    assert launch["host_memory_counted"] is False  # a planned machine's memory is not this one's
    code = (
        "import sys; from grpo_exp.plan.__main__ import main; code = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(code)"
    )
    run = subprocess.run([sys.executable, "-c", code, *SWEEP_ON_AN_H200], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and "16 at a time on GPU 0: the cores" in run.stdout, run.stderr


def test_a_planned_sweep_is_bound_by_the_host_memory_given(capsys):
    launch = _plan(capsys, *SWEEP_ON_AN_H200, "--gpus", "2", "--host-memory", "8GiB")["launch"]
    assert launch["bound"] == "host memory" and launch["host_memory_counted"] is True
    assert launch["at_once"] == 3 and len(launch["gpus"]) == 2  # 2.2 GiB a GPU job in 7.2 GiB (8 less 10 %)
    assert launch["why"].startswith("2.2 GiB a job in 8.0 GiB available, 10% kept free")


def test_a_sweep_under_another_launcher_is_not_packed(capsys):
    assert _plan(capsys, "-m", "seed=0,1")["launch"] == {"jobs": 2, "parallel_launcher": False}


@pytest.mark.skipif(hardware.driver_present(), reason="this machine's GPUs give the size")
def test_planned_gpus_need_their_size():
    with pytest.raises(UserError, match="--gpus 2: give each GPU's memory too"):
        run(parser().parse_known_args(["-m", "seed=0,1", "+launcher=parallel", "--gpus", "2"])[0], ["seed=0,1"])


def test_sizes():
    assert parse_size("24GiB") == 24 * GIB
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("16000MiB") == 16000 << 20


def test_probe_flag_runs_the_probe(capsys, monkeypatch):
    seen = []
    fake = types.ModuleType("grpo_exp.plan.probe")
    fake.probe = lambda spec: seen.append(spec) or {"parts": {"generation": {"verdict": "ok"}}}
    fake.format_probe = lambda result: f"probe: {result['parts']['generation']['verdict']}"
    monkeypatch.setitem(sys.modules, "grpo_exp.plan.probe", fake)
    assert main(["--probe"]) == 0
    assert "probe: ok" in capsys.readouterr().out
    assert _plan(capsys, "--probe")["probe"]["parts"]["generation"]["verdict"] == "ok"
    assert len(seen) == 2


def test_the_job_writes_its_plan_and_a_failure_is_a_warning(tmp_path, monkeypatch, caplog):
    from hydra import compose, initialize_config_dir

    from grpo_exp.config.schema import CONF_DIR, register_schema
    from grpo_exp.folder import PLAN_FILE, JobFolder
    from grpo_exp.job.preflight import job_spec
    from grpo_exp.memory import estimate as memory
    from grpo_exp.training import records

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        spec = job_spec(compose(config_name="config", overrides=["logger=none"]))
    plan = records.memory_plan(spec)
    assert plan is not None and plan["peak_bytes"] > 0 and plan["target"]["gpu"] is False
    JobFolder(tmp_path).write_plan(plan)
    assert json.loads((tmp_path / PLAN_FILE).read_text())["peak_bytes"] == plan["peak_bytes"]

    def broken(*args, **kwargs):
        raise RuntimeError("no shape")

    monkeypatch.setattr(memory, "memory_plan", broken)
    assert records.memory_plan(spec) is None
    assert "no memory plan" in caplog.text


def test_the_longest_prompt_is_counted_once_then_read_from_its_cache(settings, monkeypatch, tmp_path):
    """Counted as grpo_exp.dataset filters prompts, on a cold cache; a second plan reads the count back."""
    from grpo_exp.dataset import format_prompt, prompt_tokens
    from grpo_exp.memory import prompts
    from grpo_exp.models import load_tokenizer, model_path
    from grpo_exp.shipped import read_records, shipped_file

    monkeypatch.setattr(prompts, "cache_root", lambda: tmp_path)
    cfg = settings("dataset.max_prompt_tokens=64")
    found = prompts.longest_prompt(cfg.dataset, cfg.model)

    tokenizer = load_tokenizer(cfg.model, model_path(cfg.model))
    records = read_records(shipped_file(f"{cfg.dataset.name}.jsonl"))
    counts = [prompt_tokens(format_prompt(r[cfg.dataset.prompt_field], cfg.dataset), tokenizer) for r in records]
    assert found.tokens == max(n for n in counts if n <= 64) and found.source.startswith("longest prompt of ")
    assert len(list((tmp_path / prompts.CACHE_DIR).glob("*.json"))) == 1

    too_short = settings("dataset.max_prompt_tokens=1").dataset
    assert prompts.longest_prompt(too_short, cfg.model).source.startswith("dataset.max_prompt_tokens=1 (no prompt")

    monkeypatch.setattr(prompts, "_count", lambda *args: pytest.fail("counted again"))
    assert prompts.longest_prompt(cfg.dataset, cfg.model) == found
