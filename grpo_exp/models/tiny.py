"""The embedded default model, built offline: no hub, no GPU, about two minutes of a laptop CPU, once.

Recipe: a byte-level BPE tokenizer trained on the shipped text, with Qwen3's chat template (ChatML,
and tool calls in ``<tool_call>`` tags), so chat prompts go through the same ``apply_chat_template``
path as real models and TRL parses the embedded model's tool calls as it parses Qwen's;
a small Qwen2-architecture model; a short supervised warm-up on replies composed by
``warmup.build_corpus`` (for a task recipe with ``habit_steps``, then a habit phase on
``warmup_task.habit_corpus``). The result is saved with ``save_pretrained`` under a cache folder named by
a hash of the recipe and the shipped files, so it is built once and loaded like any hub model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from grpo_exp.cache import cache_root
from grpo_exp.config.schema import TinyRecipe
from grpo_exp.models.examples import Example
from grpo_exp.models.progress import StepProgress
from grpo_exp.models.warmup import build_corpus, corpus_files
from grpo_exp.models.warmup_task import habit_corpus
from grpo_exp.shipped import shipped_file

log = logging.getLogger(__name__)

# Part of every cache key: bumped whenever the build or a warm-up corpus changes in code, which the
# recipe and the shipped files hashed beside it don't show. 2: the warm-up runs on BUILD_THREADS threads;
# 3: batches mix scenarios; 4: Qwen3's template; 5: the store agent's wrong actions follow the state.
BUILDER_VERSION = 5
# The warm-up's weights depend on torch's thread count (the order of its float sums), so the
# build pins it: the same model whichever job (`threads=1` in a parallel sweep) or machine builds it.
BUILD_THREADS = 2
PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# Qwen3's chat template, as TRL ships it: TRL knows how to parse the tool calls of models that use it
# (``add_response_schema``). Without tools it renders prompts exactly as plain ChatML does.
TEMPLATE_FILE = ("chat_templates", "qwen3.jinja")
# What an agent copies from a request into a call, token by token: each digit, and the letters that
# start a number (the SO of order SO3196).
COPIED = r"[A-Z]+(?=\d)|\d"
LOSS_IGNORE = -100


def recipe_key(recipe: TinyRecipe) -> str:
    """A short hash of everything the built model depends on."""
    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(recipe), sort_keys=True).encode())
    digest.update(f"builder={BUILDER_VERSION}".encode())
    digest.update(chat_template().encode())
    for name in corpus_files(recipe):
        digest.update(shipped_file(name).read_bytes())
    if recipe.scenarios.get("task"):  # its problems are reasoning-gym's: another release may draw others
        digest.update(f"reasoning-gym={importlib.metadata.version('reasoning-gym')}".encode())
    return digest.hexdigest()[:12]


@functools.cache
def chat_template() -> str:
    """Qwen3's chat template, read from the installed TRL without importing it (the preflight keys the
    cache by it, before anything heavy loads)."""
    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.submodule_search_locations, "trl is a dependency"
    return Path(spec.submodule_search_locations[0]).joinpath(*TEMPLATE_FILE).read_text(encoding="utf-8")


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
    warm_up(model, tokenizer, corpus, recipe, recipe.sft_steps, recipe.sft_lr, recipe.sft_warmup_steps)
    if recipe.habit_steps:
        warm_up(model, tokenizer, habit_corpus(recipe), recipe, recipe.habit_steps, recipe.habit_lr)
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
    core.pre_tokenizer = _pre_tokenizer(digits=any(ex.tools or ex.scenario == "task" for ex in corpus))
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [text for ex in corpus for text in ex.texts()]
    agents = [ex for ex in corpus if ex.tools]
    if agents:  # the chat template's tool preamble, as often as the model reads it, so it merges into few tokens
        texts += [tool_frame(agents[0])] * len(agents)
    core.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=chat_template(),
        padding_side="left",
    )


def _pre_tokenizer(digits: bool):
    """Byte-level words as GPT-2 splits them; for an agent or a task's numbers (``digits``), identifiers cut
    into their letters and single digits and the rest merged freely: the template's tool preamble and a
    call's fixed JSON become a few tokens each, and any number is the same tokens wherever it stands, so
    the model can copy it into a call digit after digit, the letters before it its anchor in the request
    (without one, a 1M-parameter model copied five digits right in 2 % of its calls), and a sum is worked
    digit by digit."""
    from tokenizers import Regex, pre_tokenizers

    if not digits:
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(COPIED), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def warm_up(model, tokenizer, corpus: list[Example], recipe: TinyRecipe, steps: int, lr: float, rise: int = 0) -> None:
    """Supervised next-token training on the replies (prompt tokens masked out of the loss), the learning
    rate rising linearly over the first ``rise`` steps, within a linear decay to 0. Without the rise, the
    store agent's build sometimes never learned to copy order numbers (its loss stayed at 0.8 where a
    build that learned it reaches 0.2; benchmarks/support_env.md).

    Every batch draws from the whole corpus, so scenarios meet in one update and the model learns
    to tell a writing request from a customer's message. Batches of one scenario at a time (the
    builder before version 3) left it answering most writing requests like a customer
    (benchmarks/recipes.md).
    """
    import torch

    rows = [_encode(tokenizer, example) for example in corpus]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: rate_factor(step, steps, rise))
    generator = torch.Generator().manual_seed(recipe.seed)
    progress = StepProgress(steps)
    model.train()
    for step in range(steps):
        input_ids, labels = _pad(_batch(rows, recipe.sft_batch_tokens, generator), tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=input_ids != tokenizer.pad_token_id, labels=labels).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if progress.due(step + 1):
            log.info(
                "tiny model warm-up step %d/%d: loss %.3f, %s", step + 1, steps, loss.item(), progress.timing(step + 1)
            )
    model.eval()


def rate_factor(step: int, steps: int, rise: int) -> float:
    """The warm-up's learning rate at ``step`` as a share of its peak: rising over ``rise`` steps, within a
    linear decay to 0 at ``steps`` (without a rise, exactly the decay every earlier build used)."""
    return min(1, (step + 1) / max(rise, 1)) * (1 - step / steps)


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
    """Token ids and labels (the model's own turns learned, the rest masked) laid out as TRL lays out a
    rollout: the prompt, for an agent each turn that calls a tool with the tool's reply after it, then the
    final turn."""
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": example.prompt}],
        tools=list(example.tools) or None,
        add_generation_prompt=True,
        tokenize=False,
    )
    pieces = [(prompt, False)]
    for call, reply in example.turns:
        pieces += [(call_turn(call) + EOS, True), (tool_suffix(reply), False)]
    pieces.append((example.reply + EOS, True))
    ids: list[int] = []
    labels: list[int] = []
    for text, learned in pieces:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece
        labels += piece if learned else [LOSS_IGNORE] * len(piece)
    return ids, labels


def call_turn(call: str) -> str:
    """A turn that calls a tool, as Qwen's template writes one (``call``: the JSON of name and arguments)."""
    return f"<tool_call>\n{call}\n</tool_call>"


def tool_suffix(reply: str) -> str:
    """What TRL appends after a turn that called a tool: the tool's reply, then the next assistant turn's
    start (GRPOTrainer's framing under this template, agents/rollout.suffix_framer; tests/test_agent.py
    holds them equal)."""
    return f"\n{BOS}user\n<tool_response>\n{reply}\n</tool_response>{EOS}\n{BOS}assistant\n"


def tool_frame(example: Example) -> str:
    """The template's text around an agent's conversation (its tool preamble), for the tokenizer to learn."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    renderer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=chat_template())
    messages = [{"role": "user", "content": example.prompt}]
    return renderer.apply_chat_template(messages, tools=list(example.tools), add_generation_prompt=True, tokenize=False)


def _pad(rows: list[tuple[list[int], list[int]]], pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_id)
    labels = torch.full((len(rows), width), LOSS_IGNORE)
    for i, (ids, target) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(target)] = torch.tensor(target)
    return input_ids, labels
