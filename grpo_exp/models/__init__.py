"""Models by ``model.source``: each source turns the config into a ``from_pretrained`` path.

The embedded tiny model and hub models (Qwen, Mistral, CodeLlama) then load the same way, with the
same dtype, 4-bit and LoRA handling.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from grpo_exp.config.attention import keep_cudnn_attention_off
from grpo_exp.config.schema import ModelSettings
from grpo_exp.errors import UserError
from grpo_exp.registry import Registry

if TYPE_CHECKING:
    from peft import LoraConfig

    from grpo_exp.config.layout import Layout


@dataclass(frozen=True)
class ModelSource:
    """Which weights a job starts from: the ``from_pretrained`` path, and what pins its contents.

    ``key``: the embedded model's cache key (a hash of its recipe and corpus); a hub model's
    revision is only known once it loads (run_info.json records it then)."""

    source: str
    path: str
    key: str | None = None


class Source(Protocol):
    """A ``model.source``: resolves the config to a ``ModelSource`` cheaply, and makes it loadable."""

    def resolve(self, model: ModelSettings) -> ModelSource: ...

    def prepare(self, model: ModelSettings) -> str: ...

    def tokenizer(self, model: ModelSettings, path: str) -> Any: ...


SOURCES: Registry[Source] = Registry("model.source")


class _Tiny:
    """The embedded model, built once per recipe into the cache."""

    def resolve(self, model: ModelSettings) -> ModelSource:
        from grpo_exp.models import tiny, warmup

        recipe = model.recipe
        if recipe is None:
            raise UserError("model.source=tiny needs a model.recipe block (see conf/model/tiny.yaml)")
        unknown = sorted(set(recipe.scenarios) - set(warmup.scenarios()))
        if unknown:
            raise UserError(f"model.recipe.scenarios: unknown {unknown}; known: {', '.join(warmup.scenarios())}")
        if not any(recipe.scenarios.values()):
            raise UserError("model.recipe.scenarios gives every scenario a share of 0: nothing to warm up on")
        if (recipe.scenarios.get("task") or recipe.habit_steps) and not recipe.task:
            raise UserError(
                "the tiny model's task replies need a reasoning-gym task: add dataset=reasoning_gym "
                "dataset.task=<name> (model=tiny_arithmetic takes the dataset's), or set model.recipe.task"
            )
        key = tiny.recipe_key(recipe)
        return ModelSource("tiny", str(tiny.cache_path(key)), key)

    def prepare(self, model: ModelSettings) -> str:
        from grpo_exp.models.tiny import ensure_built

        assert model.recipe is not None  # resolve() said so in the preflight
        return str(ensure_built(model.recipe))

    def tokenizer(self, model: ModelSettings, path: str) -> Any:
        """The tokenizer exactly as built: AutoTokenizer would take the Qwen2 class from the model's config
        and put Qwen2's pre-tokenizer in place of the one the warm-up trained with."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(path)


class _Pretrained:
    """A hub id or a local folder, loaded as it is."""

    def resolve(self, model: ModelSettings) -> ModelSource:
        return ModelSource("pretrained", model.name_or_path)

    def prepare(self, model: ModelSettings) -> str:
        return model.name_or_path

    def tokenizer(self, model: ModelSettings, path: str) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, trust_remote_code=model.trust_remote_code)


SOURCES.register("tiny")(_Tiny())
SOURCES.register("pretrained")(_Pretrained())


def resolve(model: ModelSettings) -> ModelSource:
    """The model a job would start from, checked, without building or loading anything."""
    return SOURCES.get(model.source).resolve(model)


def model_path(model: ModelSettings) -> str:
    """The ``from_pretrained`` path (hub id or folder) for this model config, built first if need be."""
    return SOURCES.get(model.source).prepare(model)


def load(model: ModelSettings, path: str, layout: Layout | None = None) -> tuple[Any, Any]:
    """Model and tokenizer from ``path``, as ``layout`` says (None: float32 on the CPU)."""
    return load_model(model, path, layout), load_tokenizer(model, path)


def load_model(model: ModelSettings, path: str, layout: Layout | None = None) -> Any:
    """The model at ``path`` in the layout's weight dtype, 4-bit when configured.

    Loaded after the job's distributed state exists (``trainer.build_trainer``), so DeepSpeed's
    ZeRO-3 init and FSDP's rank-0 loading apply. A 4-bit model is placed on this process's own GPU
    (bitsandbytes would put every rank's on the first); any other model stays on the CPU for the
    trainer to place."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = layout.weight_dtype if layout is not None else "float32"
    kwargs: dict[str, Any] = {"trust_remote_code": model.trust_remote_code, "dtype": getattr(torch, dtype)}
    # The layout's choice (model.attn_implementation, or eager for an embedded model on a GPU in 16 bits);
    # TRL builds the reference model with the policy's.
    attention = layout.attention if layout is not None else model.attn_implementation
    if attention:
        kwargs["attn_implementation"] = attention
    if layout is not None:
        keep_cudnn_attention_off(layout.gpu, attention)
    if model.quantization.load_in_4bit:
        from transformers import BitsAndBytesConfig

        assert layout is not None and layout.gpu  # the layout check refused 4-bit without a GPU
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=model.quantization.quant_type,
            bnb_4bit_compute_dtype=getattr(torch, layout.precision.dtype),
            bnb_4bit_use_double_quant=model.quantization.double_quant,
        )
        kwargs["device_map"] = {"": layout.local_rank}
    # A 4-bit base is not passed through peft's prepare_model_for_kbit_training: its float32 upcast of
    # the embeddings, norms and lm_head costs ~2 GiB on a 7B model, and TRL's own QLoRA does without
    # it (TRL freezes the base and enables input gradients for checkpointing itself).
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def keep_adapter_dtype(model: Any, layout: Layout) -> int:
    """Give the trainable (adapter) weights the dtype the layout chose for them, after TRL has built
    the peft model; returns how many tensors changed.

    TRL 1.16 casts a 4-bit model's adapter to bf16; under fp16 autocast the grad scaler can't
    unscale bf16 gradients on CUDA (TRL issue 4901), so there they go back to float32
    (``config.layout``'s docstring)."""
    import torch

    if layout.adapter_dtype is None:
        return 0
    dtype = getattr(torch, layout.adapter_dtype)
    changed = 0
    for param in model.parameters():
        if param.requires_grad and param.dtype != dtype:
            param.data = param.data.to(dtype)
            changed += 1
    return changed


def load_tokenizer(model: ModelSettings, path: str) -> Any:
    """The tokenizer at ``path``, with a padding token (the end-of-sequence one when it has none)."""
    tokenizer = SOURCES.get(model.source).tokenizer(model, path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def lora_config(model: ModelSettings) -> LoraConfig | None:
    """The peft config GRPOTrainer wraps the model with, when LoRA is on."""
    if not model.lora.enabled:
        return None
    from peft import LoraConfig

    targets = model.lora.target_modules
    return LoraConfig(
        r=model.lora.r,
        lora_alpha=model.lora.alpha,
        lora_dropout=model.lora.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )
