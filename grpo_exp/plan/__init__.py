"""Memory planning: what a GRPO job needs per device before any weights load (python -m grpo_exp.plan).

``memory.memory_plan(spec)`` is the arithmetic (also written into each job's ``plan.json``);
``architectures`` reads a model's shape from its config; ``remedies`` re-plans the article's
out-of-memory fixes; ``__main__`` is the command line.
"""
