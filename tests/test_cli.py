"""run.py as a user meets it: one-line errors before anything heavy loads, light --help and --cfg."""

from __future__ import annotations

import os
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
        (("+grpo.num_generation=4", "grpo.max_steps=2"), "did you mean grpo.num_generations?"),
        (("dataset=json", "dataset.path=missing.json"), "dataset.path=missing.json: no such file"),
        (("reward.parts.format.fn=nosuch",), "unknown reward function 'nosuch'"),
        (("-m", "grpo.num_generations=5,4", "grpo.per_device_train_batch_size=8"), "not a multiple of grpo.num_gen"),
    ],
)
def test_bad_input_is_one_line_with_exit_code_2_before_torch_loads(args, message):
    result = run_py(*args)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == [errors[0]] and errors[0].startswith("error: ") and message in errors[0]
    assert "Traceback" not in result.stderr
    assert "torch" not in result.stdout.split("HEAVY=")[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("grpo.num_generation=4",), "did you mean grpo.num_generations?"),
        (("+grpo.num_generation=4",), "did you mean grpo.num_generations?"),
        (("grpo.max_steps=-5",), "grpo.max_steps=-5: give a positive step count"),
        (("-m", "grpo.num_generations=5,4", "grpo.per_device_train_batch_size=8"), "not a multiple of grpo.num_gen"),
    ],
)
def test_cfg_job_refuses_what_a_run_refuses_in_one_line_without_torch(args, message):
    """--cfg job prints the config a run would get, so a config the run refuses is refused here too."""
    result = run_py(*args, "--cfg", "job")
    assert result.returncode == 2, result.stdout
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == [errors[0]] and errors[0].startswith("error: ") and message in errors[0]
    assert result.stdout.strip() == "HEAVY="  # no config printed, and torch never imported


# Each bad command (overrides after run.py) and a piece of its one-line answer. Paths under {tmp}.
BAD_INPUTS = [
    (
        "+grpo.num_generation=4 grpo.max_steps=2",
        "unknown config key grpo.num_generation; did you mean grpo.num_generations?",
    ),
    ("++grpo.num_generation=4", "did you mean grpo.num_generations?"),
    ("grpo.num_generation=4", "did you mean grpo.num_generations?"),
    ("modle=tiny", "did you mean the config group model (model=<option>)?"),
    ("model=tiyn", "no model config named 'tiyn'; did you mean model=tiny?"),
    ("+recipe=stabilise", "did you mean +recipe=stabilize?"),
    ("recipee=stabilize", "did you mean the config group recipe (+recipe=<option>)?"),
    ("+seeed=3", "did you mean seed?"),
    ("grpo.kl_coef=0.1", "did you mean grpo.beta?"),
    ("grpo.learning_rate=1e-5", "sets TRL's learning_rate from optimizer.lr"),
    ("grpo.max_steps=-5", "grpo.max_steps=-5: give a positive step count, or -1"),
    ("optimizer.lr=0", "optimizer.lr=0.0 is out of range"),
    ("grpo.temperature=0", "grpo.temperature=0.0 is out of range"),
    ("grpo.top_p=1.5", "grpo.top_p=1.5 is out of range: it must lie in (0, 1]"),
    ("grpo.epsilon_high=-0.1", "grpo.epsilon_high=-0.1 is out of range"),
    ("grpo.loss_type=ppo", "expected one of [grpo, dr_grpo, dapo"),
    ("grpo.scale_rewards=sometimes", "expected one of [group, batch, none]"),
    ("grpo.hold_fixed=groups", "expected one of [none, prompts, completions]"),
    ("device=tpu", "expected one of [auto, cpu, cuda]"),
    ("logger.mode=sometimes", "expected one of [auto, online, offline, disabled]"),
    ("objective=best", "expected one of [final_reward"),
    ("grpo.num_generations=abc", "could not be converted"),
    ("grpo.num_generations=1", "grpo.num_generations=1: GRPO compares completions within a group"),
    ("grpo.num_generations=5 grpo.per_device_train_batch_size=12", "grpo.hold_fixed=prompts"),
    ("grpo.hold_fixed=completions grpo.num_generations=5", "group sizes that fit: 2, 3, 4, 6, 12"),
    ("dataset=json", "dataset=json needs a file: add dataset.path=prompts.json"),
    ("dataset=json dataset.path={tmp}/qa.jsonl", "if the prompts are in 'question', add dataset.prompt_field=question"),
    ("reward=customer_service_multi dataset=content_creation", "needs the column 'required_answers'"),
    ("reward.parts.format.fn=nosuch", "unknown reward function 'nosuch'"),
    ("reward=custom", "reward.parts.main.fn is required"),
    ("+reward.parts.x={{fn:regex_match,wieght:1}}", "Key 'wieght' not in 'RewardPart'"),
    ("monitor.window=0", "monitor.window=0 is out of range"),
    ("grpo.max_steps=[1", "cannot parse override"),
    ("dataset.task=chain_sum", "choose dataset=reasoning_gym or dataset=reasoning_gym_mix"),  # issue 62: was ignored
    (  # issue 62: the first command of docs/tasks.md trained the customer-service model at reward 0
        "dataset=reasoning_gym dataset.task=chain_sum reward=reasoning_gym grpo.max_steps=30 threads=1",
        "use +recipe=arithmetic or model=tiny_arithmetic (any model: python -m grpo_exp.plan --probe",
    ),
    # last: these import torch (ASKS_THE_MACHINE), and the probe runs every command in one process
    ("-m grpo.num_generations=4,1", "grpo.num_generations=1"),
    ("device=cuda", "device=cuda but no GPU is visible"),
]

# The machine is asked (torch, config/layout.py) only once a job's config is sound: for these, the
# answer comes from torch, or the sweep's first job is sound. Still before transformers or a model loads.
ASKS_THE_MACHINE = {"device=cuda", "-m grpo.num_generations=4,1"}

# Runs each command through cli.preflight (what run.py does before Hydra starts) in one process,
# printing exit code, stderr and whether torch/trl were imported, per case.
BATCH_PROBE = """
import contextlib, io, json, shlex, sys
from grpo_exp.job import command as cli
results = []
for line in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli.preflight(shlex.split(line))
            code = 0
        except SystemExit as exc:
            code = exc.code
    heavy = [m for m in ("torch", "trl", "transformers") if m in sys.modules]
    results.append({"code": code, "stderr": err.getvalue(), "heavy": heavy})
print(json.dumps(results))
"""


def test_bad_inputs_each_get_one_line_and_exit_2_before_torch(tmp_path):
    import json

    (tmp_path / "qa.jsonl").write_text(json.dumps({"answer": "42", "question": "six times seven?"}) + "\n")
    lines = [command.format(tmp=tmp_path) for command, _ in BAD_INPUTS]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", BATCH_PROBE, json.dumps(lines)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout.splitlines()[-1])
    assert len(results) == len(BAD_INPUTS) >= 30
    for (command, message), result in zip(BAD_INPUTS, results, strict=True):
        errors = [line for line in result["stderr"].splitlines() if line.strip()]
        assert result["code"] == 2, (command, result)
        assert len(errors) == 1 and errors[0].startswith("error: "), (command, errors)
        assert message in errors[0], (command, errors[0])
        allowed = {"torch"} if command in ASKS_THE_MACHINE else set()
        assert set(result["heavy"]) <= allowed, (command, result["heavy"])
