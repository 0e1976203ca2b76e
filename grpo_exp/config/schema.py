"""The typed schema every composed config must fit.

Hydra merges the YAML files of conf/ into these dataclasses, so a misspelt key or a value of the
wrong type fails at compose time, naming the key. Defaults and their documentation live in conf/;
the defaults here only make the schema complete. Nothing here imports torch or trl. Fields with
a fixed set of values are enums, so a bad value fails with the list of valid ones.

It is long because it is one place: every group's dataclass together, so Hydra's ConfigStore
registers the whole tree at once and a reader finds any key's type here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from grpo_exp.config import trl_schema
from grpo_exp.config.schema_cache import schema_node
from grpo_exp.config.trl_schema import TrlGrpoFields

# Where the config groups live (their YAML holds the defaults and documents every key).
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PRIMARY_CONFIG = "config"  # conf/config.yaml, which composes the groups
# Summary numbers a job can return to a sweeper as its objective (config key `objective`).
OBJECTIVES = (
    "final_reward",
    "peak_reward",
    "first_reward",
    "final_eval_reward",
    "best_eval_reward",
    "first_eval_reward",
    "final_eval_pass@1",  # held-out pass@1 (reward.task_metrics): a task metric apart from the reward
    "best_eval_pass@1",
    "first_eval_pass@1",
    "final_reward_std",
    "mean_kl",
    "max_kl",
    "final_kl",
)


# Field metadata: the key counts only while a sibling key (the group's registry key, e.g. a dataset's
# `source`) has one of these values; set under another, it would be silently ignored (config/group_keys.py).
USED_WITH = "used_with"


def used_with(selector: str, *choices: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The metadata of a field read only when its sibling ``selector`` is one of ``choices``."""
    return {USED_WITH: (selector, choices)}


GENERATED_TASK = used_with("source", "reasoning_gym")  # grpo_exp/dataset.py: _load_task
LOCAL_FILE = used_with("source", "json")
HUB_DATASET = used_with("source", "hub")


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
    sft_steps: int = 1600
    sft_batch_tokens: int = 512
    sft_lr: float = 3e-3
    sft_warmup_steps: int = 0  # warm-up steps whose learning rate rises linearly to sft_lr before it decays
    format_share: float = 0.1
    answer_share: float = 0.3
    cover_share: float = 0.5
    topic_share: float = 1.0
    correct_share: float = 0.3
    tool_share: float = 0.3
    fact_share: float = 0.5
    writing_chars: int = 150
    writing_share: float = 0.0
    task: str | None = None  # the reasoning-gym task of the `task` scenario (models/warmup_task.py)
    task_settings: dict[str, Any] = field(default_factory=dict)
    held_out_share: float = 0.0  # the task's held-out region, kept out of the warm-up (dataset.eval_fraction)
    error_share: float = 0.0  # share of worked task replies with one step that slips
    habit_steps: int = 0  # after the warm-up, steps on task replies that often skip the working (a habit)
    habit_share: float = 0.0  # share of the habit phase's task replies that give the answer at once
    habit_lr: float = 3e-4  # the habit phase's starting learning rate (decays to 0, like the warm-up's)
    seed: int = 0


class MasterWeights(StrEnum):
    """The dtype full fine-tuning keeps its trained weights and Adam states in (grpo_exp/config/layout.py)."""

    float32 = "float32"
    bfloat16 = "bfloat16"


@dataclass
class ModelSettings:
    source: str = "pretrained"
    name_or_path: str = MISSING
    dtype: str = "auto"
    master_weights: MasterWeights = MasterWeights.float32
    trust_remote_code: bool = False
    attn_implementation: str | None = None
    lora: LoraSettings = field(default_factory=LoraSettings)
    quantization: QuantizationSettings = field(default_factory=QuantizationSettings)
    recipe: TinyRecipe | None = None


@dataclass
class CurriculumSettings:
    """Raise a generated task's difficulty as the model passes its held-out problems (grpo_exp/tasks/curriculum.py)."""

    enabled: bool = False
    metric: str = "eval/pass@1"  # the held-out number that decides (a metrics.jsonl key)
    raise_at: float = 0.7  # raise the level at an evaluation where the metric reaches this
    start_level: int = 0
    max_level: int | None = None  # None: the task's last level


