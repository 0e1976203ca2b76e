"""Run names in W&B and trackio: a sweep's jobs are named by what differs between them, first."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from grpo_exp.config.schema import CONF_DIR, register_schema
from grpo_exp.folder import multirun_file
from grpo_exp.tracking.wandb_run import identity_from_hydra, run_name

# The sweep: the learning rate and seed vary; the rest of the command is the same for every job.
SWEEP = ["optimizer.lr=1e-4,3e-4", "seed=1,2", "grpo.max_steps=30", "dataset.num_samples=200", "logger=trackio"]
JOB = ["optimizer.lr=3e-4", "seed=2", "grpo.max_steps=30", "dataset.num_samples=200", "logger=trackio"]


def hydra_node(overrides: list[str], sweep_dir: Path | None = None, num: int = 0):
    """Hydra's node of a job run with ``overrides`` (in the sweep at ``sweep_dir``, as job ``num``)."""
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        node = compose(config_name="config", overrides=overrides, return_hydra_config=True).hydra
    with open_dict(node):
        node.overrides.task = overrides
        node.mode = RunMode.MULTIRUN if sweep_dir else RunMode.RUN
        node.job.num = num
        if sweep_dir:
            node.sweep.dir = str(sweep_dir)
    return node


def test_a_sweeps_run_names_start_with_the_swept_values_alone(tmp_path):
    """Issue 62: names repeated every constant override, so the sidebar cut off the learning rate and seed."""
    OmegaConf.save({"hydra": {"overrides": {"task": SWEEP}}}, multirun_file(tmp_path))
    name = identity_from_hydra(hydra_node(JOB, tmp_path, num=3)).name
    assert name == f"lr=0.0003,seed=2 - job 3 of {tmp_path.name}"  # the end: apart from another sweep's alike
    assert "max_steps" not in name and "num_samples" not in name and "logger" not in name


def test_a_single_runs_name_is_its_overrides():
    assert identity_from_hydra(hydra_node(["optimizer.lr=1e-4", "seed=3"])).name == "lr=0.0001,seed=3"


def test_keys_whose_last_part_repeats_keep_their_full_name():
    values = {"model.lora.r": 8, "grpo.r": 2, "optimizer.lr": 1e-3}
    assert run_name(values) == "model.lora.r=8,grpo.r=2,lr=0.001"
    assert run_name({}) == "defaults"
