"""One stage's trainer: TRL's GRPOTrainer with the job's model, prompts, rewards, GRPOConfig and callbacks.

``JobTrainer`` is GRPOTrainer with a quieter console: completions tables only when asked, no model
card, no library progress bars beside the training bar. It overrides public methods only, so a
default run generates, scores and computes its loss with GRPOTrainer's own code.

TRL prints a rich table of sampled completions on every logging step whenever ``log_completions``
is on (hundreds of lines for a short run), though the same table also goes to W&B; and it writes a
hub model card (linking ``https://huggingface.co/None`` when nothing is pushed) into the job folder
with every checkpoint. Neither has a setting of its own, hence this small subclass.

``SamplingJobTrainer`` adds DAPO's dynamic sampling (training/dynamic_sampling.py) and is built only
when ``grpo.dynamic_sampling`` is on (``trainer_class``): it is the one trainer that overrides private
methods of TRL's, all of them in training/trl_private.py.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trl import GRPOConfig, GRPOTrainer

from grpo_exp import dataset, models
from grpo_exp.config import batch
from grpo_exp.config.layout import Layout
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.config.trl_map import optimizer_fields
from grpo_exp.config.trl_schema import TrlGrpoFields
from grpo_exp.folder import JobFolder
from grpo_exp.quiet import library_bars_off
from grpo_exp.spec import JobSpec
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.training import trl_fields
from grpo_exp.training.callbacks import (
    CheckpointSeal,
    FinalEvaluation,
    JobCallback,
    SignalProgress,
    SolvedStop,
    StopCallback,
)
from grpo_exp.training.dynamic_sampling import DynamicSampling
from grpo_exp.training.stops import StopRequest
from grpo_exp.training.trl_private import (
    TrlGeneration,
    completions_table_off,
    load_checkpoint_weights,
    sync_vllm_by_reload,
)

if TYPE_CHECKING:
    from grpo_exp.training.schedule import Stage


class JobTrainer(GRPOTrainer):
    """``print_completions``: also print TRL's completions table to the console (W&B gets it either way);
    ``layout``: the job's, whose adapter dtype holds once TRL has wrapped the model."""

    def __init__(self, *args: Any, layout: Layout, print_completions: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        models.keep_adapter_dtype(self.model, layout)  # before the optimizer exists (it is built in train)
        self.print_completions = print_completions

    def train(self, *args: Any, **kwargs: Any) -> Any:
        with library_bars_off():  # checkpoints would each draw "Writing model shards" bars
            return super().train(*args, **kwargs)

    def load_trained(self, checkpoint: str) -> None:
        """The checkpoint's weights (a full model's or a LoRA adapter's), as ``train(resume_from_checkpoint=...)``
        loads them, for a stage with no step left to train: transformers' epoch loop would train one more
        before it checks ``max_steps``. Its own loader, so every format it resumes from loads alike."""
        load_checkpoint_weights(self, checkpoint)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.print_completions or not self.args.log_completions:
            return super().log(logs, start_time)
        with completions_table_off():
            return super().log(logs, start_time)

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        """A card only for a model that goes to the hub; a local job folder has config.yaml instead."""
        if self.args.push_to_hub:
            super().create_model_card(*args, **kwargs)


class SamplingJobTrainer(DynamicSampling, TrlGeneration, JobTrainer):
    """JobTrainer with DAPO's dynamic sampling (``grpo.dynamic_sampling``)."""


def trainer_class(settings: ExperimentConfig) -> type[JobTrainer]:
    """GRPOTrainer's own generation and scoring, unless ``grpo.dynamic_sampling`` asks for DAPO's."""
    return SamplingJobTrainer if settings.grpo.dynamic_sampling else JobTrainer


def build_trainer(
    spec: JobSpec, stage: Stage, folder: JobFolder, monitor: HealthMonitor, stop: StopRequest, tracked: bool
) -> JobTrainer:
    """Everything heavy happens here: the model loads (the embedded one is built first if need be).

    With ``tracked``, the trainer logs to the W&B run the lifecycle hands it once open."""
    import datasets
    from transformers import set_seed
    from transformers.trainer_callback import ProgressCallback

    settings = stage.settings
    _quiet_library_noise()
    datasets.disable_progress_bars()  # for the whole job: TRL maps the prompts again inside the trainer
    set_seed(settings.seed)
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    path = models.model_path(settings.model)
    tokenizer = models.load_tokenizer(settings.model, path)
    prompts, held_out = dataset.load_splits(settings.dataset, tokenizer, spec.shown_tools())
    args = grpo_config(
        settings,
        spec.layout,
        folder.path,
        list(spec.weights),
        report_to_wandb=tracked,
        held_out=0 if held_out is None else len(held_out),
    )
    args.ignore_data_skip = stage.prompts is not None or stage.new_data  # no data position of theirs to restore
    args.eval_on_start = args.eval_on_start and stage.resume_from is None  # once, before step 1
    _ = args.device  # the distributed state (and DeepSpeed's config) exist before the weights load
    model = models.load_model(settings.model, path, spec.layout)
    with library_bars_off():  # the reference model would repeat the policy's "Loading weights" bar
        trainer = trainer_class(settings)(
            model=model,
            processing_class=tokenizer,
            reward_funcs=list(spec.rewards),
            args=args,
            train_dataset=prompts if stage.prompts is None else stage.prompts,
            eval_dataset=held_out,
            peft_config=models.lora_config(settings.model),
            tools=list(spec.tools) or None,
            environment_factory=spec.environments.factory,  # None without one: TRL's single-turn or tools path
            callbacks=[
                JobCallback(folder, monitor, finish=stage.final, layout=spec.layout),
                CheckpointSeal(monitor),
                StopCallback(stop),
                *([FinalEvaluation()] if held_out is not None else []),
                SolvedStop(folder, settings.monitor, held_out=held_out is not None),
                *stage.callbacks,
            ],
            layout=spec.layout,
            print_completions=settings.grpo.print_completions,
        )
    if isinstance(trainer, SamplingJobTrainer):
        trainer.enable_dynamic_sampling(
            settings.grpo.max_sampling_rounds,
            [r.ceiling for r in spec.rewards],
            keep_solved=settings.grpo.dynamic_sampling_keep_solved,
        )
    if spec.layout.vllm and not spec.layout.gpu:  # vLLM's CPU build: TRL's per-tensor weight sync fails there
        sync_vllm_by_reload(trainer)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(SignalProgress())
    return trainer


def grpo_config(
    settings: ExperimentConfig,
    layout: Layout,
    output_dir: Path,
    weights: list[float],
    report_to_wandb: bool,
    held_out: int = 0,
) -> GRPOConfig:
    """TRL's GRPOConfig: every field of the ``grpo`` group as is, plus what other groups and the job set.

    ``held_out``: how many held-out prompts the job evaluates; without any, TRL's evaluation is off."""
    g = settings.grpo
    fields = {f.name: _plain(getattr(g, f.name)) for f in dataclasses.fields(TrlGrpoFields)}
    fields.update(optimizer_fields(settings.optimizer))
    fields.update(
        output_dir=str(output_dir),
        seed=settings.seed,
        use_cpu=not layout.gpu,
        bf16=layout.bf16,
        fp16=layout.fp16,
        trust_remote_code=settings.model.trust_remote_code,  # the reference model and vLLM load with it too
        report_to=["wandb"] if report_to_wandb else "none",
        disable_tqdm=False if g.disable_tqdm is None else g.disable_tqdm,
        # grpo.save_steps=0 (the default) means no checkpoints; TRL itself wants a positive interval.
        save_strategy=_plain(g.save_strategy) if g.save_steps else "no",
        save_steps=g.save_steps or 1,
        use_vllm=layout.vllm is not None,  # the layout decided: vLLM where it can run (a GPU, or its CPU build)
        reward_weights=weights,
    )
    if layout.reference_dtype != layout.weight_dtype:  # TRL builds the reference model from these
        fields.update(model_init_kwargs={"dtype": layout.reference_dtype})
    if held_out:
        fields.update(per_device_eval_batch_size=batch.eval_batch(settings, held_out, layout.processes))
    else:
        fields.update(eval_strategy="no", eval_on_start=False)
    known = {f.name for f in dataclasses.fields(GRPOConfig) if f.init}
    return GRPOConfig(**trl_fields.accepted(fields, known))


def _plain(value: Any) -> Any:
    """Schema values as TRL expects them: enum members as their strings."""
    return value.value if isinstance(value, enum.Enum) else value


def _quiet_library_noise() -> None:
    """Library messages nobody can act on.

    TRL toggles gradient checkpointing around generation through calls transformers 5 deprecates,
    warning on every step."""
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.*deprecated", category=FutureWarning)
    # With a model instance, TRL says it ignores model_init_kwargs; it does build the reference model from them.
    logging.getLogger("trl.trainer.grpo_trainer").addFilter(
        lambda record: "`model_init_kwargs` will be ignored" not in record.getMessage()
    )
    # Resuming a model with tied embeddings: transformers reports the tied lm_head as "missing"
    # from the checkpoint, then ties it; nothing is missing.
    logging.getLogger("transformers.trainer").addFilter(
        lambda record: "checkpoint model loaded: ['lm_head.weight']" not in record.getMessage()
    )
    # transformers warns when a resumed checkpoint's batch size differs from the trainer's: an adaptive
    # stage with a new group size resumes the previous stage's checkpoint on purpose.
    logging.getLogger("transformers.trainer_utils").addFilter(
        lambda record: "do not match the ones in the `trainer_state.json`" not in record.getMessage()
    )
