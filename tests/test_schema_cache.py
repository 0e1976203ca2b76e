"""The schema node loaded from the cache is the schema: same keys, types and checks as one built fresh."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from grpo_exp.cache import CACHE_ENV
from grpo_exp.config.schema import SCHEMA_SOURCES, ExperimentConfig
from grpo_exp.config.schema_cache import cache_key, schema_node


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path / f"schema-{cache_key(SCHEMA_SOURCES)}.pkl"


def test_the_cached_node_is_the_schema_built_fresh(cache):
    built = schema_node(ExperimentConfig, SCHEMA_SOURCES)
    assert cache.is_file()
    written = cache.stat().st_mtime_ns
    loaded = schema_node(ExperimentConfig, SCHEMA_SOURCES)
    assert cache.stat().st_mtime_ns == written  # read, not rebuilt
    fresh = OmegaConf.structured(ExperimentConfig)
    for node in (built, loaded):
        assert OmegaConf.to_container(node) == OmegaConf.to_container(fresh)
        assert OmegaConf.get_type(node.grpo) is OmegaConf.get_type(fresh.grpo)


def test_the_cached_node_still_refuses_unknown_keys_and_wrong_types(cache):
    schema_node(ExperimentConfig, SCHEMA_SOURCES)
    loaded = schema_node(ExperimentConfig, SCHEMA_SOURCES)
    with pytest.raises(ConfigKeyError):
        OmegaConf.merge(loaded, {"grpo": {"num_generation": 4}})
    with pytest.raises(ValidationError):
        OmegaConf.merge(loaded, {"grpo": {"num_generations": "many"}})


def test_a_torn_cache_file_is_rebuilt(cache):
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(b"\x80\x05 torn")
    node = schema_node(ExperimentConfig, SCHEMA_SOURCES)
    assert OmegaConf.to_container(node) == OmegaConf.to_container(OmegaConf.structured(ExperimentConfig))
    assert schema_node(ExperimentConfig, SCHEMA_SOURCES) is not None and cache.stat().st_size > 1000
