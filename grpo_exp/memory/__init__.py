"""Memory arithmetic: what a GRPO job needs per device before any weights load.

``estimate.memory_plan(spec)`` is the arithmetic (also written into each job's ``plan.json``);
``architectures`` reads a model's shape from its config; ``activations`` measures what one of its
decoder layers saves for the backward pass (cached per shape); ``prompts`` finds the data's longest
prompt in the job's tokens; ``target`` holds the devices and dtypes;
``remedies`` re-plans the article's out-of-memory fixes; ``table`` prints a plan. It sits below
training, which writes a job's plan; the command line that plans jobs is ``grpo_exp.plan``.
"""
