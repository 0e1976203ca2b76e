"""Which of TRL's GRPOConfig fields other keys set: the one table from our keys to TRL's.

The ``grpo`` group exposes GRPOConfig's fields one to one (``trl_schema``) except these. The
schema generator leaves them out, a user typing ``grpo.<field>`` is pointed to the key here, and
the trainer's GRPOConfig is filled from them.
"""

from __future__ import annotations

from typing import Any

from grpo_exp.config.schema import OptimizerSettings

# Our ``optimizer`` group's keys and the GRPOConfig field each one sets.
OPTIMIZER_FIELDS: dict[str, str] = {
    "lr": "learning_rate",
    "name": "optim",
    "weight_decay": "weight_decay",
    "warmup_steps": "warmup_steps",
    "scheduler": "lr_scheduler_type",
    "max_grad_norm": "max_grad_norm",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "adam_beta1": "adam_beta1",
    "adam_beta2": "adam_beta2",
}
# GRPOConfig fields the job sets from other groups or from itself, and the key a user writes instead.
JOB_FIELDS: dict[str, str] = {
    "output_dir": "the job folder (hydra.run.dir)",
    "seed": "seed",
    "use_cpu": "device",
    "report_to": "logger.backend",
    "run_name": "logger.name",
    "reward_weights": "reward.parts.<name>.weight",
    "trust_remote_code": "model.trust_remote_code",
    "model_init_kwargs": "model.*",
}
SET_ELSEWHERE: dict[str, str] = {**JOB_FIELDS, **{trl: f"optimizer.{ours}" for ours, trl in OPTIMIZER_FIELDS.items()}}


def optimizer_fields(opt: OptimizerSettings) -> dict[str, Any]:
    """GRPOConfig's fields from the ``optimizer`` group.

    transformers' ``constant`` schedule ignores warm-up; with warm-up asked for, the one that has it."""
    fields = {trl: getattr(opt, ours) for ours, trl in OPTIMIZER_FIELDS.items()}
    if opt.scheduler == "constant" and opt.warmup_steps:
        fields["lr_scheduler_type"] = "constant_with_warmup"
    return fields
