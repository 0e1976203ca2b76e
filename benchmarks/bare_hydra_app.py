"""A bare Hydra app over the project's conf/ tree: the yardstick for ``run.py --help`` and ``--cfg job``.

It composes the same config groups with Hydra alone: no typed schema (an empty node stands in
for it), no grpo-exp import, no checks. ``benchmarks/overhead.py`` times it beside run.py.
"""

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

ConfigStore.instance().store(name="schema", node={})


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Nothing to run: only the light paths (--help, --cfg job) are timed."""


if __name__ == "__main__":
    main()
