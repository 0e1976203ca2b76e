"""The bytes a model's decoder layer saves for its backward pass, measured on that layer itself.

A table of families can't say what a layer saves: Qwen3's q/k norms and a query wider than the
hidden size, a family's MLP, a 16-bit or an fp32 residual stream all change it. So the plan
measures it: transformers builds the model class of the job's ``config.json`` with one layer and a
tiny vocabulary (random weights, on the CPU), runs it forward with torch's saved-tensor hooks at
two short lengths, and takes the difference per token, so that the weights (and autocast's 16-bit
copies of them), saved once whatever the length, cancel out. What the layer saves is counted
apart from what the rest of the model saves (the embedding's indices, the final norm).

The result is cached per shape, mode and library versions (``grpo_exp.cache``), so a shape is
measured once per machine: that first plan imports torch and builds one layer (about 2-10 s on
2 busy cores, by the layer's size); every plan after it reads the cache and imports nothing.

Modes (``MODES``), by what the residual stream and the matmuls are in:

- ``float32``: fp32 weights, no autocast (the CPU);
- ``autocast``: fp32 weights under 16-bit autocast (full fine-tuning with fp32 master weights): the
  residual stays fp32, the matmuls' saved inputs are 16-bit;
- ``16-bit``: 16-bit weights (a LoRA or QLoRA base, ``model.master_weights=bfloat16``): a 16-bit
  residual stream. bf16 and fp16 save the same bytes; the CPU measures bf16.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from typing import Any

from grpo_exp.cache import cache_root
from grpo_exp.errors import UserError

MODES = ("float32", "autocast", "16-bit")
CACHE_DIR = "activations"  # under grpo_exp.cache's folder
LENGTHS = (8, 16)  # tokens per sequence, the two short runs the per-token bytes come from
BATCH = 1
VOCAB = 128  # the measured model's vocabulary: the embedding and head don't enter a layer's bytes
# config.json keys that don't shape a layer (or that a one-layer build must not keep)
UNSHAPING = ("architectures", "torch_dtype", "dtype", "quantization_config", "layer_types", "transformers_version")
REASON_CHARS = 80  # of a failed build's message, in the one-line error
VERSIONED = ("torch", "transformers")  # a new release may save other tensors: measure again


@dataclass(frozen=True)
class Activations:
    """Bytes saved for the backward per token: by one decoder layer, and by the model outside its layers."""

    layer: float
    outside: float
    mode: str
    source: str  # "measured now (N s)" or the cache file it came from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def activations(config: dict[str, Any], mode: str) -> Activations:
    """The per-token bytes of ``config``'s layer in ``mode``, from the cache or measured now."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {MODES}")
    path = cache_root() / CACHE_DIR / f"{shape_key(config, mode)}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        return Activations(cached["layer"], cached["outside"], mode, f"cached {path.name}")
    except (OSError, ValueError, KeyError):
        pass
    start = time.perf_counter()
    try:
        layer, outside = measure(config, mode)
    except Exception as exc:  # a family transformers can't build from its config alone (remote code)
        model_type = (config.get("text_config") or config).get("model_type")
        why = str(exc).splitlines()[0][:REASON_CHARS] if str(exc) else ""
        raise UserError(
            f"can't build one layer of model_type={model_type} to measure its activations "
            f"({type(exc).__name__}: {why}); plan a model whose family transformers knows"
        ) from None
    seconds = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.partial")
    staging.write_text(json.dumps({"layer": layer, "outside": outside, "config": layer_fields(config)}))
    staging.replace(path)  # atomic: another plan measuring the same shape writes the same figures
    return Activations(layer, outside, mode, f"measured now on one layer ({seconds:.1f} s, torch imported; cached)")


def layer_fields(config: dict[str, Any]) -> dict[str, Any]:
    """The config a one-layer build of the model takes: its own keys, one layer, a tiny vocabulary."""
    text = config.get("text_config") or config
    fields = {
        k: v for k, v in text.items() if not k.startswith("_") and not k.endswith("_token_id") and k not in UNSHAPING
    }
    return fields | {"num_hidden_layers": 1, "vocab_size": VOCAB, "tie_word_embeddings": False}


def shape_key(config: dict[str, Any], mode: str) -> str:
    versions = {name: _version(name) for name in VERSIONED}
    text = json.dumps({"fields": layer_fields(config), "mode": mode, "versions": versions}, sort_keys=True)
    model_type = (config.get("text_config") or config).get("model_type", "model")
    return f"{model_type}-{mode}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def measure(config: dict[str, Any], mode: str) -> tuple[float, float]:
    """(layer, outside) bytes per token, from saved-tensor hooks at ``LENGTHS`` tokens."""
    model = one_layer_model(config, mode)
    short, long = (saved_bytes(model, mode, n) for n in LENGTHS)
    tokens = BATCH * (LENGTHS[1] - LENGTHS[0])
    return (long[0] - short[0]) / tokens, (long[1] - short[1]) / tokens


def one_layer_model(config: dict[str, Any], mode: str, layers: int = 1) -> Any:
    """The model class transformers builds for ``config``, with ``layers`` layers and a tiny
    vocabulary, on the CPU in the mode's weight dtype (random weights: only shapes matter)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = layer_fields(config) | {"num_hidden_layers": layers}
    hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    weights = torch.bfloat16 if mode == "16-bit" else torch.float32
    return AutoModelForCausalLM.from_config(hf_config, dtype=weights).train()


def saved_bytes(model: Any, mode: str, length: int, batch: int = BATCH) -> tuple[int, int]:
    """Bytes ``model`` saves for its backward on ``batch`` x ``length`` tokens: (inside its
    decoder layers, outside them). Each storage is counted once (views share it)."""
    import torch

    decoder = model.model
    inside: dict[int, int] = {}
    outside: dict[int, int] = {}
    where = [outside]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        where[0][storage.data_ptr()] = storage.nbytes()
        return tensor

    hooks = []
    for layer in decoder.layers:
        hooks.append(layer.register_forward_pre_hook(lambda *_: where.__setitem__(0, inside)))
        hooks.append(layer.register_forward_hook(lambda *_: where.__setitem__(0, outside)))
    ids = torch.randint(0, VOCAB, (batch, length))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        decoder(input_ids=ids, use_cache=False)
    for hook in hooks:
        hook.remove()
    return sum(inside.values()), sum(outside.values())
