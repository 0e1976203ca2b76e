"""Models by ``model.source``: each source turns the config into a ``from_pretrained`` path.

The embedded tiny model and hub models (Qwen, Mistral, CodeLlama) then load the same way, with the
same dtype, 4-bit and LoRA handling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grpo_exp.config import ModelSettings
from grpo_exp.errors import UserError
from grpo_exp.registry import Registry

if TYPE_CHECKING:
    from peft import LoraConfig

log = logging.getLogger(__name__)

SOURCES: Registry[Callable[[ModelSettings], str]] = Registry("model.source")


@SOURCES.register("tiny")
def _tiny(cfg: ModelSettings) -> str:
    from grpo_exp.models.tiny import ensure_built

    if cfg.recipe is None:
        raise UserError("model.source=tiny needs a model.recipe block (see conf/model/tiny.yaml)")
    return str(ensure_built(cfg.recipe))


@SOURCES.register("pretrained")
def _pretrained(cfg: ModelSettings) -> str:
    return cfg.name_or_path


def model_path(cfg: ModelSettings) -> str:
    """The ``from_pretrained`` path (hub id or folder) for this model config."""
    return SOURCES.get(cfg.source)(cfg)


def load(cfg: ModelSettings, path: str, use_gpu: bool) -> tuple[Any, Any]:
    """Model and tokenizer from ``path`` with the configured dtype and 4-bit quantization."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    if cfg.dtype != "auto":
        kwargs["dtype"] = getattr(torch, cfg.dtype)
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    if cfg.quantization.load_in_4bit:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=cfg.quantization.quant_type,
            bnb_4bit_compute_dtype=getattr(torch, cfg.quantization.compute_dtype),
            bnb_4bit_use_double_quant=cfg.quantization.double_quant,
        )
    if not use_gpu and kwargs.get("dtype") in (torch.bfloat16, torch.float16):
        log.warning("model.dtype=%s on CPU is slow and imprecise; loading float32", cfg.dtype)
        kwargs["dtype"] = torch.float32
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    if cfg.quantization.load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    return model, tokenizer


def lora_config(cfg: ModelSettings) -> LoraConfig | None:
    """The peft config GRPOTrainer wraps the model with, when LoRA is on."""
    if not cfg.lora.enabled:
        return None
    from peft import LoraConfig

    targets = cfg.lora.target_modules
    return LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        task_type="CAUSAL_LM",
    )
