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
from pathlib import Path

import omegaconf
from omegaconf import DictConfig, OmegaConf

from grpo_exp import config, metrics, trl_schema
from grpo_exp.cache import cache_root

# The modules whose source decides the schema: editing any of them makes a new cache entry.
_DEFINED_IN = (config, trl_schema, metrics)


def schema_node() -> DictConfig:
    """``ExperimentConfig`` as OmegaConf nodes: from the cache when it holds this version, else built and cached."""
    path = cache_root() / f"schema-{cache_key()}.pkl"
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # absent, torn or from another build: build it (a cache never stops a command)
        pass
    node = OmegaConf.structured(config.ExperimentConfig)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, delete=False) as handle:
            handle.write(pickle.dumps(node))
        os.replace(handle.name, path)  # atomic: a parallel command reads the old file or the whole new one
    except OSError:
        pass  # a read-only home: build it each time
    return node


def cache_key() -> str:
    """A short hash of the schema's source and of the Python and OmegaConf versions."""
    digest = hashlib.sha256(f"{sys.version}|{omegaconf.__version__}".encode())
    for module in _DEFINED_IN:
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]
