"""run.py as a user meets it: one-line errors before anything heavy loads, light --help and --cfg."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Prints which heavy modules were imported by the time run.py finished.
HEAVY_PROBE = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('HEAVY=' + ','.join(m for m in ('torch', 'trl', 'transformers') "
    "if m in sys.modules)))\n"
    "sys.argv = ['run.py', *sys.argv[1:]]\n"
    "runpy.run_path('run.py', run_name='__main__')\n"
)


def run_py(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HEAVY_PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("args", [("--help",), ("--cfg", "job"), ("--hydra-help",)])
def test_help_and_cfg_import_neither_torch_nor_trl(args):
    result = run_py(*args)
    assert result.returncode == 0, result.stderr
    assert "HEAVY=\n" in result.stdout or result.stdout.rstrip().endswith("HEAVY=")


def test_cfg_job_shows_the_composed_config():
    result = run_py("--cfg", "job", "grpo.num_generations=8", "grpo.per_device_train_batch_size=16")
    assert "num_generations: 8" in result.stdout and "source: tiny" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("grpo.num_generation=4",), "did you mean grpo.num_generations?"),
        (("grpo.num_generations=5",), "not a multiple of grpo.num_generations=5"),
        (("dataset=json", "dataset.path=missing.json"), "dataset.path=missing.json: no such file"),
        (("reward.parts.format.fn=nosuch",), "unknown reward function 'nosuch'"),
        (("-m", "grpo.num_generations=4,5"), "not a multiple of grpo.num_generations=5"),
    ],
)
def test_bad_input_is_one_line_with_exit_code_2_before_torch_loads(args, message):
    result = run_py(*args)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == [errors[0]] and errors[0].startswith("error: ") and message in errors[0]
    assert "Traceback" not in result.stderr
    assert "torch" not in result.stdout.split("HEAVY=")[-1]
