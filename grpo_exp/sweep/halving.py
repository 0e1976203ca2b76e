"""Successive halving for a sweep (``sweep.halving.enabled=true``): stop the losing configurations early.

Every configuration of the sweep trains to the first rung (``sweep.halving.min_steps``); there the
configurations are ranked by held-out reward (``final_eval_reward`` at the rung's evaluation, the
mean over a configuration's seeds), and the best 1/``eta`` go on to the next rung, ``eta`` times
longer, up to ``grpo.max_steps``. A job that goes on continues its own folder from the rung's
checkpoint (``resume=auto``): every step is trained and logged once, in one W&B run, and its
learning-rate schedule is that of the whole run (``sweep.halving.rung_steps`` only ends it early).
A job left behind is marked ``stopped_early`` at its rung, in ``summary.json`` and in its W&B run
(a tag and its summary), and never counts as the sweep's result.

The decisions go to ``<sweep dir>/halving.json`` as each rung ends: the sweep's report shows them,
and the same command with ``resume=auto`` resumes the sweep from the rung it had reached.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from omegaconf import DictConfig

from grpo_exp.config.checks import check_halving
from grpo_exp.folder import COMPLETED, HALVING_FILE, STOPPED_EARLY, JobFolder, read_json, read_yaml, write_json
from grpo_exp.job.resume import AUTO, override_key

log = logging.getLogger("grpo_exp")

RUNG_KEY = "sweep.halving.rung_steps"
REPEAT_KEYS = frozenset({"seed"})  # repeats of one configuration: ranked by their mean
RANKED_BY = "final_eval_reward"  # held-out reward at the rung's evaluation
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
    ends = rungs(max_steps, int(halving.eta), halving.min_steps)
    record = read_json(sweep_dir / HALVING_FILE) or {}
    decided = {r["steps"]: r for r in record.get("rungs", []) if r.get("steps") in ends}
    varied = varied_keys(jobs)
    alive = [HalvingJob(n, list(o), configuration(o, varied)) for n, o in enumerate(jobs)]
    log.info("successive halving: %d jobs, rungs at steps %s, eta %d", len(alive), ends, halving.eta)
    rungs_done: list[dict[str, Any]] = []
    returns: list[JobReturn] = []
    for index, steps in enumerate(ends):
        last = index == len(ends) - 1
        batch = [_rung_overrides(job, steps, last, index) for job in alive]
        returns = list(launch(batch, 0))
        # a resumed sweep keeps the decision it made then
        rung = decided[steps] if steps in decided else _decide(alive, sweep_dir, steps, int(halving.eta), last)
        rungs_done.append(rung)
        _write(sweep_dir, ends, max_steps, rungs_done, jobs)
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


def _decide(alive: list[HalvingJob], sweep_dir: Path, steps: int, eta: int, last: bool) -> dict[str, Any]:
    """Each configuration's mean score over its jobs at this rung, and the ones that go on."""
    values: dict[str, list[float]] = {}
    for job in alive:
        summary = JobFolder(sweep_dir / str(job.number)).summary() or {}
        score = summary.get(RANKED_BY, summary.get(FALLBACK))
        ok = summary.get("status") == COMPLETED and isinstance(score, int | float) and math.isfinite(score)
        values.setdefault(job.configuration, [])
        if ok:
            values[job.configuration].append(float(score))
    scores = {c: statistics.fmean(v) if v else None for c, v in values.items()}
    return {
        "steps": steps,
        "jobs": [job.number for job in alive],
        "scores": scores,
        "kept": list(scores) if last else survivors(scores, eta),
    }


def _write(sweep_dir: Path, ends: list[int], max_steps: int, rungs_done: list[dict[str, Any]], jobs: list) -> None:
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
            "ranked_by": f"{RANKED_BY} (mean over seeds)",
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
