"""The GPU story in one script, offline, under eight minutes: what users run (run.py), checked on a GPU.

No hub is needed: the model is Qwen2.5-0.5B's architecture with random weights and a made-up tokenizer
of its vocabulary (``random_qwen.py``). Every case is one ``python run.py model=qwen2_5_0_5b_instruct
model.name_or_path=<that folder> ...`` job in its own process (vLLM keeps its GPU memory until the
process ends), read back from its job folder (``metrics.jsonl``, ``summary.json``, ``run_info.json``'s
layout, ``plan.json``, ``model/``):

- ``precision``: full fine-tuning, two steps at lr 2e-5. The share of weight elements the saved
  model changed: with float32 master weights nearly all; pure bf16 would round most updates away,
  which a control computed here in torch shows (one weight matrix plus an Adam-sized step, in bf16).
- ``lora``, ``qlora``: the adapter trains (its B matrices leave zero); QLoRA needs bitsandbytes.
- ``vllm``: generation with vLLM in the training process (TRL's colocate mode) against transformers,
  at a batch where vLLM's batching shows (8 prompts x 8 completions of 256 tokens), the first step
  left out as warm-up, the weight sync timed apart from generation, memory as allocated and reserved.
- ``two_processes``: ``torchrun --nproc_per_node 2 run.py``: two processes in the layout, every
  step logged once. Needs two GPUs.
- memory plan, for every job: the peak memory measured against ``plan.json``'s ``peak_bytes``.

The timings and memory peaks come from inside run.py's process without touching the project: the
harness's timing shim (``benchmarks/timing_shim/sitecustomize.py``, first on the job's PYTHONPATH)
wraps TRL's ``GRPOTrainer._generate`` and ``VLLMGeneration.sync_weights`` once TRL imports them.
Jobs start, time out and are read back through ``benchmarks/harness.py``.
A case that can't run here (no vLLM, one GPU, ...) is reported as skipped with its reason.

It runs with whichever Python starts it (the jobs use the same interpreter): a venv from ``make setup``,
or a GPU node's own Python and torch with the project installed offline (docs/offline.md)::

    python benchmarks/gpu_check.py                            # every case, about 6-7 minutes
    python benchmarks/gpu_check.py --cases precision,vllm --out /scratch/gpu_check
    python benchmarks/gpu_check.py --smoke --out /tmp/check   # on a CPU: the plumbing

Its first line names the versions it found. Everything goes under ``--out`` (by default a new folder
in ``~/grpo_exp_gpu_check``, never the repository): ``gpu_check.json`` and ``.md``, and ``jobs/<case>/``,
each job's own folder (``run.log``, ``error.txt`` when it failed, ``console.log``: its console output,
``metrics.jsonl``, ``plan.json``), kept so that a failure can be explained. Copy the table into
benchmarks/gpu_check.md by hand once it has run on a GPU.

``--smoke`` runs the cases a CPU can (precision, lora) through run.py with ``device=cpu`` on a
shrunken model (2 layers, a small vocabulary), 1 step, short completions: it checks the script and
the precision measurement, not the speed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness
from benchmarks.random_qwen import build_model

OUT_PARENT = Path.home() / "grpo_exp_gpu_check"  # --out's default is a new folder in here: outside the tree
JOBS = "jobs"  # <out>/jobs/<case>/: each job's folder, kept
VERSIONS_OF = ("transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm")  # beside python and torch


@dataclass(frozen=True)
class Workload:
    """One job's size: steps, group, prompts per step, completion length."""

    steps: int
    num_generations: int
    prompts_per_step: int
    max_completion_length: int

    def overrides(self) -> list[str]:
        return [
            f"grpo.max_steps={self.steps}",
            f"grpo.num_generations={self.num_generations}",
            f"grpo.prompts_per_step={self.prompts_per_step}",
            f"grpo.max_completion_length={self.max_completion_length}",
        ]


