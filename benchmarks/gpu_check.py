"""A GPU check that fits in five minutes, offline: GRPO steps on Qwen2.5-0.5B's architecture.

No hub is needed: the model is built from Qwen2.5-0.5B's config with random weights, and the
tokenizer is a byte-level BPE of the same vocabulary size made up on the spot (random weights
make every completion run to the full length, so each case generates the same number of tokens).
Four cases, each in its own process (vLLM keeps its GPU memory until the process ends): TRL's
GRPOTrainer generating with transformers (``hf``) and with vLLM in the training process
(``vllm``: TRL's colocate mode), each with full fine-tuning and with LoRA. For each: completion
tokens per second while generating, median step time, and peak GPU memory.

Usage (a GPU machine with ``make setup TORCH=torch EXTRAS=dev,vllm``)::

    .venv/bin/python benchmarks/gpu_check.py                  # all four cases, about 5 minutes
    .venv/bin/python benchmarks/gpu_check.py --cases hf,vllm --steps 8
    .venv/bin/python benchmarks/gpu_check.py --smoke          # on a CPU: the plumbing, tiny and short

``--smoke`` runs the ``hf`` case on the CPU with 2 layers, 1 step and short completions: it
checks the script, not the speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Qwen/Qwen2.5-0.5B-Instruct's config.json (the architecture; the weights here are random).
QWEN2_5_0_5B = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
    "use_sliding_window": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 151643-151645, as in Qwen's tokenizer
CASES = {  # name -> (generate with vLLM, LoRA)
    "hf": (False, False),
    "vllm": (True, False),
    "hf_lora": (False, True),
    "vllm_lora": (True, True),
}
# The workload: 2 prompts x groups of 8 per step, completions of 256 tokens (the article's default).
WORKLOAD = {"num_generations": 8, "per_device_train_batch_size": 16, "max_completion_length": 256, "steps": 5}
SMOKE = {"num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 8, "steps": 1, "layers": 2}
VLLM_MEMORY_SHARE = 0.3  # of the GPU, for vLLM's weights and KV cache in colocate mode
LORA = {"r": 16, "lora_alpha": 32, "target_modules": "all-linear"}
PROMPTS = 64


def build_model(folder: Path, layers: int | None) -> None:
    """Random-weight Qwen2.5-0.5B (bf16) and a tokenizer of its vocabulary size, saved to ``folder``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**{**QWEN2_5_0_5B, "num_hidden_layers": layers or QWEN2_5_0_5B["num_hidden_layers"]})
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    build_tokenizer(QWEN2_5_0_5B["bos_token_id"]).save_pretrained(folder)


def build_tokenizer(regular: int):
    """A byte-level BPE with ``regular`` tokens (bytes, then pairs, then triples) and Qwen's special tokens.

    Made-up merges rather than a trained vocabulary: only the size matters to the speed of the
    embedding and the output layer, and it needs no download.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = list(pre_tokenizers.ByteLevel.alphabet())
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    merges = []
    for first in sorted(alphabet):
        for second in sorted(alphabet):
            if len(vocab) < regular:
                merges.append((first, second))
                vocab[first + second] = len(vocab)
    pairs = [token for token in vocab if len(token) == 2]
    for pair in pairs:
        for second in sorted(alphabet):
            if len(vocab) < regular:
                merges.append((pair, second))
                vocab[pair + second] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})  # in Qwen's order, so Qwen's ids
    tokenizer.eos_token, tokenizer.pad_token = "<|im_end|>", "<|endoftext|>"
    return tokenizer


def length_reward(completions, **kwargs):
    """Any reward will do for timing; this one varies, so GRPO has advantages to train on."""
    return [len(c) / 1000 for c in completions]


def run_case(name: str, model_dir: Path, out: Path, workload: dict, cpu: bool) -> dict:
    """One case in this process: train a few steps and return its figures."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    use_vllm, lora = CASES[name]
    gen_seconds: list[float] = []
    step_ends: list[float] = []

    def sync() -> None:
        if not cpu:
            torch.cuda.synchronize()

    class TimedGRPOTrainer(GRPOTrainer):
        """Times generation (HF or vLLM) inside each step."""

        def _generate(self, *args, **kwargs):
            sync()
            start = time.perf_counter()
            result = super()._generate(*args, **kwargs)
            sync()
            gen_seconds.append(time.perf_counter() - start)
            return result

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            sync()
            step_ends.append(time.perf_counter())

    dtype = torch.float32 if cpu else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = Dataset.from_list([{"prompt": f"Question {i}: explain step {i} of the plan."} for i in range(PROMPTS)])
    config = GRPOConfig(
        output_dir=str(out),
        use_cpu=cpu,
        bf16=not cpu,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_steps=workload["steps"],
        num_generations=workload["num_generations"],
        per_device_train_batch_size=workload["per_device_train_batch_size"],
        max_completion_length=workload["max_completion_length"],
        learning_rate=1e-6,
        beta=0.0,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=VLLM_MEMORY_SHARE,
    )
    trainer = TimedGRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=length_reward,
        args=config,
        train_dataset=prompts,
        peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA) if lora else None,
        callbacks=[StepClock()],
    )
    if not cpu:
        torch.cuda.reset_peak_memory_stats()
    sync()
    started = time.perf_counter()
    trainer.train()
    lengths = [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]
    tokens = sum(lengths) * workload["per_device_train_batch_size"]
    steps = [b - a for a, b in zip([started, *step_ends], step_ends, strict=False)]
    return {
        "case": name,
        "steps": len(steps),
        "completion_tokens": round(tokens),
        "generation_tokens_per_s": round(tokens / sum(gen_seconds), 1),
        "median_step_s": round(statistics.median(steps[1:] or steps), 3),  # the first step warms up
        "peak_gpu_memory_gib": None if cpu else round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "gpu_memory_in_use_gib": None if cpu else round(_in_use_gib(), 2),
    }


