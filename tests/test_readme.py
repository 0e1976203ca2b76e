"""Every command in README.md's code blocks runs as written (on the CPU, with few steps).

Commands that need a GPU, a model or dataset hub, or a W&B server are listed in ``SKIPPED`` with
the reason; a README command that is neither run nor listed fails the test, and so does a listed
one that left the README. The fast tier checks every job of every command the way run.py does
before training (composed, validated, rewards built); the slow tier runs them all, one step each.

Commands written inline, in tables and prose (`` `python run.py --help` ``, `` `make run ARGS="…"` ``),
are checked too: each ``python run.py`` one (and ``make run ARGS=…``) is preflighted with the block
commands unless it holds a placeholder (``…``, ``<sweep folder>``); every ``python -m grpo_exp.<module>``
named anywhere must be runnable with ``-m``, and every ``make <target>`` must be a Makefile target.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

README = ROOT / "README.md"
# Appended to every run.py command: one step, no W&B, so the whole README runs in minutes.
FAST = ("grpo.max_steps=1", "logger=none")
# Commands (by their start) that this machine cannot run, and why.
SKIPPED = {
    "make run": "`make` first installs the environment (network); it then runs `python run.py`, run below",
    "make test": "the test suite itself",
    "make test-e2e": "the test suite itself",
    "make test-slow": "the test suite itself",
    "make lint": "ruff, which CI runs as its own step (`make` first installs the environment)",
    "make setup TORCH=torch": "installs CUDA torch and vLLM: needs a GPU machine and the network",
    "make test-low": "a second venv at the low end of the range (minutes; CI runs it: .ci/run)",
    "make wheelhouse": "downloads every wheel (the network, minutes): tests/test_offline_setup.py builds one",
    "make setup WHEELHOUSE=": "a GPU node's offline set-up: tests/test_offline_setup.py installs from a wheelhouse",
    "python run.py model=qwen2_5_0_5b_instruct": "downloads a model from the hub (and wants a GPU)",
    "python run.py -m model=qwen2_5_0_5b_instruct": "downloads a model from the hub (and wants a GPU)",
    "python run.py model=mistral_7b_instruct": "a 7B model in 4 bits: needs a CUDA GPU and the hub",
    "python run.py dataset=hub": "downloads a dataset from the hub",
    "python run.py +recipe=math_gsm8k": "GSM8K and Qwen2.5-1.5B from the hub, and a GPU",
    "pip install": "installs an optional extra from the package index (the network)",
    "'sweep=$(ls'": "shell variable for the dashboard commands below, which need a W&B server or login",
    "python -m grpo_exp.dashboard": "needs a finished sweep and a W&B login (tests/test_dashboard.py runs it offline)",
    "accelerate launch": "several GPUs (tests/test_accelerate_configs.py checks the configs parse)",
    "CUDA_VISIBLE_DEVICES=": "several GPUs and vLLM",
    ".venv/bin/python benchmarks/": "a benchmark of several minutes, not a test",
    "python -m grpo_exp.tracking.repair": "needs a job whose W&B run died (tests/test_wandb_repair.py runs it)",
    "export 'TRACKIO_DIR=": "sets trackio's store for the commands after it (tests/test_trackio.py sets its own)",
    "trackio list": "reads the store of a finished trackio sweep (tests/test_trackio.py runs it)",
}


def readme_commands() -> list[str]:
    """Each command line of the README's bash blocks, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [shlex.join(shlex.split(line, comments=True)) for line in lines if shlex.split(line, comments=True)]


# A backtick span in prose may hold several commands (`source .venv/bin/activate && python run.py …`).
INLINE_KINDS = ("python run.py", "python -m ", "make ")
PLACEHOLDER = re.compile(r"…|<[^>]*>")


