"""Weights & Biases: one run per Hydra job, named, grouped and tagged so sweeps compare at a glance.

The run is opened here, before the trainer, so it carries our name, group, tags and config;
transformers' WandbCallback then reuses it for ``train/*`` metrics. Every run is finished on the
way out, marked failed when the job raised, so the next job of a sweep gets a run of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from grpo_exp.config.schema import LoggerSettings
from grpo_exp.folder import OFFLINE_RUNS, JobFolder, multirun_file

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_HOST = "https://api.wandb.ai"
# W&B's own switch for its system-stats sampler (public and private spellings); set, it wins.
STATS_ENV = ("WANDB_X_DISABLE_STATS", "WANDB__DISABLE_STATS")


@dataclass
class RunIdentity:
    """What names a job's run, from Hydra's job info (``identity_from_hydra``)."""

    name: str
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    # The job's command-line overrides; top-level W&B config keys, so runs group and plot by them.
    overrides: dict[str, Any] = field(default_factory=dict)


def identity_from_hydra() -> RunIdentity:
    """Name from the job's overrides, tags from its config choices and swept keys, group per sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    overrides = {
        o.key_or_group: o.value()
        for o in _parse(hydra_cfg.overrides.task)
        if not o.key_or_group.lstrip("+~").startswith(("hydra.", "logger", "resume"))
    }
    name = ",".join(f"{k}={v}" for k, v in overrides.items()) or "defaults"
    tags = [
        f"{group}:{choice}" for group, choice in hydra_cfg.runtime.choices.items() if choice and "hydra" not in group
    ]
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return RunIdentity(name=name, tags=tags, overrides=overrides)
    sweep_dir = Path(hydra_cfg.sweep.dir)
    swept = swept_keys(sweep_dir, hydra_cfg.sweeper.get("params") or {})
    sweep_name = hydra_cfg.runtime.choices.get("sweep") or "_".join(["sweep", *(k.rpartition(".")[2] for k in swept)])
    tags += [f"swept:{key}" for key in swept]
    return RunIdentity(name=name, group=f"{sweep_name}-{sweep_dir.name}", tags=tags, overrides=overrides)


def swept_keys(sweep_dir: Path, params: dict[str, Any]) -> list[str]:
    """Keys the sweep varies: its ``hydra.sweeper.params`` and the command line's sweep overrides.

    The command line of the whole sweep is only in ``multirun.yaml``, which the sweeper writes
    into the sweep folder before it starts any job.
    """
    keys = list(params) + [o.key_or_group for o in _parse(sweep_command(sweep_dir)) if o.is_sweep_override()]
    return list(dict.fromkeys(k.lstrip("+~") for k in keys))


def sweep_command(sweep_dir: Path) -> list[str]:
    """The sweep's own command-line overrides (value lists included), from Hydra's ``multirun.yaml``."""
    saved = multirun_file(sweep_dir)
    if not saved.is_file():
        return []
    from omegaconf import OmegaConf

    return list(OmegaConf.load(saved).hydra.overrides.task)


def _parse(overrides: Any) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(list(overrides))


