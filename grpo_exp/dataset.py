"""Prompt datasets: the shipped scenarios, the user's JSON file (the article's case), hub datasets and
reasoning-gym's generated tasks.

Loaders are registered by ``dataset.source``. ``check_dataset`` looks at a file without loading
``datasets`` so bad input fails before the model loads; ``load_prompts`` builds the prompt set and
``load_splits`` divides it into training prompts and held-out prompts the trainer never sees.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_exp.config.schema import DatasetSettings
from grpo_exp.errors import UserError
from grpo_exp.registry import Registry
from grpo_exp.shipped import read_records, shipped_file

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Field names that usually hold the prompt, most likely first (for the hint when prompt_field is wrong).
PROMPT_NAMES = ("question", "instruction", "query", "input", "problem", "messages", "text")

LOADERS: Registry[Callable[[DatasetSettings], Dataset]] = Registry("dataset.source")
# The column a record's verifiable answer lands in when ``dataset.reference_field`` is set (reward=math reads it).
REFERENCE_COLUMN = "reference_answer"
# A source that decides its own held-out rows marks them in this column (a generated task's held-out region).
HELD_OUT_COLUMN = "held_out"


def builtin_names() -> list[str]:
    """The shipped prompt sets usable as ``dataset.name`` with ``source: builtin``."""
    return sorted(p.stem for p in shipped_file("").glob("*.jsonl"))


@LOADERS.register("builtin")
def _load_builtin(data: DatasetSettings) -> Dataset:
    return _from_records(read_records(_builtin_path(data)), data)


@LOADERS.register("json")
def _load_json(data: DatasetSettings) -> Dataset:
    return _from_records(read_records(Path(str(data.path))), data)


@LOADERS.register("hub")
def _load_hub(data: DatasetSettings) -> Dataset:
    from datasets import load_dataset

    dataset = load_dataset(data.name, data.subset, split=data.split)
    if data.prompt_field not in dataset.column_names:
        raise UserError(f"{data.name} has no {data.prompt_field!r} column (columns: {dataset.column_names})")
    if data.num_samples:
        dataset = dataset.select(range(min(data.num_samples, len(dataset))))
    if data.reference_field:  # no file to check before the model loads: the references are checked here
        from grpo_exp.rewards.math import check_references

        check_references(list(dataset), data.reference_field, data.reference_marker, f"{data.name} ({data.split})")
    return dataset.map(lambda r: {"prompt": format_prompt(r[data.prompt_field], data), **_reference(r, data)})


@LOADERS.register("reasoning_gym")
def _load_task(data: DatasetSettings) -> Dataset:
    """The task's training problems, then its held-out ones (marked), drawn from disjoint regions; under a
    curriculum, at the stage's level, which each problem's entry records."""
    from datasets import Dataset

    from grpo_exp.tasks.curriculum import LEVEL_KEY, task_settings
    from grpo_exp.tasks.problems import TASK_ENTRY, Region, draw, entry_json

    assert data.task is not None  # check_dataset said so
    settings = task_settings(data)
    rows = []
    for held_out, count in ((False, data.num_samples), (True, data.eval_samples if data.eval_fraction else 0)):
        for entry in draw(data.task, settings, data.split_seed, count, Region(data.eval_fraction, held_out)):
            if data.curriculum.enabled:
                entry["metadata"][LEVEL_KEY] = data.curriculum.start_level
            rows.append(
                {
                    "prompt": format_prompt(entry["question"], data),
                    TASK_ENTRY: entry_json(entry),
                    HELD_OUT_COLUMN: held_out,
                }
            )
    return Dataset.from_list(rows)


def _from_records(records: list[dict[str, Any]], data: DatasetSettings) -> Dataset:
    """Prompts shaped before Arrow sees them, so files may mix plain and chat prompts."""
    import pyarrow
    from datasets import Dataset

    rows = [
        {**r, "prompt": format_prompt(r[data.prompt_field], data), **_reference(r, data)}
        for r in records[: data.num_samples or None]
    ]
    try:
        return Dataset.from_list(rows)
    except pyarrow.ArrowException as exc:
        raise UserError(
            f"records of {source_name(data)} don't share one shape ({exc}); with dataset.chat=false every "
            "prompt must be a string, or every one a list of messages"
        ) from None


def _builtin_path(data: DatasetSettings) -> Path:
    if data.name not in builtin_names():
        raise UserError(f"no shipped dataset {data.name!r}; shipped: {', '.join(builtin_names())}")
    return shipped_file(f"{data.name}.jsonl")


def check_dataset(data: DatasetSettings) -> set[str] | None:
    """Fail early, in one line, on a dataset the trainer could not use; its columns (None: unknown yet)."""
    LOADERS.get(data.source)
    held_out = _check_file(_existing(data.eval_path, "dataset.eval_path"), data) if data.eval_path else None
    if data.source == "reasoning_gym":
        from grpo_exp.tasks.checks import check_task
        from grpo_exp.tasks.curriculum import check_curriculum
        from grpo_exp.tasks.problems import TASK_ENTRY

        check_task(data.task, data.task_settings)
        if data.curriculum.enabled:
            check_curriculum(data)
        if not data.num_samples:
            raise UserError("dataset=reasoning_gym draws dataset.num_samples training problems: give a count")
        return {"prompt", TASK_ENTRY}
    if data.source == "hub":
        if not data.name:
            raise UserError("dataset=hub needs a name: add dataset.name=<hub dataset>")
        return None
    if data.source == "json":
        if not data.path:
            raise UserError("dataset=json needs a file: add dataset.path=prompts.json")
        path = _existing(data.path, "dataset.path")
    else:
        path = _builtin_path(data)
    columns = _check_file(path, data)
    return columns if held_out is None else columns & held_out  # the rewards see columns both sets have


def _existing(path: str, key: str) -> Path:
    if not Path(path).is_file():
        raise UserError(f"{key}={path}: no such file (relative paths start at {Path.cwd()})")
    return Path(path)


def _check_file(path: Path, data: DatasetSettings) -> set[str]:
    """The columns of a prompt file, or one line saying why it can't be used."""
    if not path.read_text(encoding="utf-8").strip():
        raise UserError(f"{path} is empty: it needs records with a {data.prompt_field!r} field")
    records = read_records(path)
    if not records:
        raise UserError(f"{path} holds no records: it needs records with a {data.prompt_field!r} field")
    lacking = [i for i, record in enumerate(records) if data.prompt_field not in record]
    if len(lacking) == len(records):
        fields = sorted(records[0])
        guess = _prompt_like(data.prompt_field, records[0])
        hint = f"; if the prompts are in {guess!r}, add dataset.prompt_field={guess}" if guess else ""
        raise UserError(f"{path}: records have no {data.prompt_field!r} field (fields found: {fields}){hint}")
    if lacking:
        raise UserError(
            f"{path}: {len(lacking)} of {len(records)} records have no {data.prompt_field!r} field "
            f"(the first is record {lacking[0] + 1}); fix or remove them"
        )
    columns = {"prompt", *(key for record in records for key in record)}
    if data.reference_field:
        from grpo_exp.rewards.math import check_references

        check_references(records, data.reference_field, data.reference_marker, str(path), _record_lines(path))
        columns.add(REFERENCE_COLUMN)
    return columns


