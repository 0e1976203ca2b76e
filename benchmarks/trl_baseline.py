"""The script a TRL user would write by hand for grpo-exp's default job: the yardstick for its overhead.

Same cached tiny model, same shipped customer-service prompts (wrapped as a user message), the
same format reward and the same GRPOConfig values as ``python run.py logger=none
dataset.eval_fraction=0`` (every prompt trains, none is held out) with the defaults in conf/;
nothing from grpo_exp is imported. At the same seed it logs the same per-step rewards and loss
as the framework (``tests/test_overhead.py`` checks it), so any difference
in time is the framework's own cost. ``benchmarks/overhead.py`` runs the two alternately.

Usage::

    .venv/bin/python benchmarks/trl_baseline.py --model ~/.cache/grpo_exp/tiny-<key> --out /tmp/base
    .venv/bin/python benchmarks/trl_baseline.py --model ... --out ... --max-steps 60 --wandb offline
    .venv/bin/python benchmarks/trl_baseline.py --model ... --out ... --max-steps 1 --no-save   # startup.py's

It writes ``<out>/metrics.jsonl`` (one JSON object per logging step, as the trainer logs it)
and the final model in ``<out>/model`` (unless ``--no-save``), as the framework does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "grpo_exp" / "data" / "customer_service.jsonl"
# The article's customer-service format check (conf/reward/customer_service.yaml).
FORMAT = re.compile(r"^您好.+问题已解决.+如有其他问题请随时联系$")
# The GRPOConfig that conf/ composes for the default job on a CPU (conf/model/tiny.yaml tunes
# lr, completion length, beta and steps; conf/grpo/default.yaml and conf/optimizer/adamw.yaml the rest).
CONFIG = {
    "seed": 42,
    "use_cpu": True,
    "bf16": False,
    "learning_rate": 5e-4,
    "optim": "adamw_torch",
    "weight_decay": 0.0,
    "warmup_steps": 0.1,
    "lr_scheduler_type": "constant_with_warmup",
    "max_grad_norm": 1.0,
    "gradient_accumulation_steps": 1,
    "num_generations": 6,
    "per_device_train_batch_size": 12,
    "max_completion_length": 48,
    "temperature": 1.0,
    "top_p": 1.0,
    "beta": 0.04,
    "epsilon": 0.2,
    "loss_type": "dapo",
    "scale_rewards": "group",
    "logging_steps": 1,
    "save_strategy": "no",
    "gradient_checkpointing": False,
}


def format_reward(completions, **kwargs):
    """1.0 for a reply in the article's greeting / resolution / sign-off format, else 0.0."""
    return [1.0 if FORMAT.match(c[0]["content"]) else 0.0 for c in completions]


class JsonlLog(TrainerCallback):
    """Every log line of the trainer, appended to a JSON Lines file (how a user keeps metrics)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and state.is_world_process_zero:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="folder of the tiny model (its grpo-exp cache entry)")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--max-steps", type=int, default=150, help="training steps (the default job: 150)")
    parser.add_argument("--wandb", choices=["none", "offline"], default="none", help="W&B reporting")
    parser.add_argument(
        "--no-save", action="store_true", help="skip saving the final model (run.py's save_model=false)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    records = [json.loads(line) for line in PROMPTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}]} for r in records])
    if args.wandb == "offline":
        os.environ.update(WANDB_MODE="offline", WANDB_DIR=str(args.out))
    config = GRPOConfig(
        output_dir=str(args.out),
        max_steps=args.max_steps,
        report_to="none" if args.wandb == "none" else ["wandb"],
        **CONFIG,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=format_reward,
        args=config,
        train_dataset=dataset,
        callbacks=[JsonlLog(args.out / "metrics.jsonl")],
    )
    trainer.train()
    if not args.no_save:
        trainer.save_model(str(args.out / "model"))


if __name__ == "__main__":
    main()
