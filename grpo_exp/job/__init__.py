"""One job around Hydra: the command's preflight, the job's run and its resume plan."""
