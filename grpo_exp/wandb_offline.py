"""Reading W&B's offline run files, which ``wandb.Api`` can't open.

A resumed offline run starts W&B's step counter at 0 in a new ``offline-run-*`` folder; ``wandb
sync`` would then drop its rows as older than the ones already there. Reading the earlier folders'
last step lets the resumed run continue after it.

A ``.wandb`` file is a 7-byte header (``:W&B``, magic, version) followed by LevelDB-style log
blocks of 32 KiB, each record a 7-byte header (crc32, length, type) and a chunk of a serialized
``wandb_internal_pb2.Record``; long records span FIRST/MIDDLE/LAST chunks.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def last_step(job_dir: Path) -> int | None:
    """The highest history step in the job's offline W&B runs (None when there are none)."""
    steps = [
        history_step(record.history)
        for path in job_dir.glob("wandb/offline-run-*/*.wandb")
        for record in records(path)
        if record.WhichOneof("record_type") == "history"
    ]
    return max(steps, default=None)


def history_step(history: Any) -> int:
    """A history row's step: an ``_step`` item when W&B counted it, the record's own when given to ``log``."""
    explicit = [int(item.value_json) for item in history.item if item.key == "_step"]
    return explicit[0] if explicit else int(history.step.num)
