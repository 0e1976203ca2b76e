"""gpu_check's jobs: their sizes, how one starts (``python run.py`` on the random model, with the timing
shim), and how a finished one becomes a row of the report (status, layout, steps, memory against its plan).

Shared by the cases in ``gpu_check.py`` and ``gpu_check_user_runs.py``.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness


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


# Each GPU workload is sized to its question; together they stay well inside the check's budget.
TRAINING_WORKLOAD = Workload(steps=2, num_generations=4, prompts_per_step=2, max_completion_length=64)
# vLLM's gain is batching: 64 completions of 256 tokens at once (the article's length), 1 warm-up step + 3.
GENERATION_WORKLOAD = Workload(steps=4, num_generations=8, prompts_per_step=8, max_completion_length=256)
SMOKE_WORKLOAD = Workload(steps=1, num_generations=4, prompts_per_step=2, max_completion_length=8)
WARMUP_CALLS = 1  # timings dropped from the front: CUDA kernels, vLLM's first batch, allocator growth
LEARNING_RATE = 2e-5  # the article's rate; Adam's first steps move every weight by about this much
LENGTH_TARGET_CHARS = 4096  # above any completion here: the reward pays for every character
# Each case's own limit (the smoke run's: SMOKE_TIMEOUT_S); the whole check's budget caps it too.
CASE_TIMEOUT_S = {
    "default_run": 180,
    "sweep": 180,
    "vs_trl": 150,  # each of its two processes
    "precision": 150,
    "lora": 150,
    "qlora": 150,
    "vllm": 330,
    "two_processes": 180,
}
SMOKE_TIMEOUT_S = 240
# Timed inside each job by the harness's shim: generation, and vLLM's weight sync (which runs inside it).
TIMED = {
    "trl.trainer.grpo_trainer:GRPOTrainer._generate": "generate_s",
    "trl.generation.vllm_generation:VLLMGeneration.sync_weights": "sync_weights_s",
}
CONSOLE_LOG = "console.log"


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
    finished = harness.run_py(
        *random_model_job(ctx.model_dir, ctx.smoke),
        *overrides,
        job=folder,
        launcher=harness.torchrun_launcher(processes) if processes > 1 else (),
        env=offline_env(timings),
        timeout_s=timeout_s,
        log=folder / CONSOLE_LOG,  # beside the job's run.log: also what ran before its logging began
    )
    return TimedJob(folder, finished, harness.timings(timings))


def random_model_job(model_dir: Path | str, smoke: bool) -> list[str]:
    """What every random-model job overrides, before its case's own overrides."""
    return [
        "model=qwen2_5_0_5b_instruct",
        f"model.name_or_path={model_dir}",
        "logger=none",
        *(["device=cpu", "threads=1"] if smoke else ["device=cuda"]),
        "grpo.save_steps=0",  # no checkpoints: only the final model/ matters here
        "dataset.eval_fraction=0",  # no held-out evaluation: every second goes to the steps measured
        # Random weights never write the article's format, so its reward is flat and nothing would train
        # (zero advantages); characters vary with the sampled tokens, so a length reward gives groups spread.
        "reward=custom",
        "reward.parts.main.fn=length_score",
        f"+reward.parts.main.params.target={LENGTH_TARGET_CHARS}",
        f"optimizer.lr={LEARNING_RATE}",
    ]


def offline_env(timings: Path | None = None) -> dict[str, str]:
    """The job's environment: no hub; with ``timings``, the shim's timers and memory peaks too."""
    env = harness.timed_env(timings, TIMED) if timings else dict(harness.quiet_env())
    return env | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


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
