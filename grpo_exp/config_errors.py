"""Hydra's and OmegaConf's multi-line exceptions (unknown key, wrong type, missing option, bad
override syntax) as one line, with the closest real key suggested for a misspelt one."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator
from typing import Any, get_type_hints

from grpo_exp.config import KEY_ALIASES, ExperimentConfig

OVERRIDE_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# How alike a misspelt key must be to a real one (difflib ratio) to be suggested.
SPELLING_CUTOFF = 0.75


def describe_config_error(exc: BaseException) -> str:
    """One line for an exception raised while composing or converting a config."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

    cause = exc.__cause__ or exc
    full_key = getattr(cause, "full_key", None)
    text = str(exc)
    if isinstance(cause, ConfigAttributeError | ConfigKeyError) and full_key:
        return unknown_key_message(full_key) if "." in full_key or exc is not cause else _first_line(text)
    if isinstance(cause, MissingMandatoryValue) and full_key:
        return f"{full_key} is required: add {full_key}=<value>"
    if isinstance(cause, ValidationError) and full_key:
        return f"{full_key}: {_first_line(str(cause))}"
    if match := re.search(r"Could not find '([^']+)/([^']+)'", text):
        group, name = match.groups()
        options = re.findall(r"^\t(\S+)$", text.split("Config search path")[0], flags=re.MULTILINE)
        return f"no {group} config named {name!r}; available: {', '.join(options)}"
    if text.startswith("Ambiguous value"):
        return f"{_first_line(text)}: add -m to sweep over the values, or write a list as key=[a,b]"
    if type(exc).__name__ == "OverrideParseException":
        return f"cannot parse override: {_first_line(text)} (grammar: {OVERRIDE_GRAMMAR})"
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def unknown_key_message(full_key: str) -> str:
    """'unknown config key X', with the closest real key (or the article's alias) to use instead."""
    section, _, leaf = full_key.rpartition(".")
    known = list(_schema_keys(ExperimentConfig))
    leaves = {k.rpartition(".")[2] for k in known} | set(KEY_ALIASES)
    close = difflib.get_close_matches(leaf, sorted(leaves), n=1, cutoff=SPELLING_CUTOFF)
    if close:
        wanted = KEY_ALIASES.get(close[0], close[0])
        paths = sorted((k for k in known if k.rpartition(".")[2] == wanted), key=lambda k: not k.startswith(section))
        return f"unknown config key {full_key}; did you mean {paths[0]}?"
    in_section = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section]
    return f"unknown config key {full_key}; keys here: {', '.join(in_section)}"


def _schema_keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted key path of a schema dataclass, depth-first."""
    hints = get_type_hints(node)
    for field in dataclasses.fields(node):
        path = f"{prefix}{field.name}"
        hint = hints[field.name]
        nested = [t for t in getattr(hint, "__args__", (hint,)) if dataclasses.is_dataclass(t)]
        if nested:
            yield from _schema_keys(nested[0], f"{path}.")
        else:
            yield path


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip()
