"""Compose and validate every job of a command before Hydra starts any of them.

Hydra composes a sweep's jobs one by one as it runs them, so a bad value in the ninth job would
surface after eight have trained. Here every combination (command-line sweeps and
``hydra.sweeper.params`` alike) is composed and validated first, and the first problem is reported
as one line. Range sweeps of the Optuna sweeper are checked at both ends.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from omegaconf import DictConfig, OmegaConf

from grpo_exp import hardware
from grpo_exp.config.errors import describe_config_error
from grpo_exp.config.loading import to_settings
from grpo_exp.config.schema import register_schema
from grpo_exp.errors import UserError
from grpo_exp.spec import JobSpec, build_spec, check_config

# Beyond this many combinations only the first are checked, so checking stays well under a minute.
MAX_CHECKED_JOBS = 64


# The specs built here, by composed config: Hydra runs the jobs in this process after the
# preflight, and each job takes its spec from here, so it is checked (and its rewards built) once.
_SPECS: dict[str, JobSpec] = {}


def check_command(
    config_dir: Path,
    config_name: str,
    overrides: Sequence[str],
    multirun: bool,
    validating: bool = True,
    ask_machine: bool = True,
) -> None:
    """Compose and validate each job the command would run; a one-line UserError for the first bad one.

    ``validating=False`` only composes (a resumed job validates its folder's recorded config instead);
    ``ask_machine=False`` runs every check but the machine's (``--cfg``: torch stays unimported).
    """
    register_schema()
    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
        jobs = list(job_overrides(config_name, overrides)) if multirun else [list(overrides)]
        for job in jobs[:MAX_CHECKED_JOBS]:
            cfg = compose_job(config_name, job)
            if validating and ask_machine:
                job_spec(cfg)
            elif validating:
                check_config(to_settings(cfg))


def job_spec(cfg: DictConfig) -> JobSpec:
    """The spec of a composed job; built once per job and process (and launch: the batch is split per rank)."""
    key = f"{hardware.world_size()}:{OmegaConf.to_yaml(cfg)}"
    if key not in _SPECS:
        _SPECS[key] = build_spec(to_settings(cfg))
    return _SPECS[key]


def recorded_spec(folder: Path, overrides: Sequence[str]) -> JobSpec:
    """The spec of the config a job folder recorded, with a resume's adjustments; once per process,
    like ``job_spec`` (the preflight and the resumed job share it)."""
    from grpo_exp.job import resume

    adjustments = [o for o in overrides if resume.override_key(o) in resume.ADJUSTABLE]
    key = f"resume:{folder.resolve()}:{adjustments}"
    if key not in _SPECS:
        _SPECS[key] = build_spec(resume.recorded_settings(folder, adjustments))
    return _SPECS[key]


def compose_job(config_name: str, overrides: Sequence[str], with_hydra: bool = False) -> DictConfig:
    """One job's config (with Hydra's own node if asked), or a one-line UserError saying why not."""
    try:
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=with_hydra)
    except Exception as exc:  # Hydra and OmegaConf raise many types; all of them are the user's input
        raise UserError(describe_config_error(exc)) from None


def job_overrides(config_name: str, overrides: Sequence[str]) -> Iterator[list[str]]:
    """The override list of every job in the sweep, as the basic sweeper would expand it."""
    plain = [o for o in _parse(overrides) if not o.is_sweep_override()]
    base = compose_job(config_name, [o.input_line for o in plain if o.input_line], with_hydra=True)
    params = base.hydra.sweeper.get("params") or {}
    parsed = _parse([f"{k}={v}" for k, v in params.items()] + list(overrides))
    choices: dict[str, list[str]] = {}
    for override in parsed:
        choices[override.get_key_element()] = list(_values(override))
    keys = list(choices)
    for combo in itertools.product(*(choices[k] for k in keys)):
        yield [f"{k}={v}" for k, v in zip(keys, combo, strict=True)]


def _parse(overrides: Sequence[str]) -> list[Override]:
    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except Exception as exc:
        raise UserError(describe_config_error(exc)) from None


def _values(override: Override) -> Iterator[str]:
    if not override.is_sweep_override():
        yield override.get_value_element_as_str()
    elif isinstance(override.value(), IntervalSweep):
        sweep = override.value()
        yield from (_number(sweep.start), _number(sweep.end))
    else:
        yield from override.sweep_string_iterator()


def _number(value: float) -> str:
    """An interval end as an override value; whole numbers stay integers (``int(interval(4, 8))``)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))