# Each GPU workload is sized to its question; together they stay well inside TOTAL_BUDGET_S.
TRAINING_WORKLOAD = Workload(steps=2, num_generations=4, prompts_per_step=2, max_completion_length=64)
# vLLM's gain is batching: 64 completions of 256 tokens at once (the article's length), 1 warm-up step + 3.
GENERATION_WORKLOAD = Workload(steps=4, num_generations=8, prompts_per_step=8, max_completion_length=256)
SMOKE_WORKLOAD = Workload(steps=1, num_generations=4, prompts_per_step=2, max_completion_length=8)
WARMUP_CALLS = 1  # timings dropped from the front: CUDA kernels, vLLM's first batch, allocator growth
LEARNING_RATE = 2e-5  # the article's rate; Adam's first steps move every weight by about this much
LENGTH_TARGET_CHARS = 4096  # above any completion here: the reward pays for every character
BF16_CONTROL_WEIGHT = "model.layers.0.mlp.down_proj.weight"  # any matrix with Qwen's initialisation
CHANGED_SHARE_MIN = 0.5  # fp32 master weights: most elements must move in one step
UNCHANGED_SHARE_MIN = 0.5  # pure bf16: most elements must stay put (the round-away the check shows)
# Per case on one H200, start-up (imports, model load: ~30 s a job) included; the model build is ~30 s.
CASE_ESTIMATE_S = {"precision": 60, "lora": 50, "qlora": 60, "vllm": 240, "two_processes": 70}
CASE_TIMEOUT_S = {"precision": 150, "lora": 150, "qlora": 150, "vllm": 330, "two_processes": 180}
SMOKE_TIMEOUT_S = 120
TOTAL_BUDGET_S = 470  # under 8 minutes: a case that no longer fits is skipped, not started
# Timed inside each job by the harness's shim: generation, and vLLM's weight sync (which runs inside it).
TIMED = {
    "trl.trainer.grpo_trainer:GRPOTrainer._generate": "generate_s",
    "trl.generation.vllm_generation:VLLMGeneration.sync_weights": "sync_weights_s",
}
CONSOLE_LOG = "console.log"
GIB = 2**30


# ---------------------------------------------------------------- running run.py jobs


@dataclass
class Context:
    """What every case needs: where the model and the jobs live, and how much time is left."""

    model_dir: Path
    jobs: Path
    smoke: bool
    budget: harness.Budget  # the whole check's
    gpus: int

    def workload(self, gpu_workload: Workload) -> Workload:
        return SMOKE_WORKLOAD if self.smoke else gpu_workload

    def timeout(self, case: str) -> float:
        """The case's own limit, within what is left of the whole check's."""
        return SMOKE_TIMEOUT_S if self.smoke else self.budget.limit(CASE_TIMEOUT_S[case])


@dataclass
class TimedJob(harness.Job):
    """A finished run.py job, its folder, and what the timing shim measured inside it."""

    timings: dict[str, Any] = field(default_factory=dict)


def run_job(ctx: Context, name: str, overrides: list[str], timeout_s: float, processes: int = 1) -> TimedJob:
    """``python run.py`` (or torchrun with ``processes``) on the random model, with the timing shim."""
    folder, timings = ctx.jobs / name, ctx.jobs / f"{name}.timings"
    env = harness.timed_env(timings, TIMED) | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    finished = harness.run_py(
        "model=qwen2_5_0_5b_instruct",
        f"model.name_or_path={ctx.model_dir}",
        "logger=none",
        *(["device=cpu", "threads=1"] if ctx.smoke else ["device=cuda"]),
        "grpo.save_steps=0",  # no checkpoints: only the final model/ matters here
        "dataset.eval_fraction=0",  # no held-out evaluation: every second goes to the steps measured
        # Random weights never write the article's format, so its reward is flat and nothing would train
        # (zero advantages); characters vary with the sampled tokens, so a length reward gives groups spread.
        "reward=custom",
        "reward.parts.main.fn=length_score",
        f"+reward.parts.main.params.target={LENGTH_TARGET_CHARS}",
        f"optimizer.lr={LEARNING_RATE}",
        *overrides,
        job=folder,
        launcher=harness.torchrun_launcher(processes) if processes > 1 else (),
        env=env,
        timeout_s=timeout_s,
        log=folder / CONSOLE_LOG,  # beside the job's run.log: also what ran before its logging began
    )
    return TimedJob(folder, finished, harness.timings(timings))


# ---------------------------------------------------------------- reading a job into a row