def logged_in() -> bool:
    """Whether W&B has credentials here (env var or ~/.netrc), without prompting or network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return read_netrc_auth(host=os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)) is not None
    except Exception:  # an unreadable netrc means no usable login
        return False


def resolve_mode(settings: LoggerSettings) -> str:
    """``auto`` becomes WANDB_MODE when set, else online with a login and offline without."""
    if settings.backend == "none":
        return "disabled"
    if settings.mode != "auto":
        return settings.mode
    return os.environ.get("WANDB_MODE") or ("online" if logged_in() else "offline")


def system_stats(gpu: bool) -> dict[str, bool]:
    """W&B settings for its system-stats sampler: off on a machine without a GPU, unless asked for.

    The sampler is a background process that competes with training for the cores (about 5 % of a
    2-core run) while charting nothing but the CPU; with a GPU its memory and utilisation charts
    are worth it. ``WANDB_X_DISABLE_STATS=false`` turns it back on.
    """
    if any(name in os.environ for name in STATS_ENV) or gpu:
        return {}
    return {"x_disable_stats": True}


@contextlib.contextmanager
def wandb_run(
    settings: LoggerSettings,
    identity: RunIdentity,
    config: dict[str, Any],
    output_dir: Path,
    run_id: str | None = None,
    gpu: bool = False,
) -> Iterator[Future | None]:
    """The job's W&B run, opening in the background (None when tracking is off); finished, or failed, on exit.

    ``wandb.init`` spends most of its second waiting for W&B's service process to start and answer;
    opened while the model loads, that wait costs the job nothing. ``.result()`` gives the run.
    ``config`` (the resolved job config) is nested under ``grpo_exp`` so the TrainingArguments that
    transformers writes at the top level can't clash with it; the overrides sit beside it. With
    ``run_id`` (a resumed job) the same run continues (see ``continue_history``).
    """
    mode = resolve_mode(settings)
    if mode == "disabled":
        yield None
        return
    import wandb

    # wandb.init imports these; here, so that two threads never import the same modules at once.
    from wandb.sdk.launch.inputs import internal  # noqa: F401

    options = dict(
        project=settings.project,
        entity=settings.entity,
        name=settings.name or identity.name,
        group=settings.group or identity.group,
        tags=[*identity.tags, *settings.tags],
        job_type=settings.job_type,
        config={"grpo_exp": config, **identity.overrides},
        dir=str(output_dir),
        mode=mode,
        id=run_id,
        resume="allow" if run_id else None,
        reinit="finish_previous",
        settings=wandb.Settings(silent=True, **system_stats(gpu)),  # its banners repeat our one line
    )
    _lost.clear()  # a sweep's next job tries W&B afresh
    opener = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wandb-init")
    opening = opener.submit(_open, options, output_dir)
    opener.shutdown(wait=False)
    try:
        yield opening
    except BaseException as exc:
        if opening.exception() is None:  # a run that failed to open has nothing to finish
            code = getattr(exc, "exit_code", 1)  # a clean stop keeps its code (130, 143)
            safely(lambda: opening.result().finish(exit_code=code))
        raise
    if opening.exception() is None:
        safely(lambda: opening.result().finish())


def _open(options: dict[str, Any], output_dir: Path) -> Any:
    import wandb

    run = wandb.init(**options)
    _guard_log(run)
    log.info("W&B run %r: %s", run.name, view_hint(run, options["mode"], output_dir))
    return run


def _guard_log(run: Any) -> None:
    """``wandb.log`` and ``run.log`` through ``safely``: TRL's profiling timers and completion tables and
    transformers' logger call them directly, so a W&B failure there is the same one warning as ours."""
    import wandb

    send = run.log

    def guarded(*args: Any, **kwargs: Any) -> Any:
        return safely(lambda: send(*args, **kwargs))

    run.log = guarded
    wandb.log = guarded


def continue_history(run: Any, mode: str, output_dir: Path, resumed_from: int, rows: list[dict[str, Any]]) -> int:
    """Join a resumed job's W&B history to the stopped run's; returns the last training step W&B holds.

    W&B keeps one row per step and drops steps below the highest it holds. Offline, W&B counts
    again from 0 in the new ``offline-run-*`` folder, so the first row is placed after the earlier
    folders' last one. Steps up to the checkpoint that W&B never received (a kill loses the last
    rows in flight) are sent from ``metrics.jsonl`` (``rows``); steps after it that W&B already
    holds are not sent again (``GuardedWandbCallback``).
    """
    from transformers.integrations.integration_utils import rewrite_logs  # W&B's train/ keys, as logged live

    from grpo_exp.tracking import wandb_offline

    if mode == "offline":
        last_row, sent = wandb_offline.progress(output_dir)
        step = None if last_row is None else last_row + 1
    else:
        sent, step = run.summary.get("train/global_step"), None
    sent = int(sent or 0)
    run.log({"resume/from_step": resumed_from}, step=step)
    for row in rows:
        if sent < row["step"] <= resumed_from:
            run.log({**rewrite_logs({k: v for k, v in row.items() if k != "step"}), "train/global_step": row["step"]})
    return max(sent, resumed_from)


def view_hint(run: Any, mode: str, output_dir: Path) -> str:
    """How to see the run: its URL online, the upload command offline."""
    if mode == "offline":
        return f"saved offline; upload with: wandb sync {JobFolder(output_dir).wandb / OFFLINE_RUNS}"
    return run.url or "online"


# Why W&B stopped taking this job's records (None while it takes them). W&B keeps one run per
# process, so whether it still works is the process's too.
_lost: list[str] = []


def lost() -> str | None:
    """Why W&B was given up on for this job, or None while it works."""
    return _lost[0] if _lost else None


def safely(call: Callable[[], T], default: T | None = None) -> T | None:
    """Run one W&B call; a failure of W&B's (its service process gone, the network, its disk) becomes
    one warning, and W&B is left alone for the rest of the job, which trains on with ``metrics.jsonl``
    as its record (a resume sends what W&B missed)."""
    if _lost:
        return default
    try:
        return call()
    except Exception as exc:
        give_up(exc)
        return default


def give_up(exc: BaseException) -> None:
    """Stop using W&B for this job, with one warning, and keep its exit hook from tracing back too."""
    reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    _lost.append(reason)
    log.warning("W&B failed (%s): training goes on; metrics.jsonl keeps every step for a later resume", reason)
    try:  # W&B's exit hook would report the lost service again, as a traceback: unregister it
        from wandb.sdk import wandb_setup

        connection = wandb_setup.singleton()._connection
        if connection is not None and connection._cleanup is not None:
            connection._cleanup()
            connection._torn_down = True
    except Exception:  # another wandb version: its exit hook may still print, training is unharmed
        pass
