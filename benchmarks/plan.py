"""The memory plan against measurements: predicted vs measured peak of a few GRPO steps on the CPU.

Each row is a real job (``run.py``, the same code path as any run) in a subprocess of its own:
the embedded tiny model, and randomly initialised models of Qwen2.5-0.5B's shape (all 24 layers,
or 4 of them), fully fine-tuned or with LoRA, with and without gradient checkpointing. The job
writes its own ``plan.json`` at its start (``grpo_exp.memory.estimate.memory_plan`` on its spec); the
prediction is that file's ``peak_bytes``.

The measurement: the child process imports torch, transformers, TRL, peft and datasets, reads its
resident set (``VmRSS``, the baseline), runs ``run.py`` in-process, and reads its peak resident
set (``VmHWM``) at the end; measured = peak - baseline. glibc's malloc keeps freed memory of
mid-sized blocks for reuse, so the child runs with ``MALLOC_MMAP_THRESHOLD_`` fixed at 64 KiB
(every tensor of any size is its own mapping, returned when freed) and ``MALLOC_ARENA_MAX=2``;
the RSS then follows the live tensors plus the Python heap.

The random models generate with the tiny model's tokenizer (ids beyond its vocabulary decode to
nothing); they never say end-of-sequence, so every completion runs to its limit, the plan's worst
case. Prompts are held to ``dataset.max_prompt_tokens=30`` (the shipped prompts are 20-43 tokens
with this tokenizer), the length the plan assumes for every prompt.

Usage::

    .venv/bin/python benchmarks/plan.py              # every row (about 15 min on 2 busy cores), prints the table
    .venv/bin/python benchmarks/plan.py --rows tiny  # rows whose name contains "tiny"
    .venv/bin/python benchmarks/plan.py --calibrate  # the activation constants, measured again (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS_DIR = Path(tempfile.gettempdir()) / "grpo_exp_plan_bench"
TOLERANCE = 0.15
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024), "MALLOC_ARENA_MAX": "2"}
SHORT_JOB = [
    "logger=none",
    "save_model=false",
    "grpo.save_steps=0",
    "dataset.eval_fraction=0",
    "grpo.max_steps=2",  # step 2 is the first with optimizer states during the backward
    "dataset.max_prompt_tokens=30",
    "threads=2",
]
QWEN_SHAPE = "qwen2_5_0_5b_instruct"

# name -> (layers of Qwen2.5-0.5B's shape, or None for the tiny model; overrides)
ROWS: dict[str, tuple[int | None, list[str]]] = {
    # the warmed-up tiny model ends its replies early: min_new_tokens holds them to the plan's length
    "tiny, full, no checkpointing (the default job)": (None, ["grpo.generation_kwargs={min_new_tokens: 48}"]),
    "Qwen2.5-0.5B shape (24 layers), full, checkpointing, beta 0": (
        24,
        ["grpo.num_generations=2", "grpo.prompts_per_step=1", "grpo.max_completion_length=16", "grpo.beta=0"],
    ),
    # twice the completions: the loss/backward outgrows the optimizer step
    "Qwen2.5-0.5B shape, 4 layers, full, no checkpointing, 16 completions": (
        4,
        ["grpo.num_generations=2", "grpo.prompts_per_step=8", "grpo.max_completion_length=32"],
    ),
    "Qwen2.5-0.5B shape, 4 layers, full, checkpointing": (
        4,
        ["grpo.num_generations=2", "grpo.prompts_per_step=4", "grpo.max_completion_length=32"],
    ),
    "Qwen2.5-0.5B shape, 4 layers, LoRA, no checkpointing": (
        4,
        [
            "grpo.num_generations=2",
            "grpo.prompts_per_step=4",
            "grpo.max_completion_length=32",
            "model.lora.enabled=true",
        ],
    ),
    "Qwen2.5-0.5B shape, 4 layers, LoRA, checkpointing": (
        4,
        [
            "grpo.num_generations=2",
            "grpo.prompts_per_step=4",
            "grpo.max_completion_length=32",
            "model.lora.enabled=true",
        ],
    ),
}


def checkpointing(name: str) -> str:
    return "grpo.gradient_checkpointing=false" if "no checkpointing" in name else "grpo.gradient_checkpointing=true"


def random_model(layers: int) -> Path:
    """A randomly initialised model of Qwen2.5-0.5B's shape with ``layers`` layers, saved once,
    with the embedded model's tokenizer."""
    folder = MODELS_DIR / f"qwen2_5_0_5b_shape_{layers}_layers"
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from grpo_exp.config.schema import TinyRecipe
    from grpo_exp.memory.architectures import ARCHITECTURES_DIR
    from grpo_exp.models.tiny import ensure_built
    from grpo_exp.shipped import shipped_file

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_built(TinyRecipe())))
    shape = json.loads((shipped_file(ARCHITECTURES_DIR) / f"{QWEN_SHAPE}.json").read_text())
    fields = {k: v for k, v in shape.items() if not k.startswith("_") and k not in ("architectures", "torch_dtype")}
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    config = Qwen2Config(**{**fields, "num_hidden_layers": layers, **ids, "pad_token_id": tokenizer.pad_token_id})
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(**ids, pad_token_id=tokenizer.pad_token_id)
    staging = folder.with_suffix(".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(folder)
    return folder


def child(argv: list[str], result: Path) -> None:
    """Inside the measured process: baseline after the imports, run.py, peak at the end."""
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trl  # noqa: F401

    import grpo_exp.training.trainer  # noqa: F401

    baseline = _status("VmRSS")
    sys.argv = ["run.py", *argv]
    try:
        runpy.run_path(str(ROOT / "run.py"), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    result.write_text(json.dumps({"baseline": baseline, "peak": _status("VmHWM")}))


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(name: str, layers: int | None, overrides: list[str], work: Path) -> dict:
    folder = work / "job"
    model = [] if layers is None else ["model=qwen2_5_0_5b_instruct", f"model.name_or_path={random_model(layers)}"]
    argv = [*model, *SHORT_JOB, *overrides, checkpointing(name), f"hydra.run.dir={folder}"]
    result = work / "result.json"
    env = {**os.environ, **MALLOC_ENV, "WANDB_MODE": "disabled"}
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, __file__, "--child", str(result), *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"{name}: the job failed:\n{run.stderr[-3000:]}")
    figures = json.loads(result.read_text())
    plan = json.loads((folder / "plan.json").read_text())
    measured = figures["peak"] - figures["baseline"]
    return {
        "name": name,
        "command": "python run.py " + " ".join(a for a in argv if not a.startswith("hydra.run.dir")),
        "predicted": plan["peak_bytes"],
        "phase": plan["peak_phase"],
        "measured": measured,
        "error": plan["peak_bytes"] / measured - 1,
        "seconds": seconds,
        "items": plan["items"],
    }


# Layer shapes (hidden, MLP, heads, key/value heads) the activation constants are checked on.
CALIBRATION_BATCH = 2
CALIBRATION_LENGTHS = (64, 128)  # tokens per sequence
CALIBRATION_SHAPES = [
    (128, 256, 4, 2),
    (256, 256, 4, 2),
    (128, 512, 4, 2),
    (128, 256, 8, 2),
    (128, 256, 4, 4),
    (896, 4864, 14, 2),
]


def calibrate() -> None:
    """Where ``memory.LAYER_ACTIVATIONS`` and ``CPU_TILE_TEMPORARIES`` come from, measured again.

    Activations: the bytes a stack of Qwen2 layers saves for the backward pass (torch's saved-tensor
    hooks, each storage once), per token per layer, in fp32 and under bf16 autocast: the difference
    between 3 layers and 1 at 128 tokens per sequence minus the same at 64, so that the weights (and
    autocast's 16-bit copies of them), saved once whatever the length, cancel out."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpo_exp.memory import estimate as memory

    def saved_bytes(shape: tuple[int, int, int, int], layers: int, length: int, autocast: bool) -> int:
        hidden, inner, heads, kv_heads = shape
        config = Qwen2Config(
            vocab_size=1000,
            hidden_size=hidden,
            intermediate_size=inner,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
        )
        model = Qwen2ForCausalLM(config).train()
        seen: dict[int, int] = {}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
            return tensor

        ids = torch.randint(0, 1000, (CALIBRATION_BATCH, length))
        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        with hooks, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model.model(input_ids=ids, use_cache=False)
        return sum(seen.values())

    short, long = CALIBRATION_LENGTHS
    print("| shape (hidden, MLP, heads, kv heads) | dtype | measured bytes/token/layer | constants |")
    print("| --- | --- | --- | --- |")
    for shape in CALIBRATION_SHAPES:
        for autocast, key in ((False, memory.FP32), (True, memory.HALF)):
            per_length = [
                saved_bytes(shape, 3, n, autocast) - saved_bytes(shape, 1, n, autocast) for n in (short, long)
            ]
            per_layer = (per_length[1] - per_length[0]) / 2 / (CALIBRATION_BATCH * (long - short))
            h, i, heads, kv = shape
            per_h, per_i, per_kv, per_head, const = memory.LAYER_ACTIVATIONS[key]
            predicted = per_h * h + per_i * i + per_kv * kv * (h // heads) + per_head * heads + const
            print(f"| {shape} | {'bf16 autocast' if autocast else 'fp32'} | {per_layer:,.0f} | {predicted:,} |")


def table(rows: list[dict]) -> str:
    mib = 1 << 20
    lines = [
        "| job | predicted peak (phase) | measured peak | predicted / measured - 1 | within 15 % | s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ok = "yes" if abs(row["error"]) <= TOLERANCE else "**no**"
        lines.append(
            f"| {row['name']} | {row['predicted'] / mib:,.0f} MiB ({row['phase']}) | {row['measured'] / mib:,.0f} MiB "
            f"| {row['error']:+.1%} | {ok} | {row['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[3:], Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="", help="only rows whose name contains this")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "plan.json"), help="raw results (JSON)")
    parser.add_argument("--calibrate", action="store_true", help="measure the activation constants again, and stop")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return
    rows = []
    for name, (layers, overrides) in ROWS.items():
        if args.rows.lower() not in name.lower():
            continue
        with tempfile.TemporaryDirectory() as work:
            row = measure(name, layers, overrides, Path(work))
        rows.append(row)
        print(
            f"{name}: predicted {row['predicted'] >> 20} MiB, measured {row['measured'] >> 20} MiB "
            f"({row['error']:+.1%}), {row['seconds']:.0f} s",
            flush=True,
        )
    Path(args.out).write_text(json.dumps({"machine": platform.platform(), "rows": rows}, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
