"""What run.py does around Hydra: check the whole command first, then run each job safely.

``preflight`` composes and validates every job before Hydra starts one (one-line errors, exit 2).
``run_job`` is the body of each Hydra job: it trains, and turns any failure into one line on the
console, the full traceback in the job's ``error.txt``, and (in a sweep) a failed job that does
not stop the others.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import math
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from grpo_exp import hardware
from grpo_exp.config.schema import CONF_DIR, register_schema
from grpo_exp.errors import EXIT_USER_ERROR, DiskFull, UserError, causes, describe_failure
from grpo_exp.folder import FolderInUse, JobFolder
from grpo_exp.job import resume as resume_rules
from grpo_exp.job.resume import override_key
from grpo_exp.tracking.metrics import objective_value
from grpo_exp.training import stops
from grpo_exp.training.stops import JobStopped

if TYPE_CHECKING:
    from grpo_exp.spec import JobSpec  # its import builds on the rewards and data: not for --help

log = logging.getLogger("grpo_exp")

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # the shell's code for Ctrl-C
EXIT_NO_SPACE = 28  # errno's number for "no space left on device"
HALVING_SWEEPER = "halving"  # hydra_plugins/grpo_exp_plugins/halving_sweeper.py
# Hydra's own flags that only print something; they need no checking.
_PRINT_ONLY = ("help", "hydra_help", "cfg", "info", "shell_completion", "version")


def preflight(argv: list[str]) -> list[str]:
    """Exit with one line if any job of this command has a config that cannot run.

    Returns the command line Hydra should see: ``resume=<job folder>`` becomes a run in that folder.
    """
    from hydra._internal.utils import get_args_parser

    args, _ = get_args_parser().parse_known_args(argv)
    if args.help or args.hydra_help:
        # Listing the groups for help makes Hydra deep-copy every stored config once per group (~100
        # times); the typed schema would cost ~0.15 s there and check nothing, as help runs no job.
        ConfigStore.instance().store(name="schema", node={})
        return argv
    register_schema()
    config_dir = CONF_DIR.parent / args.config_path if args.config_path else CONF_DIR
    if args.cfg and not (args.config_dir or args.experimental_rerun):
        _check_printed_config(config_dir, args.config_name or "config", args.overrides, args.multirun)
        return argv
    if any(getattr(args, flag, None) for flag in _PRINT_ONLY) or args.config_dir or args.experimental_rerun:
        return argv
    from grpo_exp.job.preflight import check_command, recorded_spec  # --help and --cfg return above

    try:
        _check_launch(args.overrides, args.multirun)
        resume_to = _resume_folder(args.overrides, args.multirun)
        if resume_to is not None:
            # The job runs the folder's recorded config, but Hydra still composes this command line
            # (a `+resume=` on the schema's own key fails there): check that it does.
            check_command(config_dir, args.config_name or "config", args.overrides, multirun=False, validating=False)
            recorded_spec(resume_to, args.overrides)
            return [*argv, f"hydra.run.dir='{resume_to}'", "hydra.output_subdir=null"]
        check_command(config_dir, args.config_name or "config", args.overrides, args.multirun)
        if args.multirun:
            return [*argv, *_sweep_overrides(config_dir, args.config_name or "config", args.overrides)]
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    return argv


def _check_printed_config(config_dir: Path, config_name: str, overrides: list[str], multirun: bool) -> None:
    """``--cfg`` prints the config a run would get: it is refused as the run would be (one line, exit 2),
    by every check that needs no torch (the machine's say, ``layout``, is left to the run)."""
    from grpo_exp.job.preflight import check_command

    try:
        check_command(config_dir, config_name, overrides, multirun, ask_machine=False)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def _sweep_overrides(config_dir: Path, config_name: str, overrides: list[str]) -> list[str]:
    """What the sweep's command gains: its folder, resolved once (a requeued SLURM job must find the
    folder it started in, not one named after the time it was requeued, ``${now:...}``), and the
    halving sweeper when ``sweep.halving.enabled`` (Hydra's basic sweeper with halving added)."""
    from hydra import initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.utils import setup_globals

    from grpo_exp.job.preflight import compose_job

    setup_globals()
    parsed = OverridesParser.create().parse_overrides(overrides)
    plain = [o.input_line for o in parsed if not o.is_sweep_override() and o.input_line]
    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
        cfg = compose_job(config_name, plain, with_hydra=True)
    HydraConfig.instance().set_config(cfg)  # for ${hydra:...} in the folder's name, as a job would see it
    given = "hydra.sweep.dir" in {override_key(o) for o in overrides}
    added = [] if given else [f"hydra.sweep.dir='{cfg.hydra.sweep.dir}'"]
    if cfg.sweep.halving.enabled:
        sweeper = cfg.hydra.runtime.choices.get("hydra/sweeper")
        if sweeper not in ("basic", HALVING_SWEEPER):
            raise UserError(
                f"sweep.halving.enabled=true halves a grid of configurations; hydra/sweeper={sweeper} chooses its own "
                "(leave out sweep.halving, or sweep a grid: key=a,b,c)"
            )
        from grpo_exp.config.checks import check_halving

        check_halving(cfg)
        added.append(f"hydra/sweeper={HALVING_SWEEPER}")
    return added


def _check_launch(overrides: list[str], multirun: bool) -> None:
    """Under torchrun or accelerate launch each rank composes the command alone: a folder named after
    the time (Hydra's default) could differ between them by a second."""
    keys = {override_key(o) for o in overrides}
    given = ("hydra.sweep.dir" if multirun else "hydra.run.dir") in keys or "resume" in keys
    if hardware.world_size() > 1 and not given:
        key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
        raise UserError(f"under torchrun or accelerate launch, all processes write into one folder: add {key}=<folder>")


def _resume_folder(overrides: list[str], multirun: bool) -> Path | None:
    """For ``resume=<job folder>``: the folder, once it exists and the other overrides may change."""
    values = {override_key(o): o.split("=", 1)[1] for o in overrides if "=" in o}
    resume = values.get("resume", resume_rules.NEVER)
    folder_key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if resume == resume_rules.AUTO and folder_key not in values:
        raise UserError(f"resume=auto continues the run in {folder_key}; add {folder_key}=<the folder to continue>")
    if not resume_rules.is_folder(resume):
        return None
    folder = Path(resume)
    if multirun:
        raise UserError(
            f"resume={resume} continues one job; to resume a sweep, run its command again with "
            "hydra.sweep.dir=<its folder> resume=auto"
        )
    if values.get("hydra.run.dir", resume) != resume:
        raise UserError(f"resume={resume} writes into that folder; leave out hydra.run.dir")
    resume_rules.check_folder(folder)
    resume_rules.check_overrides(resume, overrides)
    return folder


def run_job(cfg: DictConfig) -> float:
    """Train one job; returns its objective (NaN when it failed inside a sweep)."""
    _freeze_startup()
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    from grpo_exp.job.preflight import job_spec, recorded_spec

    primary = hardware.rank() == 0  # under torchrun/accelerate, rank 0 speaks and writes the job's files
    if not primary:
        _quiet_secondary()
    try:
        overrides = list(hydra_cfg.overrides.task)
        recorded = resume_rules.is_folder(str(cfg.resume))  # the run's recorded config, not this composition
        spec = recorded_spec(output_dir, overrides) if recorded else job_spec(cfg)
        folder = JobFolder(output_dir)
        with folder.lock() if primary else contextlib.nullcontext():  # one writer: rank 0
            return _train(spec, folder)
    except FolderInUse as exc:  # another job's folder: nothing may be written to it, and the command stops
        log.error("%s", exc)
        sys.exit(EXIT_USER_ERROR)
    except JobStopped as stop:
        where = f"checkpoint {stop.checkpoint}" if stop.checkpoint else "no checkpoint (stopped before the first one)"
        if stop.handover:  # pre-empted under submitit: its handler requeues the job, which resumes
            log.warning("pre-empted at step %d, %s; the launcher requeues the job", stop.step, where)
            stop.handover()
        log.warning("stopped at step %d, %s; resume with: %s", stop.step, where, resume_command(output_dir))
        sys.exit(stop.exit_code)
    except KeyboardInterrupt:
        log.warning("stopped at once; from the last checkpoint, resume with: %s", resume_command(output_dir))
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        folder = JobFolder(output_dir)
        full = _disk_full(exc, folder, resume_command(output_dir)) if primary else None
        if primary:
            with contextlib.suppress(OSError):  # on a full disk even this may not fit
                folder.write_error(traceback.format_exc())
        if full:
            log.error("%s", full)
            sys.exit(EXIT_NO_SPACE)
        log.error("%s (details: %s)", describe_failure(exc), folder.error)
        if in_sweep:
            return math.nan
        sys.exit(EXIT_USER_ERROR if isinstance(exc, UserError) else EXIT_FAILED)


@functools.cache  # once per process: a later job's start may hold the previous job's cyclic garbage
def _freeze_startup() -> None:
    """Move every object start-up made (the libraries, Hydra's composition, the checks) out of reach
    of the cyclic garbage collector's full passes, before the first job builds anything.

    Those objects live as long as the process, yet each full pass walks all of them again: on a
    1-step run the full passes during the training imports cost ~0.5 s more than a plain TRL
    script's (benchmarks/startup.md). What start-up left as cyclic garbage is kept (a few MB, once).
    """
    gc.freeze()


def _disk_full(exc: BaseException, folder: JobFolder, resume: str) -> str | None:
    """The one line for a job that ran out of disk (None for other failures). The lifecycle has
    removed the checkpoints the disk cut short by the time it raises ``DiskFull``; a failure
    before training (writing the job's records) is judged here, the same way."""
    from grpo_exp.training.checkpoints import full_disk

    full = next((e for e in causes(exc) if isinstance(e, DiskFull)), None) or full_disk(exc, folder)
    return full.line(resume) if full else None


def _quiet_secondary() -> None:
    """Ranks other than 0 print errors only and write no run.log: the console reads as one job's."""
    import warnings

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
    root.setLevel(logging.ERROR)
    logging.getLogger("grpo_exp").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"  # read when transformers loads, with its progress bars off
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


def _train(spec: JobSpec, folder: JobFolder) -> float:
    """Start, continue or skip the job, as its folder says (``resume.plan``)."""
    from grpo_exp.tracking.wandb_run import identity_from_hydra
    from grpo_exp.training import ranks
    from grpo_exp.training.lifecycle import train

    if spec.layout.processes > 1:
        ranks.start(spec.layout.gpu)  # so rank 0 alone decides where to resume, and says so to the others
    plan = ranks.decided_by_primary(lambda: resume_rules.plan(spec.settings, folder.path))
    if plan.done is not None:
        log.info("%s completed its %s steps before; nothing to do", folder.path, plan.done.get("steps"))
        value = objective_value(plan.done, str(spec.settings.objective))[1]
        return math.nan if value is None else value
    log.info("%s", spec.layout.describe())
    for warning in spec.warnings:
        log.warning(warning)
    return train(spec, folder, identity_from_hydra(), plan.point)


def resume_command(output_dir: Path) -> str:
    """The command that continues this job: its folder alone, or for a sweep the sweep's command."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return resume_rules.sweep_resume_command(
            Path(hydra_cfg.sweep.dir), list(hydra_cfg.overrides.task), launcher_words()
        )
    return shlex.join([*launcher_words(), "run.py", f"resume={output_dir}"])


def launcher_words(cmdline: Path | None = None) -> list[str]:
    """How this process was started, up to the script: ``python``, or the launcher's command line
    (``torchrun --nproc_per_node 2``, ``accelerate launch --config_file …``), read from the parent
    process that torchrun and accelerate run the ranks under."""
    if stops.LAUNCHED_BY not in os.environ and cmdline is None:
        return ["python"]
    try:
        raw = (cmdline or Path(f"/proc/{os.getppid()}/cmdline")).read_bytes()
    except OSError:
        return ["torchrun", f"--nproc_per_node={os.environ.get('LOCAL_WORLD_SIZE', '1')}"]
    words = [w.decode() for w in raw.split(b"\0") if w]
    script = Path(sys.argv[0]).name
    words = words[: next((i for i, w in enumerate(words) if Path(w).name == script), len(words))]
    if len(words) > 1 and Path(words[0]).name.startswith("python") and not words[1].startswith("-"):
        words = [Path(words[1]).name, *words[2:]]  # `python .venv/bin/torchrun …`: the entry point is the command
    elif words and Path(words[0]).name.startswith("python"):
        words = ["python", *words[1:]]
    return words
