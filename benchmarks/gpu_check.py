"""The GPU story in one script, offline, under eight minutes: what users run (run.py), checked on a GPU.

First what users run as they run it, on the embedded default model:

- ``default_run``: ``python run.py logger=none``, the default recipe to its end (150 steps): the
  held-out reward before -> after (summary.json) and the precision and attention it trained in
  (run_info.json's layout); it must complete and its held-out reward rise.
- ``sweep``: ``python run.py -m +launcher=parallel seed=1,2,3,4 logger=none``, shortened to
  ``SWEEP_STEPS`` steps so that it fits the budget: the jobs at a time its launch line says, and the
  jobs completed (all four must).

The rest needs no hub either: the model is Qwen2.5-0.5B's architecture with random weights and a made-up
tokenizer of its vocabulary (``random_qwen.py``). Every case is one ``python run.py model=qwen2_5_0_5b_instruct
model.name_or_path=<that folder> ...`` job in its own process (vLLM keeps its GPU memory until the
process ends), read back from its job folder (``metrics.jsonl``, ``summary.json``, ``run_info.json``'s
layout, ``plan.json``, ``model/``):

- ``vs_trl``: 5 steps of 8 prompts x 8 completions of 128 tokens through run.py, then the same job as
  plain TRL writes it (``trl_random_qwen.py``, the same GRPOConfig): the train loop (the trainer's
  ``train_runtime``) and the whole process, each side.

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

    python benchmarks/gpu_check.py                            # every case that fits 8 minutes
    python benchmarks/gpu_check.py --cases precision,vllm --out /scratch/gpu_check
    python benchmarks/gpu_check.py --budget-s 300             # a case that no longer fits is skipped
    python benchmarks/gpu_check.py --dry-run                  # the plan: cases, estimates, what fits
    python benchmarks/gpu_check.py --smoke --out /tmp/check   # on a CPU: the plumbing

Its first line names the versions it found. Everything goes under ``--out`` (by default a new folder
in ``~/grpo_exp_gpu_check``, never the repository): ``gpu_check.json`` and ``.md``, and ``jobs/<case>/``,
each job's own folder (``run.log``, ``error.txt`` when it failed, ``console.log``: its console output,
``metrics.jsonl``, ``plan.json``), kept so that a failure can be explained. The report is written again
after every case, so a check stopped at its limit keeps the rows it finished. Copy the table into
benchmarks/gpu_check.md by hand once it has run on a GPU.

``--smoke`` runs the cases a CPU can (precision, lora by default; default_run, sweep and vs_trl when
named) through run.py with ``device=cpu`` on a shrunken model (2 layers, a small vocabulary), 1-2 steps,
short completions: it checks the script and the precision measurement, not the speed.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness
from benchmarks.gpu_check_jobs import (
    GENERATION_WORKLOAD,
    LEARNING_RATE,
    TRAINING_WORKLOAD,
    WARMUP_CALLS,
    Context,
    check,
    job_row,
    median_after_warmup,
    run_job,
    skipped,
)
from benchmarks.gpu_check_report import markdown, versions, versions_line
from benchmarks.gpu_check_user_runs import DEFAULT_RUN_STEPS, SWEEP_STEPS, case_default_run, case_sweep, case_vs_trl
from benchmarks.random_qwen import build_model

OUT_PARENT = Path.home() / "grpo_exp_gpu_check"  # --out's default is a new folder in here: outside the tree
JOBS = "jobs"  # <out>/jobs/<case>/: each job's folder, kept
BF16_CONTROL_WEIGHT = "model.layers.0.mlp.down_proj.weight"  # any matrix with Qwen's initialisation
CHANGED_SHARE_MIN = 0.5  # fp32 master weights: most elements must move in one step
UNCHANGED_SHARE_MIN = 0.5  # pure bf16: most elements must stay put (the round-away the check shows)
# Per case on one H200, start-up included. Measured there on 2026-12-04 (gpu_check.md): precision 48 s,
# lora 39 s, qlora 41 s, model build 18 s; the default's 150 steps in fp32 took 63 s; plain TRL's 5-step
# 0.5B job 57 s and run.py's 62 s. The rest are guesses: the sweep's 4 jobs of 40 steps side by side.
CASE_ESTIMATE_S = {
    "default_run": 80,
    "sweep": 80,
    "vs_trl": 130,
    "precision": 50,
    "lora": 40,
    "qlora": 45,
    "vllm": 240,
    "two_processes": 70,
}
MODEL_BUILD_ESTIMATE_S = 20  # the random model; the embedded one, when its cache is cold, takes minutes more
EMBEDDED_CASES = {"default_run", "sweep"}  # they train the embedded default model (its cache is warmed first)
CASE_WHAT = {  # what --dry-run says each case runs
    "default_run": f"python run.py logger=none ({DEFAULT_RUN_STEPS} steps): held-out reward before -> after",
    "sweep": f"python run.py -m +launcher=parallel seed=1,2,3,4 logger=none grpo.max_steps={SWEEP_STEPS}",
    "vs_trl": "random 0.5B, 5 steps, run.py then plain TRL: train loop and whole process",
    "precision": "random 0.5B full fine-tuning: float32 master weights against a pure-bf16 control",
    "lora": "random 0.5B LoRA: the adapter trains",
    "qlora": "random 0.5B QLoRA (bitsandbytes): the adapter trains on a 4-bit base",
    "vllm": "vLLM colocate against transformers generation (vLLM installed)",
    "two_processes": "torchrun with 2 processes (2 GPUs)",
}
TOTAL_BUDGET_S = 470  # under 8 minutes by default (--budget-s): a case that no longer fits is skipped, not started


# ---------------------------------------------------------------- the random model's cases


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


def case_qlora(ctx: Context) -> list[dict[str, Any]]:
    """QLoRA: the same on a 4-bit base (bitsandbytes)."""
    return case_lora(ctx, quantized=True)


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
    "default_run": case_default_run,
    "sweep": case_sweep,
    "vs_trl": case_vs_trl,
    "precision": case_precision,
    "lora": case_lora,
    "qlora": case_qlora,
    "vllm": case_vllm,
    "two_processes": case_two_processes,
}
SMOKE_CASES = ("precision", "lora")  # run by --smoke unless --cases names others


def run_cases(
    ctx: Context, cases: list[str], written: Callable[[list[dict[str, Any]]], None] = lambda rows: None
) -> list[dict[str, Any]]:
    """Every case's rows, in order, each stamped with when it finished, with its wall time printed;
    ``written`` gets the rows so far after every case (the report is rewritten then).

    On a GPU one after another (each job has the GPU to itself, and a case that no longer fits the
    time budget is skipped); the smoke run's CPU jobs run side by side, one torch thread each, since
    most of a tiny job is its single-threaded start-up."""
    done: list[dict[str, Any]] = []

    def one(case: str) -> list[dict[str, Any]]:
        left = ctx.budget.left()
        if not ctx.smoke and left < CASE_ESTIMATE_S[case]:
            total = ctx.budget.total_s
            rows = [skipped(case, f"time budget: {left:.0f} s left of {total:.0f}, needs ~{CASE_ESTIMATE_S[case]}")]
        else:
            started = time.monotonic()
            rows = CASES[case](ctx)
            statuses = ", ".join(f"{r['case']} {r['status']}" for r in rows)
            print(f"{case}: {statuses} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        for row in rows:
            row["finished_at"] = _now()
        done.extend(rows)
        written(done)
        return rows

    if not ctx.smoke:
        return [row for case in cases for row in one(case)]
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        return [row for rows in pool.map(one, cases) for row in rows]


def plan(cases: list[str], budget_s: float) -> list[tuple[str, int, bool]]:
    """What a GPU run would do, in order: each case, its estimate, and whether it would still start
    (the model build first, then the estimates in turn: what ``run_cases`` skips on time)."""
    spent = float(MODEL_BUILD_ESTIMATE_S)
    planned = []
    for case in cases:
        fits = budget_s - spent >= CASE_ESTIMATE_S[case]
        spent += CASE_ESTIMATE_S[case] if fits else 0
        planned.append((case, CASE_ESTIMATE_S[case], fits))
    return planned


def plan_text(cases: list[str], budget_s: float) -> str:
    lines = [
        f"plan within {budget_s:.0f} s (model build ~{MODEL_BUILD_ESTIMATE_S} s first; the embedded model's, "
        "when its cache is cold, a few minutes more: warm it with one CPU run of the default beforehand):"
    ]
    for case, estimate, fits in plan(cases, budget_s):
        lines.append(f"  {case:<14} ~{estimate:>3} s  {'runs   ' if fits else 'skipped'}  {CASE_WHAT[case]}")
    return "\n".join(lines)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# ---------------------------------------------------------------- running the check


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
        "--budget-s",
        type=float,
        default=TOTAL_BUDGET_S,
        help=f"seconds the whole check may take; a case that no longer fits is skipped (default {TOTAL_BUDGET_S})",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan (cases, estimates, what fits) and stop")
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
    if args.dry_run:
        if reason := refusal(cases, smoke=True):  # only the case names: the plan needs no GPU
            print(f"error: {reason}", file=sys.stderr)
            sys.exit(2)
        print(plan_text(cases, args.budget_s))
        return
    out = args.out or OUT_PARENT / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if reason := refusal(cases, args.smoke) or _occupied(out):
        print(f"error: {reason}", file=sys.stderr)
        sys.exit(2)

    import torch

    budget = harness.Budget(args.budget_s)
    report: dict[str, Any] = {
        "date": _now(),
        "smoke": args.smoke,
        "gpu": None,
        "gpus_visible": 0 if args.smoke else torch.cuda.device_count(),
        "versions": found,
        "command": " ".join(["python", *sys.argv]),
        "budget_s": args.budget_s,
        "model_build_s": None,
        "wall_s": None,
        "cases": [],
    }

    def write(rows: list[dict[str, Any]]) -> None:
        """The report as it stands: rewritten after every case, so a check stopped at its limit keeps its rows."""
        gpu = next((r["layout"].get("gpu_name") for r in rows if (r.get("layout") or {}).get("gpu_name")), None)
        report.update(cases=list(rows), gpu=gpu, wall_s=round(budget.spent(), 1))
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "gpu_check.md").write_text(markdown(report))

    # The random model is scratch; the job folders stay under <out>/jobs.
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        ctx = Context(
            model_dir=Path(tmp) / "qwen2_5_0_5b_random",
            jobs=out / JOBS,
            smoke=args.smoke,
            budget=budget,
            gpus=report["gpus_visible"],
        )
        build_model(ctx.model_dir, args.smoke)
        if EMBEDDED_CASES & set(cases):  # the default's cached model: built here when cold, outside any case
            harness.default_model()
        report["model_build_s"] = round(budget.spent(), 1)
        print(f"models built in {report['model_build_s']} s", file=sys.stderr)
        rows = run_cases(ctx, cases, write)
    write(rows)
    print(markdown(report))
    print(f"written to {out} (job folders in {out / JOBS})", file=sys.stderr)
    if any(r["status"] == "failed" for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
