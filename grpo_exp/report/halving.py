"""The rungs of a successive-halving sweep in its report, from ``<sweep dir>/halving.json``.

Where each configuration stopped, its held-out reward at each rung it reached (with its interval over
seeds when it ran several), why each went on or stopped, and the completions the sweep generated against
the full sweep's (every job to ``grpo.max_steps``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_exp.folder import HALVING_FILE, read_json


def halving_section(sweep_dir: Path) -> list[str]:
    """The report's "Successive halving" section; nothing for a sweep that didn't halve."""
    record = read_json(Path(sweep_dir) / HALVING_FILE)
    if not record or not record.get("rungs"):
        return []
    rungs: list[dict[str, Any]] = record["rungs"]
    configurations = list(rungs[0]["scores"])
    header = ["configuration", *(f"rung {i} (step {r['steps']})" for i, r in enumerate(rungs)), "stopped at"]
    rows = []
    for name in configurations:
        cells, stopped = [], f"step {rungs[-1]['steps']} (the end)"
        for index, rung in enumerate(rungs):
            if name not in rung["scores"]:
                cells.append("—")
                continue
            score, bounds = rung["scores"][name], (rung.get("intervals") or {}).get(name)
            kept = name in rung["kept"]
            spread = f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else ""
            cells.append(("—" if score is None else f"{score:.3f}{spread}") + ("" if kept else " ✗"))
            if not kept and index < len(rungs) - 1:
                stopped = f"rung {index} (step {rung['steps']})"
        rows.append([f"`{name}`", *cells, stopped])
    made, full = record["completions"]["generated"], record["completions"]["full_sweep"]
    saved = f"{made:,} completions generated against {full:,} for the full sweep" + (
        f" ({made / full:.0%}; {1 - made / full:.0%} saved)." if full else "."
    )
    planned = ", ".join(str(s) for s in record.get("rungs_at", []))
    return [
        "",
        "## Successive halving",
        "",
        f"Rungs end at steps {planned}; ranked by {record.get('ranked_by', 'held-out reward')}, the best 1/eta go on, "
        "and so does a configuration whose interval over seeds overlaps the best's "
        "(✗: stopped there, `stopped_early`). " + saved,
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] * len(header)) + " |",
        *("| " + " | ".join(row) + " |" for row in rows),
        *_reasons(rungs),
    ]


def _reasons(rungs: list[dict[str, Any]]) -> list[str]:
    """Each rung's decision, one line per rung: why each configuration went on or stopped."""
    lines = [
        f"- Rung {index} (step {rung['steps']}): "
        + "; ".join(f"`{name}` {why}" for name, why in rung["reasons"].items())
        for index, rung in enumerate(rungs)
        if rung.get("reasons")
    ]
    return ["", *lines] if lines else []
