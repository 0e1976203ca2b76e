"""Weights & Biases: one run per Hydra job, named, grouped and tagged so sweeps compare at a glance.

The run is opened here, before the trainer, so it carries our name, group, tags and config;
transformers' WandbCallback then reuses it for ``train/*`` metrics. Every run is finished on the
way out, marked failed when the job raised, so the next job of a sweep gets a run of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from grpo_exp.config.schema import LoggerBackend, LoggerSettings
from grpo_exp.folder import OFFLINE_RUNS, JobFolder, multirun_file
from grpo_exp.tracking.metrics import EVAL_PREFIX, EVAL_REWARD, TRAINER_EVAL_PREFIX

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_HOST = "https://api.wandb.ai"
# W&B's own switch for its system-stats sampler (public and private spellings); set, it wins.
STATS_ENV = ("WANDB_X_DISABLE_STATS", "WANDB__DISABLE_STATS")


# Top-level run-config keys beside the overrides, so a sweep's runs group by configuration and spread by seed.
SEED_KEY = "seed"
CONFIGURATION_KEY = "configuration"
DEFAULTS = "defaults"  # the configuration of a job that set nothing


@dataclass
class RunIdentity:
    """What names a job's run, from Hydra's job info (``identity_from_hydra``)."""

    name: str
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    # The job's command-line overrides; top-level W&B config keys, so runs group and plot by them.
    overrides: dict[str, Any] = field(default_factory=dict)
    # The values that make the job's configuration (the swept ones in a sweep, all but its seed): the runs of
    # one configuration share it, whatever their seed.
    configuration: str = DEFAULTS


def run_config(identity: RunIdentity, config: dict[str, Any]) -> dict[str, Any]:
    """The config a job's W&B and trackio runs hold: the resolved job config nested under ``grpo_exp`` (so the
    TrainingArguments transformers writes at the top level can't clash with it), the overrides beside it, and
    the seed and configuration as keys of their own, so the runs of one configuration group across seeds."""
    return {
        "grpo_exp": config,
        **identity.overrides,
        SEED_KEY: config.get(SEED_KEY),
        CONFIGURATION_KEY: identity.configuration,
    }


def configuration_label(values: dict[str, Any]) -> str:
    """``key=value, ...`` of the values that make a configuration (the sweep report labels it alike)."""
    return ", ".join(f"{key}={value_text(value)}" for key, value in values.items()) or DEFAULTS


def value_text(value: Any) -> str:
    """An override value as people read it: ``1e-3`` parses to 0.001 and shows as ``0.001``."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def identity_from_hydra(hydra_cfg: Any = None) -> RunIdentity:
    """Name from the job's overrides (a sweep's: the swept ones), tags from its config choices and swept
    keys, group per sweep. ``hydra_cfg``: Hydra's node of the running job (by default, ``HydraConfig``'s)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = hydra_cfg if hydra_cfg is not None else HydraConfig.get()
    overrides = {
        o.key_or_group: o.value()
        for o in _parse(hydra_cfg.overrides.task)
        if not o.key_or_group.lstrip("+~").startswith(("hydra.", "logger", "resume", "sweep.halving.rung_steps"))
    }
    tags = [
        f"{group}:{choice}" for group, choice in hydra_cfg.runtime.choices.items() if choice and "hydra" not in group
    ]
    if hydra_cfg.mode != RunMode.MULTIRUN:
        own = configuration_label({k: v for k, v in overrides.items() if k != SEED_KEY})
        return RunIdentity(name=run_name(overrides), tags=tags, overrides=overrides, configuration=own)
    sweep_dir = Path(hydra_cfg.sweep.dir)
    swept = swept_keys(sweep_dir, hydra_cfg.sweeper.get("params") or {})
    # Last, where a cut sidebar loses it: the job number and sweep folder keep names apart between sweeps (a
    # resumed trackio run is found by its name, which also names a folder of its store: no "/").
    name = (
        f"{run_name({k: overrides[k] for k in swept if k in overrides})} - job {hydra_cfg.job.num} of {sweep_dir.name}"
    )
    sweep_name = hydra_cfg.runtime.choices.get("sweep") or "_".join(["sweep", *(k.rpartition(".")[2] for k in swept)])
    tags += [f"swept:{key}" for key in swept]
    own = configuration_label({k: overrides[k] for k in swept if k in overrides and k != SEED_KEY})
    group = f"{sweep_name}-{sweep_dir.name}"
    return RunIdentity(name=name, group=group, tags=tags, overrides=overrides, configuration=own)


def run_name(values: dict[str, Any]) -> str:
    """``key=value`` for each value, a key by its last part where unambiguous (``lr=0.0001,seed=1``): a sweep
    passes only what it sweeps, so a cut sidebar still shows what differs between its runs."""
    last = [key.rpartition(".")[2] for key in values]
    shown = [short if last.count(short) == 1 else key for key, short in zip(values, last, strict=True)]
    return ",".join(f"{key}={value_text(value)}" for key, value in zip(shown, values.values(), strict=True)) or DEFAULTS


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
    if LoggerBackend.wandb.value not in settings.trackers():
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
    ``config`` (the resolved job config) is held as ``run_config`` says. With
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
        config=run_config(identity, config),
        dir=str(output_dir),
        mode=mode,
        id=run_id,
        resume="allow" if run_id else None,
        reinit="finish_previous",
        settings=wandb.Settings(silent=True, **system_stats(gpu)),  # its banners repeat our one line
    )
    start_afresh()  # a sweep's next job tries W&B afresh
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


# The first row of a continued history names where it continues: after a resume, its checkpoint's
# step; after a repair (``grpo_exp.tracking.repair``), the last training step W&B held before.
RESUME_MARKER = "resume/from_step"
REPAIR_MARKER = "repair/from_step"
# lifecycle copies summary.json's figures into the W&B summary under this prefix.
SUMMARY_PREFIX = "summary/"


@dataclass(frozen=True)
class History:
    """What a job's W&B run holds: where W&B's step counter goes on, the last training step and the
    last held-out evaluation it received, and whether it has the job's summary."""

    next_row: int | None  # the W&B step of the next row, when W&B can't count on by itself (offline)
    trained: int  # 0: none
    evaluated: int | None  # None: none (an evaluation before training is at step 0)
    summarized: bool


