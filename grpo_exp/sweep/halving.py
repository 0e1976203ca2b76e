"""Successive halving for a sweep (``sweep.halving.enabled=true``): stop the losing configurations early.

Every configuration of the sweep trains to the first rung (``sweep.halving.min_steps``); there the
configurations are ranked by held-out reward (``final_eval_reward`` at the rung's evaluation, over a
configuration's seeds: their mean, or interquartile mean from ``sweep.verdict.interquartile_from``
seeds), and the best 1/``eta`` go on to the next rung, ``eta`` times longer, up to ``grpo.max_steps``.
With several seeds per configuration a rung is noisy too: one whose bootstrap interval over its seeds
overlaps the best's (``grpo_exp.report.intervals``) goes on as well, since the rung can't tell it from
the best. Each rung records every configuration's interval and why it went on or stopped.

A job that goes on continues its own folder from the rung's checkpoint (``resume=auto``): every
step is trained and logged once, in one W&B run, and its learning-rate schedule is that of the whole
run (``sweep.halving.rung_steps`` only ends it early). A job left behind is marked ``stopped_early``
at its rung, in ``summary.json`` and in its W&B run (a tag and its summary), and never counts as the
sweep's result.

The decisions go to ``<sweep dir>/halving.json`` as each rung ends: the sweep's report shows them,
and the same command with ``resume=auto`` resumes the sweep from the rung it had reached.

A job without a score at a rung (it failed, or its ``summary.json`` is not there) is not guessed at:
a configuration is ranked on its jobs that have one, and one with none ranks last. The
rung's record names those jobs (``missing``), and ``resume=auto``, which re-runs them, decides that
rung again with their scores (each job keeps the score recorded for it), so a configuration that
failed at a rung is not left eliminated once it has run. A rung where no job has a score eliminates
nobody: the sweep stops there with one line, since ranking nothing would keep the first jobs in
job order.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from grpo_exp.config.checks import check_halving
from grpo_exp.config.schema import VerdictSettings
from grpo_exp.folder import (
    COMPLETED,
    ERROR_FILE,
    HALVING_FILE,
    STOPPED_EARLY,
    SUMMARY_FILE,
    JobFolder,
    read_json,
    read_yaml,
    write_json,
)
from grpo_exp.job.resume import AUTO, override_key
from grpo_exp.report.intervals import Interval, interval

log = logging.getLogger("grpo_exp")

# Why a configuration went on from a rung or stopped there (halving.json "reasons", and the report).
KEPT_BEST = "kept: the best score"
KEPT_TOP = "kept: in the best 1/{eta}"
KEPT_OVERLAP = "kept: its interval over {n} seeds overlaps the best's"
STOPPED_BELOW = "stopped: its interval lies clear below the best's"
STOPPED_ONE_SEED = "stopped: outside the best 1/{eta}, and one seed gives no interval"
STOPPED_NO_SCORE = "stopped: no score"
STOPPED = "stopped"
RUNG_KEY = "sweep.halving.rung_steps"
REPEAT_KEYS = frozenset({"seed"})  # repeats of one configuration: ranked by their mean
RANKED_BY = "final_eval_reward"  # held-out reward at the rung's evaluation
# Objectives ranked as the sweep asks (each held out, at the rung's evaluation, higher better); others: RANKED_BY.
RANKED_AS_ASKED = frozenset({"final_eval_reward", "final_eval_pass@1"})
FALLBACK = "final_reward"  # a sweep without held-out prompts: its training counterpart
STOPPED_TAG = STOPPED_EARLY  # the W&B tag
# Keys the sweeper sets per rung; the user's own are replaced, never doubled.
_SET_HERE = ("resume", RUNG_KEY, "hydra.sweep.subdir")


def rungs(max_steps: int, eta: int, min_steps: int | None) -> list[int]:
    """The steps each rung ends at: min_steps, min_steps*eta, ..., with grpo.max_steps the last.

    A rung stands only where eta times its steps still fit in grpo.max_steps: 11, 33, 100 rather
    than 11, 33, 99, 100, whose rung at 99 would rank the survivors one step before their end."""
    ends = []
    step = min_steps or max(1, max_steps // eta**2)
    while step * eta <= max_steps:
        ends.append(step)
        step *= eta
    return [*ends, max_steps]


def configuration(overrides: Sequence[str], varied: set[str]) -> str:
    """A job's configuration: its values of the keys the sweep varies, without the repeats (seed)."""
    kept = [o for o in overrides if override_key(o) in varied - REPEAT_KEYS]
    return " ".join(kept) or "defaults"


