"""Plain TRL on gpu_check's random-weight Qwen2.5-0.5B: the yardstick of its ``vs_trl`` case.

What a TRL user would write by hand for the job gpu_check runs through run.py (``model=qwen2_5_0_5b_instruct``
on the random model, the shipped customer-service prompts as user messages, a length reward of target
4096 characters, lr 2e-5, 8 prompts x 8 completions of up to 128 tokens): the same ``GRPOConfig`` values
(``tests/test_gpu_check.py`` holds them equal to what run.py composes) and nothing imported from
grpo_exp. So the train loop should take the same time on both sides, and any difference in the whole
process is grpo-exp's start-up.

Usage (gpu_check.py runs it; ``--cpu`` for its smoke run)::

    python benchmarks/trl_random_qwen.py --model <random model folder> --out /tmp/plain

It writes ``<out>/metrics.jsonl``: every log of the trainer, its last with ``train_runtime``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "grpo_exp" / "data" / "customer_service.jsonl"
TARGET_CHARS = 4096  # gpu_check's LENGTH_TARGET_CHARS: above any completion, so every character pays
# The GRPOConfig run.py composes for gpu_check's vs_trl job on a bf16 GPU (conf/grpo/default.yaml,
# conf/optimizer/adamw.yaml, conf/model/qwen2_5_0_5b_instruct.yaml and the job's overrides), less the
# workload, which comes from the command line.
CONFIG = {
    "seed": 42,
    "learning_rate": 2e-5,
    "optim": "adamw_torch",
    "weight_decay": 0.0,
    "lr_scheduler_type": "constant",
    "max_grad_norm": 1.0,
    "gradient_accumulation_steps": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "beta": 0.04,
    "epsilon": 0.2,
    "loss_type": "dapo",
    "scale_rewards": "group",
    "logging_steps": 1,
    "save_strategy": "no",
    "eval_strategy": "no",
}
GPU = {"use_cpu": False, "bf16": True, "model_init_kwargs": {"dtype": "bfloat16"}}  # the reference in bf16
CPU = {"use_cpu": True, "bf16": False}


def length_reward(completions, **kwargs):
    """0 at TARGET_CHARS characters, falling linearly: with random weights, longer replies score higher."""
    return [-abs(TARGET_CHARS - len(c[0]["content"])) / TARGET_CHARS for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the random model's folder (random_qwen.build_model)")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--max-completion-length", type=int, default=128)
    parser.add_argument("--cpu", action="store_true", help="train on the CPU in float32 (gpu_check --smoke)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class JsonlLog(TrainerCallback):
        def on_log(self, args_, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                with (args.out / "metrics.jsonl").open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps({"step": state.global_step, **logs}) + "\n")

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)  # trained weights: float32
    records = [json.loads(line) for line in PROMPTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}]} for r in records])
    config = GRPOConfig(
        output_dir=str(args.out),
        max_steps=args.max_steps,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.prompts_per_step * args.num_generations,
        max_completion_length=args.max_completion_length,
        report_to="none",
        **CONFIG,
        **(CPU if args.cpu else GPU),
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=length_reward,
        args=config,
        train_dataset=dataset,
        callbacks=[JsonlLog()],
    )
    trainer.train()


if __name__ == "__main__":
    main()