def job_row(case: str, job: TimedJob) -> dict[str, Any]:
    """The figures every job has: status, wall time, layout, steps, and memory against its plan."""
    steps = job.steps()
    row: dict[str, Any] = {
        "case": case,
        "status": "ok" if job.ok else "failed",
        "wall_s": round(job.finished.wall_s, 1),
        "layout": job.layout(),
        "steps": len(steps),
        "timed_generations": len(job.timings.get("generate_s", [])),  # the shim saw run.py's trainer
        "figures": {},
        "checks": {},
        "memory": memory_against_plan(job),
    }
    if steps:
        row["figures"].update(
            reward=round(steps[-1]["reward"], 4),
            kl=round(steps[-1].get("kl", float("nan")), 6),
            mean_completion_tokens=round(statistics.mean(r["completions/mean_length"] for r in steps), 1),
        )
    if not job.ok:
        row["reason"] = job.failure()
    return row


def memory_against_plan(job: TimedJob) -> dict[str, Any]:
    """Measured peak (torch's allocator on a GPU, the process's peak RSS on a CPU) over plan.json's peak."""
    timings, plan = job.timings, job.plan()
    measured = timings.get("peak_allocated_bytes") if timings.get("cuda") else timings.get("peak_rss_bytes")
    planned = plan.get("peak_bytes")
    return {
        "measure": "torch.cuda.max_memory_allocated" if timings.get("cuda") else "peak RSS (CPU)",
        "peak_bytes": measured,
        "peak_reserved_bytes": timings.get("peak_reserved_bytes"),
        "device_used_bytes": timings.get("device_used_bytes"),
        "plan_peak_bytes": planned,
        "plan_phase": plan.get("peak_phase"),
        "measured_over_plan": round(measured / planned, 3) if measured and planned else None,
        "plan": "plan.json missing" if not plan else None,
    }


def check(row: dict[str, Any], name: str, passed: bool) -> None:
    """Record one check; a failed check fails the row."""
    row["checks"][name] = bool(passed)
    if not passed and row["status"] == "ok":
        row["status"] = "failed"
        row["reason"] = f"check failed: {name}"


def skipped(case: str, reason: str) -> dict[str, Any]:
    return {"case": case, "status": "skipped", "reason": reason}


def median_after_warmup(values: list[float]) -> float | None:
    kept = values[WARMUP_CALLS:] or values
    return round(statistics.median(kept), 4) if kept else None


# ---------------------------------------------------------------- the cases


def case_precision(ctx: Context) -> list[dict[str, Any]]:
    """Full fine-tuning at lr 2e-5: the share of weight elements the saved model changed, and the
    pure-bf16 round-away of the same size of update, computed here, beside it."""
    job = run_job(ctx, "precision", ctx.workload(TRAINING_WORKLOAD).overrides(), ctx.timeout("precision"))
    row = job_row("precision", job)
    initial = _load_weights(ctx.model_dir)
    row["figures"].update(bf16_control(initial[BF16_CONTROL_WEIGHT]))
    if job.ok:
        trained = _load_weights(job.folder / "model")
        row["figures"].update(changed_shares(initial, trained))
        fp32 = row["layout"].get("weight_dtype") == row["figures"]["trained_dtype"] == "float32"
        check(row, "trained and saved in float32", fp32)
        check(row, f"changed share > {CHANGED_SHARE_MIN}", row["figures"]["changed_share"] > CHANGED_SHARE_MIN)
    unchanged = row["figures"]["bf16_control_unchanged_share"]
    check(row, f"bf16 control unchanged share > {UNCHANGED_SHARE_MIN}", unchanged > UNCHANGED_SHARE_MIN)
    return [row]


def _load_weights(folder: Path) -> dict[str, Any]:
    """Every tensor of a saved model folder (one or several safetensors files), by name."""
    from safetensors.torch import load_file

    weights: dict[str, Any] = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(file))
    return weights


