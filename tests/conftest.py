"""Shared fixtures: composing the real conf/ tree the way run.py does; feeding the health monitor."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from grpo_exp.config.loading import to_settings
from grpo_exp.config.schema import ExperimentConfig, register_schema
from grpo_exp.job.command import CONF_DIR
from grpo_exp.tracking.monitor import Alert, HealthMonitor

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# A tiny model warmed up on the task's replies (the customer-service one is refused): a short warm-up, as these
# runs check the plumbing, not what the model learns; built once into the cache.
QUICK_TASK_MODEL = (
    "model=tiny_arithmetic",
    "model.recipe.corpus_size=300",
    "model.recipe.sft_steps=30",
    "model.recipe.habit_steps=0",
)
# The store agent's model (+recipe=support_env) with a short warm-up, for runs that check an environment's
# plumbing; built once into the cache.
QUICK_STORE_MODEL = ("model.recipe.corpus_size=300", "model.recipe.sft_steps=30")

# Under pytest-xdist (make test) the workers share the cores: each worker, and every run.py it
# starts, gets its share of torch threads. Left at torch's default, two workers each ran a thread
# per core, and OpenMP's waiting threads took three times the CPU (CI: 13 -> 24 minutes). A tiny
# model's build keeps its own 2 threads (its weights depend on them); passive waiting stops those
# threads spinning against the other worker (a code-model build: 161 s -> 91 s beside a run).
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture
def compose_cfg() -> Callable[..., DictConfig]:
    """compose_cfg("model=tiny", ...) -> the job config Hydra would build for those overrides."""
    register_schema()

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


@pytest.fixture
def settings(compose_cfg: Callable[..., DictConfig]) -> Callable[..., ExperimentConfig]:
    """settings("grpo.num_generations=4") -> the typed config of that job."""
    return lambda *overrides: to_settings(compose_cfg(*overrides))


def feed(monitor: HealthMonitor, rows: list[dict]) -> list[Alert]:
    """Each row to the monitor as one logging step (steps 1, 2, ...); every alert raised."""
    alerts = []
    for step, row in enumerate(rows, start=1):
        alerts += monitor.observe(step, row)
    return alerts


def report_columns(stats: dict) -> list[str]:
    """The sweep report's result columns for a sweep of one finished job whose summary is ``stats``."""
    from grpo_exp.report.compare import _result_keys
    from grpo_exp.report.jobs import JobRecord
    from grpo_exp.report.sweep import Sweep

    job = JobRecord(name="0", path=Path("0"), status="completed", stats=stats, rows=[], overrides={})
    return _result_keys(Sweep(Path("."), [job], swept=[]))


# The files that take longest (minutes of CPU on 2 cores), longest first. pytest-xdist's --dist loadfile
# hands out whole files in collection order; started first, these don't leave one worker running a long
# file alone at the end while the other idles. Other files keep their order after them.
LONG_FILES = (  # the fast tier's, by the seconds of their runs (docs/development.md: Test tiers)
    "test_train_e2e.py",
    "test_rollback.py",
    "test_sweep_e2e.py",
    "test_cli.py",
    "test_dynamic_sampling.py",
    "test_adaptive.py",
    "test_agent.py",
    "test_multiprocess.py",
    "test_faults.py",
)


# make test-e2e's (-m e2e), by the same measure: its runs are minutes each, so the order matters more.
E2E_LONG_FILES = (
    "test_long_runs.py",
    "test_faults.py",
    "test_sweep_e2e.py",
    "test_config.py",
    "test_multiprocess.py",
    "test_rollback.py",
    "test_adaptive.py",
    "test_readme.py",
    "test_math_reward.py",
    "test_trackio.py",
    "test_parallel_sweep.py",
    "test_halving.py",
    "test_ray_launcher.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = E2E_LONG_FILES if config.option.markexpr.strip() == "e2e" else LONG_FILES
    rank = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.path.name, len(order)))  # stable: in-file order is kept
