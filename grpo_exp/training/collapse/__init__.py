"""Collapse: a run whose reward falls away, whose KL spikes or whose numbers turn non-finite (``monitor.on_collapse``).

- ``detector``: what counts as a collapse, and the last healthy step before it; rebuilt from ``metrics.jsonl``.
- ``rollback``: acting on it during training: healthy checkpoints kept, then a stop (``stop``) or a
  new stage from the last healthy checkpoint with a gentler learning rate (``rollback``).

The health monitor's early warnings (``tracking.monitor``) are a separate, softer judgement: they
advise once and never act; a rollback only restores the monitor's state with the checkpoint.
"""
