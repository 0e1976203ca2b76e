"""The data files shipped inside the package (prompt sets, warm-up fragments) and how to read them.

Below both the prompt datasets (``data``) and the embedded model's warm-up (``models``), which read
the same files.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError


def shipped_file(name: str) -> Path:
    """A data file shipped inside the package (prompts, warm-up fragments)."""
    return Path(str(resources.files("grpo_exp") / "data" / name))


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a JSON array or JSON Lines file (the article's ``prompts.json`` may be either)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    else:
        records = [_json_line(path, number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not all(isinstance(r, dict) for r in records):
        raise UserError(f"{path} must hold JSON objects (records with a 'prompt' field)")
    return records


def _json_line(path: Path, number: int, line: str) -> Any:
    """One line of a JSON Lines file; its error names the file's line, not the line's own line 1."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON Lines: line {number}: {exc.msg} (column {exc.colno})") from None
