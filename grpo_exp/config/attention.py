"""The attention implementation a job's model loads with, decided with its layout (``config/layout.py``).

``model.attn_implementation`` when set; else transformers' default (SDPA), except for the embedded
models on a GPU computing in bf16 or fp16, which load with eager attention. There PyTorch's SDPA gave
NaN gradients within 2-19 steps of the default run on an H200 in bf16 (issue 59), while eager attention
trained, and so did fp32; the likely cause is the cuDNN backend's backward on left-padded batches
(docs/gpus.md, "NaN with SDPA in bf16"). Eager attention materialises a score matrix of the sequence
length squared per head, which at the embedded models' size costs nothing. Real models keep SDPA:
their memory is what a fused kernel saves, and no GPU has shown them diverging yet.
"""

from __future__ import annotations

from grpo_exp.config.schema import ExperimentConfig

EMBEDDED_SOURCES = frozenset({"tiny"})  # the model sources the project builds itself (conf/model/tiny*.yaml)
EMBEDDED_GPU_ATTENTION = "eager"


def choose(settings: ExperimentConfig, gpu: bool, sixteen_bit: bool) -> str | None:
    """The implementation to load with; None leaves it to transformers (SDPA where the model has it)."""
    if settings.model.attn_implementation:
        return settings.model.attn_implementation
    if gpu and sixteen_bit and settings.model.source in EMBEDDED_SOURCES:
        return EMBEDDED_GPU_ATTENTION
    return None