def varied_keys(jobs: Sequence[Sequence[str]]) -> set[str]:
    """The keys whose value differs between the sweep's jobs."""
    values: dict[str, set[str]] = {}
    for job in jobs:
        for override in job:
            values.setdefault(override_key(override), set()).add(override.split("=", 1)[-1])
    return {key for key, seen in values.items() if len(seen) > 1}


def survivors(scores: dict[str, float | None], eta: int) -> list[str]:
    """The best ceil(n/eta) configurations by score (higher is better); a configuration without one is last."""
    ranked = sorted(scores, key=lambda c: -scores[c] if scores[c] is not None else math.inf)
    return ranked[: max(1, math.ceil(len(ranked) / eta))]


def judge(
    values: dict[str, list[float]], eta: int, settings: VerdictSettings
) -> tuple[dict[str, float | None], dict[str, Interval | None], dict[str, str]]:
    """A rung's scores (each configuration's centre over its seeds), intervals, and the reason each goes on or stops.

    The best 1/eta by score go on; with several seeds per configuration, so does one whose interval overlaps
    the best's: the rung can't tell it from the best, and dropping it would be a call on noise."""
    intervals = {c: interval(v, settings) if v else None for c, v in values.items()}
    scores = {c: None if i is None else i.centre for c, i in intervals.items()}
    top = survivors(scores, eta)
    best = intervals[top[0]]
    reasons = {}
    for c, own in intervals.items():
        if c in top and scores[c] is not None:
            reasons[c] = KEPT_TOP.format(eta=eta) if c != top[0] else KEPT_BEST
        elif own is not None and best is not None and own.overlaps(best):
            reasons[c] = KEPT_OVERLAP.format(n=own.n)
        elif own is None:
            reasons[c] = STOPPED_NO_SCORE if c not in top else KEPT_TOP.format(eta=eta)
        elif own.bounded and best is not None and best.bounded:
            reasons[c] = STOPPED_BELOW
        else:
            reasons[c] = STOPPED_ONE_SEED.format(eta=eta)
    return scores, {c: i if i is not None and i.bounded else None for c, i in intervals.items()}, reasons


@dataclass
class HalvingJob:
    number: int
    overrides: list[str]
    configuration: str


def run(
    jobs: list[list[str]],
    sweep_dir: Path,
    cfg: DictConfig,
    launch: Callable[[list[list[str]], int], Sequence[JobReturn]],
) -> list[JobReturn]:
    """Train the sweep's jobs rung by rung; the returns of the jobs that reached the last rung.

    ``cfg``: the sweep's composed config (its ``sweep.halving`` and ``grpo.max_steps``);
    ``launch``: the launcher's ``launch(job overrides, first job number)``."""
    halving, max_steps = cfg.sweep.halving, int(cfg.grpo.max_steps)
    check_halving(cfg)
    verdict = VerdictSettings(**OmegaConf.to_container(cfg.sweep.verdict))
    ends = rungs(max_steps, int(halving.eta), halving.min_steps)
    record = read_json(sweep_dir / HALVING_FILE) or {}
    recorded = {r["steps"]: r for r in record.get("rungs", []) if r.get("steps") in ends}
    varied = varied_keys(jobs)
    alive = [HalvingJob(n, list(o), configuration(o, varied)) for n, o in enumerate(jobs)]
    log.info("successive halving: %d jobs, rungs at steps %s, eta %d", len(alive), ends, halving.eta)
    rungs_done: list[dict[str, Any]] = []
    returns: list[JobReturn] = []
    for index, steps in enumerate(ends):
        last = index == len(ends) - 1
        batch = [_rung_overrides(job, steps, last, index) for job in alive]
        returns = list(launch(batch, 0))
        rung = _rung(alive, sweep_dir, index, steps, int(halving.eta), last, recorded.get(steps), verdict)
        if rung is None:  # no job has a score: nobody is eliminated, and nothing recorded for this rung
            _write(sweep_dir, ends, max_steps, rungs_done, jobs, verdict)
            break
        rungs_done.append(rung)
        _write(sweep_dir, ends, max_steps, rungs_done, jobs, verdict)
        if last:
            break
        kept = set(rung["kept"])
        for job in alive:
            if job.configuration not in kept:
                mark_stopped(JobFolder(sweep_dir / str(job.number)), index, steps)
        alive = [job for job in alive if job.configuration in kept]
        log.info("rung %d (step %d): %d configuration(s) go on: %s", index, steps, len(kept), "; ".join(sorted(kept)))
    return returns


