"""What a sweep folder says about its W&B runs: their group and project, the swept keys, the logged curves.

Everything comes from files the sweep already wrote (``multirun.yaml``; per job ``run_info.json``,
``config.yaml``, ``metrics.jsonl``, ``summary.json``), so the user never repeats it. Nothing of W&B is
imported here: a folder that won't do fails in well under a second, with one line.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_exp.errors import UserError
from grpo_exp.folder import JobFolder, multirun_file, numbered_jobs, read_yaml

# The job config is nested under this W&B config key (grpo_exp.tracking.wandb_run.wandb_run).
WANDB_CONFIG_ROOT = "grpo_exp"
# Axes of the dashboard when the sweep varies neither (e.g. seeds only): the sweeps' usual pair.
DEFAULT_AXES = ("grpo.num_generations", "optimizer.lr")
# Repeats of one configuration: averaged by the grouped plots, never an axis of their own.
NOT_AXES = frozenset({"seed"})
# metrics.jsonl holds TRL's log keys; W&B gets them with these prefixes (transformers' WandbCallback).
TRAIN_PREFIX = "train/"
EVAL_PREFIXES = ("eval/", "eval_")
PART_PREFIX, PART_SUFFIX = "rewards/", "/mean"
EVAL_REWARD = "eval/reward"


@dataclass(frozen=True)
class Axis:
    """A swept key and where W&B keeps it: ``wandb_key`` is a path into the run config."""

    key: str
    wandb_key: str

    @property
    def label(self) -> str:
        return self.key.rpartition(".")[2]


@dataclass
class SweepFacts:
    """What the dashboard needs to know about one sweep."""

    folder: Path
    groups: list[str]
    project: str
    entity: str | None
    axes: list[Axis]
    runs: int  # jobs that opened a W&B run
    reward_parts: list[str] = field(default_factory=list)  # part names, as in train/rewards/<part>/mean
    eval_keys: list[str] = field(default_factory=list)  # W&B keys eval/..., empty without a held-out set
    eval_summary_key: str | None = None  # the run-summary key holding the final held-out reward
    seeded: bool = False  # the sweep repeats configurations over seeds: their runs are compared as groups

    @property
    def name(self) -> str:
        return self.groups[0] if len(self.groups) == 1 else f"{self.groups[0]} (+{len(self.groups) - 1})"


def read_sweep(folder: Path) -> SweepFacts:
    """The facts of ``folder`` (``outputs/multirun/<sweep>/``); a UserError when it has no W&B runs."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"no sweep folder at {folder}: pass a folder from `python run.py -m` (outputs/multirun/...)")
    jobs = [JobFolder(path) for path in numbered_jobs(folder)]
    if not jobs:
        raise UserError(f"{folder} holds no jobs (0/, 1/, ...): pass the folder of a sweep (`python run.py -m`)")
    # A job that never started or was cut short has no run info: the other jobs still describe the sweep.
    runs = [info for job in jobs if (info := job.run_info().get("wandb"))]
    groups = [run["group"] for run in runs if run.get("group")]
    if not groups:
        raise UserError(
            f"no W&B group in {folder}: its jobs logged no W&B run (logger=none?); "
            "run the sweep with W&B on (the default logger=wandb, offline works too)"
        )
    config = _mapping(read_yaml(jobs[0].config))
    swept = _swept_keys(folder)
    rows = [row for job in jobs for row in job.rows()]  # evaluation rows too: they carry the eval/ keys
    summaries = [job.summary() or {} for job in jobs]
    keys = {key for row in rows for key in row}
    return SweepFacts(
        folder=folder,
        groups=list(dict.fromkeys(groups)),
        project=Counter(run.get("project") for run in runs).most_common(1)[0][0] or "grpo-exp",
        entity=(config.get("logger") or {}).get("entity"),
        axes=_axes(swept, config),
        runs=len(runs),
        reward_parts=sorted(
            {_part(k) for k in keys if k.startswith(PART_PREFIX) and k.endswith(PART_SUFFIX)}
            | {p for s in summaries for p in s.get("parts") or {}}
        ),
        eval_keys=sorted({_eval_key(k) for k in keys if k.startswith(EVAL_PREFIXES) and "reward" in k}),
        eval_summary_key=_eval_summary_key(summaries, keys),
        seeded=bool(NOT_AXES & set(swept)),
    )


def _axes(swept: list[str], config: dict[str, Any]) -> list[Axis]:
    """The swept keys (minus repeats such as seeds), else the default pair, each with its W&B config path.

    A value key (``optimizer.lr``) is read from the nested job config, which every run has whether or
    not it was swept; a config-group choice (``reward=...``) only exists as the run's top-level override.
    """
    keys = [k for k in swept if k not in NOT_AXES] or list(DEFAULT_AXES)
    return [Axis(k, f"{WANDB_CONFIG_ROOT}.{k}" if _is_value(config, k) else k) for k in keys]


def _swept_keys(folder: Path) -> list[str]:
    """The keys the sweep varied, as the jobs' W&B tags name them (``grpo_exp.tracking.wandb_run.swept_keys``)."""
    saved = multirun_file(folder)
    if not saved.is_file():
        return []
    from grpo_exp.tracking.wandb_run import swept_keys

    params = ((_mapping(read_yaml(saved)).get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    keys = swept_keys(folder, params)
    return [k for k in keys if not k.startswith(("hydra.", "logger", "resume"))]


def _is_value(config: dict[str, Any], dotted: str) -> bool:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return not isinstance(node, dict | list)


def _part(key: str) -> str:
    return key[len(PART_PREFIX) : -len(PART_SUFFIX)]


def _eval_key(key: str) -> str:
    """``eval_reward`` (Trainer's prefix) and ``eval/reward`` both reach W&B as ``eval/reward``."""
    return "eval/" + key.split("/", 1)[1] if key.startswith("eval/") else "eval/" + key[len("eval_") :]


def _eval_summary_key(summaries: list[dict[str, Any]], keys: set[str]) -> str | None:
    """The final held-out reward in the run summary: ``summary/<key>`` from summary.json when a job wrote one
    (training/lifecycle.py copies its numbers there), else the last ``eval/reward`` W&B holds, else none."""
    for summary in summaries:
        for key, value in summary.items():
            if key.startswith("final") and "eval" in key and "reward" in key and isinstance(value, int | float):
                return f"summary/{key}"
    return EVAL_REWARD if any(_eval_key(k) == EVAL_REWARD for k in keys if k.startswith(EVAL_PREFIXES)) else None


def _mapping(data: Any) -> dict[str, Any]:
    """A YAML document as a mapping: an absent, unreadable or non-mapping file reads as empty."""
    return data if isinstance(data, dict) else {}