def _in_use_gib() -> float:
    """GPU memory in use by anything (vLLM's pool included), as the driver reports it."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def refusal(cases: list[str], smoke: bool) -> str | None:
    """Why these cases can't run on this machine, in one line; None when they can."""
    import importlib.util

    import torch

    if smoke:
        return None
    if not torch.cuda.is_available():
        return "no CUDA GPU visible: this check needs one (on a CPU, --smoke checks the script itself)"
    if any(CASES[c][0] for c in cases) and importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed: pip install -e '.[vllm]', or run --cases hf,hf_lora"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--steps", type=int, default=WORKLOAD["steps"], help="GRPO steps per case")
    parser.add_argument("--smoke", action="store_true", help="a tiny CPU run of the hf case: checks the script")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case in this process
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    workload = {**(SMOKE if args.smoke else WORKLOAD)}
    workload["steps"] = 1 if args.smoke else args.steps

    if args.case:
        out = Path(tempfile.mkdtemp(prefix=f"gpu_check_{args.case}_"))
        print("RESULT " + json.dumps(run_case(args.case, args.model_dir, out, workload, cpu=args.smoke)), flush=True)
        return

    cases = ["hf"] if args.smoke else [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    reason = f"unknown case {unknown[0]!r}; cases: {', '.join(CASES)}" if unknown else refusal(cases, args.smoke)
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        sys.exit(2)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp, "qwen2_5_0_5b_random")
        started = time.perf_counter()
        build_model(model_dir, SMOKE["layers"] if args.smoke else None)
        print(f"model built in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for case in cases:
            command = [
                sys.executable,
                __file__,
                "--case",
                case,
                "--model-dir",
                str(model_dir),
                "--steps",
                str(args.steps),
            ]
            command += ["--smoke"] if args.smoke else []
            started = time.perf_counter()
            result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ))
            lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
            if result.returncode or not lines:
                print(f"{case}: failed (exit {result.returncode}):\n{result.stderr[-3000:]}", file=sys.stderr)
                continue
            results.append({**json.loads(lines[-1][len("RESULT ") :]), "wall_s": round(time.perf_counter() - started)})
    print(f"\n{workload['steps']} steps x {workload['per_device_train_batch_size']} completions of up to "
          f"{workload['max_completion_length']} tokens (groups of {workload['num_generations']})\n")  # fmt: skip
    print("| case | generation tokens/s | median step (s) | peak torch GPU memory (GiB) | GPU memory in use (GiB) "
          "| wall (s) |\n|---|---|---|---|---|---|")  # fmt: skip
    for r in results:
        print(f"| {r['case']} | {r['generation_tokens_per_s']} | {r['median_step_s']} | {r['peak_gpu_memory_gib']} | "
              f"{r['gpu_memory_in_use_gib']} | {r['wall_s']} |")  # fmt: skip
    by_case = {r["case"]: r for r in results}
    for plain, fast in (("hf", "vllm"), ("hf_lora", "vllm_lora")):
        if plain in by_case and fast in by_case:
            speedup = by_case[fast]["generation_tokens_per_s"] / by_case[plain]["generation_tokens_per_s"]
            print(f"\nvLLM generation speed-up over transformers ({plain}): {speedup:.2f}x")
    if len(results) < len(cases):
        sys.exit(1)


if __name__ == "__main__":
    main()
