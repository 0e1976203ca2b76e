"""How long a job's padded prompts are: its data's longest prompt that passes the length filter.

TRL pads a batch's prompts to the longest of them, so a plan that takes ``dataset.max_prompt_tokens``
for every prompt overstates a job whose prompts are short (the shipped ones are 20-43 tokens with
the tiny model's tokenizer, against a cap of 256). Where the plan can read the data (a shipped set,
a local JSON file, a local ``dataset.eval_path``) and the job's tokenizer is on this machine (the
built tiny model, a local folder, a hub tokenizer already downloaded), it counts every prompt as
``grpo_exp.dataset`` does (chat template included) and keeps the longest within the cap. Otherwise
(hub data, no tokenizer offline) it plans at the cap, and says which it used.

Tokenizing imports transformers (and torch with it, about 3 s here), so the count is cached per
data file, tokenizer and dataset settings: only a job's first plan pays for it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.cache import cache_root
from grpo_exp.config.schema import DatasetSettings, ModelSettings
from grpo_exp.shipped import read_records, shipped_file

CACHE_DIR = "prompt_lengths"  # under grpo_exp.cache's folder
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# the dataset settings a count depends on
PROMPT_SETTINGS = ("prompt_field", "chat", "system_prompt", "max_prompt_tokens", "num_samples")


@dataclass(frozen=True)
class PromptLength:
    tokens: int
    source: str  # what the length was taken from


def longest_prompt(
    dataset: DatasetSettings, model: ModelSettings, tools: Sequence[str] = (), environments: Sequence[str] = ()
) -> PromptLength:
    """The padded prompt length a job's batches reach (at most ``dataset.max_prompt_tokens``), the schemas
    of an agent's ``tools`` (``agent.tools``) and of its environments' methods (``agent.environment(s)``)
    included: TRL renders them into every prompt. The turns after the first (tool calls, the tools'
    replies) count in ``grpo.max_completion_length``, as TRL counts them."""
    cap = dataset.max_prompt_tokens
    files = _data_files(dataset)
    if not files:
        return PromptLength(cap, f"dataset.max_prompt_tokens={cap} (dataset.source={dataset.source} isn't read)")
    tokenizer = _tokenizer_folder(model)
    if tokenizer is None:
        return PromptLength(cap, f"dataset.max_prompt_tokens={cap} (no tokenizer of {model.name_or_path} here)")
    names = ", ".join(path.name for path in files)
    path = cache_root() / CACHE_DIR / f"{_key(dataset, files, tokenizer, tools, environments)}.json"
    try:
        return PromptLength(int(json.loads(path.read_text(encoding="utf-8"))["tokens"]), f"longest prompt of {names}")
    except (OSError, ValueError, KeyError):
        pass
    tokens = _count(dataset, model, files, tokenizer, tools, environments)
    if tokens is None:  # every prompt is too long: the job refuses that itself
        return PromptLength(cap, f"dataset.max_prompt_tokens={cap} (no prompt of {names} is within it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.partial")
    staging.write_text(json.dumps({"tokens": tokens, "files": [str(p) for p in files]}))
    staging.replace(path)
    return PromptLength(tokens, f"longest prompt of {names}")


def _data_files(dataset: DatasetSettings) -> list[Path]:
    files = []
    if dataset.source == "builtin" and dataset.name:
        files.append(shipped_file(f"{dataset.name}.jsonl"))
    elif dataset.source == "json" and dataset.path:
        files.append(Path(dataset.path).expanduser())
    if dataset.eval_path:
        files.append(Path(dataset.eval_path).expanduser())
    return [path for path in files if path.is_file()]


def _tokenizer_folder(model: ModelSettings) -> Path | None:
    """Where the job's tokenizer lies on this machine, or None."""
    if model.source == "tiny" and model.recipe is not None:
        from grpo_exp.models import tiny

        folder = tiny.cache_path(tiny.recipe_key(model.recipe))
    else:
        folder = Path(model.name_or_path).expanduser()
        if not folder.is_dir():
            folder = _hub_snapshot(model.name_or_path)
    if folder is None or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    return folder


def _hub_snapshot(repo: str) -> Path | None:
    """A hub model's downloaded snapshot, found without importing transformers."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE", home / "hub"))
    snapshots = hub / f"models--{repo.replace('/', '--')}" / "snapshots"
    if not snapshots.is_dir():
        return None
    found = sorted(snapshots.glob("*/tokenizer_config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def _key(
    dataset: DatasetSettings, files: list[Path], tokenizer: Path, tools: Sequence[str], environments: Sequence[str]
) -> str:
    stamp = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    stamp += [(str(p), p.stat().st_mtime_ns) for p in (tokenizer / n for n in TOKENIZER_FILES) if p.is_file()]
    fields = {k: getattr(dataset, k) for k in PROMPT_SETTINGS}
    shown = [list(tools), list(environments)]
    return hashlib.sha256(json.dumps([stamp, fields, shown], default=str).encode()).hexdigest()[:20]


def _count(
    dataset: DatasetSettings,
    model: ModelSettings,
    files: list[Path],
    tokenizer: Path,
    tools: Sequence[str],
    environments: Sequence[str],
) -> int | None:
    """The longest prompt within the cap, counted as ``grpo_exp.dataset`` filters them."""
    from grpo_exp.agents.environments import class_tools, resolve_environment
    from grpo_exp.agents.tools import resolve_tool
    from grpo_exp.dataset import format_prompt, prompt_tokens
    from grpo_exp.models import load_tokenizer

    tok = load_tokenizer(model, str(tokenizer))
    schemas = [resolve_tool(spec) for spec in tools]
    schemas += [tool for spec in environments for tool in class_tools(resolve_environment(spec))]
    lengths: list[int] = []
    for number, path in enumerate(files):
        records: list[dict[str, Any]] = read_records(path)
        if number == 0 and dataset.num_samples:
            records = records[: dataset.num_samples]
        for record in records:
            if dataset.prompt_field in record:
                lengths.append(prompt_tokens(format_prompt(record[dataset.prompt_field], dataset), tok, schemas))
    within = [n for n in lengths if n <= dataset.max_prompt_tokens]
    return max(within) if within else None
