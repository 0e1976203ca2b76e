"""The verdict's lines on jobs whose figures don't stand for their configuration: failed, killed, stopped
early, or trained on completions their vLLM sampler drew from other weights than the policy's."""

from __future__ import annotations

from grpo_exp.folder import FAILED, INCOMPLETE, STOPPED_EARLY, SUMMARY_FILE
from grpo_exp.report.jobs import JobRecord
from grpo_exp.report.sweep import Sweep
from grpo_exp.tracking.monitor import SAMPLER_DRIFT, SAMPLER_DRIFT_REMEDY


def casualties(sweep: Sweep) -> list[str]:
    """A line per job that drifted from its sampler, then per job that did not finish, failed ones first."""
    return _sampler_drift(sweep) + _unfinished(sweep)


def _sampler_drift(sweep: Sweep) -> list[str]:
    """Jobs whose summary holds the sampler alert (tracking/monitor.py): the completions they trained on came
    from other weights than those trained, so their results are not their configuration's."""
    lines = []
    for job in sweep.jobs:
        for alert in job.stats.get("alerts") or []:
            if isinstance(alert, dict) and alert.get("kind") == SAMPLER_DRIFT:
                lines.append(
                    f"- **Sampler drift:** {job_ref(sweep, job)}, from step {alert.get('step')}: vLLM sampled from "
                    f"other weights than the policy's, so its results are not its configuration's; "
                    f"{SAMPLER_DRIFT_REMEDY}."
                )
    return lines


def _unfinished(sweep: Sweep) -> list[str]:
    lines = []
    for job in sorted(sweep.jobs, key=lambda job: job.status != FAILED):
        ref = job_ref(sweep, job)
        if job.status == FAILED:
            lines.append(f"- **Failed:** {ref}: {job.error or 'no error recorded'}")
        elif job.status == INCOMPLETE:
            steps = int(job.value("logged_steps") or 0)
            lines.append(
                f"- **Incomplete** (no {SUMMARY_FILE}: killed, or still running): {ref}, {steps} steps logged."
            )
        elif job.status == STOPPED_EARLY:
            lines.append(f"- **Stopped early** by successive halving: {ref}, at step {int(job.value('steps') or 0)}.")
        elif not job.finished:
            lines.append(f"- **{job.status.capitalize()}:** {ref}, {int(job.value('logged_steps') or 0)} steps logged.")
    return lines


def job_ref(sweep: Sweep, job: JobRecord) -> str:
    return f"job {job.name} (`{sweep.label(job)}`)" if sweep.swept else f"job {job.name}"