def changed_shares(initial: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """Shares of elements the job changed, as saved (fp32) and as pure-bf16 storage would have kept them.

    The initial weights are bf16 values, so ``bf16(trained) == initial`` is exactly "this update,
    applied to bf16 weights, rounds away"."""
    import torch

    names = sorted(set(initial) & set(trained))
    total = changed = kept_in_bf16 = 0
    for name in names:
        before, after = initial[name].float(), trained[name].float()
        total += before.numel()
        changed += int((after != before).sum())
        kept_in_bf16 += int((after.to(torch.bfloat16).float() != before).sum())
    return {
        "tensors_compared": len(names),
        "trained_dtype": str(next(iter(trained.values())).dtype).removeprefix("torch.") if trained else None,
        "changed_share": round(changed / total, 4) if total else 0.0,
        "changed_share_if_stored_bf16": round(kept_in_bf16 / total, 4) if total else 0.0,
    }


def bf16_control(weight: Any) -> dict[str, Any]:
    """One of the model's matrices plus an Adam-sized step (lr x sign, Adam's first update), in pure bf16
    and in fp32: the share of elements the bf16 sum leaves unchanged is the round-away."""
    import torch

    generator = torch.Generator().manual_seed(0)
    step = LEARNING_RATE * torch.randn(weight.shape, generator=generator).sign()
    in_bf16 = weight.to(torch.bfloat16) + step.to(torch.bfloat16)
    in_fp32 = weight.float() + step
    return {
        "bf16_control_weight": BF16_CONTROL_WEIGHT,
        "bf16_control_unchanged_share": round(float((in_bf16 == weight.to(torch.bfloat16)).float().mean()), 4),
        "fp32_control_unchanged_share": round(float((in_fp32 == weight.float()).float().mean()), 4),
    }


def case_lora(ctx: Context, quantized: bool = False) -> list[dict[str, Any]]:
    """LoRA (or QLoRA): the job trains and saves an adapter whose B matrices have left zero."""
    name = "qlora" if quantized else "lora"
    if quantized and ctx.smoke:
        return [skipped(name, "4-bit loading needs a CUDA GPU")]
    if quantized and importlib.util.find_spec("bitsandbytes") is None:
        return [skipped(name, "bitsandbytes is not installed: pip install -e '.[quant]'")]
    overrides = [*ctx.workload(TRAINING_WORKLOAD).overrides(), "model.lora.enabled=true"]
    overrides += ["model.quantization.load_in_4bit=true"] if quantized else []
    job = run_job(ctx, name, overrides, ctx.timeout(name))
    row = job_row(name, job)
    if job.ok:
        adapter = _load_weights(job.folder / "model")
        b = [t for n, t in adapter.items() if "lora_B" in n]
        moved = sum(int((t != 0).sum()) for t in b)
        size = sum(t.numel() for t in b)
        row["figures"].update(
            adapter_tensors=len(adapter), lora_b_nonzero_share=round(moved / size, 4) if size else 0.0
        )
        check(row, "an adapter was saved", bool(b))
        check(
            row,
            f"lora_B nonzero share > {CHANGED_SHARE_MIN}",
            row["figures"]["lora_b_nonzero_share"] > CHANGED_SHARE_MIN,
        )
    return [row]


def case_vllm(ctx: Context) -> list[dict[str, Any]]:
    """vLLM colocate against transformers generation, same workload, warm-up left out: seconds per
    generation, completion tokens per second, weight sync apart, memory allocated vs reserved."""
    if ctx.smoke:
        return [skipped("vllm", "vLLM needs a GPU")]
    if importlib.util.find_spec("vllm") is None:
        return [skipped("vllm", "vLLM is not installed: pip install -e '.[vllm]'")]
    workload = ctx.workload(GENERATION_WORKLOAD)
    rows = []
    for name, use_vllm in (("generation_transformers", False), ("generation_vllm", True)):
        overrides = [*workload.overrides(), f"grpo.use_vllm={str(use_vllm).lower()}", "save_model=false"]
        overrides += ["grpo.vllm_mode=colocate"] if use_vllm else []
        job = run_job(ctx, name, overrides, ctx.timeout("vllm"))
        row = job_row(name, job)
        generate, sync = job.timings.get("generate_s", []), job.timings.get("sync_weights_s", [])
        # vLLM's sync runs inside _generate: generation proper is the difference, call by call.
        generation = generate
        if use_vllm:  # each generation here began with one sync
            generation = [g - s for g, s in zip(generate, sync, strict=False)] + generate[len(sync) :]
        tokens = workload.prompts_per_step * workload.num_generations * row["figures"].get("mean_completion_tokens", 0)
        gen_s = median_after_warmup(generation)
        row["figures"].update(
            generation_s=gen_s,
            completion_tokens_per_s=round(tokens / gen_s, 1) if gen_s else None,
            weight_sync_s=median_after_warmup(sync) if use_vllm else None,
            step_s=median_after_warmup([r["step_time"] for r in job.steps() if "step_time" in r]),
        )
        if job.ok:
            check(row, "generation was timed", len(generate) > WARMUP_CALLS)
            if use_vllm:
                check(row, "weight syncs were timed", len(sync) > WARMUP_CALLS)
        rows.append(row)
    plain, fast = (r["figures"].get("completion_tokens_per_s") for r in rows)
    if plain and fast:
        rows[1]["figures"]["speedup_over_transformers"] = round(fast / plain, 2)
    return rows


def case_two_processes(ctx: Context) -> list[dict[str, Any]]:
    """torchrun with two processes: the layout counts two, and metrics.jsonl has every step once."""
    if ctx.smoke:
        return [skipped("two_processes", "needs two GPUs (the CPU version is tests/test_multiprocess.py)")]
    if ctx.gpus < 2:
        return [skipped("two_processes", f"{ctx.gpus} GPU visible: needs 2")]
    workload = ctx.workload(TRAINING_WORKLOAD)
    job = run_job(ctx, "two_processes", [*workload.overrides(), "save_model=false"], ctx.timeout("two_processes"), 2)
    row = job_row("two_processes", job)
    if job.ok:
        numbers = [r["step"] for r in job.steps()]
        row["figures"]["logged_steps"] = numbers
        check(row, "layout processes == 2", row["layout"].get("processes") == 2)
        check(row, "every step logged exactly once", numbers == list(range(1, workload.steps + 1)))
    return [row]


CASES: dict[str, Callable[[Context], list[dict[str, Any]]]] = {
    "precision": case_precision,
    "lora": case_lora,
    "qlora": lambda ctx: case_lora(ctx, quantized=True),
    "vllm": case_vllm,
    "two_processes": case_two_processes,
}
SMOKE_CASES = ("precision", "lora")  # the ones a CPU can run


def run_cases(ctx: Context, cases: list[str]) -> list[dict[str, Any]]:
    """Every case's rows, in order, with its wall time printed.

    On a GPU one after another (each job has the GPU to itself, and a case that no longer fits the
    time budget is skipped); the smoke run's CPU jobs run side by side, one torch thread each, since
    most of a tiny job is its single-threaded start-up."""

    def one(case: str) -> list[dict[str, Any]]:
        left = ctx.budget.left()
        if not ctx.smoke and left < CASE_ESTIMATE_S[case]:
            return [
                skipped(case, f"time budget: {left:.0f} s left of {TOTAL_BUDGET_S}, needs ~{CASE_ESTIMATE_S[case]}")
            ]
        started = time.monotonic()
        rows = CASES[case](ctx)
        statuses = ", ".join(f"{r['case']} {r['status']}" for r in rows)
        print(f"{case}: {statuses} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        return rows

    if not ctx.smoke:
        return [row for case in cases for row in one(case)]
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        return [row for rows in pool.map(one, cases) for row in rows]


# ---------------------------------------------------------------- the report


def versions() -> dict[str, str | None]:
    """What this interpreter runs the jobs with: python, torch and the CUDA (or ROCm) it was built for, the rest."""
    import torch

    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "rocm": getattr(torch.version, "hip", None),
    }
    for package in VERSIONS_OF:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def versions_line(found: dict[str, str | None]) -> str:
    build = f"CUDA {found['cuda']}" if found["cuda"] else f"ROCm {found['rocm']}" if found["rocm"] else "CPU only"
    rest = ", ".join(f"{name} {found[name] or 'not installed'}" for name in VERSIONS_OF)
    return f"python {found['python']}, torch {found['torch']} ({build}), {rest}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _figures_text(row: dict[str, Any]) -> str:
    """The row's own figures, short: the ones a reader compares."""
    f = row.get("figures", {})
    shown = []
    for key, label in (
        ("changed_share", "changed"),
        ("changed_share_if_stored_bf16", "changed if stored bf16"),
        ("bf16_control_unchanged_share", "bf16 control unchanged"),
        ("fp32_control_unchanged_share", "fp32 control unchanged"),
        ("lora_b_nonzero_share", "lora_B nonzero"),
        ("generation_s", "generation s"),
        ("completion_tokens_per_s", "tokens/s"),
        ("weight_sync_s", "weight sync s"),
        ("step_s", "step s"),
        ("speedup_over_transformers", "speed-up"),
        ("logged_steps", "logged steps"),
        ("reward", "reward"),
    ):
        if f.get(key) is not None:
            shown.append(f"{label} {f[key]}")
    return "; ".join(shown)


def markdown(report: dict[str, Any]) -> str:
    """The report as the markdown table gpu_check.md holds (and the script prints)."""
    v = report["versions"]
    lines = [
        f"# GPU check ({'smoke run on the CPU: plumbing only' if report['smoke'] else 'one GPU run'})",
        "",
        f"- date: {report['date']}",
        f"- GPU: {report['gpu'] or 'none'}",
        f"- {versions_line(v)}",
        f"- total wall time: {report['wall_s']} s (model build {report['model_build_s']} s)",
        "",
        "| case | status | wall (s) | layout | figures | peak memory (GiB) | reserved (GiB) | plan peak (GiB) "
        "| measured / plan | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["cases"]:
        layout = row.get("layout") or {}
        where = (
            f"{layout.get('device')} {layout.get('precision')}, {layout.get('weight_dtype')} weights" if layout else "-"
        )
        memory = row.get("memory") or {}
        cells = [
            row["case"],
            row["status"],
            row.get("wall_s", "-"),
            where + (f", {layout['processes']} processes" if layout.get("processes", 1) > 1 else ""),
            _figures_text(row) or "-",
            _gib(memory.get("peak_bytes")) + (" (RSS)" if memory.get("measure", "").startswith("peak RSS") else ""),
            _gib(memory.get("peak_reserved_bytes")),
            _gib(memory.get("plan_peak_bytes")),
            memory.get("measured_over_plan") or memory.get("plan") or "-",
            row.get("reason", ""),
        ]
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    lines += [
        "",
        "Peak memory: `torch.cuda.max_memory_allocated()` in the job's process (with vLLM colocate it includes",
        "vLLM's weights and KV-cache pool, `grpo.vllm_gpu_memory_utilization` of the GPU); reserved:",
        "`max_memory_reserved()`; on the CPU, the process's peak RSS (torch's libraries included). Plan peak:",
        "the job's `plan.json` `peak_bytes`. Timings are medians with the first call left out as warm-up.",
    ]
    return "\n".join(lines) + "\n"


def refusal(cases: list[str], smoke: bool) -> str | None:
    """Why the check can't run on this machine, in one line; None when it can."""
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        return f"unknown case {unknown[0]!r}; cases: {', '.join(CASES)}"
    if smoke:
        return None
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU visible: this check needs one (on a CPU, --smoke checks the script itself)"
    return None


def _occupied(out: Path) -> str | None:
    """Why ``out`` can't take this check's job folders: an earlier check's are there (they are never deleted)."""
    jobs = out / JOBS
    if jobs.is_dir() and any(jobs.iterdir()):
        return f"{jobs} holds an earlier check's job folders: give another --out"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--smoke", action="store_true", help="a tiny CPU run of precision and lora: checks the script")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"folder for the report and the job folders (default: a new one in {OUT_PARENT})",
    )
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if args.smoke and args.cases == parser.get_default("cases"):
        cases = list(SMOKE_CASES)
    found = versions()
    print(versions_line(found), file=sys.stderr, flush=True)
    out = args.out or OUT_PARENT / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if reason := refusal(cases, args.smoke) or _occupied(out):
        print(f"error: {reason}", file=sys.stderr)
        sys.exit(2)

    import torch

    budget = harness.Budget(TOTAL_BUDGET_S)
    # The random model is scratch; the job folders stay under <out>/jobs.
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        ctx = Context(
            model_dir=Path(tmp) / "qwen2_5_0_5b_random",
            jobs=out / JOBS,
            smoke=args.smoke,
            budget=budget,
            gpus=0 if args.smoke else torch.cuda.device_count(),
        )
        build_model(ctx.model_dir, args.smoke)
        model_build_s = round(budget.spent(), 1)
        print(f"model built in {model_build_s} s", file=sys.stderr)
        rows = run_cases(ctx, cases)
    gpu = next((r["layout"].get("gpu_name") for r in rows if r.get("layout", {}).get("gpu_name")), None)
    report = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "smoke": args.smoke,
        "gpu": gpu,
        "gpus_visible": ctx.gpus,
        "versions": found,
        "model_build_s": model_build_s,
        "wall_s": round(budget.spent(), 1),
        "cases": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (out / "gpu_check.md").write_text(table)
    print(table)
    print(f"written to {out} (job folders in {out / JOBS})", file=sys.stderr)
    if any(r["status"] == "failed" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