def _rung_overrides(job: HalvingJob, steps: int, last: bool, index: int) -> list[str]:
    kept = [o for o in job.overrides if override_key(o) not in _SET_HERE]
    rung = [] if last else [f"{RUNG_KEY}={steps}"]
    resume = [f"resume={AUTO}"] if index > 0 or any(override_key(o) == "resume" for o in job.overrides) else []
    return [*kept, *rung, *resume, f"hydra.sweep.subdir={job.number}"]  # each job keeps its folder across rungs


def _rung(
    alive: list[HalvingJob],
    sweep_dir: Path,
    index: int,
    steps: int,
    eta: int,
    last: bool,
    before: dict | None,
    settings: VerdictSettings,
) -> dict[str, Any] | None:
    """This rung's decision: the one ``halving.json`` recorded when every job had its score then and
    the same jobs ran the rung, else decided now; None (said in one line) when no job has a score."""
    numbers = [job.number for job in alive]
    where = f"rung {index} (step {steps})"
    if before is not None and before.get("jobs") == numbers and _complete(before):
        log.info("%s: the decision recorded in %s stands (every job had its score)", where, HALVING_FILE)
        return before
    rung = _decide(alive, sweep_dir, steps, eta, last, (before or {}).get("job_scores") or {}, settings)
    missing = rung["missing"]
    if len(missing) == len(alive) and not last:
        log.error(
            "successive halving stops at %s: no job has a score (job(s) %s failed or have no %s), so none is "
            "eliminated; fix what failed (each job's %s), then run the same command with resume=auto to decide it",
            where,
            ", ".join(map(str, missing)),
            SUMMARY_FILE,
            ERROR_FILE,
        )
        return None
    if before is not None:
        lacked = [n for n in numbers if n not in before.get("jobs", [])] + list(before.get("missing", []))
        log.info(
            "%s decided again: the decision recorded in %s lacked %s",
            where,
            HALVING_FILE,
            f"job(s) {', '.join(map(str, lacked))}" if lacked else "a configuration's score",
        )
    if missing and not last:  # the last rung eliminates nobody; the sweep's outcome names what failed
        log.warning(
            "%s: no score from job(s) %s (failed, or no %s): a configuration without one ranks last; run the same "
            "command with resume=auto once they are fixed to decide this rung again",
            where,
            ", ".join(map(str, missing)),
            SUMMARY_FILE,
        )
    return rung


def _complete(rung: dict[str, Any]) -> bool:
    """Whether a recorded rung was decided with every job's score (a record without ``missing``: every
    configuration's)."""
    return not rung.get("missing") and None not in rung.get("scores", {}).values()


def _decide(
    alive: list[HalvingJob],
    sweep_dir: Path,
    steps: int,
    eta: int,
    last: bool,
    recorded: dict[str, float | None],
    settings: VerdictSettings,
) -> dict[str, Any]:
    """Each configuration's score over its jobs that have one at this rung (``judge``), and the ones that go on.

    ``recorded``: the job scores an earlier decision of this rung took; a job that went on since has a
    later step's summary, so its score at this rung is the recorded one."""
    job_scores = {job.number: recorded.get(str(job.number)) for job in alive}
    for job in alive:
        if job_scores[job.number] is None:
            job_scores[job.number] = _score(JobFolder(sweep_dir / str(job.number)))
    values: dict[str, list[float]] = {}
    for job in alive:
        score = job_scores[job.number]
        values.setdefault(job.configuration, []).extend([] if score is None else [score])
    scores, intervals, reasons = judge(values, eta, settings)
    kept = [c for c in scores if not reasons[c].startswith(STOPPED)]
    return {
        "steps": steps,
        "jobs": [job.number for job in alive],
        "job_scores": {str(n): s for n, s in job_scores.items()},
        "missing": [n for n, s in job_scores.items() if s is None],
        "scores": scores,
        "intervals": {c: None if i is None else [i.low, i.high] for c, i in intervals.items()},
        "seeds": {c: len(v) for c, v in values.items()},
        "kept": list(scores) if last else kept,
        "reasons": {} if last else reasons,
    }


