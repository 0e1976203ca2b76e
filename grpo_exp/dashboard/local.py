"""A sweep's runs in trackio's local dashboard (``python -m grpo_exp.dashboard <sweep> --local``).

A sweep run with ``logger=trackio`` (or ``logger.backends=[wandb,trackio]``) logged each job as a
trackio run in its local store (``TRACKIO_DIR``, else trackio's cache folder). This serves trackio's
dashboard on 127.0.0.1 for the sweep's project: its curves overlaid, grouped by config keys, no
login and no network. The project and the run names come from the sweep's job folders.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder, numbered_jobs, read_yaml

HOST = "127.0.0.1"  # this machine only: the dashboard can write to the store


@dataclass(frozen=True)
class SweepRuns:
    """The trackio project of a sweep and the names of its jobs' runs found in the store."""

    project: str
    runs: list[str]
    store: Path


def sweep_runs(sweep_dir: Path) -> SweepRuns:
    """The sweep's project and runs, or a one-line error saying why there are none to show."""
    if not sweep_dir.is_dir():
        raise UserError(f"{sweep_dir} is not a folder: give a sweep folder (outputs/multirun/...)")
    jobs = numbered_jobs(sweep_dir)
    if not jobs:
        raise UserError(f"{sweep_dir} holds no job folders (0/, 1/, …): give the folder of a sweep")
    projects, names = set(), []
    for job in jobs:
        config = read_yaml(JobFolder(job).config)
        logger = config.get("logger", {}) if isinstance(config, dict) else {}
        if logger.get("project"):
            projects.add(str(logger["project"]))
        summary = JobFolder(job).summary() or {}
        if summary.get("name"):
            names.append(str(summary["name"]))
    if len(projects) != 1:
        found = ", ".join(sorted(projects)) or "none"
        raise UserError(f"the jobs of {sweep_dir} must share one logger.project; they name: {found}")
    project = projects.pop()
    try:
        from trackio.sqlite_storage import SQLiteStorage
        from trackio.utils import TRACKIO_DIR
    except ImportError:
        raise UserError("the local dashboard needs trackio: pip install -e '.[trackio]'") from None
    stored = set(SQLiteStorage.get_runs(project)) if SQLiteStorage.get_project_db_path(project).exists() else set()
    runs = [name for name in names if name in stored]
    if not runs:
        raise UserError(
            f"no trackio run of {sweep_dir} in {TRACKIO_DIR} (project {project}): run the sweep with "
            "logger=trackio (or logger.backends=[wandb,trackio]), with the same TRACKIO_DIR"
        )
    return SweepRuns(project, runs, Path(TRACKIO_DIR))


def serve(found: SweepRuns, port: int | None = None) -> tuple[Any, str]:
    """Start trackio's dashboard for the project in this process; its handle (``.close()``) and address."""
    import trackio

    with contextlib.redirect_stdout(io.StringIO()):  # its banner says a browser opened, with a write token
        server, local_url, _, _ = trackio.show(
            project=found.project, open_browser=False, block_thread=False, host=HOST, server_port=port
        )
    return server, f"{local_url.rstrip('/')}/?project={found.project}"
