"""Checkpoints a job can trust: TRL's own ``checkpoint-<step>/`` folders plus a seal of ours.

transformers writes a checkpoint (weights or LoRA adapter, optimizer, scheduler, RNG states,
trainer state with the data position) file by file, in place: a job killed while saving leaves a
folder that looks like a checkpoint and isn't one. Once the trainer has finished a checkpoint,
``seal`` (called by ``callbacks.CheckpointSeal``) writes ``grpo_exp_state.json`` into it,
atomically: our own state (the health monitor's windows and alerts) and the size of every file.
A folder without the seal, or whose files no longer match it, is passed over for the one before,
with a warning. The final ``model/`` is sealed the same way (``save_model``), with its step, so the
eval-only command can tell whether it or a checkpoint holds the newest whole weights.
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_exp.errors import DiskFull, disk_full
from grpo_exp.folder import DAMAGED_PREFIX, SEAL_FILE, JobFolder, write_json

log = logging.getLogger("grpo_exp")


@dataclass
class Checkpoint:
    path: Path
    step: int
    state: dict[str, Any] = field(default_factory=dict)


@dataclass
class ResumePoint:
    """Where a resumed job starts: a checkpoint (None: step 0) and what the job folder recorded."""

    checkpoint: Checkpoint | None
    run_info: dict[str, Any]

    @property
    def step(self) -> int:
        return self.checkpoint.step if self.checkpoint else 0


def problem(path: Path) -> str | None:
    """Why ``path`` can't be resumed from, or None when it is whole."""
    seal = path / SEAL_FILE
    if not seal.is_file():
        return "it was not finished (the job stopped while saving it)"
    try:
        sizes = json.loads(seal.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError):
        return f"its {SEAL_FILE} is unreadable"
    for name, size in sizes.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if file.stat().st_size != size:
            return f"{name} is {file.stat().st_size} bytes, {size} when saved"
        if name.endswith(".safetensors") and not safetensors_whole(file):
            return f"{name} is damaged"
    return None


def latest(job_dir: Path, set_aside: bool = False) -> Checkpoint | None:
    """The newest whole checkpoint; damaged newer ones are reported (and renamed if ``set_aside``)."""
    for step, path in JobFolder(job_dir).checkpoints():
        reason = problem(path)
        if reason is None:
            state = json.loads((path / SEAL_FILE).read_text(encoding="utf-8"))
            return Checkpoint(path, step, state)
        log.warning("checkpoint %s can't be used: %s; trying the one before", path.name, reason)
        if set_aside:
            path.rename(path.with_name(DAMAGED_PREFIX + path.name))
    return None


def seal(path: Path, step: int, state: dict[str, Any]) -> None:
    """Mark the finished checkpoint ``path`` whole: our ``state`` and the size of each of its files."""
    files = {p.relative_to(path).as_posix(): p.stat().st_size for p in path.rglob("*") if p.is_file()}
    files.pop(SEAL_FILE, None)
    write_json(path / SEAL_FILE, {"step": step, **state, "files": files})


def save_model(trainer: Any, folder: JobFolder, primary: bool) -> None:
    """The trainer's weights into the job's ``model/``, sealed with their step once written (by the
    primary process, which writes them). The old seal goes first: a save cut short leaves no seal."""
    if primary:
        (folder.model / SEAL_FILE).unlink(missing_ok=True)
    trainer.save_model(str(folder.model))
    if primary:
        seal(folder.model, trainer.state.global_step, {})


def safetensors_whole(path: Path) -> bool:
    """A cheap integrity check: the header parses and its tensors end exactly at the file's end."""
    try:
        with path.open("rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
    except (OSError, ValueError, struct.error):
        return False
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    return 8 + header_len + end == path.stat().st_size


def full_disk(exc: BaseException, folder: JobFolder) -> DiskFull | None:
    """``DiskFull`` for a job whose disk ran full (None for any other failure), once the checkpoints
    it cut short are removed: they can't be resumed from, and their space is what the job's summary
    and its resume need. The whole ones before them are kept."""
    free, needed = folder.space()
    if not disk_full(exc, free, needed):
        return None
    saved = [path for _, path in folder.checkpoints()]  # newest first
    unfinished = []
    for path in saved:
        if problem(path) is None:
            break
        unfinished.append(path)
    for path in unfinished:
        shutil.rmtree(path, ignore_errors=True)
    kept = saved[len(unfinished)] if len(saved) > len(unfinished) else None
    return DiskFull(str(folder.path), needed, kept.name if kept else None, [p.name for p in unfinished])
