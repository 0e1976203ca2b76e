"""The layout decision against simulated machines: device, precision policy, processes (config/layout.py).

Each row of the precision policy has a test here, on the GPU it is meant for (``tests/machines.py``
says what torch would report); what a real GPU does with it is benchmarks/gpu_check.py's part.
"""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace

import pytest

from grpo_exp import hardware
from grpo_exp.config.layout import Precision, check_hardware, decide
from grpo_exp.errors import UserError
from tests.machines import (
    A100,
    CPU_BUILD_WITH_DRIVER,
    CPU_ONLY,
    CUDA_BUILD_NO_GPU,
    H100_X4,
    H200,
    MI300X,
    P100,
    T4,
    V100_X2,
)

QWEN = "model=qwen2_5_0_5b_instruct"  # model.dtype: bfloat16, LoRA off: full fine-tuning
MISTRAL = "model=mistral_7b_instruct"  # model.dtype: bfloat16, LoRA on


@pytest.fixture(autouse=True)
def plain_run(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def test_full_fine_tuning_keeps_float32_weights_under_bf16_autocast(settings):
    """Finding 2: the Qwen presets (dtype bfloat16, LoRA off) trained in pure bf16."""
    layout = decide(settings(QWEN), A100)
    assert (layout.device, layout.precision, layout.weight_dtype) == ("cuda", Precision.bf16, "float32")
    assert layout.reference_dtype == "bfloat16"  # the reference model never trains: half the memory


def test_bf16_master_weights_are_asked_for_by_name(settings):
    """Issue 30: a full fine-tune in bf16 weights and Adam states (how a 7B fits an 80 GB card), with one warning."""
    layout = decide(settings(QWEN, "model.master_weights=bfloat16"), A100)
    assert (layout.weight_dtype, layout.precision) == ("bfloat16", Precision.bf16)
    assert any("updates smaller than half a bf16 step round away" in note for note in layout.notes)
    assert layout.describe().endswith("bf16 compute, bfloat16 weights")
    with pytest.raises(UserError, match=r"model.master_weights=bfloat16 but Tesla T4 .* emulates bf16"):
        decide(settings(QWEN, "model.master_weights=bfloat16"), T4)
    from grpo_exp.config.checks import check_model

    with pytest.raises(UserError, match=r"model.master_weights=bfloat16 is for full fine-tuning"):
        check_model(settings(QWEN, "model.master_weights=bfloat16", "model.lora.enabled=true"))


def test_full_fine_tuning_on_a_gpu_without_native_bf16_uses_fp16_autocast(settings):
    """Finding 3: bf16 was set on any GPU, emulated on T4 and V100."""
    for gpu in (T4, V100_X2):
        layout = decide(settings(QWEN), gpu)
        assert (layout.precision, layout.weight_dtype, layout.reference_dtype) == (Precision.fp16, "float32", "float16")
        assert any("without native bf16: loading float16" in note for note in layout.notes)


def test_below_fp16_tensor_cores_everything_is_fp32(settings):
    layout = decide(settings(QWEN), P100)
    assert (layout.precision, layout.weight_dtype, layout.reference_dtype) == (Precision.fp32, "float32", "float32")


def test_lora_keeps_the_base_in_its_dtype(settings):
    layout = decide(settings(MISTRAL), A100)
    assert (layout.precision, layout.weight_dtype) == (Precision.bf16, "bfloat16")
    assert decide(settings(MISTRAL), T4).weight_dtype == "float16"
    assert decide(settings(MISTRAL, "model.dtype=float32"), A100).weight_dtype == "float32"
    assert decide(settings(MISTRAL, "model.dtype=auto"), T4).weight_dtype == "float16"


def test_qlora_computes_in_the_autocast_dtype(settings, monkeypatch):
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    qlora = settings(MISTRAL, "+recipe=low_memory")
    for gpu, dtype in ((A100, "bfloat16"), (T4, "float16")):
        layout = decide(qlora, gpu)
        assert layout.precision.dtype == dtype
        assert check_hardware(qlora, layout) == []
        assert f"{layout.precision.value} compute, 4-bit weights" in layout.describe()


def test_the_qlora_adapter_trains_in_float32_under_fp16_autocast(settings, monkeypatch):
    """Issue 27, finding 2: on a T4, TRL's bf16 adapter crashed the fp16 grad scaler at the first step."""
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    qlora = settings(MISTRAL, "+recipe=low_memory")
    t4, a100 = decide(qlora, T4), decide(qlora, A100)
    assert (t4.adapter_dtype, a100.adapter_dtype) == ("float32", "bfloat16")
    assert t4.describe().endswith("fp16 compute, 4-bit weights, float32 adapter")
    assert a100.describe().endswith("bf16 compute, 4-bit weights, bfloat16 adapter")
    assert decide(settings(QWEN, "model.lora.enabled=true"), A100).adapter_dtype == "float32"


def test_keep_adapter_dtype_undoes_trls_bf16_cast(settings, monkeypatch):
    """A real peft model, its adapter cast to bf16 as TRL casts a 4-bit model's; the T4 layout puts it back."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_exp import models

    monkeypatch.setattr(hardware, "installed", lambda name: True)
    tiny = settings("model.lora.enabled=true")
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(models.model_path(tiny.model)), models.lora_config(tiny.model)
    )
    for param in model.parameters():
        if param.requires_grad:
            param.data = param.data.to(torch.bfloat16)  # grpo_trainer.py, for a quantized model
    qlora = settings(MISTRAL, "+recipe=low_memory")
    assert models.keep_adapter_dtype(model, decide(qlora, A100)) == 0  # bf16 autocast: TRL's bf16 stays
    changed = models.keep_adapter_dtype(model, decide(qlora, T4))
    trained = [p.dtype for p in model.parameters() if p.requires_grad]
    frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
    assert changed == len(trained) > 0 and set(trained) == {torch.float32} and frozen == {torch.float32}


def test_trl_still_casts_a_quantized_models_adapter_to_bf16():
    """The reason for keep_adapter_dtype, read in TRL's source (importing trl takes seconds): if this
    fails, TRL changed its QLoRA dtypes, and config/layout.py's adapter policy needs a new look."""
    import importlib.util
    from pathlib import Path

    source = Path(importlib.util.find_spec("trl").origin).parent / "trainer" / "grpo_trainer.py"
    text = source.read_text()
    assert "if _is_quantized_model:" in text and "param.data = param.data.to(torch.bfloat16)" in text


def test_qlora_is_refused_under_zero3_and_fsdp(settings, monkeypatch):
    """Issue 27, finding 5: transformers refuses the 4-bit device_map under ZeRO-3; FSDP needs another storage."""
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    for name, value in (("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    qlora = settings(MISTRAL, "+recipe=low_memory")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(UserError, match=r"4-bit weights \(QLoRA\) under DeepSpeed ZeRO-3 .*accelerate/ddp.yaml"):
        check_hardware(qlora, decide(qlora, V100_X2))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    assert check_hardware(qlora, decide(qlora, V100_X2)) == []
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(UserError, match=r"under FSDP \(accelerate/fsdp.yaml\)"):
        check_hardware(qlora, decide(qlora, V100_X2))


def test_the_layout_line_says_what_deepspeed_and_fp16_really_do(settings, monkeypatch):
    """Issue 27, finding 8: DeepSpeed's line said float32 weights; grpo.fp16 on an A100 blamed "no native bf16"."""
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    for name, value in (("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "2"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    a100_x2 = dataclasses.replace(A100, gpus=2)
    line = decide(settings(QWEN), a100_x2).describe()
    assert line.endswith("2 processes: bf16 compute, bfloat16 weights, float32 master copy (DeepSpeed)"), line
    lora = decide(settings(QWEN, "model.lora.enabled=true"), a100_x2)
    assert lora.adapter_dtype == "bfloat16", "ZeRO-3 keeps a LoRA adapter in the base's dtype (TRL)"
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "ACCELERATE_USE_DEEPSPEED"):
        monkeypatch.delenv(name)
    fp16 = decide(settings(QWEN, "grpo.fp16=true", "model.lora.enabled=true"), A100)
    assert "model.dtype=bfloat16 under grpo.fp16=true: loading float16" in fp16.notes
    vllm = settings(QWEN, "grpo.fp16=true", "grpo.use_vllm=true")
    monkeypatch.setattr(hardware, "vllm_release", lambda: ("vllm", "0.31.0"))
    with pytest.raises(UserError, match=r"grpo.use_vllm=true with fp16 compute: vLLM generates in the model's bf16"):
        check_hardware(vllm, decide(vllm, A100))


def test_the_cpu_trains_in_float32(settings):
    layout = decide(settings(QWEN), CPU_ONLY)
    assert (layout.device, layout.precision, layout.weight_dtype, layout.reference_dtype) == (
        "cpu",
        Precision.fp32,
        "float32",
        "float32",
    )
    assert layout.notes == ("model.dtype=bfloat16 on the CPU is slow and imprecise; loading float32",)
    assert decide(settings("grpo.bf16=true"), CPU_ONLY).precision is Precision.bf16  # asked for


def test_precision_asked_for_that_the_device_cannot_give_is_refused(settings):
    with pytest.raises(UserError, match=r"grpo.bf16=true but Tesla T4 \(compute capability 7.5\) emulates bf16"):
        decide(settings("grpo.bf16=true"), T4)
    with pytest.raises(UserError, match=r"grpo.fp16=true needs a CUDA GPU"):
        decide(settings("grpo.fp16=true"), CPU_ONLY)
    with pytest.raises(UserError, match="choose one"):
        decide(settings("grpo.fp16=true", "grpo.bf16=true"), A100)
    assert decide(settings("grpo.bf16=false"), A100).precision is Precision.fp32


def test_a_cpu_only_torch_on_a_machine_with_a_driver(settings):
    """Finding 5: the driver said GPU, torch said CPU; the job trained on the CPU without a word."""
    layout = decide(settings(), CPU_BUILD_WITH_DRIVER)
    assert not layout.gpu
    assert layout.notes == (
        "torch 2.13.0+cpu is a CPU-only build, though a GPU driver is installed: training on the CPU; "
        "for the GPU, make setup TORCH=torch (it uninstalls the CPU build first; "
        "with pip: pip uninstall -y torch && pip install torch)",
    )
    with pytest.raises(UserError, match=r"device=cuda but torch 2.13.0\+cpu is a CPU-only build"):
        decide(settings("device=cuda"), CPU_BUILD_WITH_DRIVER)
    with pytest.raises(UserError, match="no GPU is visible"):
        decide(settings("device=cuda"), CUDA_BUILD_NO_GPU)
    qlora = settings(MISTRAL, "+recipe=low_memory")
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        check_hardware(qlora, decide(qlora, CPU_BUILD_WITH_DRIVER))


def test_a_plain_run_on_several_gpus_uses_one_and_says_how_to_use_all(settings):
    """Finding 1: a plain run on 2+ GPUs failed after the model loaded (TRL refuses nn.DataParallel)."""
    layout = decide(settings(QWEN), H100_X4)
    assert layout.processes == 1 and (layout.local_rank, layout.gpu_index) == (0, 0) and layout.gpus_visible == 4
    assert "--num_processes 4 run.py" in layout.notes[0]
    assert layout.describe().startswith("training on GPU 0 (NVIDIA H100), 1 process")


def test_each_job_of_a_parallel_sweep_takes_the_gpu_its_launcher_gives_it(settings, monkeypatch, simulated_gpus):
    """Issue 27, finding 4: every job of a parallel sweep trained on GPU 0 (the parent had pinned it)."""
    monkeypatch.setenv("GRPO_EXP_GPU", "2")
    layout = decide(settings(QWEN))
    assert (layout.gpu_index, layout.local_rank) == (2, 0) and simulated_gpus["asked"] == [2]
    assert layout.describe().startswith("training on GPU 2 (NVIDIA H100)")
    assert not any("GPUs visible" in note for note in layout.notes)  # the launcher chose: no advice to
    assert "CUDA_VISIBLE_DEVICES" not in os.environ, "deciding changes nothing a sweep's workers inherit"
    layout.claim()  # in the job's own process, before CUDA starts
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    decide(settings(QWEN)).claim()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "6", "the third of the listed GPUs"
    monkeypatch.setenv("GRPO_EXP_GPU", "4")
    with pytest.raises(UserError, match=r"GRPO_EXP_GPU=4 but 4 GPU\(s\) are visible"):
        decide(settings(QWEN), H100_X4)


def test_deciding_never_starts_cuda_in_the_parent(settings, simulated_gpus):
    """The preflight decides every job in the sweep's parent: its CUDA context held GPU 0 for the whole sweep."""
    decide(settings(QWEN))
    assert simulated_gpus["in_process"] == 0 and simulated_gpus["asked"] == [0]
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_job_whose_cuda_started_early_on_several_gpus_is_refused(settings, monkeypatch, simulated_gpus):
    import torch

    layout = decide(settings(QWEN))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # e.g. a reward module's import started it
    with pytest.raises(UserError, match="4 GPUs are visible to a plain run, and CUDA started before"):
        layout.claim()


def test_an_amd_gpu_under_rocm_is_a_gpu(settings):
    """Finding 6: a ROCm torch (torch.version.cuda is None there) trained on the CPU without a word."""
    layout = decide(settings(QWEN), MI300X)
    assert layout.gpu and layout.bf16 and layout.rocm
    assert layout.describe().startswith("training on GPU 0 (AMD Instinct MI300X, ROCm), 1 process: bf16 compute")


def test_machine_reads_a_rocm_build_as_a_gpu_build(monkeypatch, simulated_gpus):
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", "6.4.0")
    found = hardware.machine(0)
    assert found.cuda_build and found.rocm and found.gpus == 4 and found.native_bf16


def test_launched_ranks_each_take_their_own_gpu(settings, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    layout = decide(settings(QWEN), V100_X2)
    assert (layout.processes, layout.rank, layout.local_rank, layout.notes[1:]) == (2, 1, 1, ())
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(UserError, match=r"4 processes on this machine but 2 GPU\(s\) visible"):
        decide(settings(QWEN), V100_X2)


@pytest.fixture
def simulated_gpus(monkeypatch):
    """torch.cuda on a 4-GPU machine: NVML's count follows CUDA_VISIBLE_DEVICES until CUDA starts, and the
    GPU's properties come from the child process that ``hardware`` starts (simulated: what it was asked)."""
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("GRPO_EXP_GPU", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    seen = {"asked": [], "in_process": 0}

    def visible() -> int:
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        return len(listed.split(",")) if listed else 4

    def in_process(index):
        seen["in_process"] += 1
        raise AssertionError("CUDA started in this process")

    def child(args, **kwargs):
        seen["asked"].append(int(args[-1]))
        return SimpleNamespace(returncode=0, stdout=f'["NVIDIA H100", 9, 0, {80 * 1024**3}]\n', stderr="")

    monkeypatch.setattr(torch.cuda, "device_count", visible)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_properties", in_process)
    monkeypatch.setattr(hardware.subprocess, "run", child)
    return seen


def test_machine_reads_the_gpu_in_a_child_process(simulated_gpus, monkeypatch):
    found = hardware.machine(1)
    assert (found.gpus, found.name, found.capability, found.native_bf16) == (4, "NVIDIA H100", (9, 0), True)
    assert simulated_gpus == {"asked": [1], "in_process": 0}

    def fails(args, **kwargs):
        return SimpleNamespace(returncode=1, stdout="", stderr="Traceback …\nRuntimeError: CUDA driver too old\n")

    monkeypatch.setattr(hardware.subprocess, "run", fails)
    with pytest.raises(UserError, match=r"CUDA could not start on GPU 0 \(RuntimeError: CUDA driver too old\)"):
        hardware.machine(0)


def test_vllm_refusals(settings, monkeypatch):
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    qlora_vllm = settings(MISTRAL, "+recipe=low_memory", "grpo.use_vllm=true")
    with pytest.raises(UserError, match="with 4-bit weights: every weight sync would merge the adapter"):
        check_hardware(qlora_vllm, decide(qlora_vllm, A100))
    vllm = settings(QWEN, "grpo.use_vllm=true")
    monkeypatch.setattr(hardware, "vllm_release", lambda: ("vllm", "0.10.2"))
    with pytest.raises(UserError, match=r"vLLM 0.10.2 is outside the releases TRL accepts \(0.22.0 to 0.31.0\)"):
        check_hardware(vllm, decide(vllm, A100))
    monkeypatch.setattr(hardware, "vllm_release", lambda: ("vllm", "0.31.0"))
    assert check_hardware(vllm, decide(vllm, A100)) == []
    with pytest.raises(UserError, match="Tesla T4, which has no native bf16"):
        check_hardware(vllm, decide(vllm, T4))


def test_our_vllm_range_is_trls():
    """TRL's own bounds (trl/import_utils.py, read as text: importing trl takes seconds)."""
    import importlib.util
    import re
    from pathlib import Path

    from grpo_exp.config.layout import VLLM_RANGE

    source = Path(importlib.util.find_spec("trl").origin).with_name("import_utils.py").read_text()
    assert re.search(rf'Version\("{VLLM_RANGE[0]}"\) <= _vllm_base_version <= Version\("{VLLM_RANGE[1]}"\)', source)


def test_the_trainer_gets_the_decision(settings, tmp_path, monkeypatch):
    from grpo_exp.spec import build_spec
    from grpo_exp.training.trainer import grpo_config

    monkeypatch.setattr(hardware, "machine", lambda *a, **k: T4)
    spec = build_spec(settings(QWEN, "model.trust_remote_code=true"))
    args = grpo_config(spec.settings, spec.layout, tmp_path, [1.0], report_to_wandb=False)
    assert (args.bf16, args.fp16, args.use_cpu) == (False, True, False)
    assert args.model_init_kwargs == {"dtype": "float16"}  # TRL builds the reference model from it
    assert args.trust_remote_code is True  # finding 11: the reference model and vLLM load with it


def test_the_policy_loads_in_the_layouts_dtype(settings):
    """A full fine-tune's weights load float32 whatever model.dtype says (the tiny model, on the CPU)."""
    import torch

    from grpo_exp import models

    cfg = settings("model.dtype=bfloat16")
    layout = decide(cfg, CPU_ONLY)
    model = models.load_model(cfg.model, models.model_path(cfg.model), layout)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    cfg = settings("model.master_weights=bfloat16")
    model = models.load_model(cfg.model, models.model_path(cfg.model), decide(cfg, CPU_ONLY))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_the_distributed_state_exists_before_the_weights_load(settings, tmp_path, monkeypatch):
    """Finding 6: the model loaded before accelerate's state (and with it DeepSpeed's ZeRO-3 config and
    FSDP's rank-0 loading) existed, so their loading options did nothing."""
    from accelerate import PartialState
    from grpo_exp import models
    from grpo_exp.folder import JobFolder
    from grpo_exp.spec import build_spec
    from grpo_exp.tracking.monitor import HealthMonitor
    from grpo_exp.training import trainer
    from grpo_exp.training.schedule import OneStage
    from grpo_exp.training.stops import StopRequest

    PartialState._reset_state()
    seen = {}
    load = models.load_model

    def load_model(*args, **kwargs):
        seen["state"] = dict(PartialState._shared_state)
        return load(*args, **kwargs)

    monkeypatch.setattr(models, "load_model", load_model)
    spec = build_spec(settings("grpo.max_steps=1", "logger=none"))
    stage = OneStage(spec, None).next_stage(None)
    trainer.build_trainer(spec, stage, JobFolder(tmp_path), HealthMonitor(spec.settings.monitor), StopRequest(), False)
    assert seen["state"], "accelerate's state is set up when the model loads"


def test_a_4bit_model_goes_to_this_ranks_own_gpu(settings, monkeypatch):
    """Finding 6: bitsandbytes put every rank's 4-bit model on cuda:0."""
    import transformers

    from grpo_exp import models

    seen = {}

    def from_pretrained(path, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here: no GPU to load onto")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(hardware, "installed", lambda name: True)
    for name, value in (("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "2"), ("RANK", "1"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(name, value)
    qlora = settings(MISTRAL, "+recipe=low_memory")
    with pytest.raises(RuntimeError, match="stop here"):
        models.load_model(qlora.model, "unused", decide(qlora, V100_X2))
    assert seen["device_map"] == {"": 1}
    assert str(seen["quantization_config"].bnb_4bit_compute_dtype) == "torch.float16"  # V100: no native bf16


def test_the_embedded_model_attends_eagerly_on_a_gpu_in_16_bit_compute(settings):
    """Issue 59: on an H200 in bf16 the default run's SDPA gradients went NaN in 2-19 steps; eager trained."""
    layout = decide(settings(), H200)
    assert (layout.precision, layout.attention) == (Precision.bf16, "eager")
    assert (
        layout.describe()
        == "training on GPU 0 (NVIDIA H200), 1 process: bf16 compute, float32 weights, eager attention"
    )
    assert layout.record()["attention"] == "eager"  # run_info.json's layout
    assert decide(settings(), T4).attention == "eager"  # fp16 autocast: the same 16-bit kernels
    assert decide(settings("model=tiny_math"), H200).attention == "eager"  # every embedded recipe


def test_the_attention_stays_transformers_choice_where_sdpa_trained(settings):
    """fp32 on the GPU (150 steps trained there), the CPU, and real models keep transformers' default."""
    for layout in (
        decide(settings("grpo.bf16=false"), H200),
        decide(settings(), CPU_ONLY),
        decide(settings(QWEN), H200),
        decide(settings(MISTRAL), A100),
    ):
        assert layout.attention is None and "attention" not in layout.describe()
    asked = decide(settings("model.attn_implementation=sdpa"), H200)  # the user's choice wins
    assert asked.attention == "sdpa" and asked.describe().endswith("sdpa attention")
    assert decide(settings(QWEN, "model.attn_implementation=eager"), CPU_ONLY).attention == "eager"


def test_the_model_loads_with_the_layouts_attention(settings, monkeypatch):
    import transformers

    from grpo_exp import models

    seen = []
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda path, **kwargs: seen.append(kwargs)
    )
    models.load_model(settings().model, "unused", decide(settings(), H200))
    models.load_model(settings().model, "unused", decide(settings(), CPU_ONLY))
    assert seen[0]["attn_implementation"] == "eager" and "attn_implementation" not in seen[1]


def test_an_sdpa_model_on_a_gpu_trains_without_cudnns_attention_kernel(settings, monkeypatch):
    """Issue 59: cuDNN's attention backward returns NaN for left-padded rows at some widths (pytorch#196678);
    a GPU job whose model uses SDPA turns that kernel off, the embedded model's eager attention and the CPU
    leave it alone."""
    import torch
    import transformers

    from grpo_exp import models

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda path, **kwargs: kwargs)
    turned_off = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", turned_off.append)
    for model, machine in ((settings().model, H200), (settings(QWEN).model, CPU_ONLY)):
        models.load_model(model, "unused", decide(settings(), machine))  # eager on the GPU; the CPU
    assert turned_off == []
    models.load_model(settings(QWEN).model, "unused", decide(settings(QWEN), H200))
    models.load_model(settings(QWEN).model, "unused", decide(settings(QWEN, "model.attn_implementation=sdpa"), A100))
    assert turned_off == [False, False]
