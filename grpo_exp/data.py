"""Prompt datasets: the shipped scenarios, the user's JSON file (the article's case) and hub datasets.

Loaders are registered by ``dataset.source``. ``check_dataset`` looks at a file without loading
``datasets`` so bad input fails before the model loads; ``load_prompts`` builds the training set.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_exp.config import DatasetSettings
from grpo_exp.errors import UserError
from grpo_exp.registry import Registry

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Field names that usually hold the prompt, most likely first (for the hint when prompt_field is wrong).
PROMPT_NAMES = ("question", "instruction", "query", "input", "problem", "messages", "text")

LOADERS: Registry[Callable[[DatasetSettings], Dataset]] = Registry("dataset.source")


def shipped_file(name: str) -> Path:
    """A data file shipped inside the package (prompts, warm-up fragments)."""
    return Path(str(resources.files("grpo_exp") / "data" / name))


def builtin_names() -> list[str]:
    """The shipped prompt sets usable as ``dataset.name`` with ``source: builtin``."""
    return sorted(p.stem for p in shipped_file("").glob("*.jsonl"))


@LOADERS.register("builtin")
def _load_builtin(cfg: DatasetSettings) -> Dataset:
    return _from_records(read_records(_builtin_path(cfg)), cfg)


@LOADERS.register("json")
def _load_json(cfg: DatasetSettings) -> Dataset:
    return _from_records(read_records(Path(str(cfg.path))), cfg)


@LOADERS.register("hub")
def _load_hub(cfg: DatasetSettings) -> Dataset:
    from datasets import load_dataset

    dataset = load_dataset(cfg.name, cfg.subset, split=cfg.split)
    if cfg.prompt_field not in dataset.column_names:
        raise UserError(f"{cfg.name} has no {cfg.prompt_field!r} column (columns: {dataset.column_names})")
    if cfg.num_samples:
        dataset = dataset.select(range(min(cfg.num_samples, len(dataset))))
    return dataset.map(lambda r: {"prompt": format_prompt(r[cfg.prompt_field], cfg)})


def _from_records(records: list[dict[str, Any]], cfg: DatasetSettings) -> Dataset:
    """Prompts shaped before Arrow sees them, so files may mix plain and chat prompts."""
    import pyarrow
    from datasets import Dataset

    rows = [{**r, "prompt": format_prompt(r[cfg.prompt_field], cfg)} for r in records[: cfg.num_samples or None]]
    try:
        return Dataset.from_list(rows)
    except pyarrow.ArrowException as exc:
        raise UserError(
            f"records of {cfg.name or cfg.path} don't share one shape ({exc}); with dataset.chat=false every "
            "prompt must be a string, or every one a list of messages"
        ) from None


def _builtin_path(cfg: DatasetSettings) -> Path:
    if cfg.name not in builtin_names():
        raise UserError(f"no shipped dataset {cfg.name!r}; shipped: {', '.join(builtin_names())}")
    return shipped_file(f"{cfg.name}.jsonl")


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a JSON array or JSON Lines file (the article's ``prompts.json`` may be either)."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            records = json.loads(stripped)
        else:
            records = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON or JSON Lines ({exc.msg} at line {exc.lineno})") from None
    if not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path} must hold JSON objects (records with a 'prompt' field)")
    return records


def check_dataset(cfg: DatasetSettings) -> set[str] | None:
    """Fail early, in one line, on a dataset the trainer could not use; its columns (None: unknown yet)."""
    LOADERS.get(cfg.source)
    if cfg.source == "hub":
        if not cfg.name:
            raise UserError("dataset=hub needs a name: add dataset.name=<hub dataset>")
        return None
    if cfg.source == "json":
        if not cfg.path:
            raise UserError("dataset=json needs a file: add dataset.path=prompts.json")
        path = Path(cfg.path)
        if not path.is_file():
            raise UserError(f"dataset.path={cfg.path}: no such file (relative paths start at {Path.cwd()})")
    else:
        path = _builtin_path(cfg)
    if not path.read_text(encoding="utf-8").strip():
        raise UserError(f"{path} is empty: it needs records with a {cfg.prompt_field!r} field")
    records = read_records(path)
    if not records:
        raise UserError(f"{path} holds no records: it needs records with a {cfg.prompt_field!r} field")
    lacking = [i for i, record in enumerate(records) if cfg.prompt_field not in record]
    if len(lacking) == len(records):
        fields = sorted(records[0])
        guess = _prompt_like(cfg.prompt_field, records[0])
        hint = f"; if the prompts are in {guess!r}, add dataset.prompt_field={guess}" if guess else ""
        raise UserError(f"{path}: records have no {cfg.prompt_field!r} field (fields found: {fields}){hint}")
    if lacking:
        raise UserError(
            f"{path}: {len(lacking)} of {len(records)} records have no {cfg.prompt_field!r} field "
            f"(the first is record {lacking[0] + 1}); fix or remove them"
        )
    return {"prompt", *(key for record in records for key in record)}


def _prompt_like(wanted: str, record: dict[str, Any]) -> str | None:
    """The field of ``record`` most likely to hold the prompt: a usual name, a near spelling, or the longest text."""
    texts = {k: v for k, v in record.items() if isinstance(v, str | list)}
    for name in (*PROMPT_NAMES, *difflib.get_close_matches(wanted, list(texts), n=1)):
        if name in texts:
            return name
    strings = {k: len(v) for k, v in texts.items() if isinstance(v, str)}
    return max(strings, key=strings.__getitem__) if strings else None


def load_prompts(cfg: DatasetSettings, tokenizer: PreTrainedTokenizerBase) -> Dataset:
    """The training set: a ``prompt`` column in the shape TRL expects, long prompts dropped."""
    dataset = LOADERS.get(cfg.source)(cfg)
    before = len(dataset)
    dataset = dataset.filter(lambda r: prompt_tokens(r["prompt"], tokenizer) <= cfg.max_prompt_tokens)
    dropped = before - len(dataset)
    if dropped:
        log.warning("dropped %d of %d prompts longer than %d tokens", dropped, before, cfg.max_prompt_tokens)
    if not len(dataset):
        raise UserError(f"every prompt is longer than dataset.max_prompt_tokens={cfg.max_prompt_tokens}")
    log.info("loaded %d prompts (%s)", len(dataset), cfg.name or cfg.path)
    return dataset


def format_prompt(prompt: Any, cfg: DatasetSettings) -> Any:
    """A string prompt, or a list of chat messages when ``dataset.chat`` is on."""
    if not cfg.chat or not isinstance(prompt, str):
        return prompt
    system = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
    return [*system, {"role": "user", "content": prompt}]


def prompt_tokens(prompt: Any, tokenizer: PreTrainedTokenizerBase) -> int:
    """Tokens the model sees for ``prompt``, chat template included."""
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return len(ids)
