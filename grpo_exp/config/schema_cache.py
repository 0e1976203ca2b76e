"""The typed schema as OmegaConf nodes, built once per machine and version, then loaded.

Every command Hydra composes needs the schema as OmegaConf nodes. Building them from the
dataclasses (about 250 fields, TRL's included) takes ~50 ms: most of what ``--cfg job`` costs
over a bare Hydra app. The built node is pickled into the cache, under a key made of the source
of the modules that define the schema and the versions that shape its nodes, and loads in ~1 ms.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import omegaconf
from omegaconf import DictConfig, OmegaConf

from grpo_exp.cache import cache_root


def schema_node(schema: type, sources: Iterable[Path]) -> DictConfig:
    """``schema`` (a dataclass) as OmegaConf nodes: from the cache when it holds this version, else
    built and cached. ``sources``: the files that define it; editing one makes a new cache entry."""
    path = cache_root() / f"schema-{cache_key(sources)}.pkl"
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # absent, torn or from another build: build it (a cache never stops a command)
        pass
    node = OmegaConf.structured(schema)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, delete=False) as handle:
            handle.write(pickle.dumps(node))
        os.replace(handle.name, path)  # atomic: a parallel command reads the old file or the whole new one
    except OSError:
        pass  # a read-only home: build it each time
    return node


def cache_key(sources: Iterable[Path]) -> str:
    """A short hash of the schema's source files and of the Python and OmegaConf versions."""
    digest = hashlib.sha256(f"{sys.version}|{omegaconf.__version__}".encode())
    for source in sources:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]
