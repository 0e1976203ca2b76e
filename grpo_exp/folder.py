"""The job folder: what it holds, under which names, and how each file is read and written.

The job folder is how training, resume, the sweep report and the dashboard talk to each other,
so every name is here and nowhere else:

- ``config.yaml``: the config as run, derived values included (what ``resume=`` continues);
- ``metrics.jsonl``: one JSON object per logging step (and per held-out evaluation, per profile);
- ``summary.json``: how the job ended and its figures, written when it ends, stops or fails;
- ``run_info.json``: provenance, the model's source, the W&B run to continue, each resume;
- ``plan.json``: the memory plan predicted at the start (``python -m grpo_exp.plan``);
- ``adaptive_profiles.jsonl``: an adaptive run's profile and choice before each stage;
- ``evaluations.jsonl``: scores of its weights taken after training (``python -m grpo_exp.job.evaluate``);
- ``error.txt``: the traceback of a failed job;
- ``checkpoint-<step>/`` (sealed by ``grpo_exp_state.json``), ``model/``, ``wandb/``;
- ``.hydra/overrides.yaml``: Hydra's record of the job's overrides;
- ``.job.lock``: held by the job that runs in the folder (``JobFolder.lock``), naming its host and pid.

A sweep folder holds its jobs and Hydra's ``multirun.yaml``; the report goes to ``report/`` (with
``intervals.csv``, and a ``wandb/`` of its own when the interval table was logged to W&B).

Whole files are written atomically (a reader sees the old content or the new, never half), and
JSON Lines files are appended line by line; readers skip a line a kill cut short.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import platform
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
RUN_INFO_FILE = "run_info.json"
PLAN_FILE = "plan.json"
PROFILES_FILE = "adaptive_profiles.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"
ERROR_FILE = "error.txt"
OVERRIDES_FILE = ".hydra/overrides.yaml"
LOCK_FILE = ".job.lock"
MODEL_DIR = "model"
WANDB_DIR = "wandb"
OFFLINE_RUNS = "offline-run-*"
CHECKPOINT_PREFIX = "checkpoint-"
SEAL_FILE = "grpo_exp_state.json"
# A damaged checkpoint is renamed, not deleted, so nothing written is lost and TRL's rotation
# (which globs ``checkpoint-*``) no longer counts it.
DAMAGED_PREFIX = "damaged-"
MULTIRUN_FILE = "multirun.yaml"
REPORT_DIR = "report"
INTERVALS_CSV = "intervals.csv"  # in the report: each configuration's objective over its seeds, with intervals
HALVING_FILE = "halving.json"  # successive halving's decisions, written as each rung ends
# A job's ``status`` in summary.json; INCOMPLETE is what a reader makes of a job without one (killed hard).
COMPLETED, FAILED, INTERRUPTED, INCOMPLETE = "completed", "failed", "interrupted", "incomplete"
STOPPED_EARLY = "stopped_early"  # successive halving stopped the job at a rung (sweep.halving)

_CHECKPOINT = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")
_TORN = 1 << 62  # the step given to a line cut short by a kill: never kept by a rewind


@dataclass(frozen=True)
class JobFolder:
    """One job's folder (it need not exist yet)."""

    path: Path

    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def summary_file(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def run_info_file(self) -> Path:
        return self.path / RUN_INFO_FILE

    @property
    def profiles_file(self) -> Path:
        return self.path / PROFILES_FILE

    @property
    def error(self) -> Path:
        return self.path / ERROR_FILE

    @property
    def overrides(self) -> Path:
        return self.path / OVERRIDES_FILE

    @property
    def model(self) -> Path:
        return self.path / MODEL_DIR

    @property
    def wandb(self) -> Path:
        return self.path / WANDB_DIR

    def holds_run(self) -> bool:
        """Whether a job has trained here before (Hydra's own files alone don't count)."""
        return self.metrics.exists() or self.summary_file.exists() or bool(self.checkpoints())

    def holds_job_files(self) -> bool:
        """Whether any of a job's own files is here (the report's test for a job folder)."""
        files = (self.summary_file, self.metrics, self.config, self.error, self.overrides)
        return any(path.is_file() for path in files)

    def checkpoints(self) -> list[tuple[int, Path]]:
        """The checkpoint folders, newest first."""
        found = [
            (int(m.group(1)), p) for p in self.path.glob(f"{CHECKPOINT_PREFIX}*") if (m := _CHECKPOINT.match(p.name))
        ]
        return sorted(((step, p) for step, p in found if p.is_dir()), reverse=True)

    def checkpoint(self, step: int) -> Path:
        return self.path / f"{CHECKPOINT_PREFIX}{step}"

    def offline_runs(self) -> list[Path]:
        """W&B's offline run folders, oldest first (a resumed offline run adds one)."""
        return sorted(self.wandb.glob(OFFLINE_RUNS))

    def summary(self) -> dict[str, Any] | None:
        return read_json(self.summary_file)

    def run_info(self) -> dict[str, Any]:
        return read_json(self.run_info_file) or {}

    def record(self, path: Path) -> dict[str, Any]:
        """A JSON record of the folder that a resume continues ({} when absent); a one-line ``UserError``
        when it is damaged, since writing over it would lose what it held."""
        if not path.is_file():
            return {}
        value = read_json(path)
        if value is None:
            raise UserError(
                f"{path} is damaged (not a JSON object): restore it from a backup, or move it away to resume without it"
            )
        return value

    def write_config(self, text: str) -> None:
        write_text(self.config, text)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.summary_file, summary)

    def write_run_info(self, info: dict[str, Any]) -> None:
        write_json(self.run_info_file, info)

    def write_plan(self, plan: dict[str, Any]) -> None:
        """The job's memory plan (``grpo_exp.plan``), as predicted when it started."""
        write_json(self.path / PLAN_FILE, plan)

    def write_error(self, text: str) -> None:
        write_text(self.error, text)

    def space(self) -> tuple[int, int]:
        """Free bytes on the folder's disk, and the bytes a checkpoint of this job takes (its largest so far)."""
        sizes = [sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for _, p in self.checkpoints()]
        return shutil.disk_usage(self.path).free, max(sizes, default=0)

    def rows(self) -> list[dict[str, Any]]:
        """Every whole row of ``metrics.jsonl``, in order."""
        return read_rows(self.metrics)[0]

    def append_row(self, row: dict[str, Any]) -> None:
        append_line(self.metrics, row)

    def profiles(self) -> list[dict[str, Any]]:
        """An adaptive run's profiles, oldest first."""
        return read_rows(self.profiles_file)[0]

    def append_profile(self, entry: dict[str, Any]) -> None:
        append_line(self.profiles_file, entry)

    def append_evaluation(self, entry: dict[str, Any]) -> None:
        append_line(self.path / EVALUATIONS_FILE, entry)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the folder for one job: a second job for it (a second command, a sweep resumed while it
        still runs, a requeued job whose old copy lives on) fails with one line naming the holder.

        An ``fcntl`` lock on ``.job.lock``: the kernel releases it when the holder exits, however it exits,
        so a dead job never leaves a stale lock (on one host; a shared file system must support flock)."""
        self.path.mkdir(parents=True, exist_ok=True)
        path = self.path / LOCK_FILE
        with path.open("a+", encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                raise FolderInUse(
                    f"{self.path} is in use by the job of {holder}: wait for it to end or stop it, "
                    "or give this run another hydra.run.dir"
                ) from None
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} on {platform.node()}\n")
            handle.flush()
            try:
                yield
            finally:
                handle.seek(0)
                handle.truncate()  # the lock itself goes with the file handle

    def rewind(self, step: int) -> None:
        """Keep the rows of steps up to ``step`` (metrics and profiles): the steps after it are trained again."""
        for path in (self.metrics, self.profiles_file):
            if path.is_file():
                kept = [line for _, line in _text_lines(path) if line is not None and _row_step(line) <= step]
                write_text(path, "".join(line + "\n" for line in kept))


class FolderInUse(UserError):
    """Another job holds the folder; nothing of it may be written to."""


def sweep_jobs(sweep_dir: Path) -> list[Path]:
    """The job folders of a sweep (its subfolders with a job's files): Hydra's numbered ones first, in job order.

    Hidden folders (a run's ``.hydra`` holds a ``config.yaml`` too) and the report are not jobs.
    """
    jobs = [
        p
        for p in sweep_dir.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name != REPORT_DIR and JobFolder(p).holds_job_files()
    ]
    return sorted(jobs, key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name))


def numbered_jobs(sweep_dir: Path) -> list[Path]:
    """Hydra's numbered job folders (``0/``, ``1/``, ...) in job order, whatever they hold so far.

    Unlike ``sweep_jobs`` a job needs none of its own files yet: one that only opened its W&B run counts.
    """
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))


def multirun_file(sweep_dir: Path) -> Path:
    """Hydra's record of the sweep (its command line and sweeper settings), written before any job runs."""
    return sweep_dir / MULTIRUN_FILE


def report_dir(sweep_dir: Path) -> Path:
    return sweep_dir / REPORT_DIR


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when it is absent, torn or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_yaml(path: Path) -> Any:
    """The YAML document in ``path``; None when it is absent or unreadable."""
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def read_rows(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON objects of a JSON Lines file, and the numbers of its torn lines (not JSON objects, or not UTF-8
    text: skipped, the latter with a warning)."""
    if not path.is_file():
        return [], []
    rows, torn = [], []
    for number, line in _text_lines(path):
        if line is not None and not line.strip():
            continue
        try:
            row = json.loads(line) if line is not None else None
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            torn.append(number)
    return rows, torn


def _text_lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """Each line of ``path`` with its number (from 1), None for one that is not UTF-8 (a disk or a copy that
    damaged it): the rest of the file still reads, and a warning names the line."""
    for number, raw in enumerate(path.read_bytes().splitlines(), 1):
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("%s: line %d is not UTF-8 text; skipped", path, number)
            yield number, None


def append_line(path: Path, row: dict[str, Any]) -> None:
    """One JSON object as one line, appended and flushed in one write."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


def write_json(path: Path, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``path`` so readers see the old content or the new one, never half of it (nor none of it:
    the copy's size is checked on disk before it replaces the old one)."""
    partial = path.with_name(path.name + ".partial")
    data = text.encode("utf-8")
    try:
        with partial.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if os.fstat(handle.fileno()).st_size != len(data):
                raise OSError(errno.ENOSPC, f"{partial.name} holds fewer bytes than were written")
        os.replace(partial, path)
    except BaseException:  # a full disk, a kill: the old file stays whole, and no half-written copy is left
        partial.unlink(missing_ok=True)
        raise


def _row_step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return _TORN
