"""What every benchmark shares: starting ``run.py`` (or any command), stopping everything it started,
keeping a time budget, and reading the job folder it leaves.

The benchmarks start processes only through this module (``tests/test_benchmarks.py`` checks it).
A command's output goes to files, never a pipe: a worker that outlives its launcher can't hold a
benchmark up, and a chatty job can't fill a pipe nobody reads. On a time-out, or when the benchmark
itself is interrupted, the command's whole process tree is ended (``stop``): torchrun starts each
worker in a session of its own, so a process-group kill would miss them; the tree comes from /proc
(``grpo_exp.proc``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a benchmark is run as a script: the checkout's grpo_exp, not an installed one
    sys.path.insert(0, str(ROOT))

from grpo_exp import proc  # noqa: E402
from grpo_exp.folder import PLAN_FILE, JobFolder, read_json  # noqa: E402
from grpo_exp.tracking.metrics import eval_rows, training_rows  # noqa: E402

POLL_S = 0.02  # how often ``until`` is asked while a command runs
STOP_GRACE_S = 15  # after SIGTERM, for a command to end its workers itself before the tree gets SIGKILL
TIMED_OUT = 124  # the return code of a command stopped at its time limit (as timeout(1) gives)
TAIL_CHARS = 3000  # output kept in a failure message
TRACKER_ENV = ("WANDB_MODE", "WANDB_API_KEY")  # left out by ``quiet_env``: the benchmark's command decides


@dataclass
class Finished:
    """A command that ended: how, when, and what it printed."""

    command: list[str]
    returncode: int
    wall_s: float
    stdout: str
    stderr: str
    reached_s: float | None = None  # when ``until`` first held, seconds from the start; None if it never did
    cpu_s: float | None = None  # user + system time of the command and the children it waited for

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def failure(self) -> str:
        """The command, its exit and its last output, for a benchmark that stops on it."""
        said = (self.stderr or self.stdout)[-TAIL_CHARS:]
        how = f"timed out after {self.wall_s:.0f} s" if self.returncode == TIMED_OUT else f"exit {self.returncode}"
        return f"{' '.join(self.command)} failed ({how}):\n{said}"


def run(
    command: Sequence[str],
    *,
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    log: Path | None = None,
    until: Callable[[], bool] | None = None,
    show: bool = False,
    check: bool = False,
) -> Finished:
    """Run ``command`` to its end (or its time limit) and return what happened.

    ``log``: stdout and stderr together go to this file (kept; ``Finished.stdout`` holds its text);
    otherwise each goes to a scratch file read back at the end, or, with ``show``, to this process's own.
    ``until``: asked every ``POLL_S`` while the command runs; the first time it holds is ``reached_s``.
    ``check``: a failed command ends the benchmark with its ``failure()`` message.
    """
    command = [str(part) for part in command]
    with contextlib.ExitStack() as files:
        if show:
            out = err = None
        elif log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out, err = files.enter_context(log.open("w")), subprocess.STDOUT
        else:
            out, err = (files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(2))
        cpu_before = _children_cpu()
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=None if env is None else dict(env), stdout=out, stderr=err)
        returncode = reached = None
        try:
            returncode, reached = _wait(process, started, timeout_s, until)
        finally:
            if returncode is None:  # the benchmark was interrupted: leave nothing running
                stop(process)
        wall = time.perf_counter() - started
        if returncode == TIMED_OUT and log is not None:
            out.write(f"\ntimed out after {timeout_s:.0f} s\n")
        stdout, stderr = _read(out, log), "" if err is subprocess.STDOUT else _read(err, None)
    finished = Finished(command, returncode, wall, stdout, stderr, reached, _children_cpu() - cpu_before)
    if check and not finished.ok:
        sys.exit(finished.failure())
    return finished


def _wait(
    process: subprocess.Popen, started: float, timeout_s: float | None, until: Callable[[], bool] | None
) -> tuple[int, float | None]:
    """Wait for ``process``, asking ``until`` meanwhile, and stop its tree at ``timeout_s``:
    its return code, and when ``until`` first held."""
    deadline = None if timeout_s is None else started + max(1.0, timeout_s)
    reached = None
    while True:
        if until is not None and reached is None and until():
            reached = time.perf_counter() - started
        pause = POLL_S if until is not None and reached is None else 1.0
        if deadline is not None:
            pause = min(pause, max(0.0, deadline - time.perf_counter()))
        with contextlib.suppress(subprocess.TimeoutExpired):
            return process.wait(timeout=pause), reached
        if deadline is not None and time.perf_counter() >= deadline:
            stop(process)
            return TIMED_OUT, reached


def _read(file: Any, log: Path | None) -> str:
    if log is not None:
        file.flush()
        return log.read_text(errors="replace")
    if file is None:
        return ""
    file.seek(0)
    return file.read()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stop(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """End ``process`` and everything it started: SIGTERM first (torchrun passes it on to its workers),
    then SIGKILL to the whole tree as it was before the SIGTERM."""
    tree = proc.descendants(process.pid)
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


def python(*args: str | Path, **kwargs: Any) -> Finished:
    """``run`` with this interpreter: ``python(script, ...)``, ``python("-c", code)``, ``python("-m", module)``."""
    return run([sys.executable, *map(str, args)], **kwargs)


def run_py(
    *overrides: str, job: Path | None = None, root: Path = ROOT, launcher: Sequence[str] = (), **kwargs: Any
) -> Finished:
    """``python run.py <overrides>`` in the checkout ``root``; ``job`` becomes its ``hydra.run.dir``.

    ``launcher``: what starts it instead of this interpreter alone, e.g. ``torchrun_launcher(2)``."""
    where = [] if job is None else [f"hydra.run.dir={job}"]
    return run([*(launcher or [sys.executable]), "run.py", *overrides, *where], cwd=root, **kwargs)


def torchrun_launcher(processes: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]


def quiet_env(**extra: str) -> dict[str, str]:
    """This process's environment without the W&B settings a user may have exported, plus ``extra``."""
    return {k: v for k, v in os.environ.items() if k not in TRACKER_ENV} | extra


