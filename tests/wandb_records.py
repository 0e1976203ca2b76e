"""Reading W&B offline run files in tests: they can't be opened with wandb.Api.

A ``.wandb`` file is a 7-byte header (``:W&B``, magic, version) followed by LevelDB-style log
blocks of 32 KiB, each record a 7-byte header (crc32, length, type) and a chunk of a serialized
``wandb_internal_pb2.Record``; long records span FIRST/MIDDLE/LAST chunks.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
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


@dataclass
class OfflineRun:
    """What a test wants to know about one offline run."""

    run_id: str
    name: str
    group: str
    job_type: str
    tags: list[str]
    config: dict[str, Any] = field(default_factory=dict)
    history_keys: set[str] = field(default_factory=set)
    exit_code: int | None = None


def read_run(run_dir: Path) -> OfflineRun:
    """The run record, config, logged keys and exit code of ``wandb/offline-run-*``."""
    (path,) = run_dir.glob("*.wandb")
    run: OfflineRun | None = None
    config: dict[str, Any] = {}
    keys: set[str] = set()
    exit_code = None
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run = OfflineRun(r.run_id, r.display_name, r.run_group, r.job_type, list(r.tags))
            config.update({item.key: json.loads(item.value_json) for item in r.config.update})
        elif kind == "config":
            config.update({item.key: json.loads(item.value_json) for item in record.config.update})
        elif kind == "history":
            keys.update(item.key or "/".join(item.nested_key) for item in record.history.item)
        elif kind == "exit":
            exit_code = record.exit.exit_code
    assert run is not None, f"no run record in {path}"
    run.config, run.history_keys, run.exit_code = config, keys, exit_code
    return run