@dataclass
class DatasetSettings:
    source: str = "builtin"
    name: str | None = None
    path: str | None = field(default=None, metadata=LOCAL_FILE)
    subset: str | None = field(default=None, metadata=HUB_DATASET)
    split: str = field(default="train", metadata=HUB_DATASET)
    prompt_field: str = "prompt"
    chat: bool = True
    system_prompt: str | None = None
    max_prompt_tokens: int = 256
    num_samples: int | None = None
    eval_fraction: float = 0.1
    eval_path: str | None = None
    split_seed: int = 0
    reference_field: str | None = None  # the field holding a record's verifiable answer (reward=math); None: none
    reference_marker: str | None = None  # the answer is the text after the field's last marker; None: all of it
    # a reasoning-gym task (source reasoning_gym): grpo_exp/tasks/problems.py
    task: str | None = field(default=None, metadata=GENERATED_TASK)
    task_settings: dict[str, Any] = field(default_factory=dict, metadata=GENERATED_TASK)  # the task's own config
    # held-out problems of a generated task (its share of the space: eval_fraction)
    eval_samples: int = field(default=100, metadata=GENERATED_TASK)
    curriculum: CurriculumSettings = field(default_factory=lambda: CurriculumSettings(), metadata=GENERATED_TASK)


@dataclass
class StartWhen:
    """A metric threshold that brings a reward part in (staged rewards, grpo_exp/rewards/stages.py)."""

    metric: str = MISSING
    at_least: float | None = None
    at_most: float | None = None
    window: int = 10


@dataclass
class RewardPart:
    fn: str = MISSING
    weight: float = 1.0
    start_step: int = 0
    start_when: StartWhen | None = None
    scale_by: str | None = None
    timeout_s: float | None = None  # None: reward.timeout_s
    ceiling: float | None = None  # the part's best score; None: the registry's (a built-in part), else unknown
    params: dict[str, Any] = field(default_factory=dict)


class OnTimeout(StrEnum):
    """What a reward call past its time limit gives: no score for that batch, or a failed job."""

    skip = "skip"
    fail = "fail"


@dataclass
class TaskMetricSettings:
    """Held-out and training task metrics from one part's scores (grpo_exp/rewards/task_metrics.py)."""

    part: str | None = None  # the part whose ceiling means "solved"; None: no task metrics
    k: list[int] = field(default_factory=lambda: [1])  # pass@k for each k (up to the samples per prompt)


@dataclass
class RewardSettings:
    # Typed as Any so `+reward.parts.<name>={fn: ..., weight: ...}` can add a part from the command
    # line (OmegaConf refuses new keys of a dataclass type); to_settings checks each part instead.
    parts: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0  # 0: no limit
    on_timeout: OnTimeout = OnTimeout.skip
    task_metrics: TaskMetricSettings = field(default_factory=TaskMetricSettings)
    max_timeouts_in_a_row: int = 10  # calls of one part past its limit before the run fails
    # The embedded model's warm-up scenario that teaches the replies the parts score (config/reply_format.py);
    # None: any reply form.
    reply_format: str | None = None


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


class HoldFixed(StrEnum):
    """What a sweep over group sizes keeps equal per step (the batch follows the group size)."""

    none = "none"
    prompts = "prompts"
    completions = "completions"


@dataclass(repr=False, eq=False)  # with 180 fields these two would only slow every start-up
class GrpoSettings(TrlGrpoFields):
    """All of TRL's GRPOConfig (generated, trl_schema.py) plus how this project sizes the batch."""

    per_device_train_batch_size: int | None = None  # None: derived from hold_fixed (batch.py)
    hold_fixed: HoldFixed = HoldFixed.prompts
    prompts_per_step: int = 2
    completions_per_step: int = 12
    print_completions: bool = False
    dynamic_sampling: bool = False  # DAPO's: drop groups that scored alike, sample more prompts
    dynamic_sampling_keep_solved: bool = False  # keep alike groups solved at the reward's ceiling
    max_sampling_rounds: int = 4  # extra generation rounds per batch dynamic sampling may take


@dataclass
class AdaptiveSettings:
    """Adaptive group size: profile prompt difficulty at intervals, pick ``num_generations`` per stage."""

    enabled: bool = False
    interval: int = 50
    profile_prompts: int | None = 64
    samples_per_prompt: int = 4
    generation_batch: int = 64
    min_generations: int = 4
    max_generations: int = 16
    target_mixed_share: float = 0.8
    solved_threshold: float = 1.0
    drop_solved: bool = True
    drop_unsolved: bool = True


@dataclass
class ProbeSettings:
    """The reward probe before training (``python -m grpo_exp.plan --probe``): how much it samples."""

    prompts: int | None = 16
    group_sizes: list[int] = field(default_factory=lambda: [4, 8, 16])
    generation_batch: int = 16


