"""User-facing errors: one line that names the problem and the fix, never a traceback.

``UserError`` is raised by our own checks. ``describe_config_error`` turns the multi-line
exceptions of Hydra and OmegaConf (unknown key, wrong type, missing option, bad override syntax)
into the same one-line form, with a spelling suggestion for unknown keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator
from typing import Any, get_type_hints

OVERRIDE_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"
# How alike a misspelt key must be to a real one (difflib ratio) to be suggested.
SPELLING_CUTOFF = 0.75


class UserError(Exception):
    """A problem the user can fix; the message names it and the fix, on one line."""


def describe_failure(exc: BaseException) -> str:
    """The one line a user sees for a failed job: ours as is, others with their type and a hint."""
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    text = " ".join(str(exc).split()) or "(no message)"
    if "out of memory" in text.lower():
        return (
            f"out of memory ({text[:120]}); the article's remedies: optimizer.gradient_accumulation_steps=4 "
            "with a smaller grpo.per_device_train_batch_size, or model.quantization.load_in_4bit=true"
        )
    return f"{type(exc).__name__}: {text}"


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
    from grpo_exp.config import KEY_ALIASES, ExperimentConfig

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