def logged(job: Path) -> Callable[[], bool]:
    """For ``until``: the job's metrics.jsonl holds its first line."""
    metrics = JobFolder(job).metrics
    return lambda: metrics.is_file() and metrics.stat().st_size > 0


# ---------------------------------------------------------------- time budget


@dataclass
class Budget:
    """Seconds a whole benchmark may take: what is left, whether a part still fits, each part's limit."""

    total_s: float
    started: float = field(default_factory=time.monotonic)

    def spent(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> float:
        return self.total_s - self.spent()

    def fits(self, estimate_s: float) -> bool:
        return self.left() >= estimate_s

    def limit(self, own_s: float) -> float:
        """A part's time limit: its own, or what is left of the whole when that is less."""
        return min(own_s, self.left())


# ---------------------------------------------------------------- reading a job folder


@dataclass
class Job:
    """A job folder as a benchmark reads it (file names are grpo_exp.folder's), with how its command ended."""

    folder: Path
    finished: Finished | None = None

    @property
    def ok(self) -> bool:
        return (self.finished is None or self.finished.ok) and self.summary().get("status") == "completed"

    def summary(self) -> dict[str, Any]:
        return JobFolder(self.folder).summary() or {}

    def rows(self) -> list[dict[str, Any]]:
        """Every whole row of metrics.jsonl (steps, evaluations, the trainer's last log)."""
        return JobFolder(self.folder).rows()

    def steps(self) -> list[dict[str, Any]]:
        """The training steps: rows with a reward."""
        return training_rows(self.rows())

    def evaluations(self) -> list[dict[str, Any]]:
        return eval_rows(self.rows())

    def run_info(self) -> dict[str, Any]:
        return JobFolder(self.folder).run_info()

    def layout(self) -> dict[str, Any]:
        return self.run_info().get("layout", {})

    def plan(self) -> dict[str, Any]:
        return read_json(self.folder / PLAN_FILE) or {}

    @property
    def model(self) -> Path:
        return JobFolder(self.folder).model

    def failure(self) -> str:
        """The job's last error line (error.txt holds the traceback of a job that raised), or its output's."""
        error = JobFolder(self.folder).error
        text = (
            error.read_text()
            if error.exists()
            else (self.finished.stdout + self.finished.stderr if self.finished else "")
        )
        lines = text.strip().splitlines()
        code = self.finished.returncode if self.finished else "?"
        return f"run.py exit {code}: {lines[-1][:300] if lines else 'no output'}"


def run_job(*overrides: str, job: Path, **kwargs: Any) -> Job:
    """``run_py`` into ``job``, read back as a ``Job``."""
    return Job(job, run_py(*overrides, job=job, **kwargs))


def recipe_over_seeds(
    doc: str, recipe: str, figures: Callable[[Path], dict[str, Any]], table: Callable[[list[dict[str, Any]]], str]
) -> None:
    """The command line of a benchmark that runs ``+recipe=<recipe>`` once per seed (``logger=none``) and
    prints ``table`` of each finished job's ``figures``: ``--seeds``, ``--set`` (more overrides), ``--out``
    (keep the job folders) and ``--tabulate`` (finished job folders, nothing run)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--set", nargs="*", default=[], help="extra run.py overrides")
    parser.add_argument("--out", type=Path, help="keep the job folders here (default: a temporary folder)")
    parser.add_argument("--tabulate", type=Path, nargs="+", help="job folders of finished runs: print their table")
    args = parser.parse_args()
    if args.tabulate:
        print(table([figures(path) for path in args.tabulate]))
        return
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.out or Path(scratch)
        rows = []
        for seed in args.seeds:
            out = workdir / f"{recipe}-{seed}"
            run_py(f"+recipe={recipe}", f"seed={seed}", "logger=none", *args.set, job=out, check=True)
            rows.append(figures(out))
    print(table(rows))


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, for a benchmark to print beside its timings."""
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------- timers inside a job

TIMING_SHIM = Path(__file__).resolve().with_name("timing_shim")  # its sitecustomize.py times methods in a job


def timed_env(folder: Path, methods: Mapping[str, str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment whose job times ``methods`` (``"module:Class.method"`` -> record key) and writes
    ``folder/timings_rank<RANK>.json``; read it back with ``timings``."""
    env = dict(os.environ if env is None else env)
    folder.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(p for p in (str(TIMING_SHIM), env.get("PYTHONPATH", "")) if p)
    timed = ",".join(f"{where}={key}" for where, key in methods.items())
    return env | {"PYTHONPATH": path, "BENCH_TIMINGS": str(folder), "BENCH_TIMED": timed}


def timings(folder: Path, rank: int = 0) -> dict[str, Any]:
    """What the shim recorded for ``rank``; {} when it wrote nothing."""
    return read_json(folder / f"timings_rank{rank}.json") or {}


# ---------------------------------------------------------------- the default job's model

_MODEL_PATH = """
from hydra import compose, initialize_config_dir
from grpo_exp import models
from grpo_exp.config.loading import to_settings
from grpo_exp.config.schema import register_schema
from grpo_exp.job.command import CONF_DIR
register_schema()
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    print(models.model_path(to_settings(compose(config_name="config")).model))
"""


def default_model(root: Path = ROOT) -> str:
    """The cached tiny model the default job of the checkout ``root`` trains (built on first call)."""
    return python("-c", _MODEL_PATH, cwd=root, check=True).stdout.strip().splitlines()[-1]
