"""The GPU set-up installs what it names: make's stamp follows TORCH and EXTRAS, vLLM is pinned to TRL's range."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from grpo_exp.config.layout import VLLM_RANGE
from tests.conftest import ROOT


def dry_run(venv: Path, *variables: str) -> str:
    """What `make setup` would run (``make -n``: nothing is run)."""
    done = subprocess.run(["make", "-n", "setup", f"VENV={venv}", *variables], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def installs(venv: Path, *variables: str) -> list[str]:
    return [line for line in dry_run(venv, *variables).splitlines() if "pip install" in line]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_setting_up_for_the_gpu_after_the_cpu_installs_again(tmp_path):
    """Finding 4: after `make test`, `make setup TORCH=torch EXTRAS=…,vllm,quant` did nothing."""
    venv = tmp_path / "venv"
    assert any('"torch==2.13.0"' in line for line in installs(venv))
    stamp = Path(re.search(r"touch (\S+)", dry_run(venv)).group(1))
    stamp.parent.mkdir(parents=True)
    stamp.touch()  # as if that set-up had run
    assert installs(venv) == [], "the same set-up twice installs once"
    gpu = installs(venv, "TORCH=torch", "EXTRAS=dev,vllm,quant")
    assert any('"torch"' in line for line in gpu) and any(".[dev,vllm,quant]" in line for line in gpu)


def test_vllm_is_pinned_to_the_releases_trl_accepts():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == [f"vllm>={VLLM_RANGE[0].removesuffix('.0')},<={VLLM_RANGE[1]}"]
