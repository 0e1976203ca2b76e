"""``python -m grpo_exp.tracking.repair FOLDER...``: send a job's W&B run what W&B missed.

When W&B's service process dies mid-run the job trains on (``wandb_run.safely``) and ends with
``wandb_lost`` in ``summary.json``; ``metrics.jsonl`` has every step, W&B only those before it died,
and no summary. This reopens the job's W&B run (the id in ``run_info.json``) and sends every training
step, held-out evaluation and summary figure it lacks, with the keys live logging uses, through the
resume path's sender (``wandb_run.continue_history``), then finishes the run as the job ended.

An offline run can't be appended to in place: the repair adds an ``offline-run-*`` folder with the
same id after the others, which ``wandb sync`` uploads into the one run (W&B's steps continue
after the earlier folders' last). The job's folder is held while the repair runs
(``JobFolder.lock``), so a job that still runs, and still writes both records, is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.errors import EXIT_USER_ERROR, UserError
from grpo_exp.folder import (
    COMPLETED,
    LOCK_FILE,
    METRICS_FILE,
    RUN_INFO_FILE,
    FolderInUse,
    JobFolder,
    read_json,
    read_yaml,
)
from grpo_exp.folder import sweep_jobs as sweep_job_paths
from grpo_exp.tracking.metrics import EVAL_REWARD, eval_rows, training_rows
from grpo_exp.tracking.wandb_run import (
    continue_history,
    held_history,
    logged_in,
    missing_rows,
    summary_record,
    system_stats,
    view_hint,
)

EXIT_OK, EXIT_WANDB_FAILED = 0, 1
# The repaired run ends as the job did: W&B shows exit code 0 as finished, any other as failed.
FINISHED, FAILED = 0, 1


class RepairFailed(Exception):
    """W&B itself failed during a repair (its service, the network, a missing run on the server)."""


@dataclass(frozen=True)
class Record:
    """What the job folder holds for its W&B run."""

    run: dict[str, Any]  # run_info.json's ``wandb``: id, name, group, project
    training: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    summary: dict[str, Any]  # summary.json ({} when the job never wrote one)


def job_folders(path: Path) -> list[JobFolder]:
    """The job folders a command-line folder names: the job itself, or each job of a sweep."""
    folder = JobFolder(path)
    if folder.holds_job_files() or folder.run_info_file.is_file():
        return [folder]
    jobs = sweep_job_paths(path) if path.is_dir() else []
    if not jobs:
        raise UserError(
            f"{path} is not a job folder (no {RUN_INFO_FILE} or {METRICS_FILE}) nor a sweep folder of jobs: "
            "give outputs/<date>/<time> or outputs/multirun/<sweep>"
        )
    return [JobFolder(job) for job in jobs]


def repair(folder: JobFolder) -> str:
    """Send the job's W&B run every step, evaluation and summary figure it lacks; returns the one line
    that says what was sent. Raises ``UserError`` for a folder it can't repair, ``RepairFailed`` when W&B fails."""
    run_info = _run_info(folder)
    if not run_info.get("id"):
        return f"{folder.path}: no W&B run to repair ({RUN_INFO_FILE} names none: logger=none, or W&B never opened)"
    with _holding(folder):
        rows = folder.rows()
        record = Record(run_info, training_rows(rows), eval_rows(rows), folder.summary() or {})
        mode = "offline" if folder.offline_runs() else "online"
        if mode == "online" and not logged_in():
            raise UserError(f"{folder.path}: its W&B run is online and W&B has no login here: run `wandb login` first")
        with _wandb_calls(folder), _reopened(folder, record, mode, eager=mode == "online") as opener:
            held = held_history(opener.run, mode, folder.path)
            missing = missing_rows(held, record.training, record.evaluations)
            summary = summary_record(record.summary) if record.summary and not held.summarized else {}
            if not missing and not summary:
                return (
                    f"{folder.path}: nothing missing in W&B run {run_info['id']} (it holds {_counted(record)}); "
                    f"{view_hint(opener.run, mode, folder.path)}"
                )
            run = opener.open()
            continue_history(run, mode, folder.path, None, record.training, record.evaluations, held)
            if summary:
                run.summary.update(summary)
            hint = view_hint(run, mode, folder.path)
            return f"{folder.path}: sent {_sent(missing, bool(summary))} to W&B run {run.id}; {hint}"


def _run_info(folder: JobFolder) -> dict[str, Any]:
    """run_info.json's ``wandb`` block ({} without one); a damaged file is one line naming it."""
    path = folder.run_info_file
    if not path.is_file():
        return {}
    info = read_json(path)
    run = info.get("wandb", {}) if info is not None else None
    if not isinstance(run, dict):
        raise UserError(
            f"{path} can't be read (not a JSON object with a `wandb` block): it names the W&B run to repair"
        )
    return run