def inline_commands() -> list[str]:
    """The commands in the README's backtick spans: prose and tables, and comments in code blocks."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```\w*\n(.*?)```", text, flags=re.DOTALL)
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    spans = [" ".join(span.split()) for part in [prose, *blocks] for span in re.findall(r"`([^`]+)`", part)]
    parts = [part.strip() for span in spans for part in re.split(r"&&|;|\|", span)]
    return list(dict.fromkeys(part for part in parts if part.startswith(INLINE_KINDS)))


def as_run_py(command: str) -> str:
    """``make run ARGS="…"`` is ``python run.py …``; any other command is itself."""
    words = shlex.split(command)
    if words[:2] == ["make", "run"]:
        args = [w.removeprefix("ARGS=") for w in words[2:] if w.startswith("ARGS=")]
        return shlex.join(["python", "run.py", *shlex.split(" ".join(args))])
    return command


def inline_runnable() -> list[str]:
    """The inline run.py commands the fast tier preflights (not those in the code blocks already)."""
    commands = [as_run_py(c) for c in inline_commands() if not PLACEHOLDER.search(c)]
    block = set(readme_commands())
    runs = [c for c in commands if c.startswith("python run.py") and skip_reason(c) is None and c not in block]
    return list(dict.fromkeys(runs))


def skip_reason(command: str) -> str | None:
    return next((why for start, why in SKIPPED.items() if command.startswith(start)), None)


def runnable() -> list[str]:
    return [c for c in readme_commands() if skip_reason(c) is None]


def user_files(folder: Path) -> None:
    """The files the README's commands name as the user's own (a rewards module, prompt files)."""
    article = (FIXTURES / "article_rewards.py").read_text(encoding="utf-8")
    brevity = "\n\ndef brevity(completions):\n    return [-len(c) / 100 for c in completions]\n"
    (folder / "my_rewards.py").write_text(article + brevity, encoding="utf-8")
    (folder / "path" / "to").mkdir(parents=True)
    my_reward = "\n\ndef my_reward(completions):\n    return [float('谢谢' in c) for c in completions]\n"
    (folder / "path" / "to" / "rewards.py").write_text(article + my_reward, encoding="utf-8")
    shutil.copy(FIXTURES / "prompts.json", folder / "prompts.json")
    recorded_run(folder / "outputs" / "long")
    records = json.loads((FIXTURES / "prompts.json").read_text(encoding="utf-8"))
    with (folder / "qa.jsonl").open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps({"question": record["prompt"], "answer": "谢谢"}, ensure_ascii=False) + "\n")


def recorded_run(job: Path) -> None:
    """The job folder README's long-run example leaves (the config it ran with), which its resume commands continue."""
    import dataclasses

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from grpo_exp.config.loading import to_settings
    from grpo_exp.config.schema import CONF_DIR, register_schema
    from grpo_exp.spec import build_spec

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        settings = to_settings(compose(config_name="config", overrides=["hydra.run.dir=outputs/long"]))
    build_spec(settings)
    job.mkdir(parents=True)
    (job / "config.yaml").write_text(OmegaConf.to_yaml(dataclasses.asdict(settings)), encoding="utf-8")


def argv(command: str) -> list[str]:
    """The command as this test runs it: this interpreter and this checkout's run.py, plus ``FAST``."""
    words = shlex.split(command)
    if words[:2] == ["python", "run.py"]:
        return [sys.executable, str(ROOT / "run.py"), *words[2:], *FAST]
    if words[0] == "make":
        return ["make", "-C", str(ROOT), *words[1:]]
    if words[:3] == ["python", "-m", "grpo_exp.plan"]:  # reads the config, and samples the tiny model
        return [sys.executable, "-m", "grpo_exp.plan", *words[3:]]
    if words[0] == "torchrun":  # two CPU processes here (gloo)
        script = words.index("run.py")
        torchrun = str(Path(sys.executable).parent / "torchrun")
        return [torchrun, *words[1:script], str(ROOT / "run.py"), *words[script + 1 :], *FAST]
    raise AssertionError(f"README command of an unknown kind: {command}")


def test_every_readme_command_is_run_or_skipped_with_a_reason():
    commands = readme_commands()
    assert len(runnable()) >= 15
    stale = [start for start in SKIPPED if not any(c.startswith(start) for c in commands)]
    assert not stale, f"SKIPPED lists commands the README no longer has: {stale}"
    for command in runnable():
        argv(command)  # every remaining command is one this test knows how to run


# Checks each command as run.py does before Hydra starts, all in one process; each at the process
# count it is launched with (WORLD_SIZE, as torchrun and accelerate set it).
PREFLIGHT_PROBE = """
import contextlib, io, json, os, sys
from grpo_exp.job import command as cli
results = []
for processes, args in json.loads(sys.argv[1]):
    os.environ["WORLD_SIZE"] = str(processes)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli.preflight(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
    results.append({"code": code, "stderr": err.getvalue()})
print(json.dumps(results))
"""
# accelerate's configs in accelerate/ launch this many processes unless --num_processes says otherwise.
ACCELERATE_DEFAULT_PROCESSES = 8


