"""grpo-exp's Hydra plugins: thin classes where Hydra looks for them; their code is in grpo_exp.sweep."""