@contextlib.contextmanager
def _holding(folder: JobFolder) -> Iterator[None]:
    """The job folder, held for the repair: a job that still runs is refused in one line."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(folder.lock())
        except FolderInUse:
            holder = (folder.path / LOCK_FILE).read_text(encoding="utf-8").strip() or "another process"
            raise UserError(
                f"{folder.path} is in use by the job of {holder}: repair it once the job has ended"
            ) from None
        yield


@contextlib.contextmanager
def _wandb_calls(folder: JobFolder) -> Iterator[None]:
    """W&B's own failures, as one ``RepairFailed``; ours pass through."""
    try:
        yield
    except (UserError, RepairFailed):
        raise
    except Exception as exc:
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise RepairFailed(f"{folder.path}: W&B failed during the repair ({reason}); run it again") from exc


class _Opener:
    """The job's W&B run, opened once it is needed (offline, only when something is missing)."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        self.run: Any = None

    def open(self) -> Any:
        if self.run is None:
            import wandb

            self.run = wandb.init(**self.options)
        return self.run


@contextlib.contextmanager
def _reopened(folder: JobFolder, record: Record, mode: str, eager: bool) -> Iterator[_Opener]:
    """The job's W&B run under its id, finished on the way out as the job ended (failed if the repair raised).

    Online the run must exist on W&B's server; offline W&B can't check it, and a new ``offline-run-*``
    folder with the same id is what ``wandb sync`` merges. Name, group, tags and job type are given
    again as the run had them, so uploading the new folder leaves them as they were.
    """
    import wandb

    logger = (read_yaml(folder.config) or {}).get("logger") or {}
    first = _first_run_record(folder)
    options = dict(
        id=record.run["id"],
        project=record.run.get("project") or logger.get("project"),
        entity=logger.get("entity"),
        name=record.run.get("name"),
        group=record.run.get("group"),
        dir=str(folder.path),
        mode=mode,
        resume="allow" if mode == "offline" else "must",
        reinit="finish_previous",
        settings=wandb.Settings(silent=True, **system_stats(gpu=False)),
    )
    if first is not None:
        options.update(tags=list(first.tags), job_type=first.job_type or None)
    opener = _Opener(options)
    if eager:
        opener.open()
    try:
        yield opener
    except BaseException:
        if opener.run is not None:
            with contextlib.suppress(Exception):  # the failure itself is what the user sees
                opener.run.finish(exit_code=FAILED)
        raise
    if opener.run is not None:
        opener.run.finish(exit_code=FINISHED if record.summary.get("status") == COMPLETED else FAILED)


def _first_run_record(folder: JobFolder) -> Any:
    """The run record of the job's first offline W&B run (None online): its tags and job type."""
    from grpo_exp.tracking.wandb_offline import records

    for path in (file for run in folder.offline_runs()[:1] for file in run.glob("*.wandb")):
        for entry in records(path):
            if entry.WhichOneof("record_type") == "run":
                return entry.run
    return None


def _sent(missing: list[dict[str, Any]], summary: bool) -> str:
    steps = [row["step"] for row in missing if EVAL_REWARD not in row]
    parts = [f"{_plural(len(steps), 'training step')} ({steps[0]}-{steps[-1]})"] if steps else []
    if len(steps) < len(missing):
        parts.append(_plural(len(missing) - len(steps), "evaluation"))
    return _joined([*parts, *(["the summary"] if summary else [])])


def _counted(record: Record) -> str:
    held = [f"all {_plural(len(record.training), 'training step')}", _plural(len(record.evaluations), "evaluation")]
    return _joined([*held, *(["the summary"] if record.summary else [])])


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _joined(parts: list[str]) -> str:
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """One line per job on stdout; a folder it can't repair is one line on stderr (exit 2), a W&B failure too (1)."""
    parser = argparse.ArgumentParser(
        prog="python -m grpo_exp.tracking.repair",
        description="Send a job's W&B run the steps, evaluations and summary it missed (from metrics.jsonl).",
    )
    parser.add_argument(
        "folders", nargs="+", type=Path, help="job folders (outputs/<date>/<time>) or sweep folders (each of its jobs)"
    )
    args = parser.parse_args(argv)
    code = EXIT_OK
    for path in args.folders:
        try:
            jobs = job_folders(path)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = max(code, EXIT_USER_ERROR)
            continue
        for folder in jobs:
            try:
                print(repair(folder), flush=True)
            except UserError as exc:
                print(f"error: {exc}", file=sys.stderr)
                code = max(code, EXIT_USER_ERROR)
            except RepairFailed as exc:
                print(f"error: {exc}", file=sys.stderr)
                code = max(code, EXIT_WANDB_FAILED)
    return code


if __name__ == "__main__":
    sys.exit(main())
