"""A decoder layer's activations as the plan measures them (grpo_exp/memory/activations.py), held
against what a longer, deeper, wider batch of the same model class saves for its backward.

The plan measures one layer at two short lengths; here a two-layer model of the family runs a batch
of 2 x 48 tokens, every tensor autograd saves is counted once (the parameters left out), and the
plan's bytes for that batch must come within 5 %. The families' own features are kept: Qwen2's
q/k/v bias, Qwen3's q/k norms and queries wider than the hidden size, Llama 3's rope scaling,
Mistral's head_dim; the 7-8B shapes are narrowed (fewer heads, same head size) to stay fast.
"""

from __future__ import annotations

import json

import pytest

from grpo_exp.memory.activations import activations, layer_fields
from grpo_exp.memory.architectures import shipped_configs

TOLERANCE = 0.05
LAYERS, BATCH, LENGTH = 2, 2, 48


def _shipped(name: str, **narrowed) -> dict:
    return json.loads(shipped_configs()[name].read_text()) | narrowed


FAMILIES = {
    "qwen2 (Qwen2-7B, narrowed)": _shipped(
        "Qwen/Qwen2-7B-Instruct", hidden_size=896, num_attention_heads=7, num_key_value_heads=1, intermediate_size=4736
    ),
    "qwen2.5 (Qwen2.5-0.5B)": _shipped("Qwen/Qwen2.5-0.5B-Instruct"),
    "qwen3 (Qwen3-0.6B)": _shipped("Qwen/Qwen3-0.6B"),
    "llama 3 (Llama-3.1-8B, narrowed)": _shipped(
        "meta-llama/Llama-3.1-8B-Instruct",
        hidden_size=1024,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=3584,
    ),
    "mistral (Mistral-7B v0.3, narrowed)": _shipped(
        "mistralai/Mistral-7B-Instruct-v0.3",
        hidden_size=1024,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=3584,
    ),
}


def _saved_by_a_batch(config: dict, mode: str) -> int:
    """Bytes a LAYERS-layer model of ``config`` saves for the backward of BATCH x LENGTH tokens,
    parameters left out (they are there whatever the batch)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = layer_fields(config) | {"num_hidden_layers": LAYERS}
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(fields.pop("model_type"), **fields),
        dtype=torch.bfloat16 if mode == "16-bit" else torch.float32,
    ).train()
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, fields["vocab_size"], (BATCH, LENGTH))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=ids, use_cache=False)
    return sum(saved.values())


@pytest.mark.parametrize("mode", ["float32", "16-bit"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_measured_layer_predicts_a_batch(family, mode, monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path))
    config = FAMILIES[family]
    per_token = activations(config, mode)
    planned = BATCH * LENGTH * (LAYERS * per_token.layer + per_token.outside)
    measured = _saved_by_a_batch(config, mode)
    assert planned == pytest.approx(measured, rel=TOLERANCE)


def test_qwen3_saves_more_per_hidden_unit_than_qwen2(monkeypatch, tmp_path):
    """What a constant per hidden unit would miss: Qwen3-0.6B's layer (queries of 2,048 against a
    hidden size of 1,024, q/k norms) against Qwen2.5-0.5B's, per hidden and MLP unit."""
    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path))
    qwen3, qwen2 = FAMILIES["qwen3 (Qwen3-0.6B)"], FAMILIES["qwen2.5 (Qwen2.5-0.5B)"]

    def per_width(config):
        width = config["hidden_size"] + config["intermediate_size"]
        return activations(config, "float32").layer / width

    assert per_width(qwen3) > 1.1 * per_width(qwen2)


def test_a_16_bit_residual_saves_less_than_fp32_and_autocast(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path))
    config = FAMILIES["qwen2.5 (Qwen2.5-0.5B)"]
    fp32, autocast, half = (activations(config, mode).layer for mode in ("float32", "autocast", "16-bit"))
    assert half < autocast < fp32


def test_a_shape_is_measured_once_then_read_from_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GRPO_EXP_CACHE", str(tmp_path))
    config = FAMILIES["qwen2.5 (Qwen2.5-0.5B)"] | {"num_hidden_layers": 3, "vocab_size": 1000}  # not a layer's shape
    first = activations(config, "16-bit")
    again = activations(config, "16-bit")
    assert first.source.startswith("measured now") and again.source.startswith("cached")
    assert (again.layer, again.outside) == (first.layer, first.outside)
    wider = activations(config | {"intermediate_size": 2 * config["intermediate_size"]}, "16-bit")
    assert wider.source.startswith("measured now") and wider.layer > first.layer
