"""Hydra's and OmegaConf's multi-line exceptions (unknown key, wrong type, missing option, bad
override syntax) as one line, with the closest real key suggested for a misspelt one."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator
from typing import Any, get_type_hints

from omegaconf import DictConfig

from grpo_exp.config.schema import CONF_DIR, PRIMARY_CONFIG, ExperimentConfig
from grpo_exp.config.trl_map import OPTIMIZER_FIELDS, SET_ELSEWHERE

# Slips users copy from the article (and other GRPO write-ups) mapped to our keys: the article's
# typo, TRL's name for beta, and TRL's names for our optimizer keys (learning_rate for lr, ...).
KEY_ALIASES: dict[str, str] = {
    "num_generation": "num_generations",
    "kl_coef": "beta",
    **{trl: ours for ours, trl in OPTIMIZER_FIELDS.items() if trl != ours},
}

OVERRIDE_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# How alike a misspelt key must be to a real one (difflib ratio) to be suggested.
SPELLING_CUTOFF = 0.75
# How many nearby keys to list when none is close enough to suggest.
SUGGESTIONS = 5


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
        return option_message(group, name, options)
    if text.startswith("Ambiguous value"):
        return f"{_first_line(text)}: add -m to sweep over the values, or write a list as key=[a,b]"
    if type(exc).__name__ == "OverrideParseException":
        return f"cannot parse override: {_first_line(text)} (grammar: {OVERRIDE_GRAMMAR})"
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def unknown_key_message(full_key: str) -> str:
    """'unknown config key X', with the closest real key, config group or TRL field to use instead."""
    section, _, leaf = full_key.rpartition(".")
    if leaf in SET_ELSEWHERE:
        return f"{full_key}: this project sets TRL's {leaf} from {SET_ELSEWHERE[leaf]}; write that instead"
    known = list(_schema_keys(ExperimentConfig))
    if not section:
        plus = {g: "" if g in default_groups() else "+" for g in config_groups()}
        groups = {g: f"the config group {g} ({plus[g]}{g}=<option>)" for g in config_groups()}
        tops = {k: k for k in known if "." not in k} | groups | {f"+{g}": groups[g] for g in groups}
        close = difflib.get_close_matches(leaf.lstrip("+"), sorted(tops), n=1, cutoff=SPELLING_CUTOFF - 0.15)
        if close:
            return f"unknown config key or group {full_key}; did you mean {tops[close[0]]}?"
    here = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section]
    close = difflib.get_close_matches(leaf, here, n=1, cutoff=SPELLING_CUTOFF - 0.15)
    if close:
        return f"unknown config key {full_key}; did you mean {section}.{close[0]}?"
    leaves = {k.rpartition(".")[2] for k in known} | set(KEY_ALIASES)
    close = difflib.get_close_matches(leaf, sorted(leaves), n=1, cutoff=SPELLING_CUTOFF)
    if close:
        wanted = KEY_ALIASES.get(close[0], close[0])
        paths = sorted((k for k in known if k.rpartition(".")[2] == wanted), key=lambda k: not k.startswith(section))
        return f"unknown config key {full_key}; did you mean {paths[0]}?"
    nearest = difflib.get_close_matches(leaf, here, n=SUGGESTIONS, cutoff=0) if here else []
    if not nearest:
        return f"unknown config key {full_key}; top-level keys: {', '.join(k for k in known if '.' not in k)}"
    return f"unknown config key {full_key}; nearest keys of {section}: {', '.join(nearest)} ({len(here)} in all)"


def config_groups() -> list[str]:
    """The config groups under conf/ (recipe, sweep and launcher are added with ``+``)."""
    return sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def default_groups() -> set[str]:
    """Groups conf/config.yaml composes by default; the others are added with ``+group=option``."""
    from omegaconf import OmegaConf

    defaults = OmegaConf.load(CONF_DIR / f"{PRIMARY_CONFIG}.yaml").get("defaults", [])
    return {key for entry in defaults if isinstance(entry, dict | DictConfig) for key in entry}


def option_message(group: str, name: str, options: list[str]) -> str:
    """'no model config named X', with the nearest option."""
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    plus = "" if group in default_groups() else "+"
    hint = f"did you mean {plus}{group}={close[0]}? " if close else ""
    return f"no {group} config named {name!r}; {hint}available: {', '.join(options)}"


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
