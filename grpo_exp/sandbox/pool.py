"""``Sandbox``: settings, a worker pool and a result cache around the grader.

Snippets run in parallel on a thread pool: each worker only waits on its child's pipes, so
threads suffice. Under bwrap each snippet is forked from a ready interpreter of its worker
(``forkserver``, several times faster); otherwise it gets a fresh interpreter of its own,
booted one snippet ahead (``spares``). Results are cached by
a hash of code + tests + settings, and identical work inside one batch (GRPO often samples the
same completion twice) runs once.

Per-test time limits fit the problem where it has a reference solution and
``Limits.reference_time_multiple`` is set: the reference is graded once per problem, and its
slowest test, times the multiple (with a floor), becomes that problem's per-test limit. A loop
then holds a worker for a fraction of a second instead of the configured limit.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields, replace

from grpo_exp.sandbox.cache import CacheStats, LRUCache, cache_key
from grpo_exp.sandbox.forkserver import ForkServer
from grpo_exp.sandbox.grading import GradeResult, TestSpec, grade
from grpo_exp.sandbox.isolation import Launcher, resolve
from grpo_exp.sandbox.limits import Limits
from grpo_exp.sandbox.runner import RunResult, run_code
from grpo_exp.sandbox.spares import ChildSource

DEFAULT_CACHE_SIZE = 4096
ZYGOTES_PER_WORKER = 2  # one serves a program while the other cleans up and forks its next process

log = logging.getLogger("grpo_exp.sandbox")


class Sandbox:
    """Runs untrusted snippets under ``limits`` and ``isolation`` (auto, bwrap, unshare, none).

    ``workers`` defaults to ``os.cpu_count()``. The isolation mode is probed and fixed when the
    sandbox is made: ``mode`` says which one is in force. ``fork_server`` forks each graded
    snippet from a ready interpreter per worker where the mode is bwrap (see ``forkserver``);
    else ``prestart`` boots each worker's next fresh interpreter while it grades (see
    ``spares``). Call ``close()`` (or use ``with``) to end them.
    """

    def __init__(
        self,
        limits: Limits | None = None,
        *,
        isolation: str = "auto",
        workers: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        prestart: bool = True,
        fork_server: bool = True,
    ) -> None:
        self.limits = limits or Limits()
        self.mode = resolve(isolation)
        self.launcher = Launcher(self.mode)
        self.workers = workers or os.cpu_count() or 1
        if self.workers < 1:
            raise ValueError(f"sandbox workers must be >= 1, got {workers}")
        self._settings = asdict(self.limits)  # part of every result's cache key
        self._cache: LRUCache[GradeResult] = LRUCache(cache_size)
        self._limits: LRUCache[float] = LRUCache(DEFAULT_CACHE_SIZE)  # per-test limit by problem
        self._source: ChildSource | ForkServer
        if fork_server and self.mode == "bwrap":
            self._source = ForkServer(self.launcher, self.limits, zygotes=ZYGOTES_PER_WORKER * self.workers)
        else:
            self._source = ChildSource(self.launcher, self.limits, spares=self.workers if prestart else 0)
        weakref.finalize(self, self._source.close)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- grading ---------------------------------------------------------------------------------

    def grade(self, code: str, spec: TestSpec) -> GradeResult:
        """Grade one candidate; see ``grade_many``."""
        return self.grade_many([(code, spec)])[0]  # type: ignore[return-value]

    def grade_many(self, items: Sequence[tuple[str, TestSpec | None]]) -> list[GradeResult | None]:
        """Grade every ``(code, spec)`` in parallel; None where ``spec`` is None (no tests)."""
        results: list[GradeResult | None] = [None] * len(items)
        todo: dict[str, list[int]] = {}
        for n, (code, spec) in enumerate(items):
            if spec is None:
                continue
            key = self._key(code, spec)
            if key in todo:
                todo[key].append(n)
                continue
            hit = self._cache.get(key)
            if hit is not None:
                results[n] = replace(hit, cached=True)
            else:
                todo[key] = [n]
        if todo:
            jobs = {key: items[slots[0]] for key, slots in todo.items()}
            limits = self._test_limits([spec for _code, spec in jobs.values()])
            futures = {key: self._executor().submit(grade, code, spec, self._source,
                                                    limits.get(_spec_key(spec)) if limits else None)
                       for key, (code, spec) in jobs.items()}  # fmt: skip
            for key, future in futures.items():
                result = future.result()
                self._cache.put(key, result)
                for n in todo[key]:
                    results[n] = result
        return results

    def test_limit(self, spec: TestSpec) -> float:
        """The per-test limit that candidates for ``spec`` get (measuring its reference if need be)."""
        return self._test_limits([spec]).get(_spec_key(spec), self.limits.test_timeout_s)

    def _test_limits(self, specs: Sequence[TestSpec | None]) -> dict[str, float]:
        """Per-test limits of the problems among ``specs`` that have a reference solution.

        Each is measured once (references of new problems are graded in parallel) and kept. A
        reference that does not pass its own tests leaves the configured limit.
        """
        if self.limits.reference_time_multiple is None:
            return {}
        wanted = {_spec_key(spec): spec for spec in specs if spec is not None and spec.reference}
        found = {key: limit for key in wanted if (limit := self._limits.get(key)) is not None}
        new = {key: self._executor().submit(grade, spec.reference, spec, self._source)
               for key, spec in wanted.items() if key not in found}  # fmt: skip
        for key, future in new.items():
            reference = future.result()
            measured = max(reference.test_s, default=0.0)
            fine = reference.total > 0 and reference.passed == reference.total
            found[key] = self.limits.test_limit_from(measured) if fine else self.limits.test_timeout_s
            if not fine:
                log.warning("reference solution fails its own tests (%s); keeping test_timeout_s", reference.outcomes)
            self._limits.put(key, found[key])
        return found

    def run(self, code: str) -> RunResult:
        """Run ``code`` as a script (no tests) and return its exit status and capped output."""
        return run_code(code, self._source)

    # -- bookkeeping -----------------------------------------------------------------------------

    @property
    def fork_server(self) -> bool:
        """Whether graded snippets are forked from a ready interpreter (else each gets a fresh one)."""
        return isinstance(self._source, ForkServer)

    @property
    def cache_stats(self) -> CacheStats:
        return self._cache.stats

    def close(self) -> None:
        """Stop the worker threads (running snippets finish first) and the spare interpreters."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
        self._source.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
            return self._pool

    def _key(self, code: str, spec: TestSpec) -> str:
        return cache_key(code, _values(spec), self._settings, self.mode)


def _spec_key(spec: TestSpec) -> str:
    return cache_key(_values(spec))


def _values(spec: TestSpec) -> list:
    """The spec's fields in order (plain strings and tuples: no deep copy, as ``asdict`` makes)."""
    return [getattr(spec, field.name) for field in fields(spec)]