def launched(command: str) -> tuple[int, list[str]] | None:
    """A torchrun or accelerate launch command's process count and run.py arguments (None for others)."""
    words = [w for w in shlex.split(command) if not re.match(r"^[A-Z_]+=", w)]  # CUDA_VISIBLE_DEVICES=… first
    if not words or words[0] not in ("torchrun", "accelerate") or "run.py" not in words:
        return None
    launcher, args = words[: words.index("run.py")], words[words.index("run.py") + 1 :]
    options = dict(re.findall(r"--(num_processes|nproc_per_node)[ =](\d+)", " ".join(launcher)))
    count = options.get("num_processes") or options.get("nproc_per_node") or ACCELERATE_DEFAULT_PROCESSES
    return int(count), args


def test_readme_finds_its_launch_commands():
    counts = [launched(c)[0] for c in readme_commands() if launched(c)]
    assert 8 in counts and 4 in counts and 2 in counts, counts


@pytest.mark.e2e  # preflights every README job: over 2 minutes
def test_every_job_of_every_readme_command_is_valid(tmp_path):
    """The sweeps included (the group-size examples used to stop on a batch-size error), and the
    accelerate and torchrun commands at their process counts (8-process ZeRO-3 did not split the batch)."""
    user_files(tmp_path)
    commands = [c for c in runnable() if c.startswith("python run.py")] + inline_runnable()
    jobs = [(1, argv(c)[2:]) for c in commands]
    for command in readme_commands():
        if (launch := launched(command)) is not None:
            commands.append(command)
            jobs.append((launch[0], [*launch[1], *FAST]))
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHT_PROBE, json.dumps(jobs)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    failures = [(c, r) for c, r in zip(commands, results, strict=True) if r["code"] or r["stderr"].strip()]
    assert failures == []


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    rules = re.findall(r"^([^\s#=:][^#=:]*?)\s*::?(?!=)", text, flags=re.MULTILINE)
    return {target for rule in rules for target in rule.split()}


def test_readme_finds_its_inline_commands():
    inline = inline_commands()
    assert "python run.py --help" in inline  # the performance table
    assert any(c.startswith("python -m grpo_exp.report ") for c in inline)  # prose and the SLURM/Ray table
    assert "python run.py reward=customer_service_multi grpo.max_steps=300" in inline_runnable()  # make run ARGS=…
    assert {"run", "test", "lint"} <= makefile_targets()


def test_every_module_and_make_target_the_readme_names_exists():
    """`python -m grpo_exp.compare` in the SLURM/Ray table named a module that never existed."""
    import importlib.util

    text = README.read_text(encoding="utf-8")
    modules = sorted(set(re.findall(r"python -m (grpo_exp(?:\.\w+)*)", text)))
    assert "grpo_exp.report" in modules

    def runs_with_dash_m(name: str) -> bool:
        spec = importlib.util.find_spec(name)
        return spec is not None and (
            spec.submodule_search_locations is None or importlib.util.find_spec(f"{name}.__main__") is not None
        )

    assert [m for m in modules if not runs_with_dash_m(m)] == []
    makes = [c for c in readme_commands() + inline_commands() if c.startswith("make ")]
    targets = {w for c in makes for w in shlex.split(c)[1:] if "=" not in w and not w.startswith("-")}
    assert sorted(targets - makefile_targets()) == []


def run_command(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    return subprocess.run(argv(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.parametrize(
    "command",
    [
        "python run.py --help",
        # four real jobs, one step each (about a minute): make test-e2e
        pytest.param("python run.py -m grpo.num_generations=4,8 optimizer.lr=1e-5,3e-5", marks=pytest.mark.e2e),
    ],
)
def test_readme_group_size_sweep_and_help_run(tmp_path, command):
    assert command in readme_commands()
    user_files(tmp_path)
    result = run_command(command, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    if " -m " in command:
        summaries = list((tmp_path / "outputs" / "multirun").glob("*/*/summary.json"))
        assert len(summaries) == 4
        assert all(json.loads(s.read_text())["status"] == "completed" for s in summaries)


@pytest.mark.slow
@pytest.mark.parametrize("command", runnable())
def test_readme_command_runs(tmp_path, command):
    user_files(tmp_path)
    result = run_command(command, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    failed = [
        path
        for path in tmp_path.glob("outputs/**/summary.json")
        if json.loads(path.read_text())["status"] != "completed"
    ]
    assert not failed, failed