class OnCollapse(StrEnum):
    warn = "warn"  # today's behaviour: the alerts, and the run goes on
    rollback = "rollback"  # back to the last healthy checkpoint, with the remedy
    stop = "stop"  # end the run with one line


@dataclass
class RemedySettings:
    """What a rollback changes before it trains again (conf/monitor/default.yaml: monitor.remedy)."""

    lr_factor: float = 0.5
    warmup_steps: int = 10
    num_generations: int | None = None


@dataclass
class MonitorSettings:
    kl_threshold: float = 0.1
    min_reward_std: float = 0.05
    max_zero_std_fraction: float = 0.5
    reward_drop: float = 0.3
    min_improvement: float = 0.05
    max_clipped_ratio: float = 0.5
    min_part_group_std: float = 0.01
    max_logp_difference: float = 0.05
    flat_ok: list[str] = field(default_factory=list)
    window: int = 10
    stop_when_solved: bool = False
    solved_window: int = 20
    on_collapse: OnCollapse = OnCollapse.warn
    max_rollbacks: int = 2
    collapse_drop: float = 0.5
    collapse_window: int = 10
    collapse_kl_multiple: float = 10.0
    healthy_every: int = 10
    remedy: RemedySettings = field(default_factory=RemedySettings)


@dataclass
class AgentSettings:
    """Tools the model may call during its rollouts (grpo_exp/agents/tools.py), or an environment whose
    methods are the tools (grpo_exp/agents/environments.py); none: single-turn replies."""

    tools: list[str] = field(default_factory=list)
    environment: str | None = None  # a registered environment, or path/to/file.py:Class
    environments: dict[str, str] = field(default_factory=dict)  # name -> environment, per row's `environment`
    tool_timeout_s: float = 10.0  # 0: no limit
    tool_reply_max_chars: int = 4000  # 0: no cap


class LoggerBackend(StrEnum):
    wandb = "wandb"
    trackio = "trackio"
    none = "none"


class LoggerMode(StrEnum):
    auto = "auto"
    online = "online"
    offline = "offline"
    disabled = "disabled"


@dataclass
class LoggerSettings:
    backend: LoggerBackend = LoggerBackend.wandb
    backends: list[LoggerBackend] = field(default_factory=list)  # several at once ([wandb, trackio]); empty: backend
    project: str = "grpo-exp"
    entity: str | None = None
    mode: LoggerMode = LoggerMode.auto
    group: str | None = None
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    job_type: str = "train"

    def trackers(self) -> set[str]:
        """The trackers a job logs to: ``backends`` when given, else ``backend`` alone."""
        chosen = {str(b) for b in self.backends} or {str(self.backend)}
        return chosen - {LoggerBackend.none.value}


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


Objective = StrEnum("Objective", {name: name for name in OBJECTIVES})


@dataclass
class HalvingSettings:
    enabled: bool = False
    eta: int = 3
    min_steps: int | None = None  # at most grpo.max_steps // eta; null: grpo.max_steps // eta**2
    rung_steps: int | None = None  # set by the halving sweeper: this rung ends at that step (the schedule stays whole)


@dataclass
class VerdictSettings:
    """How the sweep report and successive halving judge configurations over seeds (report/intervals.py)."""

    confidence: float = 0.95
    resamples: int = 9999
    enough_seeds: int = 4
    interquartile_from: int = 4
    seed: int = 0


@dataclass
class SweepSettings:
    halving: HalvingSettings = field(default_factory=HalvingSettings)
    verdict: VerdictSettings = field(default_factory=VerdictSettings)


@dataclass
class ExperimentConfig:
    model: ModelSettings = field(default_factory=ModelSettings)
    dataset: DatasetSettings = field(default_factory=DatasetSettings)
    reward: RewardSettings = field(default_factory=RewardSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    optimizer: OptimizerSettings = field(default_factory=OptimizerSettings)
    grpo: GrpoSettings = field(default_factory=GrpoSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    logger: LoggerSettings = field(default_factory=LoggerSettings)
    sweep: SweepSettings = field(default_factory=SweepSettings)
    seed: int = 42
    device: Device = Device.auto
    threads: int | None = None
    save_model: bool = True
    objective: Objective = Objective["final_eval_reward"]
    resume: str = "never"


# The files that define the schema: the key of its cached OmegaConf nodes (schema_cache).
SCHEMA_SOURCES = (Path(__file__), Path(trl_schema.__file__))


def register_schema() -> None:
    """Make the schema available to conf/config.yaml as ``schema`` (idempotent)."""
    ConfigStore.instance().store(name="schema", node=schema_node(ExperimentConfig, SCHEMA_SOURCES))
