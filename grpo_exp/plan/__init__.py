"""``python -m grpo_exp.plan``: plan a job's memory (``grpo_exp.memory``) and probe its rewards.

``jobs`` composes the jobs as run.py does; ``probe`` samples the model as training does, so this
package sits above the job and training layers.
"""
