"""A saved W&B view (workspace) for one sweep, from one command: ``python -m grpo_exp.dashboard <sweep folder>``.

``sweep`` reads what the sweep folder already knows (W&B group, swept keys, logged curves); ``view``
builds the view with W&B's ``wandb-workspaces`` objects; ``publish`` saves it (logged in) or writes its
specification next to the sweep report (offline). Nothing here is imported by a training job.
"""
