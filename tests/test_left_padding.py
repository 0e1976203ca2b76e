"""Issue 59's NaN, as far as a CPU can follow it: left padding's fully masked rows under bf16.

On an H200 in bf16 the default run's gradients went NaN within 2-19 steps with SDPA and trained with
eager attention (docs/gpus.md, "NaN with SDPA in bf16"). A left-padded batch gives every padding
position a query row with nothing to attend to. These tests hold what the CPU shows: there, SDPA
(its math kernel and its CPU flash kernel) gives those rows zeros and finite gradients in bf16, in the
tiny model's own shapes and in the model itself at the width that failed on the GPU. So the rows alone
are no NaN; the GPU's NaN needs its CUDA kernels, which the CPU cannot run, and is not reproduced here.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32  # conf/model/tiny.yaml: hidden 128 over 4 heads, 2 key/value heads
WIDTH = 64  # prompt + completion width of the batches that failed: a multiple of 128 plus 64 (docs/gpus.md)
PADDING = (0, 5, 12)  # left padding per row: none, a few, many


def left_padded_mask() -> torch.Tensor:
    """transformers' SDPA mask for a left-padded causal batch: (batch, 1, query, key), True = attend."""
    keep = torch.ones(len(PADDING), WIDTH, dtype=torch.bool)
    for row, pad in enumerate(PADDING):
        keep[row, :pad] = False
    causal = torch.ones(WIDTH, WIDTH, dtype=torch.bool).tril()
    return causal[None, None] & keep[:, None, None, :]


@pytest.mark.parametrize("backend", [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION], ids=["math", "cpu-flash"])
@pytest.mark.parametrize("autocast", [False, True], ids=["bf16-tensors", "fp32-under-autocast"])
def test_fully_masked_rows_give_zeros_and_finite_gradients_in_bf16_on_the_cpu(backend, autocast):
    generator = torch.Generator().manual_seed(0)
    dtype = torch.float32 if autocast else torch.bfloat16
    shape = (len(PADDING), HEADS, WIDTH, HEAD_DIM)
    q, k, v = (torch.randn(shape, generator=generator).to(dtype).requires_grad_() for _ in range(3))
    mask = left_padded_mask()
    assert (~mask.any(dim=-1)).sum() == sum(PADDING)  # one fully masked query row per padding position
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), sdpa_kernel(backend):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.float().square().sum().backward()
    assert out.dtype == torch.bfloat16
    assert out[2, :, :12].abs().max() == 0  # a row with nothing to attend to is zero, not NaN
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_tiny_models_bf16_training_step_on_a_left_padded_batch_is_finite_on_the_cpu(settings, attention):
    from grpo_exp import models

    cfg = settings()
    model, tokenizer = models.load(cfg.model, models.model_path(cfg.model))
    model.set_attn_implementation(attention)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, len(tokenizer), (len(PADDING), WIDTH), generator=generator)
    keep = torch.ones_like(ids)
    for row, pad in enumerate(PADDING):
        ids[row, :pad], keep[row, :pad] = tokenizer.pad_token_id, 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=keep).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    log_probs = torch.log_softmax(logits.float(), dim=-1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    (-(log_probs * keep[:, 1:]).sum() / keep[:, 1:].sum()).backward()  # the padding is out of the loss, as in TRL
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
