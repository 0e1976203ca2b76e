"""The typed schema every composed config must fit.

Hydra merges the YAML files of conf/ into these dataclasses, so a misspelt key or a value of the
wrong type fails at compose time, naming the key. Defaults and their documentation live in conf/;
the defaults here only make the schema complete. Nothing here imports torch or trl.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from grpo_exp import hardware
from grpo_exp.errors import UserError, describe_config_error

# Slips users copy from the article (and other GRPO write-ups) mapped to our keys.
KEY_ALIASES: dict[str, str] = {
    "num_generation": "num_generations",
    "kl_coef": "beta",
    "learning_rate": "lr",
}


@dataclass
class LoraSettings:
    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: Any = "all-linear"


@dataclass
class QuantizationSettings:
    load_in_4bit: bool = False
    quant_type: str = "nf4"
    compute_dtype: str = "bfloat16"
    double_quant: bool = True


@dataclass
class TinyRecipe:
    """How the embedded model is built; its hash keys the cache, so any change rebuilds it."""

    vocab_size: int = 4000
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 320
    corpus_size: int = 2000
    scenarios: dict[str, float] = field(default_factory=lambda: {"customer_service": 0.75, "content_creation": 0.25})
    sft_steps: int = 300
    sft_batch_tokens: int = 2048
    sft_lr: float = 3e-3
    format_share: float = 0.1
    correct_share: float = 0.3
    seed: int = 0


@dataclass
class ModelSettings:
    source: str = "pretrained"
    name_or_path: str = MISSING
    dtype: str = "auto"
    trust_remote_code: bool = False
    attn_implementation: str | None = None
    lora: LoraSettings = field(default_factory=LoraSettings)
    quantization: QuantizationSettings = field(default_factory=QuantizationSettings)
    recipe: TinyRecipe | None = None


@dataclass
class DatasetSettings:
    source: str = "builtin"
    name: str | None = None
    path: str | None = None
    subset: str | None = None
    split: str = "train"
    prompt_field: str = "prompt"
    chat: bool = True
    system_prompt: str | None = None
    max_prompt_tokens: int = 256
    num_samples: int | None = None


@dataclass
class RewardPart:
    fn: str = MISSING
    weight: float = 1.0
    start_step: int = 0
    scale_by: str | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardSettings:
    # Typed as Any so `+reward.parts.<name>={fn: ..., weight: ...}` can add a part from the command
    # line (OmegaConf refuses new keys of a dataclass type); to_settings checks each part instead.
    parts: dict[str, Any] = field(default_factory=dict)


@dataclass
class OptimizerSettings:
    name: str = "adamw_torch"
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_steps: float = 0.0
    scheduler: str = "constant"
    max_grad_norm: float = 1.0
    gradient_accumulation_steps: int = 1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999


@dataclass
class GrpoSettings:
    num_generations: int = 6
    per_device_train_batch_size: int = 12
    hold_fixed: str = "none"
    prompts_per_step: int = 2
    completions_per_step: int = 12
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    beta: float = 0.04
    epsilon: float = 0.2
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    num_iterations: int = 1
    num_train_epochs: float = 1.0
    max_steps: int = -1
    logging_steps: int = 1
    save_steps: int = 0
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    mask_truncated_completions: bool = False
    log_completions: bool = False
    gradient_checkpointing: bool = True


@dataclass
class MonitorSettings:
    kl_threshold: float = 0.1
    min_reward_std: float = 0.05
    max_zero_std_fraction: float = 0.5
    reward_drop: float = 0.3
    min_improvement: float = 0.05
    max_clipped_ratio: float = 0.5
    min_part_group_std: float = 0.01
    window: int = 10


@dataclass
class LoggerSettings:
    backend: str = "wandb"
    project: str = "grpo-exp"
    entity: str | None = None
    mode: str = "auto"
    group: str | None = None
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    job_type: str = "train"


@dataclass
class ExperimentConfig:
    model: ModelSettings = field(default_factory=ModelSettings)
    dataset: DatasetSettings = field(default_factory=DatasetSettings)
    reward: RewardSettings = field(default_factory=RewardSettings)
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    grpo: GrpoSettings = field(default_factory=GrpoSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    logger: LoggerSettings = field(default_factory=LoggerSettings)
    seed: int = 42
    device: str = "auto"
    threads: int | None = None
    save_model: bool = True
    objective: str = "final_reward"


def register_schema() -> None:
    """Make the schema available to conf/config.yaml as ``schema`` (idempotent)."""
    ConfigStore.instance().store(name="schema", node=ExperimentConfig)


def to_settings(cfg: DictConfig) -> ExperimentConfig:
    """The composed config as typed dataclasses, interpolations resolved; a UserError if it can't be."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise UserError(f"{missing[0]} is required: add {missing[0]}=<value>")
    try:
        settings = OmegaConf.to_object(cfg)
        assert isinstance(settings, ExperimentConfig)
    except Exception as exc:  # OmegaConf's errors name the key; make them one line
        raise UserError(describe_config_error(exc)) from None
    settings.reward.parts = {name: _reward_part(name, node) for name, node in cfg.reward.parts.items()}
    derive_batch_size(settings)
    return settings


def derive_batch_size(settings: ExperimentConfig) -> None:
    """Set the per-device batch from ``grpo.hold_fixed`` so group sizes compare at equal budgets.

    ``prompts``: every job sees ``prompts_per_step`` prompts per step, whatever its group size;
    ``completions``: every job generates ``completions_per_step`` completions per step.
    """
    grpo, accumulation = settings.grpo, settings.optimizer.gradient_accumulation_steps
    if grpo.hold_fixed == "none":
        return
    group = grpo.num_generations
    if grpo.hold_fixed == "prompts":
        completions = grpo.prompts_per_step * group
    elif grpo.hold_fixed == "completions":
        completions = grpo.completions_per_step
        if completions % group:
            fits = [g for g in range(2, completions + 1) if completions % g == 0]
            raise UserError(
                f"grpo.hold_fixed=completions: {completions} completions per step don't split into groups of "
                f"grpo.num_generations={group}; group sizes that fit: {', '.join(map(str, fits))}"
            )
    else:
        raise UserError(f"grpo.hold_fixed={grpo.hold_fixed} is not one of none, prompts, completions")
    share = accumulation * hardware.world_size()
    if completions % share:
        raise UserError(
            f"grpo.hold_fixed={grpo.hold_fixed}: {completions} completions per step don't split evenly over "
            f"optimizer.gradient_accumulation_steps x processes = {share}"
        )
    grpo.per_device_train_batch_size = completions // share


def _reward_part(name: str, node: Any) -> RewardPart:
    try:
        part = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RewardPart), node))
    except Exception as exc:
        keys = ", ".join(f.name for f in fields(RewardPart))
        raise UserError(f"reward.parts.{name}: {describe_config_error(exc)} (a part has: {keys})") from None
    assert isinstance(part, RewardPart)
    return part
