"""The set-up installs what it names (``make -n``: nothing runs): a later `make run` or `make test`
keeps the last set-up's choices, a new TORCH replaces the installed build, and the vllm extra's pin
picks torch in the same pip call."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from grpo_exp.config.layout import VLLM_RANGE
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
CPU_EXTRAS = "dev,sweeps,optuna,dashboard,ray,trackio,browser,docs"
LOCK = "constraints/lock.txt"  # the exact set CI tests
LOW = "constraints/low.txt"  # the low end of the range: what a vLLM set-up resolves


def dry_run(venv: Path, target: str = "setup", *variables: str) -> list[str]:
    """The commands `make <target>` would run, one per line (continuations joined). Run as a make of its own:
    under `make test` (CI) the inherited MAKELEVEL would add "Entering directory" lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={venv}", *variables],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.replace("\\\n", " ").splitlines()]


def pip(lines: list[str]) -> list[str]:
    return [line for line in lines if " -m pip " in line]


def set_up_as(venv: Path, torch: str, extras: str, constraints: str) -> None:
    """A venv as `make setup TORCH=<torch> EXTRAS=<extras>` leaves it: the record and a fresh stamp."""
    venv.mkdir(parents=True)
    record = {"TORCH": torch, "EXTRAS": extras, "WHEELHOUSE": "", "CONSTRAINTS": constraints}
    (venv / "setup.mk").write_text("".join(f"SETUP_{key} := {value}\n" for key, value in record.items()))
    (venv / ".installed").touch()


def install_args(line: str) -> list[str]:
    return line.split("install --quiet ")[1].split()


def test_a_fresh_venv_gets_the_cpu_build_the_default_extras_and_the_lock(tmp_path):
    installs = pip(dry_run(tmp_path / "venv"))
    assert install_args(installs[-1]) == ['"torch==2.13.0"', "-e", f'".[{CPU_EXTRAS}]"', "-c", LOCK]
    assert not any("uninstall" in line for line in installs)


def test_a_venv_set_up_before_the_lock_is_set_up_again_with_it(tmp_path):
    venv = tmp_path / "venv"
    set_up_as(venv, "torch==2.13.0", CPU_EXTRAS, constraints="")
    assert install_args(pip(dry_run(venv, "run"))[-1])[-2:] == ["-c", LOCK]


def test_a_venv_set_up_before_its_lock_changed_is_set_up_again_with_the_new_one(tmp_path):
    """Issue 60: `make setup` in an existing venv never reinstalled after the lock changed (a pull, `make lock`),
    so local tests ran another stack than CI's. A lock of its own: the repository's stays as it is."""
    venv, lock = tmp_path / "venv", tmp_path / "lock.txt"
    lock.write_text("trl==1.16.0\n")
    set_up_as(venv, "torch==2.13.0", CPU_EXTRAS, str(lock))
    checkout = (ROOT / "pyproject.toml").stat().st_mtime
    os.utime(lock, (0, 0))  # written before the set-up
    os.utime(venv / ".installed", (checkout + 1, checkout + 1))
    assert pip(dry_run(venv, "setup")) == []
    os.utime(lock, (checkout + 2, checkout + 2))  # the lock changed since
    for target in ("setup", "run"):
        assert install_args(pip(dry_run(venv, target))[-1])[-2:] == ["-c", str(lock)], f"make {target}"


def test_a_set_up_with_vllm_takes_the_stack_vllm_resolves(tmp_path):
    """The lock's transformers is newer than vLLM allows: the vllm extra's default is the low end."""
    installs = pip(dry_run(tmp_path / "venv", "setup", "TORCH=torch", "EXTRAS=dev,vllm"))
    assert install_args(installs[-1]) == ['"torch"', "-e", '".[dev,vllm]"', "-c", LOW]


def test_after_a_gpu_set_up_run_and_test_keep_it(tmp_path):
    """Finding 3: `make run` after `make setup TORCH=torch EXTRAS=dev,vllm` ran the CPU set-up again."""
    venv = tmp_path / "venv"
    set_up_as(venv, "torch", "dev,vllm,quant", LOW)
    for target in ("run", "test", "setup"):
        assert pip(dry_run(venv, target)) == [], f"make {target} set up again"
    os.utime(venv / ".installed", (0, 0))  # pyproject.toml changed since: set up again, the GPU way
    again = pip(dry_run(venv, "run"))
    assert install_args(again[-1]) == ['"torch"', "-e", '".[dev,vllm,quant]"', "-c", LOW]
    assert not any("uninstall" in line for line in again)


def test_a_new_torch_replaces_the_installed_build(tmp_path):
    """pip keeps an installed +cpu torch that satisfies `torch`: the GPU set-up uninstalls it first."""
    venv = tmp_path / "venv"
    set_up_as(venv, "torch==2.13.0", CPU_EXTRAS, LOCK)
    installs = pip(dry_run(venv, "setup", "TORCH=torch", "EXTRAS=dev,vllm,quant"))
    assert "uninstall --quiet --yes torch" in installs[-2]
    assert install_args(installs[-1])[:3] == ['"torch"', "-e", '".[dev,vllm,quant]"']
    # One pip call for torch and the extras: vLLM's torch pin picks the build (one download, not two).
    assert sum(" install " in line and "--upgrade pip" not in line for line in installs) == 1


def test_the_set_up_clears_the_stamps_of_earlier_set_ups(tmp_path):
    lines = dry_run(tmp_path / "venv", "setup", "TORCH=torch")
    assert f"rm -f {tmp_path / 'venv'}/.installed-*" in lines


def test_torch_none_keeps_the_machines_torch_and_a_wheelhouse_needs_no_index(tmp_path):
    venv = tmp_path / "venv"
    lines = dry_run(venv, "setup", "TORCH=none", "WHEELHOUSE=/wh", "EXTRAS=dev")
    assert lines[0].split()[-2:] == ["--system-site-packages", str(venv)]
    installs = pip(lines)
    assert "--upgrade pip" not in " ".join(installs)  # no index to upgrade from
    assert install_args(installs[-1]) == ["--no-index", "--find-links", "/wh", "-e", '".[dev]"', "-c", LOCK]


def test_vllm_is_pinned_to_the_releases_trl_accepts():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["vllm"] == [f"vllm>={VLLM_RANGE[0].removesuffix('.0')},<={VLLM_RANGE[1]}"]