def held_history(run: Any, mode: str, output_dir: Path) -> History:
    """What W&B holds of the job: offline, from every ``offline-run-*`` folder (W&B counts again from
    0 in a new one, so the next row is placed after their last); online, from the resumed run's summary
    (its last ``train/global_step``, for training and evaluation rows alike)."""
    if mode == "offline":
        from grpo_exp.tracking import wandb_offline

        found = wandb_offline.held(output_dir)
        summarized = any(key.startswith(SUMMARY_PREFIX) for key in found.summary_keys)
        next_row = None if found.last_row is None else found.last_row + 1
        return History(next_row, found.trained, found.evaluated, summarized)
    summary = run.summary
    step = summary.get("train/global_step")
    keys = summary.keys()  # W&B's Summary has keys() but can't be iterated itself
    evaluated = None if step is None else int(step)
    return History(None, int(step or 0), evaluated, any(key.startswith(SUMMARY_PREFIX) for key in keys))


def missing_rows(
    held: History, rows: Sequence[dict[str, Any]], evaluations: Sequence[dict[str, Any]] = (), until: int | None = None
) -> list[dict[str, Any]]:
    """The ``metrics.jsonl`` rows (training steps, held-out evaluations) W&B lacks, up to step ``until``
    (None: the last), in the order live logging sent them: a step's evaluation after its training row."""
    last = float("inf") if until is None else until
    evaluated = -1 if held.evaluated is None else held.evaluated  # an evaluation before training is at step 0
    missing = [row for row in rows if held.trained < row["step"] <= last]
    missing += [row for row in evaluations if evaluated < row["step"] <= last]
    return sorted(missing, key=lambda row: (row["step"], EVAL_REWARD in row))


def history_record(row: dict[str, Any]) -> dict[str, Any]:
    """A ``metrics.jsonl`` row as live logging sent it to W&B: ``train/<key>`` (an evaluation's
    ``eval/<key>``, its other keys ``train/``) and ``train/global_step``, as transformers' ``rewrite_logs``."""
    from transformers.integrations.integration_utils import rewrite_logs

    logs = {
        TRAINER_EVAL_PREFIX + key[len(EVAL_PREFIX) :] if key.startswith(EVAL_PREFIX) else key: value
        for key, value in row.items()
        if key != "step"
    }
    return {**rewrite_logs(logs), "train/global_step": row["step"]}


def continue_history(
    run: Any,
    mode: str,
    output_dir: Path,
    resumed_from: int | None,
    rows: Sequence[dict[str, Any]],
    evaluations: Sequence[dict[str, Any]] = (),
    held: History | None = None,
) -> int:
    """Join a continued job's W&B history to the run's earlier one; returns the last training step W&B holds.

    W&B keeps one row per step and drops steps below the highest it holds: the first row goes after
    the ones W&B holds (``held_history``). After a resume (``resumed_from``, its checkpoint's step) the
    steps up to the checkpoint that W&B never received (a kill loses the last rows in flight) are sent
    from ``metrics.jsonl`` (``rows``); steps after it that W&B already holds are not sent again
    (``GuardedWandbCallback``). A repair (``resumed_from=None``) sends every row W&B lacks, held-out
    ``evaluations`` too.
    """
    held = held or held_history(run, mode, output_dir)
    marker = {RESUME_MARKER: resumed_from} if resumed_from is not None else {REPAIR_MARKER: held.trained}
    run.log(marker, step=held.next_row)
    sent = missing_rows(held, rows, evaluations, resumed_from)
    for row in sent:
        run.log(history_record(row))
    return max(held.trained, resumed_from or 0, *(row["step"] for row in sent))


def scalar(value: Any) -> bool:
    """A single value, as W&B's summary and config take it (not a list or a mapping)."""
    return isinstance(value, str | int | float) or value is None


def summary_record(summary: dict[str, Any]) -> dict[str, Any]:
    """summary.json's figures for the W&B summary: ``summary/<key>``, single values only."""
    return {f"{SUMMARY_PREFIX}{key}": value for key, value in summary.items() if scalar(value)}


def view_hint(run: Any, mode: str, output_dir: Path) -> str:
    """How to see the run: its URL online, the upload command offline."""
    if mode == "offline":
        return f"saved offline; upload with: wandb sync {JobFolder(output_dir).wandb / OFFLINE_RUNS}"
    return run.url or "online"


# Why W&B stopped taking this job's records (None while it takes them). W&B keeps one run per
# process, so whether it still works is the process's too.
_lost: list[str] = []


def start_afresh() -> None:
    """Try W&B again in this process: a new job (or the sweep's report) after one that gave W&B up."""
    _lost.clear()


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
