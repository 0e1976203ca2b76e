"""What run.py does around Hydra: check the whole command first, then run each job safely.

``preflight`` composes and validates every job before Hydra starts one (one-line errors, exit 2).
``run_job`` is the body of each Hydra job: it trains, and turns any failure into one line on the
console, the full traceback in the job's ``error.txt``, and (in a sweep) a failed job that does
not stop the others.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import traceback
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from grpo_exp.config import register_schema, to_settings
from grpo_exp.errors import UserError, describe_failure
from grpo_exp.tracking import identity_from_hydra
from grpo_exp.validate import validate

log = logging.getLogger("grpo_exp")

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
EXIT_USER_ERROR = 2
EXIT_FAILED = 1
# Hydra's own flags that only print something; they need no checking.
_PRINT_ONLY = ("help", "hydra_help", "cfg", "info", "shell_completion", "version")


def preflight(argv: list[str]) -> None:
    """Exit with one line if any job of this command has a config that cannot run."""
    from hydra._internal.utils import get_args_parser

    args, _ = get_args_parser().parse_known_args(argv)
    if args.help or args.hydra_help:
        # Listing the groups for help makes Hydra deep-copy every stored config once per group (~100
        # times); the typed schema would cost ~0.15 s there and check nothing, as help runs no job.
        ConfigStore.instance().store(name="schema", node={})
        return
    register_schema()
    if any(getattr(args, flag, None) for flag in _PRINT_ONLY) or args.config_dir or args.experimental_rerun:
        return
    config_dir = CONF_DIR.parent / args.config_path if args.config_path else CONF_DIR
    from grpo_exp.preflight import check_command

    try:
        check_command(config_dir, args.config_name or "config", args.overrides, args.multirun)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def run_job(cfg: DictConfig) -> float:
    """Train one job; returns its objective (NaN when it failed inside a sweep)."""
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        settings = to_settings(cfg)
        for warning in validate(settings):
            log.warning(warning)
        from grpo_exp.train import train

        return train(settings, output_dir, identity_from_hydra())
    except Exception as exc:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        (output_dir / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        log.error("%s (details: %s)", describe_failure(exc), output_dir / "error.txt")
        if in_sweep:
            return math.nan
        sys.exit(EXIT_USER_ERROR if isinstance(exc, UserError) else EXIT_FAILED)
