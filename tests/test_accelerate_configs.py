"""The multi-GPU configs shipped in accelerate/ are ones `accelerate launch` reads as meant.

Launching needs GPUs; what can be checked here is that accelerate parses each file, that its
validation accepts it, and that every DeepSpeed/FSDP key is one accelerate knows (a misspelt
nested key would otherwise be ignored without a word).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser

from tests.conftest import ROOT

CONFIGS = ROOT / "accelerate"
# file -> (accelerate's distributed type, the launch flags it must turn on)
EXPECTED = {
    "ddp.yaml": ("MULTI_GPU", {"multi_gpu": True}),
    "zero2.yaml": ("DEEPSPEED", {"use_deepspeed": True, "zero_stage": 2}),
    "zero3.yaml": ("DEEPSPEED", {"use_deepspeed": True, "zero_stage": 3, "zero3_init_flag": True}),
    "fsdp.yaml": ("FSDP", {"use_fsdp": True, "fsdp_version": 2}),
}


def launch_args(path: Path):
    args = launch_command_parser().parse_args(["--config_file", str(path), "run.py"])
    _validate_launch_command(args)
    return args


def test_every_shipped_config_is_covered():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_parses_the_config_as_meant(name):
    distributed_type, flags = EXPECTED[name]
    config = load_config_from_file(str(CONFIGS / name))
    assert config.distributed_type.name == distributed_type
    # "no": the job's layout decides the autocast (bf16, fp16 or none), which accelerate's env would override
    assert config.mixed_precision == "no" and config.num_processes >= 2
    nested = {**(config.deepspeed_config or {}), **(config.fsdp_config or {})}
    args = launch_args(CONFIGS / name)
    unknown = sorted(key for key in nested if not hasattr(args, key))
    assert not unknown, f"{name}: accelerate has no setting {unknown}"
    for flag, value in flags.items():
        assert getattr(args, flag) == value, flag


def test_a_misspelt_key_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "ddp.yaml").read_text().replace("num_processes:", "num_procs:"))
    with pytest.raises(ValueError, match="num_procs"):
        load_config_from_file(str(bad))
