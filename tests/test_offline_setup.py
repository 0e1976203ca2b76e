"""The offline set-up: `make wheelhouse` lists every wheel the set-up needs (for another Python too, and
without torch for a node that has its own); `make setup WHEELHOUSE=...` installs from it with the index
switched off, and the job trains."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# A set-up script (make runs it with any Python, before a venv exists), loaded from its file.
_spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "tools" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheelhouse)

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
TORCH_STACK = re.compile(r"(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)")
OFFLINE_LIMIT_S = 1500  # a wheelhouse (two resolutions, ~60 wheels copied) and an install on 2 busy cores


def item(name: str, version: str, url: str) -> dict:
    kind = {"dir_info": {}} if url.startswith("file:") else {"archive_info": {}}
    return {"metadata": {"name": name, "version": version}, "download_info": {"url": url, **kind}}


REPORT = {
    "install": [
        item("grpo-exp", "0.1.0", "file:///repo"),
        item("torch", "2.13.0", "https://files/torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl"),
        item("nvidia-cublas", "13.1.0", "https://files/nvidia_cublas-13.1.0-py3-none-manylinux_2_27_x86_64.whl"),
        item("triton", "3.7.0", "https://files/triton-3.7.0-cp312-cp312-manylinux_2_27_x86_64.whl"),
        item("antlr4-python3-runtime", "4.9.3", "https://files/antlr4-python3-runtime-4.9.3.tar.gz"),
        item("trl", "1.16.0", "https://files/trl-1.16.0-py3-none-any.whl"),
        item("torchdata", "0.11.0", "https://files/torchdata-0.11.0-py3-none-any.whl"),
    ]
}


def test_the_wheel_list_leaves_out_the_project_and_with_torch_none_the_torch_stack():
    everything = wheelhouse.wanted(REPORT, sdists=False, leave_out=None)
    assert "grpo-exp==0.1.0" not in everything and "torch==2.13.0" in everything and len(everything) == 6
    without_torch = wheelhouse.wanted(REPORT, sdists=False, leave_out=TORCH_STACK)
    assert without_torch == ["antlr4-python3-runtime==4.9.3", "trl==1.16.0", "torchdata==0.11.0"]


def test_only_source_only_packages_are_built_here():
    assert wheelhouse.wanted(REPORT, sdists=True, leave_out=None) == ["antlr4-python3-runtime==4.9.3"]


def test_a_manylinux_node_takes_the_older_manylinux_wheels_too():
    """tokenizers ships manylinux_2_17 wheels only: with the node's manylinux_2_28 tag alone pip found none."""
    tags = wheelhouse.platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux_2_34_x86_64" not in tags and all(tag.endswith("_x86_64") for tag in tags)
    assert wheelhouse.platforms("manylinux2014_aarch64")[0] == "manylinux_2_17_aarch64"
    assert "manylinux_2_24_aarch64" not in wheelhouse.platforms("manylinux2014_aarch64")


def dry_wheelhouse(*variables: str) -> list[str]:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "wheelhouse", *variables], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return [line.strip() for line in done.stdout.replace("\\\n", " ").splitlines()]


@needs_make
def test_a_wheelhouse_for_another_python_without_torch_downloads_binaries_for_it_only(tmp_path):
    lines = dry_wheelhouse(f"WHEELHOUSE={tmp_path}", "PY=3.12", "TORCH=none")
    resolve_here, resolve_there = (line for line in lines if "--dry-run" in line)
    assert '"torch' not in resolve_here + resolve_there  # the project's own torch requirement is the node's torch
    assert "--python-version" not in resolve_here  # source-only packages are found (and built) for this Python
    download = next(line for line in lines if " -m pip download " in line)
    for command in (resolve_there, download):
        assert "--only-binary=:all:" in command and "--python-version 3.12 --implementation cp" in command
        assert "--platform manylinux_2_28_x86_64" in command and "--platform manylinux2014_x86_64" in command
    listing = next(line for line in lines if "tools/wheelhouse.py list" in line and "--sdists" not in line)
    assert f"--leave-out '{TORCH_STACK.pattern}'" in listing


