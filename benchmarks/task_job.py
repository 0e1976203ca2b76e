"""A finished reasoning-gym job, seen from outside it: its task, held-out problems and sampling, and its models.

The arithmetic benchmarks that look into a job (``reinforce_check.py``, ``arithmetic_replies.py``) read
everything from the job's own ``config.yaml`` and ``run_info.json``, so they sample the problems and
settings the job used rather than copies of the recipe's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class TaskJob:
    folder: Path
    data: dict[str, Any]  # the job's dataset settings
    grpo: dict[str, Any]  # the job's GRPO settings: temperature, completion length, eval samples

    @classmethod
    def read(cls, folder: Path) -> TaskJob:
        from grpo_exp.folder import read_yaml

        config = read_yaml(folder / "config.yaml")
        return cls(folder, config["dataset"], config["grpo"])

    @property
    def starting_model(self) -> Path:
        """The model the job started from (for the embedded model, its cache folder)."""
        return Path(json.loads((self.folder / "run_info.json").read_text())["model"]["path"])

    @property
    def saved_model(self) -> Path:
        return self.folder / "model"

    def problems(self, held_out: bool, count: int, seed: int | None = None) -> list[dict[str, Any]]:
        """Held-out problems as the job drew them (its split seed), or training problems from ``seed``'s stream."""
        from grpo_exp.tasks.problems import Region, draw

        stream = self.data["split_seed"] if seed is None else seed
        return draw(
            self.data["task"], self.data["task_settings"], stream, count, Region(self.data["eval_fraction"], held_out)
        )

    def verifier(self) -> Any:
        import reasoning_gym

        return reasoning_gym.create_dataset(self.data["task"], size=1, seed=0, **self.data["task_settings"])


def load(folder: Path) -> tuple[Any, Any]:
    """Model and tokenizer; the tokenizer as built (AutoTokenizer would re-split the embedded model's text)."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model, PreTrainedTokenizerFast.from_pretrained(folder)


def sample(
    model: Any, tokenizer: Any, entries: list[dict[str, Any]], grpo: dict[str, Any], k: int
) -> tuple[Any, Any, Any, list[str]]:
    """``k`` completions per problem, sampled as the job samples: (prompt batch, sequences, completion ids, texts)."""
    import torch

    chats = [[{"role": "user", "content": e["question"]}] for e in entries]
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(
            **enc,
            do_sample=True,
            temperature=grpo["temperature"],
            top_k=0,
            max_new_tokens=grpo["max_completion_length"],
            num_return_sequences=k,
            pad_token_id=tokenizer.pad_token_id,
        )
    completions = out[:, enc["input_ids"].shape[1] :]
    return enc, out, completions, tokenizer.batch_decode(completions, skip_special_tokens=True)
