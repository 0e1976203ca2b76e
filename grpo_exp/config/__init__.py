"""The config layer: the typed schema, loading and checking a composed config, and the job spec.

Nothing here imports torch, trl or the layers above it (job, training, tracking, report,
dashboard): a command's config is checked in well under a second, before anything heavy loads.
"""
