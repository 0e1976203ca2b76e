"""The config layer: the typed schema, loading and checking a composed config, and the job's layout.

Nothing here imports torch, trl or any other layer of the package: a command's config is checked
in well under a second, before anything heavy loads. The job spec, which combines the config with
the model source, the data and the rewards, is assembled a layer up (``grpo_exp.spec``).
"""
