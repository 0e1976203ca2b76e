"""Does the embedded model's reply depend on the customer's message? A probe before any GRPO run.

The customer-service recipe's information part rewards naming the answers each message needs;
GRPO can only sharpen that if the warmed-up model already leans towards them. For every prompt of
the shipped customer-service set, this samples replies as GRPO would (``--temperature``, TRL's default 1) and prints:

- ``information``: the mean share of the prompt's required answers named (the reward part's start);
- ``own category`` / ``other category``: how often a reply names an answer of the message's own
  category, against one other category's on average (equal: the reply ignores the message);
- ``format``: share of replies meeting the article's loose format (``^您好.+问题已解决.+$``);
- the build time of the model, wall and CPU (0 when it was cached).

Usage::

    .venv/bin/python benchmarks/conditioning.py                          # the shipped tiny recipe
    .venv/bin/python benchmarks/conditioning.py sft_steps=600 answer_share=0.5   # a variant
    .venv/bin/python benchmarks/conditioning.py --model path/to/built/model --samples 4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf  # noqa: E402

from grpo_exp.config.schema import TinyRecipe  # noqa: E402
from grpo_exp.models.tiny import ensure_built  # noqa: E402
from grpo_exp.shipped import read_records, shipped_file  # noqa: E402

FORMAT = re.compile(r"^您好.+问题已解决.+$", re.DOTALL)


def tiny_recipe(overrides: list[str]) -> TinyRecipe:
    """conf/model/tiny.yaml's recipe with ``key=value`` overrides."""
    shipped = OmegaConf.load(ROOT / "conf" / "model" / "tiny.yaml").model.recipe
    merged = OmegaConf.merge(OmegaConf.structured(TinyRecipe), shipped, OmegaConf.from_dotlist(overrides))
    return OmegaConf.to_object(merged)


def probe(path: Path, samples: int, max_tokens: int, seed: int, temperature: float = 1.0) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    records = read_records(shipped_file("customer_service.jsonl"))
    answers = json.loads(shipped_file("warmup/customer_service_replies.json").read_text(encoding="utf-8"))["answers"]
    torch.manual_seed(seed)
    info, own, other, fmt = [], [], [], []
    for record in records:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": record["prompt"]}], add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer([prompt] * samples, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**ids, do_sample=True, temperature=temperature, max_new_tokens=max_tokens, top_k=0)
        replies = tokenizer.batch_decode(out[:, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        required = record["required_answers"]
        for reply in replies:
            info.append(sum(a in reply for a in required) / len(required))
            own.append(any(a in reply for a in answers[record["category"]]))
            others = [c for c in answers if c != record["category"]]
            other.append(sum(any(a in reply for a in answers[c]) for c in others) / len(others))
            fmt.append(bool(FORMAT.match(reply)))
    return {
        "information": statistics.mean(info),
        "own category": statistics.mean(own),
        "other category": statistics.mean(other),
        "format": statistics.mean(fmt),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="tiny recipe keys, e.g. sft_steps=600")
    parser.add_argument("--samples", type=int, default=8, help="replies per prompt (a GRPO group)")
    parser.add_argument("--max-tokens", type=int, default=48, help="the tiny model's max_completion_length")
    parser.add_argument("--temperature", type=float, default=1.0, help="the run's grpo.temperature")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", type=Path, help="probe this built model folder instead of building one")
    args = parser.parse_args()
    if args.model is None:
        recipe = tiny_recipe(args.overrides)
        print("recipe:", dataclasses.asdict(recipe))
        started, cpu = time.perf_counter(), time.process_time()
        args.model = ensure_built(recipe)
        print(f"build: {time.perf_counter() - started:.0f} s wall, {time.process_time() - cpu:.0f} s CPU (0: cached)")
    figures = probe(args.model, args.samples, args.max_tokens, args.seed, args.temperature)
    print("  ".join(f"{k} {v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
