"""gpu_check's report: the versions it ran with, and its rows as the markdown table gpu_check.md holds."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

VERSIONS_OF = ("transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm")  # beside python and torch
GIB = 2**30


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
        ("held_out_before", "held-out before"),
        ("held_out_after", "held-out after"),
        ("attention", "attention"),
        ("jobs_completed", "jobs completed"),
        ("jobs_at_a_time", "jobs at a time"),
        ("train_loop_s", "train loop s"),
        ("process_s", "process s"),
        ("loop_over_plain", "loop / plain TRL"),
        ("process_over_plain", "process / plain TRL"),
        ("train_loss", "train loss"),
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
        f"- command: `{report.get('command', 'python benchmarks/gpu_check.py')}` (budget {report.get('budget_s')} s)",
        f"- total wall time: {report['wall_s']} s (model build {report['model_build_s']} s)",
        "",
        "| case | status | finished (UTC) | wall (s) | layout | figures | peak memory (GiB) | reserved (GiB) "
        "| plan peak (GiB) | measured / plan | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["cases"]:
        layout = row.get("layout") or {}
        where = (
            f"{layout.get('device')} {layout.get('precision')}, {layout.get('weight_dtype')} weights"
            + (f", {layout['attention']} attention" if layout.get("attention") else "")
            if layout
            else "-"
        )
        memory = row.get("memory") or {}
        cells = [
            row["case"],
            row["status"],
            row.get("finished_at", "-"),
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
