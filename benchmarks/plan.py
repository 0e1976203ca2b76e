"""The memory plan against measurements: predicted vs measured peak of a few GRPO steps on the CPU,
and against GPU runs others published.

Each CPU row is a real job (``run.py``, the same code path as any run) in a process of its own:
the embedded tiny model, and randomly initialised models of Qwen2.5-0.5B's shape (all 24 layers,
or 4 of them), fully fine-tuned or with LoRA, with and without gradient checkpointing. The job
writes its own ``plan.json`` at its start (``grpo_exp.memory.estimate.memory_plan`` on its spec); the
prediction is that file's ``peak_bytes``, which counts the whole process (its libraries too).

The measurement: the child process imports torch, transformers, TRL, peft and datasets, reads its
resident set (``VmRSS``: the libraries), runs ``run.py`` in-process, and reads its peak resident
set (``VmHWM``) at the end: that peak, the whole process's, is the measured figure. glibc's malloc
keeps freed memory of mid-sized blocks for reuse, so the child runs with ``MALLOC_MMAP_THRESHOLD_``
fixed at 64 KiB (every tensor of any size is its own mapping, returned when freed) and
``MALLOC_ARENA_MAX=2``, except in the rows named "plain malloc" (the job as a user runs it).

The random models generate with the tiny model's tokenizer (ids beyond its vocabulary decode to
nothing); they never say end-of-sequence, so every completion runs to its limit, the plan's worst
case. The plan takes the shipped prompts' longest (43 tokens with this tokenizer) as every prompt.

``--published`` plans the GPU runs in ``published_runs.yaml`` (settings re-entered as overrides, no training)
and prints them beside the figures their authors published.

Usage::

    .venv/bin/python benchmarks/plan.py              # every CPU row (about 15 min on 2 busy cores), prints the table
    .venv/bin/python benchmarks/plan.py --rows tiny  # rows whose name contains "tiny"
    .venv/bin/python benchmarks/plan.py --published  # the published GPU runs against their plans (seconds, once cached)
    .venv/bin/python benchmarks/plan.py --libraries  # the resident set of the imported libraries (CPU_LIBRARIES)
    .venv/bin/python benchmarks/plan.py --calibrate  # each shipped shape's layer measured again (minutes)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import runpy
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness

ROOT = harness.ROOT

MODELS_DIR = Path(tempfile.gettempdir()) / "grpo_exp_plan_bench"
TOLERANCE = 0.15
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 * 1024), "MALLOC_ARENA_MAX": "2"}
SHORT_JOB = [
    "logger=none",
    "save_model=false",
    "grpo.save_steps=0",
    "dataset.eval_fraction=0",
    "grpo.max_steps=2",  # step 2 is the first with optimizer states during the backward
    "threads=2",
]
QWEN_SHAPE = "qwen2_5_0_5b_instruct"

# name -> (layers of Qwen2.5-0.5B's shape, or None for the tiny model; overrides)
ROWS: dict[str, tuple[int | None, list[str]]] = {
    # the warmed-up tiny model ends its replies early: min_new_tokens holds them to the plan's length
    "tiny, full, no checkpointing (the default job)": (None, ["grpo.generation_kwargs={min_new_tokens: 48}"]),
    "tiny, full, no checkpointing (the default job), plain malloc": (
        None,
        ["grpo.generation_kwargs={min_new_tokens: 48}"],
    ),
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
    env = {**os.environ, "WANDB_MODE": "disabled"} | ({} if "plain malloc" in name else MALLOC_ENV)
    run = harness.python(__file__, "--child", result, *argv, env=env)
    seconds = run.wall_s
    if not run.ok:
        raise RuntimeError(f"{name}: the job failed:\n{run.stderr[-3000:]}")
    figures = json.loads(result.read_text())
    plan = harness.Job(folder).plan()
    measured = figures["peak"]  # the whole process: its libraries, heap and tensors
    return {
        "name": name,
        "command": "python run.py " + " ".join(a for a in argv if not a.startswith("hydra.run.dir")),
        "predicted": plan["peak_bytes"],
        "phase": plan["peak_phase"],
        "measured": measured,
        "libraries": figures["baseline"],
        "error": plan["peak_bytes"] / measured - 1,
        "seconds": seconds,
        "items": plan["items"],
    }


def calibrate() -> None:
    """Each shipped shape's decoder layer measured again in every mode (``memory.activations``,
    bypassing the cache): bytes saved per token by one layer, and by the model outside its layers.
    tests/test_activations.py holds these against a deeper, longer batch of each family."""
    from grpo_exp.memory.activations import MODES, measure
    from grpo_exp.memory.architectures import shipped_configs

    print("| model (shape) | mode | bytes/token, one layer | outside the layers | s |")
    print("| --- | --- | --- | --- | --- |")
    for name, path in shipped_configs().items():
        config = json.loads(path.read_text(encoding="utf-8"))
        for mode in MODES:
            start = time.perf_counter()
            layer, outside = measure(config, mode)
            print(
                f"| {name} | {mode} | {layer:,.0f} | {outside:,.0f} | {time.perf_counter() - start:.1f} |", flush=True
            )


def libraries() -> None:
    """The resident set of a fresh process once it has imported what a job imports (CPU_LIBRARIES)."""
    code = (
        "import datasets, peft, torch, transformers, trl, grpo_exp.training.trainer; from pathlib import Path; "
        "print(next(int(l.split()[1]) * 1024 for l in Path('/proc/self/status').read_text().splitlines() "
        "if l.startswith('VmRSS:')))"
    )
    figures = []
    for env in ({}, MALLOC_ENV):
        run = harness.python("-c", code, env={**os.environ, **env}, check=True)
        figures.append(int(run.stdout.split()[-1]))
    print(f"libraries resident: {figures[0] / (1 << 20):,.0f} MiB (plain malloc), {figures[1] / (1 << 20):,.0f} MiB")


PUBLISHED = Path(__file__).with_name("published_runs.yaml")  # GPU runs others published, shared with the tests


def published_runs() -> list[dict]:
    """The published runs, each with its whole ``argv``: its named settings, then its own overrides."""
    record = yaml.safe_load(PUBLISHED.read_text(encoding="utf-8"))
    return [{**run, "argv": [*record["settings"][run["settings"]], *run["overrides"]]} for run in record["runs"]]


def published() -> list[dict]:
    """Each published run planned again, beside its published figure."""
    from grpo_exp.plan.__main__ import main as plan_main

    rows = []
    for run in published_runs():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert plan_main(["--json", *run["argv"]]) == 0
        plan = json.loads(buffer.getvalue())
        outside = sum(v for k, v in plan["items"].items() if k.startswith("runtime"))
        rows.append(
            {
                "source": run["source"],
                "run": run["run"],
                "overrides": run["argv"],
                "published_gib": run["published_gib"],
                "published": run["published"],
                "plan_bytes": plan["peak_bytes"],
                "plan_pytorch_bytes": plan["peak_bytes"] - outside,  # what max_memory_reserved can see
                "phase": plan["peak_phase"],
                "verdict": plan["verdict"],
                "share": plan["peak_bytes"] / plan["memory_bytes"],
                "items": plan["items"],
            }
        )
    return rows


def published_table(rows: list[dict]) -> str:
    gib = 1 << 30
    lines = [
        "| source | run | published peak | plan: whole (phase) | plan: in PyTorch | ratio | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        figure = row["published_gib"]
        shown = row["published"] if figure is None else f"{figure:.2f} GiB, {row['published']}"
        ratio = "" if figure is None else f"{row['plan_pytorch_bytes'] / gib / figure:.2f}"
        lines.append(
            f"| {row['source']} | {row['run']} | {shown} | {row['plan_bytes'] / gib:.2f} GiB ({row['phase']}) "
            f"| {row['plan_pytorch_bytes'] / gib:.2f} GiB | {ratio} | {row['verdict']} ({row['share']:.0%}) |"
        )
    return "\n".join(lines)


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
    parser.add_argument("--calibrate", action="store_true", help="measure each shipped shape's layer again, and stop")
    parser.add_argument("--libraries", action="store_true", help="measure the imported libraries' resident set")
    parser.add_argument("--published", action="store_true", help="plan the published GPU runs (no training)")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return
    if args.libraries:
        libraries()
        return
    out = Path(args.out)
    record = json.loads(out.read_text()) if out.is_file() else {}
    if args.published:
        found = published()
        out.write_text(json.dumps(record | {"published": found}, indent=2) + "\n")
        print(published_table(found))
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
    measured = {row["name"]: row for row in record.get("rows", [])} | {row["name"]: row for row in rows}
    kept = [measured[name] for name in ROWS if name in measured]  # rows not run again keep their figures
    out.write_text(json.dumps(record | {"machine": platform.platform(), "rows": kept}, indent=2) + "\n")
    print(table(kept))


if __name__ == "__main__":
    main()