@needs_make
def test_a_wheelhouse_for_this_python_keeps_torch():
    lines = dry_wheelhouse()
    assert all("--python-version" not in line and "--leave-out" not in line for line in lines)
    resolve = [line for line in lines if "--dry-run" in line]
    assert len(resolve) == 1 and '"torch==2.13.0"' in resolve[0]  # one resolution serves this Python


OLD_LOCK = "# the lock as it was\nfoo==1.0\n"


def make_lock(tmp_path, report: dict | None) -> tuple[subprocess.CompletedProcess, Path]:
    """`make lock` into a lock of its own, its resolution skipped (RESOLVE=true): the listing reads ``report``
    as pip's, or fails on a missing one (None)."""
    lock = tmp_path / "lock.txt"
    lock.write_text(OLD_LOCK)
    if report is not None:
        (tmp_path / "lock.txt.json").write_text(json.dumps(report))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    variables = [f"LOCK={lock}", "RESOLVE=true", f"PYTHON={sys.executable}", f"VENV={tmp_path / 'venv'}"]
    done = subprocess.run(
        ["make", "--no-print-directory", "lock", *variables], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return done, lock


@needs_make
@pytest.mark.parametrize(("report", "why"), [(None, "listing"), ({"install": []}, "pins no package")])
def test_a_failed_lock_listing_fails_make_and_leaves_the_lock_whole(tmp_path, report, why):
    """Issue 60: a listing that failed replaced constraints/lock.txt by its 2 comment lines, and make exited 0."""
    done, lock = make_lock(tmp_path, report)
    assert done.returncode != 0, done.stdout
    assert lock.read_text() == OLD_LOCK
    assert "make lock: " in done.stderr and why in done.stderr and f"{lock} is unchanged" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lock.txt")) == ["lock.txt"]


@needs_make
def test_a_whole_lock_listing_replaces_the_lock_sorted_without_the_torch_stack(tmp_path):
    done, lock = make_lock(tmp_path, REPORT)
    assert done.returncode == 0, done.stderr
    lines = lock.read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == [
        "antlr4-python3-runtime==4.9.3",
        "torchdata==0.11.0",
        "trl==1.16.0",
    ]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("lock.txt")) == ["lock.txt"]


def offline_env() -> dict[str, str]:
    """This environment with every package index off: pip's config files and PIP_* settings dropped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}


@needs_make
@pytest.mark.slow  # builds a wheelhouse and a venv from it: minutes
def test_an_offline_set_up_from_a_wheelhouse_trains(tmp_path):
    wheelhouse, venv = tmp_path / "wh", tmp_path / "venv"
    make = ["make", f"VENV={venv}", "EXTRAS=dev"]
    built = subprocess.run([*make, "wheelhouse", f"WHEELHOUSE={wheelhouse}"], cwd=ROOT, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    wheels = {p.name.split("-")[0].lower() for p in wheelhouse.glob("*.whl")}
    assert {"torch", "trl", "transformers", "hydra_core", "antlr4_python3_runtime", "setuptools"} <= wheels

    venv.mkdir()
    (venv / ".installed-1234").touch()  # a stamp of the Makefile's earlier scheme
    setup = subprocess.run(
        [*make, "setup", f"WHEELHOUSE={wheelhouse}"], cwd=ROOT, env=offline_env(), capture_output=True, text=True
    )
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-3000:]
    assert not (venv / ".installed-1234").exists()
    again = subprocess.run([*make[:2], "-n", "run"], cwd=ROOT, capture_output=True, text=True)
    assert " -m pip " not in again.stdout, "make run would set up again"

    job = tmp_path / "job"
    run = subprocess.run(
        [str(venv / "bin" / "python"), "run.py", "logger=none", "grpo.max_steps=2", f"hydra.run.dir={job}"],
        cwd=ROOT,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=OFFLINE_LIMIT_S,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert len((job / "metrics.jsonl").read_text().splitlines()) >= 2
