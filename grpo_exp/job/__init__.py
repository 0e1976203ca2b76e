"""The command around Hydra: the preflight of every job, one job's run, its resume plan, its folder."""
