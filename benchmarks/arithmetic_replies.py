"""Where the arithmetic recipe's gain comes from: its held-out replies split into worked and answered at once.

For a finished ``+recipe=arithmetic`` job, samples the job's own held-out problems (its config's task,
region, split seed, sampling temperature and length) from the model it started from and from the one
it saved, and prints per model the share of replies answered at once (no ``=``: no working) and how
often each kind is right, by number of terms. Figures: benchmarks/arithmetic.md.

Usage::

    .venv/bin/python benchmarks/arithmetic.py --out runs/arithmetic
    .venv/bin/python benchmarks/arithmetic_replies.py runs/arithmetic/arithmetic-42
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

WORKING = "="  # every worked line is "total op term = result"; an answer given at once has none
SAMPLES = 8  # per problem, as the recipe's mean@8


def replies(folder: Path, job: Path, seed: int) -> dict[tuple[int, str], tuple[int, int]]:
    """(terms, "worked" | "at once") -> (right, replies) for the model in ``folder``."""
    import reasoning_gym
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from grpo_exp.folder import read_yaml
    from grpo_exp.rewards.task import tagged_answer
    from grpo_exp.tasks.problems import Region, draw

    config = read_yaml(job / "config.yaml")
    data, grpo = config["dataset"], config["grpo"]
    task, settings = data["task"], data["task_settings"]
    held_out = draw(task, settings, data["split_seed"], data["eval_samples"], Region(data["eval_fraction"], True))
    verifier = reasoning_gym.create_dataset(task, size=1, seed=0, **settings)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)  # the warm-up's own pre-tokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    torch.manual_seed(seed)
    right, total = Counter(), Counter()
    for entry in held_out:
        chat = [{"role": "user", "content": entry["question"]}]
        prompt = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            out = model.generate(
                **prompt,
                do_sample=True,
                temperature=grpo["temperature"],
                top_k=0,
                max_new_tokens=grpo["max_completion_length"],
                num_return_sequences=SAMPLES,
                pad_token_id=tokenizer.pad_token_id,
            )
        for text in tokenizer.batch_decode(out[:, prompt["input_ids"].shape[1] :], skip_special_tokens=True):
            kind = (entry["metadata"]["num_terms"], "worked" if WORKING in text else "at once")
            right[kind] += verifier.score_answer(tagged_answer(text, "answer"), entry) == 1.0
            total[kind] += 1
    return {kind: (right[kind], total[kind]) for kind in sorted(total)}


def line(name: str, split: dict[tuple[int, str], tuple[int, int]]) -> str:
    count = sum(n for _, n in split.values())
    at_once = sum(n for (_, how), (_, n) in split.items() if how == "at once")
    parts = ", ".join(f"{terms} terms {how}: {r / n:.2f} of {n}" for (terms, how), (r, n) in split.items())
    mean = sum(r for r, _ in split.values()) / count
    return f"{name}: mean@{SAMPLES} {mean:.3f}, answered at once {at_once / count:.0%} ({parts})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jobs", type=Path, nargs="+", help="finished +recipe=arithmetic job folders")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    args = p.parse_args()
    for job in args.jobs:
        start = Path(json.loads((job / "run_info.json").read_text())["model"]["path"])
        print(line(f"{job.name} before", replies(start, job, args.seed)))
        print(line(f"{job.name} after", replies(job / "model", job, args.seed)))


if __name__ == "__main__":
    main()
