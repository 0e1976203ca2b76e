"""The attention implementation a job's model loads with, decided with its layout (``config/layout.py``).

``model.attn_implementation`` when set; else transformers' default (SDPA), except for the embedded
models on a GPU computing in bf16 or fp16, which load with eager attention. There PyTorch's SDPA gave
NaN gradients within 2-19 steps of the default run on an H200 in bf16 (issue 59), while eager attention
trained, and so did fp32; the likely cause is the cuDNN backend's backward on left-padded batches
(docs/gpus.md, "NaN with SDPA in bf16"). Eager attention materialises a score matrix of the sequence
length squared per head, which at the embedded models' size costs nothing. Real models keep SDPA:
their memory is what a fused kernel saves; but on a GPU every SDPA model trains without PyTorch's cuDNN
attention kernel (``keep_cudnn_attention_off``), the published cause of such NaNs for Qwen2.5 too.
"""

from __future__ import annotations

from grpo_exp.config.schema import ExperimentConfig

EMBEDDED_SOURCES = frozenset({"tiny"})  # the model sources the project builds itself (conf/model/tiny*.yaml)
EMBEDDED_GPU_ATTENTION = "eager"
SDPA = (None, "sdpa")  # the implementations that dispatch to PyTorch's SDPA kernels (None: transformers' default)
# PyTorch's cuDNN attention backward (SDPA's default kernel on H100/H200 since torch 2.11) returns NaN query
# gradients under a mask at widths 64 past a multiple of 128 once a row's log-sum-exp is below -88.7, as
# a left-padded row's is (pytorch/pytorch#196678; huggingface/trl#7181: Qwen2.5 in DPO). Without it SDPA
# runs its flash or memory-efficient kernel, which those reports found clean and no slower.
CUDNN_ATTENTION = False


def choose(settings: ExperimentConfig, gpu: bool, sixteen_bit: bool) -> str | None:
    """The implementation to load with; None leaves it to transformers (SDPA where the model has it)."""
    if settings.model.attn_implementation:
        return settings.model.attn_implementation
    if gpu and sixteen_bit and settings.model.source in EMBEDDED_SOURCES:
        return EMBEDDED_GPU_ATTENTION
    return None


def keep_cudnn_attention_off(gpu: bool, attention: str | None) -> bool:
    """In a GPU job whose model attends with SDPA, turn PyTorch's cuDNN attention kernel off for the process
    (before the first step; TRL's reference model shares the setting). True when it did."""
    if not gpu or attention not in SDPA or CUDNN_ATTENTION:
        return False
    import torch

    torch.backends.cuda.enable_cudnn_sdp(False)
    return True
