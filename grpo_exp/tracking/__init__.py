"""What a run records: the W&B run, its offline files, per-step metrics, health alerts, summary and provenance."""
