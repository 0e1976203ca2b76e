"""Reading W&B's offline run files, which ``wandb.Api`` can't open.

A resumed offline run starts W&B's step counter at 0 in a new ``offline-run-*`` folder; ``wandb
sync`` would then drop its rows as older than the ones already there. Reading the earlier folders
tells the resumed run where W&B's steps and the training steps it received stopped.

A ``.wandb`` file is a 7-byte header (``:W&B``, magic, version) followed by LevelDB-style log
blocks of 32 KiB, each record a 7-byte header (crc32, length, type) and a chunk of a serialized
``wandb_internal_pb2.Record``; long records span FIRST/MIDDLE/LAST chunks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_exp.folder import JobFolder

FILE_HEADER = 7
BLOCK = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[Any]:
    """Every protobuf Record in a .wandb file, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    pos, parts = FILE_HEADER, []
    while pos + CHUNK_HEADER.size <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER.size:  # block trailer padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        start = pos + CHUNK_HEADER.size
        pos = start + length
        if kind not in (FULL, FIRST, MIDDLE, LAST):
            continue
        parts.append(data[start:pos])
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


@dataclass(frozen=True)
class Held:
    """What a job's offline W&B runs hold, over all of their ``offline-run-*`` folders."""

    last_row: int | None  # W&B's highest step (None: no row yet)
    trained: int  # the last training step logged (0: none)
    evaluated: int | None  # the training step of the last held-out evaluation logged (None: none; 0: before training)
    summary_keys: frozenset[str]  # every summary key written


def held(job_dir: Path) -> Held:
    """Read the job's offline W&B files for what they hold: where a resume or a repair continues them."""
    last_row, trained, evaluated, summary = None, 0, None, set()
    for path in (file for run in JobFolder(job_dir).offline_runs() for file in run.glob("*.wandb")):
        for record in records(path):
            kind = record.WhichOneof("record_type")
            if kind == "summary":
                summary.update(item_key(item) for item in record.summary.update)
            if kind != "history":
                continue
            items = {item_key(item): item.value_json for item in record.history.item}
            last_row = max(last_row or 0, history_step(record.history))
            if "train/reward" in items:
                trained = max(trained, int(float(items["train/global_step"])))
            if "eval/reward" in items:
                evaluated = max(evaluated or 0, int(float(items["train/global_step"])))
    return Held(last_row, trained, evaluated, frozenset(summary))


def history_step(history: Any) -> int:
    """A history row's step: an ``_step`` item when W&B counted it, the record's own when given to ``log``."""
    explicit = [int(item.value_json) for item in history.item if item_key(item) == "_step"]
    return explicit[0] if explicit else int(history.step.num)


def item_key(item: Any) -> str:
    """A history or config item's key (wandb-core writes it as a one-part ``nested_key``)."""
    return item.key or "/".join(item.nested_key)
