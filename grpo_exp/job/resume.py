"""Resuming a job (``resume=never|auto|<job folder>``): from where, with which config, keeping what.

- ``never`` (the default): a fresh job; a folder that already holds a run is refused, so a run
  is never appended to by accident.
- ``<job folder>``: continue that job, in that folder, with the config it recorded. Only settings
  that don't change the experiment (``ADJUSTABLE``: how long it trains, how it reports) may be
  given with it; ``run.py`` writes into the folder itself (``hydra.run.dir``).
- ``auto``: continue the job folder Hydra gives this job when it holds a run of the same config,
  skip it when that run completed, start it otherwise. That is how a sweep resumes (the same
  command, the same ``hydra.sweep.dir``) and how a requeued SLURM job picks up its checkpoint.

A resumed job continues from its latest whole checkpoint (``checkpoints.latest``): its
``metrics.jsonl`` is cut back to the checkpoint's step, so every step ends up there once, and its
W&B run continues under the same id without resending the steps W&B already holds.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from grpo_exp.config.loading import to_settings
from grpo_exp.config.schema import CONF_DIR, ExperimentConfig
from grpo_exp.errors import UserError
from grpo_exp.folder import COMPLETED, CONFIG_FILE, STOPPED_EARLY, JobFolder
from grpo_exp.training.checkpoints import ResumePoint, latest

log = logging.getLogger("grpo_exp")

NEVER, AUTO = "never", "auto"
# What a resumed job may change: how long it trains and how it reports, never what it learns.
ADJUSTABLE = (
    "resume",
    "grpo.max_steps",
    "grpo.num_train_epochs",
    "grpo.save_steps",
    "grpo.save_total_limit",
    "logger",
    "logger.mode",
    "save_model",
    "threads",
    "device",
    "sweep.halving.rung_steps",  # successive halving continues a job to its next rung
)


@dataclass
class Plan:
    """What a job does: train ``settings`` (continuing ``point`` if set), or nothing (``done``)."""

    settings: ExperimentConfig
    point: ResumePoint | None = None
    done: dict[str, Any] | None = None  # the summary of a run that already completed


def plan(settings: ExperimentConfig, job_dir: Path) -> Plan:
    """Decide, before anything heavy loads, whether this job starts, continues, or is already done.

    ``settings`` are the job's validated settings: for ``resume=<folder>``, that folder's recorded ones.
    """
    folder = JobFolder(job_dir)
    if settings.resume == NEVER:
        if folder.holds_run():
            raise UserError(
                f"{job_dir} already holds a run; continue it with resume={job_dir}, or give another hydra.run.dir"
            )
        return Plan(settings)
    if settings.resume == AUTO and not folder.holds_run():
        return Plan(settings)  # auto, and this job never ran: start it
    if settings.resume == AUTO and (changed := differences(recorded_settings(job_dir), settings)):
        raise UserError(
            f"resume=auto: {job_dir} holds a run with another config ({', '.join(changed[:4])} differ); "
            "resume it with the same settings, or give a new hydra.sweep.dir (hydra.run.dir)"
        )
    summary = folder.record(folder.summary_file)
    target = settings.sweep.halving.rung_steps or settings.grpo.max_steps  # a rung of halving ends early
    if summary.get("status") in (COMPLETED, STOPPED_EARLY) and (target <= 0 or summary.get("steps", 0) >= target):
        return Plan(settings, done=summary)
    return Plan(settings, point=resume_point(job_dir))


def is_folder(value: str) -> bool:
    return value not in (NEVER, AUTO)


def check_folder(folder: Path) -> None:
    """A one-line error unless ``folder`` is a job folder that can be resumed."""
    if not JobFolder(folder).config.is_file():
        raise UserError(
            f"resume={folder}: not a job folder (no {CONFIG_FILE} there); give the folder of a run, "
            "e.g. resume=outputs/<date>/<time>"
        )


def check_overrides(folder: str, overrides: Sequence[str]) -> None:
    """Refuse overrides that would make a resumed job a different experiment, naming them."""
    refused = [o for o in overrides if override_key(o) not in ADJUSTABLE and not override_key(o).startswith("hydra.")]
    if refused:
        raise UserError(
            f"resume={folder} continues the run with its recorded config; these overrides would change the "
            f"experiment: {', '.join(refused)} (only {', '.join(ADJUSTABLE[1:])} may change); start a new run instead"
        )


def recorded_settings(folder: Path, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """The config a job ran with (its ``config.yaml``), with the adjustable overrides applied."""
    check_folder(folder)
    path = JobFolder(folder).config
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), OmegaConf.load(path))
    except Exception as exc:  # YAML's and OmegaConf's errors span lines; the user needs the file and the gist
        gist = " ".join(str(exc).split())[:160]
        raise UserError(
            f"resume={folder}: {path} can't be read as the run's config ({gist}); restore it, "
            "or start a new run with another hydra.run.dir"
        ) from None
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key not in ADJUSTABLE or key == "resume":
            continue
        if (CONF_DIR / key).is_dir():  # a config group (logger=none): its option's file
            option = CONF_DIR / key / f"{value}.yaml"
            if not option.is_file():
                names = ", ".join(sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml")))
                raise UserError(f"no {key} config named {value!r}; available: {names}")
            cfg[key] = OmegaConf.merge(cfg[key], OmegaConf.load(option))
        else:
            cfg.merge_with_dotlist([f"{key}={value}"])
    cfg.resume = str(folder)
    return to_settings(cfg)


def differences(recorded: ExperimentConfig, current: ExperimentConfig) -> list[str]:
    """Dotted keys whose values differ between two configs, adjustable keys left out."""
    old, new = _flat(dataclasses.asdict(recorded)), _flat(dataclasses.asdict(current))
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k) and k not in ADJUSTABLE]


def resume_point(job_dir: Path) -> ResumePoint:
    """The latest whole checkpoint of ``job_dir`` (damaged newer ones set aside) and its records."""
    folder = JobFolder(job_dir)
    run_info = folder.record(folder.run_info_file)  # first: a damaged record stops the resume before anything moves
    checkpoint = latest(job_dir, set_aside=True)
    if checkpoint is None:
        log.warning("no usable checkpoint in %s: training starts again from step 0", job_dir)
    return ResumePoint(checkpoint, run_info)


def override_key(override: str) -> str:
    """The key an override sets, without Hydra's ``+``/``++``/``~`` prefixes."""
    return override.split("=", 1)[0].lstrip("+~")


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(_flat(value, f"{prefix}{key}."))
    return flat


def sweep_resume_command(sweep_dir: Path, overrides: list[str] | None = None, launch: list[str] | None = None) -> str:
    """The sweep's command with ``hydra.sweep.dir`` and ``resume=auto``: completed jobs are skipped,
    the others continue from their latest checkpoint (``plan`` above).

    ``overrides``: the command's own, when the sweep's record (``multirun.yaml``) isn't written yet;
    ``launch``: what starts ``run.py`` (``python``, or torchrun's command line)."""
    from grpo_exp.tracking.wandb_run import sweep_command

    recorded = sweep_command(sweep_dir) or list(overrides or [])
    kept = [o for o in recorded if override_key(o) not in ("resume", "hydra.sweep.dir")]
    return shlex.join([*(launch or ["python"]), "run.py", "-m", *kept, f"hydra.sweep.dir={sweep_dir}", "resume=auto"])
