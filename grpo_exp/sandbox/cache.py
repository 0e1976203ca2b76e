"""A small thread-safe LRU for grading results, keyed by a hash of code + tests + settings."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

V = TypeVar("V")


def cache_key(*parts: Any) -> str:
    """A stable digest of JSON-serialisable ``parts``."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0


class LRUCache(Generic[V]):
    """At most ``size`` entries; the least recently used goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = CacheStats()

    def get(self, key: str) -> V | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.stats.hits += 1
                return self._data[key]
            self.stats.misses += 1
            return None

    def put(self, key: str, value: V) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)
