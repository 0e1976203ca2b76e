"""How the report writes things down: Markdown table rows, job lists and name lists shared by its sections."""

from __future__ import annotations

from collections.abc import Iterable

from grpo_exp.report.jobs import JobRecord

MAX_LISTED = 6  # configurations named in one verdict line before "and N more"
NONE_CELL = "—"


def md_row(cells: Iterable[str]) -> str:
    """A Markdown table row; a cell's own ``|`` and line breaks can't break the table."""
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def jobs_text(jobs: Iterable[JobRecord]) -> str:
    """ "job 3" or "jobs 0, 2, 10", in job order."""
    names = sorted((job.name for job in jobs), key=lambda name: (len(name), name))
    return ("job " if len(names) == 1 else "jobs ") + ", ".join(names)


def names_text(labels: Iterable[str]) -> str:
    """Configurations in backticks, the first MAX_LISTED of them, then how many more."""
    names = [f"`{label}`" for label in labels]
    more = len(names) - MAX_LISTED
    return ", ".join(names[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "")
