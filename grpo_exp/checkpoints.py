"""Checkpoints a job can trust: TRL's own ``checkpoint-<step>/`` folders plus a seal of ours.

transformers writes a checkpoint (weights or LoRA adapter, optimizer, scheduler, RNG states,
trainer state with the data position) file by file, in place: a job killed while saving leaves a
folder that looks like a checkpoint and isn't one. Once the trainer has finished a checkpoint,
``CheckpointSeal`` writes ``grpo_exp_state.json`` into it, atomically: our own state (the health
monitor's windows and alerts, the W&B run) and the size of every file. A folder without the seal,
or whose files no longer match it, is passed over for the one before, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_exp.monitor import HealthMonitor

log = logging.getLogger("grpo_exp")

SEAL_FILE = "grpo_exp_state.json"
_FOLDER = re.compile(r"^checkpoint-(\d+)$")
# A damaged checkpoint is renamed, not deleted, so nothing written is lost and TRL's rotation
# (which globs ``checkpoint-*``) no longer counts it.
DAMAGED_PREFIX = "damaged-"


@dataclass
class Checkpoint:
    path: Path
    step: int
    state: dict[str, Any] = field(default_factory=dict)


def folders(job_dir: Path) -> list[tuple[int, Path]]:
    """The job's checkpoint folders, newest first."""
    found = [(int(m.group(1)), p) for p in job_dir.glob("checkpoint-*") if (m := _FOLDER.match(p.name)) and p.is_dir()]
    return sorted(found, reverse=True)


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
        if name.endswith(".safetensors") and not _safetensors_whole(file):
            return f"{name} is damaged"
    return None


def latest(job_dir: Path, set_aside: bool = False) -> Checkpoint | None:
    """The newest whole checkpoint; damaged newer ones are reported (and renamed if ``set_aside``)."""
    for step, path in folders(job_dir):
        reason = problem(path)
        if reason is None:
            state = json.loads((path / SEAL_FILE).read_text(encoding="utf-8"))
            return Checkpoint(path, step, state)
        log.warning("checkpoint %s can't be used: %s; trying the one before", path.name, reason)
        if set_aside:
            path.rename(path.with_name(DAMAGED_PREFIX + path.name))
    return None


class CheckpointSeal(TrainerCallback):
    """Seals each checkpoint the trainer finishes with our state and its files' sizes."""

    def __init__(self, monitor: HealthMonitor, extra: dict[str, Any] | None = None) -> None:
        self.monitor = monitor
        self.extra = extra or {}  # e.g. the W&B run id, so a resumed job continues the same run

    def on_step_end(self, args, state, control, **kwargs):
        # The last step is always checkpointed, so a finished run can be extended (grpo.max_steps).
        if args.save_strategy != "no" and state.global_step >= state.max_steps > 0:
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        files = {p.relative_to(path).as_posix(): p.stat().st_size for p in path.rglob("*") if p.is_file()}
        files.pop(SEAL_FILE, None)
        seal = {"step": state.global_step, "monitor": self.monitor.state_dict(), **self.extra, "files": files}
        _write_atomic(path / SEAL_FILE, json.dumps(seal, indent=1))


def _write_atomic(path: Path, text: str) -> None:
    """Write a file so readers see the old content or the new one, never half of it."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)


def _safetensors_whole(path: Path) -> bool:
    """A cheap integrity check: the header parses and its tensors end exactly at the file's end."""
    try:
        with path.open("rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
    except (OSError, ValueError, struct.error):
        return False
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    return 8 + header_len + end == path.stat().st_size
