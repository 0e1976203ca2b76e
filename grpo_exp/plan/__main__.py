"""``python -m grpo_exp.plan [options] <run.py's overrides>``: the memory a job (or each job of a
``-m`` sweep) needs per device, without downloading or loading weights.

Options: ``--gpu-memory 24GiB`` plans for a GPU of that size (on any machine, native bf16 assumed);
``--launcher zero3`` / ``--processes 8`` plan a launch (accelerate configs in accelerate/);
``--json`` prints one JSON object (a sweep's: its jobs under ``jobs``, the largest peak on top),
with ``verdict`` "fits" | "tight" | "does not fit" (``fits`` is true only for "fits": the line
between them is ``memory.estimate``'s ``FITS_SHARE``);
a ``-m`` sweep also says how many of its jobs ``+launcher=parallel`` runs at a time and the bound
that decided (``launch``; ``sweep.packing``), on this machine or on one described by ``--gpus`` (of
``--gpu-memory`` each), ``--cores`` and ``--host-memory``;
``--probe`` also runs ``grpo_exp.plan.probe`` on the job (it loads the model) and shows its result
(under ``probe`` in the JSON). Exit 2 with one line for bad input; a plan that doesn't fit is
still exit 0. A plan imports no torch, except the first time a model shape is planned (one of its
layers is measured, ``memory.activations``) or a dataset's prompts are counted with the job's
tokenizer (``memory.prompts``): both are cached, and the plan says when it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from typing import Any

from grpo_exp.errors import EXIT_USER_ERROR, UserError

VERDICTS = ("fits", "tight", "does not fit")  # memory.estimate's, best first (not imported: it is lazy)

# Size units for --gpu-memory; a bare G/M/K is binary, as nvidia-smi and torch report memory.
UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, flag: str = "--gpu-memory") -> int:
    """``24GiB``, ``24GB``, ``80G``, ``16000MiB`` or bytes; a one-line UserError naming ``flag`` otherwise."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in UNITS or float(match.group(1)) <= 0:
        raise UserError(f"{flag} {text}: give a size such as 24GiB, 80GB or 16000MiB")
    return int(float(match.group(1)) * UNITS[unit])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_exp.plan",
        description="Memory plan of a GRPO job per device (the same overrides as run.py).",
    )
    p.add_argument("-m", "--multirun", action="store_true", help="plan every job of the sweep")
    p.add_argument("--gpu-memory", help="plan for a GPU of this size, e.g. 24GiB, 80GB")
    p.add_argument("--launcher", help="an accelerate config: ddp, zero2, zero3, fsdp (accelerate/) or a path")
    p.add_argument("--processes", type=int, help="training processes (GPUs); default: the launcher's, WORLD_SIZE")
    p.add_argument(
        "--gpus", type=int, help="pack a sweep's jobs on this many GPUs of --gpu-memory; default: this machine's, or 1"
    )
    p.add_argument("--cores", type=int, help="pack a sweep's jobs on this many cores; default: this machine's")
    p.add_argument(
        "--host-memory", help="pack a sweep's jobs in this much free host memory, e.g. 128GiB; default: this machine's"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--probe", action="store_true", help="also probe the job for real (loads the model)")
    return p


def main(argv: list[str] | None = None) -> int:
    args, overrides = parser().parse_known_args(argv)
    try:
        # With --json, stdout is the JSON alone: whatever a library prints on the way (transformers prints
        # "[INFO] Running in WANDB offline mode" when it loads under WANDB_MODE=offline) goes to stderr.
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            result = run(args, overrides)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(result)
    return 0


def run(args: argparse.Namespace, overrides: list[str]) -> str:
    from grpo_exp.memory.estimate import memory_plan_of_settings
    from grpo_exp.memory.table import format_plan
    from grpo_exp.memory.target import job_target
    from grpo_exp.plan import jobs

    gpu_memory = parse_size(args.gpu_memory) if args.gpu_memory is not None else None
    host_memory = parse_size(args.host_memory, "--host-memory") if args.host_memory is not None else None
    for flag, value in (("--processes", args.processes), ("--gpus", args.gpus), ("--cores", args.cores)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: give 1 or more")
    launch = jobs.launch(args.launcher, args.processes)
    composed = list(jobs.composed_jobs(overrides, args.multirun))
    texts, dicts, sweep = [], [], jobs.SweepNeeds()
    for number, (job, settings) in enumerate(composed, 1):
        planned_gpu = gpu_memory is not None or args.gpus is not None or settings.model.quantization.load_in_4bit
        layout, simulated = jobs.layout_for(settings, launch.processes, planned_gpu)
        target = job_target(settings, layout, gpu_memory, launch.sharding, simulated)
        plan = memory_plan_of_settings(settings, target)
        sweep.add(settings, layout, target, plan.peak_bytes, simulated)
        entry: dict[str, Any] = {"overrides": job, **plan.to_dict()}
        title = f"job {number}/{len(composed)}: {' '.join(job) or '(defaults)'}"
        text = format_plan(plan, title)
        if args.probe:
            entry["probe"], probe_text = _probe(job)
            text += "\n" + probe_text
        texts.append(text)
        dicts.append(entry)
    packed = None
    if args.multirun:
        given = (args.gpu_memory, args.gpus, args.cores, args.host_memory)
        machine = sweep.machine(args.cores, host_memory, args.gpus, planned=any(g is not None for g in given))
        packed = jobs.sweep_packing([job for job, _ in composed], machine, sweep)
        texts.append(packed.line())
    if not args.json:
        return "\n\n".join(texts)
    if len(dicts) == 1 and not args.multirun:
        return json.dumps(dicts[0], indent=2)
    largest = max(dicts, key=lambda d: d["peak_bytes"])
    fits = [d["fits"] for d in dicts]
    verdicts = [d["verdict"] for d in dicts]
    summary = {
        "peak_bytes": largest["peak_bytes"],
        "verdict": None if None in verdicts else max(verdicts, key=VERDICTS.index),  # the worst job's
        "fits": None if None in fits else all(fits),
        "items": largest["items"],
        "jobs": dicts,
    }
    if packed is not None:
        summary["launch"] = packed.to_dict()
    return json.dumps(summary, indent=2)


def _probe(job: list[str]) -> tuple[dict[str, Any], str]:
    """Run the probe (grpo_exp/plan/probe.py) on the job's full spec: it needs this machine to run it."""
    try:
        from grpo_exp.plan.probe import format_probe, probe
    except ImportError as exc:
        raise UserError(f"--probe needs grpo_exp/plan/probe.py ({exc})") from None
    from hydra import initialize_config_dir

    from grpo_exp.config.schema import CONF_DIR, PRIMARY_CONFIG, register_schema
    from grpo_exp.job.preflight import compose_job, job_spec

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        spec = job_spec(compose_job(PRIMARY_CONFIG, job))
    result = probe(spec)
    return result, format_probe(result)


if __name__ == "__main__":
    sys.exit(main())