def _reference(record: dict[str, Any], data: DatasetSettings) -> dict[str, Any]:
    """The record's verifiable answer as its ``reference_answer`` column (none without ``dataset.reference_field``)."""
    if not data.reference_field:
        return {}
    from grpo_exp.rewards.math import reference_after

    return {REFERENCE_COLUMN: reference_after(record.get(data.reference_field), data.reference_marker)}


def _record_lines(path: Path) -> list[int]:
    """The line each record of a JSON Lines file or JSON array starts on, in order."""
    text = path.read_text(encoding="utf-8")
    if not text.lstrip().startswith("["):
        return [number for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    between = re.compile(r"[\s,]*")  # what separates a JSON array's items
    decoder, lines, at = json.JSONDecoder(), [], text.index("[") + 1
    while (at := between.match(text, at).end()) < len(text) and text[at] != "]":
        lines.append(text.count("\n", 0, at) + 1)
        at = decoder.raw_decode(text, at)[1]
    return lines


def _prompt_like(wanted: str, record: dict[str, Any]) -> str | None:
    """The field of ``record`` most likely to hold the prompt: a usual name, a near spelling, or the longest text."""
    texts = {k: v for k, v in record.items() if isinstance(v, str | list)}
    for name in (*PROMPT_NAMES, *difflib.get_close_matches(wanted, list(texts), n=1)):
        if name in texts:
            return name
    strings = {k: len(v) for k, v in texts.items() if isinstance(v, str)}
    return max(strings, key=strings.__getitem__) if strings else None


def load_splits(
    data: DatasetSettings, tokenizer: PreTrainedTokenizerBase, tools: Sequence[Any] = ()
) -> tuple[Dataset, Dataset | None]:
    """Training prompts and held-out prompts (None when evaluation is off), never sharing a prompt.

    The held-out set is ``dataset.eval_path`` when set (training drops any prompt it shares with
    it), else a share ``dataset.eval_fraction`` of the distinct prompts drawn with
    ``dataset.split_seed``: fixed apart from the job's seed, so every job of a sweep, seeds
    included, is scored on the same prompts.
    """
    dataset = load_prompts(data, tokenizer, tools)
    if HELD_OUT_COLUMN in dataset.column_names:  # the source drew its own held-out rows
        held = dataset[HELD_OUT_COLUMN]
        train, held_out = (
            dataset.select([i for i, h in enumerate(held) if h == side]).remove_columns(HELD_OUT_COLUMN)
            for side in (False, True)
        )
        source = f"task {data.task}" if data.task else f"the {HELD_OUT_COLUMN} column"
        log.info("%d training and %d held-out problems (%s)", len(train), len(held_out), source)
        return train, held_out if len(held_out) else None
    if data.eval_path:
        own = dataclasses.replace(data, num_samples=None)
        records = _from_records(read_records(Path(data.eval_path)), own)
        held_out = _drop_long(records, data, tokenizer, data.eval_path, tools)
        seen = {prompt_key(p) for p in held_out["prompt"]}
        train = dataset.filter(lambda r: prompt_key(r["prompt"]) not in seen)
        if shared := len(dataset) - len(train):
            log.warning("dropped %d training prompts that are also in %s", shared, data.eval_path)
        if not len(train):
            raise UserError(f"every training prompt is also in dataset.eval_path={data.eval_path}: nothing to train on")
        return train, held_out
    if not data.eval_fraction:
        return dataset, None
    keys = list(dict.fromkeys(prompt_key(p) for p in dataset["prompt"]))
    size = min(math.ceil(len(keys) * data.eval_fraction), len(keys) - 1)
    if size < 1:
        log.warning(
            "only %d distinct prompt(s): no held-out evaluation (add prompts or a dataset.eval_path)", len(keys)
        )
        return dataset, None
    chosen = set(random.Random(data.split_seed).sample(keys, size))
    rows = [prompt_key(p) in chosen for p in dataset["prompt"]]
    train = dataset.select([i for i, held in enumerate(rows) if not held])
    held_out = dataset.select([i for i, held in enumerate(rows) if held])
    log.info(
        "held out %d of %d prompts for evaluation (dataset.eval_fraction=%g)",
        len(held_out),
        len(dataset),
        data.eval_fraction,
    )
    return train, held_out


def prompt_key(prompt: Any) -> str:
    """A prompt as comparable text (plain or chat), so the split works on distinct prompts."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False, sort_keys=True)


def load_prompts(data: DatasetSettings, tokenizer: PreTrainedTokenizerBase, tools: Sequence[Any] = ()) -> Dataset:
    """Every prompt of the dataset: a ``prompt`` column in the shape TRL expects, long prompts dropped
    (counted with the ``tools`` an agent's prompts show the model)."""
    dataset = _drop_long(LOADERS.get(data.source)(data), data, tokenizer, source_name(data), tools)
    log.info("loaded %d prompts (%s)", len(dataset), source_name(data))
    return dataset


def source_name(data: DatasetSettings) -> str:
    """What logs and errors call the prompts' source: the dataset's name or file, or the generated task."""
    return data.name or data.path or f"reasoning-gym task {data.task}"


def _drop_long(
    dataset: Dataset, data: DatasetSettings, tokenizer: PreTrainedTokenizerBase, source: Any, tools: Sequence[Any] = ()
) -> Dataset:
    before = len(dataset)
    lengths = [prompt_tokens(prompt, tokenizer, tools) for prompt in dataset["prompt"]]
    dataset = dataset.select([i for i, n in enumerate(lengths) if n <= data.max_prompt_tokens])
    dropped = before - len(dataset)
    if dropped:
        log.warning("dropped %d of %d prompts longer than %d tokens", dropped, before, data.max_prompt_tokens)
    if not len(dataset):
        cap = f"dataset.max_prompt_tokens={data.max_prompt_tokens}"
        if not lengths:
            raise UserError(f"every prompt of {source} is longer than {cap}")
        shortest = min(lengths)
        shown = f", with the schemas of the {len(tools)} tools the model is shown" if tools else ""
        raise UserError(
            f"every prompt of {source} is longer than {cap} (the shortest: {shortest} tokens{shown}): "
            f"raise dataset.max_prompt_tokens to at least {shortest} where the model's context holds that, or use "
            "shorter prompts (and a model whose tokenizer knows the tools' text)"
        )
    return dataset


def format_prompt(prompt: Any, data: DatasetSettings) -> Any:
    """A string prompt, or a list of chat messages when ``dataset.chat`` is on."""
    if not data.chat or not isinstance(prompt, str):
        return prompt
    system = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    return [*system, {"role": "user", "content": prompt}]


def prompt_tokens(prompt: Any, tokenizer: PreTrainedTokenizerBase, tools: Sequence[Any] = ()) -> int:
    """Tokens the model sees for ``prompt``, chat template included, with the schemas of an agent's ``tools``."""
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer.apply_chat_template(prompt, tools=list(tools) or None, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)
