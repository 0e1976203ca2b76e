"""How a sweep ended, read from its job folders: the exit status, and the command that finishes it.

A sweep's jobs never stop one another (a failed job returns NaN to the sweeper), so the sweep's
own exit status is decided here, once every job has run: 0 when each completed, 1 otherwise, with
one line that names the jobs to re-run and the ``resume=auto`` command that re-runs only those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grpo_exp.folder import COMPLETED, FAILED, STOPPED_EARLY, numbered_jobs
from grpo_exp.job.resume import sweep_resume_command
from grpo_exp.report.jobs import load_job

EXIT_COMPLETED = 0
EXIT_FAILED = 1
_DONE = (COMPLETED, STOPPED_EARLY)  # a job successive halving stopped at a rung ended as planned


@dataclass(frozen=True)
class SweepOutcome:
    """The jobs of a sweep that did not complete: failed ones with their cause, and unfinished ones."""

    sweep_dir: Path
    failed: dict[str, str] = field(default_factory=dict)  # job name -> cause (one line)
    unfinished: list[str] = field(default_factory=list)  # interrupted, or killed before its launcher could tell

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.failed or self.unfinished else EXIT_COMPLETED

    def line(self) -> str | None:
        """One line naming the jobs to re-run and the command that does; None when all completed."""
        if self.exit_code == EXIT_COMPLETED:
            return None
        parts = [f"job {name} failed ({cause})" for name, cause in self.failed.items()]
        parts += [f"job {name} did not finish" for name in self.unfinished]
        return f"sweep: {'; '.join(parts)}; re-run only these with: {sweep_resume_command(self.sweep_dir)}"


def read_outcome(sweep_dir: Path) -> SweepOutcome:
    """The outcome of the sweep in ``sweep_dir`` from each numbered job folder's records."""
    failed: dict[str, str] = {}
    unfinished: list[str] = []
    for path in numbered_jobs(sweep_dir):
        job = load_job(path)
        if job.status in _DONE:
            continue
        if job.status == FAILED:
            failed[job.name] = job.error or "see its error.txt"
        else:
            unfinished.append(job.name)
    return SweepOutcome(sweep_dir, failed, unfinished)
