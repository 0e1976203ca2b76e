"""A model's shape, from its config alone: no weights are downloaded or loaded.

Where the config comes from, by ``model.name_or_path``:

- the presets' published ``config.json`` values ship in ``grpo_exp/data/architectures/`` (each
  file names its hub id as ``_name_or_path``), so planning them works offline;
- the embedded tiny model's comes from its recipe, or from its built folder when the cache has it
  (the built vocabulary is what the tokenizer reached, at most the recipe's);
- a local folder's ``config.json`` is read as JSON; any other hub id through ``AutoConfig``.

Parameters are counted by arithmetic on the decoder layout of the families in ``FAMILIES`` (the
presets' and the tiny model's), which keeps ``python -m grpo_exp.plan`` free of torch (importing
it alone takes about 3 s on 2 busy cores). The tests check each count against the model built on
the meta device (``meta_parameters``), which is also how any other family is counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_exp.config.schema import ModelSettings
from grpo_exp.errors import UserError
from grpo_exp.shipped import shipped_file

ARCHITECTURES_DIR = "architectures"  # under grpo_exp/data/
ALL_LINEAR = "all-linear"  # peft: every nn.Linear except the output layer (lm_head)
OUTPUT_LAYER = "lm_head"
LAYERS_PATH = "model.layers.{}"  # where the decoder families keep their layers


@dataclass(frozen=True)
class Family:
    """How a decoder family lays out its layers: which projections carry a bias (a bool, or the
    config key that says), and whether the queries and keys have a norm of their own (Qwen3)."""

    qkv_bias: bool | str = False
    o_bias: bool | str = False
    mlp_bias: bool | str = False
    qk_norm: bool = False

    def flag(self, value: bool | str, config: dict[str, Any]) -> bool:
        return bool(config.get(value, False)) if isinstance(value, str) else value


# Families counted by arithmetic; others are built on the meta device.
FAMILIES: dict[str, Family] = {
    "qwen2": Family(qkv_bias=True),
    "qwen3": Family(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True),
    "mistral": Family(),
    "llama": Family(qkv_bias="attention_bias", o_bias="attention_bias", mlp_bias="mlp_bias"),
}


@dataclass(frozen=True)
class Linear:
    """One kind of nn.Linear: its module name (the last part), shape, how many the model has, and
    its full module path with ``{}`` for the layer index (what peft matches target_modules on)."""

    name: str
    inputs: int
    outputs: int
    bias: bool
    count: int
    path: str = ""

    def paths(self) -> list[str]:
        return [self.path.format(i) for i in range(self.count)] if "{}" in self.path else [self.path] * self.count

    @property
    def parameters(self) -> int:
        return self.count * (self.inputs * self.outputs + (self.outputs if self.bias else 0))


@dataclass(frozen=True)
class Architecture:
    """What the memory plan needs of a model: sizes, and its parameters by kind."""

    model_type: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    parameters: int  # every parameter (a tied embedding once)
    linears: tuple[Linear, ...]  # the nn.Linear kinds, the output layer (if untied) included
    source: str  # where the config came from
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the config.json

    @property
    def embedding(self) -> int:
        return self.vocab * self.hidden

    @property
    def linear_parameters(self) -> int:
        """Parameters in nn.Linear layers (what 4-bit loading quantizes, the output layer aside)."""
        return sum(layer.parameters for layer in self.linears if layer.name != OUTPUT_LAYER)

    @property
    def layer_parameters(self) -> int:
        """Parameters of one decoder layer (the unit ZeRO-3 and FSDP gather at a time)."""
        per_layer = sum(layer.parameters for layer in self.linears if layer.name != OUTPUT_LAYER) // self.layers
        return per_layer + 2 * self.hidden  # two RMSNorms

    @property
    def largest_tensor(self) -> int:
        """Elements of the biggest parameter (the CPU optimizer works one tensor at a time)."""
        return max([self.embedding, *(layer.inputs * layer.outputs for layer in self.linears)])


def architecture(model: ModelSettings) -> Architecture:
    """The architecture of the model a job trains, without loading weights."""
    config, source = model_config(model)
    return from_config(config, source)


def model_config(model: ModelSettings) -> tuple[dict[str, Any], str]:
    """The model's ``config.json`` as a dict, and where it came from."""
    if model.source == "tiny" and model.recipe is not None:
        return _tiny_config(model)
    shipped = shipped_configs()
    if model.name_or_path in shipped:
        path = shipped[model.name_or_path]
        return json.loads(path.read_text(encoding="utf-8")), f"shipped {path.name}"
    folder = Path(model.name_or_path).expanduser()
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text(encoding="utf-8")), str(folder / "config.json")
    return _hub_config(model), f"hub {model.name_or_path}"


def shipped_configs() -> dict[str, Path]:
    """The shipped architectures by hub id."""
    found = {}
    for path in sorted(shipped_file(ARCHITECTURES_DIR).glob("*.json")):
        found[json.loads(path.read_text(encoding="utf-8"))["_name_or_path"]] = path
    return found


def _tiny_config(model: ModelSettings) -> tuple[dict[str, Any], str]:
    from grpo_exp.models import tiny

    recipe = model.recipe
    assert recipe is not None
    built = tiny.cache_path(tiny.recipe_key(recipe)) / "config.json"
    if built.is_file():
        return json.loads(built.read_text(encoding="utf-8")), str(built)
    config = {
        "model_type": "qwen2",
        "vocab_size": recipe.vocab_size,  # an upper bound: the built tokenizer may stop short of it
        "hidden_size": recipe.hidden_size,
        "intermediate_size": recipe.intermediate_size,
        "num_hidden_layers": recipe.num_layers,
        "num_attention_heads": recipe.num_heads,
        "num_key_value_heads": recipe.num_kv_heads,
        "max_position_embeddings": recipe.max_position_embeddings,
        "tie_word_embeddings": True,
    }
    return config, "the tiny model's recipe (not built yet: its vocabulary at most)"


