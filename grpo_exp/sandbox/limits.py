"""Resource limits for one sandboxed snippet, and the rlimits they become in the child.

The wall-clock limits are enforced by the trusted parent (it kills the child); the others are
kernel rlimits that the child's trusted start-up code sets on itself before any untrusted code
runs, so the snippet can lower them but never raise them again (it holds no privileges).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

MIB = 1024 * 1024
CPU_GRACE_S = 1  # SIGXCPU at the soft limit (catchable), SIGKILL this much later at the hard one


@dataclass(frozen=True)
class Limits:
    """Per-snippet limits. Defaults suit MBPP/HumanEval-sized programs.

    ``memory_mb`` and ``max_processes`` bound the snippet as a whole where it gets a cgroup
    (``cgroup`` on and the machine allows it, see ``cgroups``); each process also keeps
    RLIMIT_AS = ``memory_mb``. Without a cgroup, rlimits are all there is and they count per
    process, so forking is refused (RLIMIT_NPROC = 1) to keep the total at ``memory_mb``.
    RLIMIT_NPROC counts per user: exact when the trainer runs as root (each running snippet
    gets its own throw-away uid), otherwise it includes the trainer's own processes and threads.
    """

    timeout_s: float = 10.0  # wall clock for the whole snippet: start, load and every test
    test_timeout_s: float = 3.0  # wall clock for one test (its calls into the snippet)
    cpu_s: int | None = None  # CPU seconds per process; None: the snippet's wall-clock timeout
    memory_mb: int = 512  # memory of the whole snippet (cgroup), and address space per process
    file_size_mb: int = 1  # largest file the snippet may write (RLIMIT_FSIZE)
    max_processes: int = 16  # processes of the snippet, see the class docstring
    cgroup: bool = True  # a cgroup per snippet where the machine allows it
    max_open_files: int = 64  # RLIMIT_NOFILE
    max_output_bytes: int = MIB  # stdout and stderr each of a run (a graded program's go to /dev/null)
    max_message_bytes: int = 4 * MIB  # one result message from the child
    workdir_mb: int = 16  # size of the private working folder where it is a tmpfs (bwrap)
    # Files, folders, links and System V IPC objects a forked program may leave for its fork server to
    # remove. More, and the fork server is discarded and replaced instead of walking them (see zygote.py).
    # Removing 1,000 costs about what starting a fork server does (~25 and ~36 ms here): a clean-up
    # never costs more than that, where 200,000 folders took 5 to 7 s to walk.
    max_leftovers: int = 1000
    max_restarts: int = 2  # fresh interpreters after a test killed the previous one
    # Where a problem has a reference solution, its slowest test sets the per-test limit:
    # this many times its time, at least ``min_test_timeout_s``, at most ``test_timeout_s``.
    # None: always ``test_timeout_s``. A spinning candidate then costs a fraction of a second.
    reference_time_multiple: float | None = None
    min_test_timeout_s: float = 0.25

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value is not None and type(value) is not bool and value <= 0 and name != "max_restarts":
                raise ValueError(f"sandbox limit {name} must be positive, got {value!r}")
        if self.max_restarts < 0:
            raise ValueError(f"sandbox limit max_restarts must be >= 0, got {self.max_restarts!r}")

    def test_limit_from(self, reference_test_s: float) -> float:
        """The per-test limit for a problem whose reference solution's slowest test took this long."""
        if self.reference_time_multiple is None:
            return self.test_timeout_s
        derived = max(self.min_test_timeout_s, self.reference_time_multiple * reference_test_s)
        return min(self.test_timeout_s, derived)

    @property
    def cpu_seconds(self) -> int:
        """CPU limit actually applied: ``cpu_s`` or the wall-clock timeout rounded up."""
        return self.cpu_s if self.cpu_s is not None else max(1, math.ceil(self.timeout_s))

    def rlimits(self, whole_snippet_budget: bool = True) -> list[tuple[str, int, int]]:
        """``(resource name, soft, hard)`` triples for the child to apply to itself.

        ``whole_snippet_budget``: whether a cgroup bounds the snippet's memory and processes.
        """
        mem = self.memory_mb * MIB
        fsize = self.file_size_mb * MIB
        processes = self.max_processes if whole_snippet_budget else 1
        return [
            ("RLIMIT_CPU", self.cpu_seconds, self.cpu_seconds + CPU_GRACE_S),
            ("RLIMIT_AS", mem, mem),
            ("RLIMIT_FSIZE", fsize, fsize),
            ("RLIMIT_NPROC", processes, processes),
            ("RLIMIT_NOFILE", self.max_open_files, self.max_open_files),
            ("RLIMIT_CORE", 0, 0),
            ("RLIMIT_MSGQUEUE", 0, 0),  # no POSIX message queue: a forked program's would outlive it
        ]
