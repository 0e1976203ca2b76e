"""Run one GRPO experiment, or a sweep with -m. See README.md and `python run.py --help`."""

import sys

import hydra
from omegaconf import DictConfig

from grpo_exp.job import command


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    return command.run_job(cfg)


if __name__ == "__main__":
    sys.argv[1:] = command.preflight(sys.argv[1:])
    main()