def _hub_config(model: ModelSettings) -> dict[str, Any]:
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model.name_or_path, trust_remote_code=model.trust_remote_code)
    except Exception as exc:  # offline, a typo, a private repo: all of them the user's to fix
        known = ", ".join(shipped_configs())
        raise UserError(
            f"no config for model.name_or_path={model.name_or_path} ({type(exc).__name__}); shipped: {known}, "
            "or give a local folder with a config.json"
        ) from None
    return config.to_dict()


def from_config(config: dict[str, Any], source: str = "config") -> Architecture:
    """The architecture described by a ``config.json``; families outside ``FAMILIES`` are counted on meta."""
    text = config.get("text_config") or config
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    head_dim = text.get("head_dim") or hidden // heads
    kv_heads = text.get("num_key_value_heads") or heads
    layers, vocab = text["num_hidden_layers"], text["vocab_size"]
    tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))
    family = FAMILIES.get(text.get("model_type", ""))
    if family is None:
        parameters, linears = meta_parameters(config)
    else:
        linears = _decoder_linears(text, family, hidden, heads, kv_heads, head_dim, layers, vocab, tied)
        norms = (2 * layers + 1) * hidden + (2 * layers * head_dim if family.qk_norm else 0)
        parameters = vocab * hidden + norms + sum(layer.parameters for layer in linears)
    return Architecture(
        model_type=text.get("model_type", "unknown"),
        hidden=hidden,
        intermediate=text.get("intermediate_size", 4 * hidden),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        tied=tied,
        parameters=parameters,
        linears=tuple(linears),
        source=source,
        config=config,
    )


def _decoder_linears(
    config: dict[str, Any],
    family: Family,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    layers: int,
    vocab: int,
    tied: bool,
) -> list[Linear]:
    qkv, o, mlp = (family.flag(v, config) for v in (family.qkv_bias, family.o_bias, family.mlp_bias))
    inner = config["intermediate_size"]
    attention, mlp_path = f"{LAYERS_PATH}.self_attn.", f"{LAYERS_PATH}.mlp."
    linears = [
        Linear("q_proj", hidden, heads * head_dim, qkv, layers, attention + "q_proj"),
        Linear("k_proj", hidden, kv_heads * head_dim, qkv, layers, attention + "k_proj"),
        Linear("v_proj", hidden, kv_heads * head_dim, qkv, layers, attention + "v_proj"),
        Linear("o_proj", heads * head_dim, hidden, o, layers, attention + "o_proj"),
        Linear("gate_proj", hidden, inner, mlp, layers, mlp_path + "gate_proj"),
        Linear("up_proj", hidden, inner, mlp, layers, mlp_path + "up_proj"),
        Linear("down_proj", inner, hidden, mlp, layers, mlp_path + "down_proj"),
    ]
    if not tied:
        linears.append(Linear(OUTPUT_LAYER, hidden, vocab, False, 1, OUTPUT_LAYER))
    return linears


def meta_parameters(config: dict[str, Any]) -> tuple[int, list[Linear]]:
    """Count exactly on the meta device (transformers' ``from_config`` inside accelerate's
    ``init_empty_weights``): every parameter, and the nn.Linear kinds with their shapes."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from accelerate import init_empty_weights

    fields = {k: v for k, v in config.items() if not k.startswith("_")}
    hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(hf_config)
    model.tie_weights()  # init_empty_weights re-creates each registered parameter, which unties a tied head
    kinds: dict[tuple[str, int, int, bool, str], int] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            path = re.sub(r"\.\d+\.", ".{}.", name, count=1)
            key = (name.rsplit(".", 1)[-1], module.in_features, module.out_features, module.bias is not None, path)
            kinds[key] = kinds.get(key, 0) + 1
    linears = [Linear(n, i, o, b, count, path) for (n, i, o, b, path), count in kinds.items()]
    if getattr(model.config, "tie_word_embeddings", False):  # the tied head shares the embedding's weight
        linears = [layer for layer in linears if layer.name != OUTPUT_LAYER]
    return sum(p.numel() for p in model.parameters()), linears


def lora_parameters(arch: Architecture, r: int, target_modules: str | Iterable[str]) -> int:
    """Trainable parameters of a LoRA adapter of rank ``r``: r x (inputs + outputs) per adapted nn.Linear."""
    return sum(count * r * (layer.inputs + layer.outputs) for layer, count in adapted(arch, target_modules))


def adapted(arch: Architecture, target_modules: str | Iterable[str]) -> list[tuple[Linear, int]]:
    """The nn.Linear kinds a LoRA adapter wraps, and how many of each, matched as peft matches
    ``target_modules`` on full module names: all-linear is every one but the output layer; another
    string is a regular expression the whole name must match; a list holds names or name suffixes."""
    found = []
    for layer in arch.linears:
        if target_modules == ALL_LINEAR:
            count = 0 if layer.name == OUTPUT_LAYER else layer.count
        elif isinstance(target_modules, str):
            count = sum(1 for path in layer.paths() if re.fullmatch(target_modules, path))
        else:
            keys = list(target_modules)
            count = sum(1 for path in layer.paths() if any(path == k or path.endswith(f".{k}") for k in keys))
        if count:
            found.append((layer, count))
    return found
