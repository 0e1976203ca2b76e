"""What long runs cost: checkpoint size and write time, and how soon a resumed run trains again.

Prints, as Markdown:

- the tiny model: a real run through ``run.py`` with a checkpoint every few steps; the size of one
  checkpoint (weights, optimizer, scheduler, RNG and trainer state) and the time each took to
  write (from the first file written to the seal, read off the files' times);
- resume: seconds from starting ``python run.py resume=<folder>`` to its first new step, beside a
  fresh start's seconds to its first step;
- Qwen2.5-0.5B, computed from its architecture (parameters counted on the meta device, no
  weights): checkpoint size for full fine-tuning and for LoRA (r=16, all linear layers), and the
  write time those sizes would take at the disk speed measured for the tiny model.

Usage::

    .venv/bin/python benchmarks/checkpoints.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness
from grpo_exp.folder import JobFolder
from grpo_exp.training import checkpoints

STEPS, EVERY = 12, 4
# Qwen/Qwen2.5-0.5B-Instruct's config.json (the dimensions that decide the parameter count).
QWEN2_5_0_5B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
LORA_RANK = 16
ADAM_STATES = 2  # exp_avg and exp_avg_sq, one each per trainable parameter, in the parameter's dtype


def seconds_to_step(job: Path, step: int, *args: str) -> float:
    """Seconds from starting run.py until metrics.jsonl holds ``step``; the run is left to finish."""

    def reached() -> bool:
        return any(row.get("step", 0) >= step for row in JobFolder(job).rows())

    finished = harness.run_py(*args, until=reached, check=True)
    return finished.reached_s if finished.reached_s is not None else sys.exit(f"run.py never logged step {step}")


def checkpoint_figures(job: Path) -> tuple[int, list[float]]:
    """Bytes of the latest checkpoint, and each checkpoint's write time in seconds."""
    times = []
    for _, path in JobFolder(job).checkpoints():
        mtimes = [p.stat().st_mtime for p in path.iterdir() if p.name != checkpoints.SEAL_FILE]
        times.append((path / checkpoints.SEAL_FILE).stat().st_mtime - min(mtimes))
    latest = JobFolder(job).checkpoints()[0][1]
    size = sum(p.stat().st_size for p in latest.rglob("*") if p.is_file())
    return size, times


def qwen_parameters() -> tuple[int, int]:
    """Qwen2.5-0.5B's parameters, and LoRA's (r=16 on every linear layer), counted without weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Qwen2Config

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen2Config(**QWEN2_5_0_5B))
    total = sum(p.numel() for p in model.parameters())
    lora = get_peft_model(model, LoraConfig(r=LORA_RANK, target_modules="all-linear", task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    return total, trainable


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # no options: --help only
    print(f"CPUs: {os.cpu_count()}; load average before: {os.getloadavg()[0]:.2f}\n")
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp, "job")
        common = ("logger=none", f"grpo.save_steps={EVERY}")
        fresh = seconds_to_step(job, 1, f"grpo.max_steps={STEPS}", *common, f"hydra.run.dir={job}")
        size, write_times = checkpoint_figures(job)
        resumed = seconds_to_step(job, STEPS + 1, f"resume={job}", f"grpo.max_steps={STEPS + 2}")
    mb_per_s = size / 1e6 / max(write_times)
    print("| tiny model (1.1 M parameters) | figure |\n|---|---|")
    print(f"| checkpoint size | {size / 1e6:.1f} MB |")
    each = ", ".join(f"{t:.2f}" for t in write_times)
    print(f"| checkpoint write time ({len(write_times)} checkpoints) | {each} s |")
    print(f"| fresh start to first step | {fresh:.1f} s |")
    print(f"| `resume=` to first resumed step | {resumed:.1f} s |")

    total, lora = qwen_parameters()
    print(f"\n| Qwen2.5-0.5B ({total / 1e6:.0f} M parameters), computed | size | write at {mb_per_s:.0f} MB/s |")
    print("|---|---|---|")
    rows = {
        "full fine-tuning, bf16 weights + bf16 AdamW states": total * 2 * (1 + ADAM_STATES),
        "full fine-tuning, fp32 weights + fp32 AdamW states": total * 4 * (1 + ADAM_STATES),
        f"LoRA r={LORA_RANK} ({lora / 1e6:.1f} M trainable), fp32 adapter + states": lora * 4 * (1 + ADAM_STATES),
    }
    for label, bytes_ in rows.items():
        print(f"| {label} | {bytes_ / 1e9:.3f} GB | {bytes_ / 1e6 / mb_per_s:.1f} s |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