def _score(folder: JobFolder) -> float | None:
    """A job's score from its ``summary.json``; None when it failed, has none, or the score isn't finite."""
    summary = folder.summary() or {}
    key = summary["objective"] if summary.get("objective") in RANKED_AS_ASKED else RANKED_BY
    score = summary.get(key, summary.get(FALLBACK))
    done = summary.get("status") in (COMPLETED, STOPPED_EARLY)  # stopped_early: scored at its rung
    return float(score) if done and isinstance(score, int | float) and math.isfinite(score) else None


def _write(
    sweep_dir: Path,
    ends: list[int],
    max_steps: int,
    rungs_done: list[dict[str, Any]],
    jobs: list,
    settings: VerdictSettings,
) -> None:
    """halving.json: the rungs so far, and the completions generated against the full sweep."""
    trained = 0
    for number in range(len(jobs)):
        folder = JobFolder(sweep_dir / str(number))
        summary = folder.summary() or {}
        trained += int(summary.get("steps") or 0) * completions_per_step(folder)
    full = sum(completions_per_step(JobFolder(sweep_dir / str(n))) * max_steps for n in range(len(jobs)))
    write_json(
        sweep_dir / HALVING_FILE,
        {
            "rungs_at": ends,
            "ranked_by": (
                f"the objective if one of {sorted(RANKED_AS_ASKED)}, else {RANKED_BY} "
                f"(over seeds: mean, interquartile mean from {settings.interquartile_from})"
            ),
            "rungs": rungs_done,
            "completions": {"generated": trained, "full_sweep": full},
        },
    )


def completions_per_step(folder: JobFolder) -> int:
    """Completions a job generates per training step (its resolved config.yaml), 0 when unknown."""
    config = read_yaml(folder.config)
    if not isinstance(config, dict):
        return 0
    batch = (config.get("grpo") or {}).get("per_device_train_batch_size") or 0
    accumulation = (config.get("optimizer") or {}).get("gradient_accumulation_steps") or 1
    return int(batch) * int(accumulation)


def mark_stopped(folder: JobFolder, rung: int, steps: int) -> None:
    """The job stops at this rung: ``summary.json`` says so, and so does its W&B run (tag and summary)."""
    summary = folder.summary() or {}
    if summary.get("status") != COMPLETED:
        return  # failed or unfinished: it says so itself; or marked before (a resumed sweep)
    folder.write_summary(summary | {"status": STOPPED_EARLY, "stopped_at_rung": rung, "stopped_at_step": steps})
    wandb_info = folder.run_info().get("wandb") or {}
    if wandb_info.get("id"):
        _tag_wandb(folder, wandb_info, rung, steps)


def _tag_wandb(folder: JobFolder, info: dict[str, Any], rung: int, steps: int) -> None:
    """Reopen the job's finished W&B run (same id, the mode it ran in) to tag it; W&B failing costs only the tag."""
    from grpo_exp.tracking.wandb_run import safely

    def tag() -> None:
        import wandb

        mode = "offline" if folder.offline_runs() else "online"
        settings = wandb.Settings(silent=True, x_disable_stats=True)
        where = {"project": info.get("project"), "dir": str(folder.path), "mode": mode}
        with wandb.init(id=info["id"], resume="allow", settings=settings, **where) as run:
            run.tags = (*run.tags, STOPPED_TAG)
            run.summary.update({STOPPED_TAG: True, "stopped_at_rung": rung, "stopped_at_step": steps})

    safely(tag)
