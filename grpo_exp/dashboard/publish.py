"""Save a sweep's W&B view when a login is present, else write its specification for later.

The specification (``<sweep>/report/wandb_view.json``) is written either way: it is what the view
holds, readable without W&B, and the offline user's proof of what the command will create.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from grpo_exp.dashboard.sweep import read_sweep
from grpo_exp.dashboard.view import build_workspace, default_entity, save, specification
from grpo_exp.folder import report_dir

# The view's spec goes beside the sweep report (grpo_exp.report writes report.md into report_dir).
SPEC_FILE = "wandb_view.json"
OFFLINE_MODES = frozenset({"offline", "disabled", "dryrun"})
MAX_REASON = 200  # characters of a server's error kept in the one-line message


@dataclass
class Published:
    """Where the view went: always its specification file, and its URL once saved on a server."""

    spec_path: Path
    url: str | None = None
    why_not_saved: str | None = None


def publish(folder: Path, entity: str | None = None, project: str | None = None, online: bool = True) -> Published:
    """Build the view of the sweep in ``folder``, write its specification, and save it when ``online`` can.

    Raises a UserError (one line) for a folder without a sweep or W&B group, or without the library.
    """
    facts = read_sweep(folder)
    if project:
        facts.project = project
    entity = entity or facts.entity
    why_not = _offline_reason() if online else "asked for the specification only"
    url = None
    workspace = build_workspace(facts, entity)
    if why_not is None:
        try:
            if entity is None:
                entity = workspace.entity = default_entity()
            url = save(workspace)
        except Exception as exc:  # no server, no permission: the spec still records the view
            why_not = f"{type(exc).__name__}: {' '.join(str(exc).split())[:MAX_REASON]}"
    spec = specification(workspace, entity_known=entity is not None)
    spec_path = report_dir(Path(folder)) / SPEC_FILE
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps({**spec, "url": url}, indent=2) + "\n", encoding="utf-8")
    return Published(spec_path, url, why_not)


def _offline_reason() -> str | None:
    """Why no view can be saved from here, or None when a W&B login is present."""
    from grpo_exp.tracking.wandb_run import logged_in

    mode = os.environ.get("WANDB_MODE", "")
    if mode in OFFLINE_MODES:
        return f"WANDB_MODE={mode}"
    return None if logged_in() else "no W&B login here"
