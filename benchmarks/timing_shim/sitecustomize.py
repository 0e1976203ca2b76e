"""Timers inside a benchmarked job: active only when $BENCH_TIMINGS names a folder (``harness.timed_env``).

Python imports ``sitecustomize`` at start-up from this folder, which the harness puts first on the
job's PYTHONPATH. It imports nothing heavy itself (run.py refuses a bad config before torch loads):
it wraps the methods $BENCH_TIMED names once their modules are first imported, and writes its record
(``timings_rank<RANK>.json``: the seconds of every call, the peak memory) after every timed call and
at exit, so a job that ends abruptly still leaves what it measured.

$BENCH_TIMED: comma-separated ``module:Class.method=key``, e.g.
``trl.trainer.grpo_trainer:GRPOTrainer._generate=generate_s``.
"""

import atexit
import importlib.abc
import importlib.util
import json
import os
import resource
import sys
import time

FOLDER = os.environ.get("BENCH_TIMINGS")
TARGETS: dict[str, list[tuple[str, str, str]]] = {}  # module -> (class, method, key)
for item in filter(None, os.environ.get("BENCH_TIMED", "").split(",")):
    where, key = item.split("=")
    module, attribute = where.split(":")
    owner, method = attribute.split(".")
    TARGETS.setdefault(module, []).append((owner, method, key))
RECORD: dict[str, list[float]] = {key: [] for targets in TARGETS.values() for _, _, key in targets}


def _cuda():
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized() else None


def _write():
    if not any(RECORD.values()):  # a helper process that never ran a timed method: not the job
        return
    torch = _cuda()
    memory = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if torch is not None:
        free, total = torch.cuda.mem_get_info()
        memory.update(
            peak_allocated_bytes=torch.cuda.max_memory_allocated(),
            peak_reserved_bytes=torch.cuda.max_memory_reserved(),
            device_used_bytes=total - free,
        )
    path = os.path.join(FOLDER, f"timings_rank{os.environ.get('RANK', '0')}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({**RECORD, **memory, "cuda": torch is not None}, f)
    os.replace(path + ".tmp", path)


def _timed(key, method):
    def timed(*args, **kwargs):
        torch = _cuda()
        if torch is not None:
            torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            if torch is not None:
                torch.cuda.synchronize()
            RECORD[key].append(time.perf_counter() - start)
            _write()

    return timed


def _patch(module):
    for owner, method, key in TARGETS[module.__name__]:
        cls = getattr(module, owner)
        setattr(cls, method, _timed(key, getattr(cls, method)))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    busy = False

    def find_spec(self, name, path=None, target=None):
        if name not in TARGETS or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if FOLDER and TARGETS:
    sys.meta_path.insert(0, _PatchOnImport())
    atexit.register(_write)
