"""Agents that call tools: the tools TRL runs during a rollout, and rollouts outside the trainer."""
