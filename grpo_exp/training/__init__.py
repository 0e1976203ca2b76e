"""Training a job: one lifecycle over a schedule of stages, the trainer, its callbacks, checkpoints, stops."""
