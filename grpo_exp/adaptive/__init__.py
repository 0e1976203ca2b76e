"""Adaptive group size: profile prompt difficulty, pick ``num_generations`` per stage, train in stages.

``choice`` is the pure decision (no torch), ``checks`` the settings check run before the model loads,
``profile`` samples and scores prompts with the current policy, ``stages`` runs the stages.
"""
