"""The embedded default model, built offline: no hub, no GPU, about two minutes of a laptop CPU, once.

Recipe: a byte-level BPE tokenizer trained on the shipped text, with a ChatML chat template (the
one Qwen uses) so chat prompts go through the same ``apply_chat_template`` path as real models;
a small Qwen2-architecture model; a short supervised warm-up on replies composed by
``warmup.build_corpus``. The result is saved with ``save_pretrained`` under a cache folder named by
a hash of the recipe and the shipped files, so it is built once and loaded like any hub model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from grpo_exp.cache import cache_root
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.warmup import Example, build_corpus, corpus_files
from grpo_exp.shipped import shipped_file

log = logging.getLogger(__name__)

# Bump when the build code changes in a way the recipe does not capture.
BUILDER_VERSION = 3  # 2: the warm-up runs on BUILD_THREADS threads; 3: batches mix scenarios
# The warm-up's weights depend on torch's thread count (the order of its float sums), so the
# build pins it: the same model whichever job (`threads=1` in a parallel sweep) or machine builds it.
BUILD_THREADS = 2
PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LOSS_IGNORE = -100
SFT_LOG_EVERY = 50


def recipe_key(recipe: TinyRecipe) -> str:
    """A short hash of everything the built model depends on."""
    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(recipe), sort_keys=True).encode())
    digest.update(f"builder={BUILDER_VERSION}".encode())
    for name in corpus_files(recipe):
        digest.update(shipped_file(name).read_bytes())
    return digest.hexdigest()[:12]


def cache_path(key: str) -> Path:
    """Where the model of cache key ``key`` (``recipe_key``) is kept once built."""
    return cache_root() / f"tiny-{key}"


def ensure_built(recipe: TinyRecipe) -> Path:
    """The folder of the model built from ``recipe``, building it first if no one has yet."""
    target = cache_path(recipe_key(recipe))
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.with_suffix(".lock")):  # parallel sweep jobs build it once
        if not (target / "config.json").is_file():
            log.info("building the embedded tiny model (once) into %s", target)
            staging = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
            try:
                build(recipe, staging)
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(recipe: TinyRecipe, out: Path) -> None:
    """Train the tokenizer, create the model, warm it up, and save both into ``out``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(BUILD_THREADS)
    try:
        _build(recipe, out)
    finally:
        torch.set_num_threads(threads)  # the job's own setting, for its training


def _build(recipe: TinyRecipe, out: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    corpus = build_corpus(recipe)
    tokenizer = train_tokenizer(corpus, recipe.vocab_size)
    torch.manual_seed(recipe.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_kv_heads,
        intermediate_size=recipe.intermediate_size,
        max_position_embeddings=recipe.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD),
    )
    model = Qwen2ForCausalLM(config)
    warm_up(model, tokenizer, corpus, recipe)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "recipe.json").write_text(json.dumps(dataclasses.asdict(recipe), indent=2))


def train_tokenizer(corpus: list[Example], vocab_size: int):  # -> PreTrainedTokenizerFast
    """A byte-level BPE (any input encodes, nothing is unknown) with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator((text for ex in corpus for text in (ex.prompt, ex.reply)), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
    )


def warm_up(model, tokenizer, corpus: list[Example], recipe: TinyRecipe) -> None:
    """Supervised next-token training on the replies (prompt tokens masked out of the loss).

    Every batch draws from the whole corpus, so scenarios meet in one update and the model learns
    to tell a writing request from a customer's message. Batches of one scenario at a time (the
    builder before version 3) left it answering most writing requests like a customer
    (benchmarks/recipes.md).
    """
    import torch

    rows = [_encode(tokenizer, example) for example in corpus]
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.sft_lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / recipe.sft_steps)
    generator = torch.Generator().manual_seed(recipe.seed)
    model.train()
    for step in range(recipe.sft_steps):
        input_ids, labels = _pad(_batch(rows, recipe.sft_batch_tokens, generator), tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=input_ids != tokenizer.pad_token_id, labels=labels).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % SFT_LOG_EVERY == 0 or step == recipe.sft_steps - 1:
            log.info("tiny model warm-up step %d/%d: loss %.3f", step + 1, recipe.sft_steps, loss.item())
    model.eval()


def _batch(rows: list[tuple[list[int], list[int]]], budget: int, generator) -> list[tuple[list[int], list[int]]]:
    """Random rows while the padded batch (rows x the longest) stays within ``budget`` tokens; at
    least one. Replies differ a lot in length between scenarios, so the size follows the draw."""
    import torch

    batch: list[tuple[list[int], list[int]]] = []
    width = 0
    while True:
        row = rows[int(torch.randint(len(rows), (1,), generator=generator))]
        width = max(width, len(row[0]))
        if batch and (len(batch) + 1) * width > budget:
            return batch
        batch.append(row)


def _encode(tokenizer, example: Example) -> tuple[list[int], list[int]]:
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": example.prompt}], add_generation_prompt=True, tokenize=False
    )
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    reply_ids = tokenizer(example.reply + EOS, add_special_tokens=False)["input_ids"]
    return prompt_ids + reply_ids, [LOSS_IGNORE] * len(prompt_ids) + reply_ids


def _pad(rows: list[tuple[list[int], list[int]]], pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), LOSS_IGNORE)
    for i, (ids, target) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(target)] = torch.tensor(target)
    return input_ids, labels
