"""What tests want to know about an offline W&B run (the file format: grpo_exp/wandb_offline.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_exp.tracking.wandb_offline import item_key, records


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
    history: list[dict[str, Any]] = field(default_factory=list)  # each row's items, decoded
    summary: dict[str, Any] = field(default_factory=dict)  # the summary as last updated


def read_run(run_dir: Path) -> OfflineRun:
    """The run record, config, history, summary and exit code of ``wandb/offline-run-*``."""
    (path,) = run_dir.glob("*.wandb")
    run: OfflineRun | None = None
    config: dict[str, Any] = {}
    keys: set[str] = set()
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
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
            history.append({item_key(item): json.loads(item.value_json) for item in record.history.item})
            keys.update(history[-1])
        elif kind == "summary":
            summary.update({item_key(item): json.loads(item.value_json) for item in record.summary.update})
        elif kind == "exit":
            exit_code = record.exit.exit_code
    assert run is not None, f"no run record in {path}"
    run.config, run.history_keys, run.exit_code = config, keys, exit_code
    run.history, run.summary = history, summary
    return run
