"""A random-weight Qwen2.5-0.5B and a made-up byte-level BPE of its vocabulary, built offline (gpu_check's model).

No hub is needed: the architecture is Qwen2.5-0.5B-Instruct's config.json as the project ships it
(``grpo_exp/data/architectures``), the weights are random, and the tokenizer's merges are made up on
the spot (random weights make every completion run to the full length, so each job generates the
same number of tokens; only the vocabulary's size matters to the speed of the embedding and the
output layer). ``smoke`` shrinks the model for a CPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grpo_exp.memory.architectures import ARCHITECTURES_DIR
from grpo_exp.shipped import shipped_file

QWEN_SHAPE = "qwen2_5_0_5b_instruct"  # Qwen/Qwen2.5-0.5B-Instruct's config.json, shipped in grpo_exp/data/architectures
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 151643-151645, as in Qwen's tokenizer
# Qwen's ChatML, without its tool and system-prompt branches: the dataset's prompts are chats.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# --smoke shrinks the model so two run.py jobs fit the test's time on 2 CPU cores; the layers,
# heads and initialisation (normal, std 0.02) stay Qwen's kind, so the precision figures still mean it.
SMOKE_REGULAR_TOKENS = 2048
SMOKE_ARCHITECTURE = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 1024,
    "vocab_size": SMOKE_REGULAR_TOKENS + 64,  # the special tokens, padded as Qwen pads its vocabulary
    "bos_token_id": SMOKE_REGULAR_TOKENS,
    "eos_token_id": SMOKE_REGULAR_TOKENS + 2,
}


def build_model(folder: Path, smoke: bool) -> None:
    """Random-weight Qwen2.5-0.5B (bf16, as Qwen ships it) and a tokenizer of its vocabulary, in ``folder``.

    Built on the CPU: this process must hold no GPU memory while the jobs run."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    architecture = {**qwen_architecture(), **(SMOKE_ARCHITECTURE if smoke else {})}
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**architecture)).to(torch.bfloat16)
    model.generation_config.eos_token_id = architecture["eos_token_id"]
    model.save_pretrained(folder)
    tokenizer = build_tokenizer(architecture["bos_token_id"])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)


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


def qwen_architecture() -> dict[str, Any]:
    """The shipped config.json's fields that a ``Qwen2Config`` takes (not its name, class list or dtype)."""
    shape = json.loads((shipped_file(ARCHITECTURES_DIR) / f"{QWEN_SHAPE}.json").read_text(encoding="utf-8"))
    return {k: v for k, v in shape.items() if not k.startswith("_") and k not in ("architectures", "torch_dtype")}
