"""An adaptive run: stages of ``adaptive.interval`` steps, each with the group size its profile chose.

TRL fixes ``num_generations`` when a GRPOTrainer is built, so each stage is a new trainer over the
kept prompts, resumed from the previous stage's checkpoint: the weights, the optimizer and scheduler
state, the step count, ``metrics.jsonl`` and the W&B run all carry on (``ignore_data_skip``: the
prompt set changed, so there is no data position to restore). Before each stage the policy is
profiled on a seeded sample of the training prompts; the choice and its reason go to the console,
``metrics.jsonl`` (``adaptive/*`` rows), ``adaptive_profiles.jsonl`` and the W&B run.
"""

from __future__ import annotations

import gc
import json
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from grpo_exp import checkpoints, data, hardware, models
from grpo_exp.adaptive import checks
from grpo_exp.adaptive.choice import Choice, choose
from grpo_exp.adaptive.profile import Sampler
from grpo_exp.config import ExperimentConfig
from grpo_exp.metrics import METRICS_FILE, append_metrics
from grpo_exp.monitor import HealthMonitor
from grpo_exp.stops import StopRequest
from grpo_exp.validate import Checked

log = logging.getLogger("grpo_exp.adaptive")

PROFILES_FILE = "adaptive_profiles.jsonl"


@dataclass
class Stage:
    """What ``train.build_trainer`` needs to build one stage's trainer."""

    prompts: Any  # datasets.Dataset: the kept training prompts
    final: bool
    callbacks: list[TrainerCallback] = field(default_factory=list)


class StageBounds(TrainerCallback):
    """Ends a stage at its last step with a checkpoint, which the next stage resumes from.

    The trainer state restored from the previous stage's checkpoint still names that stage's batch
    size; it is set to this stage's, so each checkpoint records the batch it was trained with.
    """

    def __init__(self, end: int) -> None:
        self.end = end

    def on_train_begin(self, args, state, control, **kwargs):
        state.train_batch_size = args.train_batch_size

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.end:
            control.should_save = True
            control.should_training_stop = True


def train_in_stages(
    settings: ExperimentConfig,
    output_dir: Path,
    monitor: HealthMonitor,
    run: Any,
    checked: Checked,
    stop: StopRequest,
    build_trainer: Callable[..., Any],
):
    """Profile, choose, train a stage; repeat until ``grpo.max_steps``. Returns the last stage's trainer.

    ``build_trainer`` builds one stage's trainer, logging to ``run`` (``train.build_trainer`` with the
    run handed over; passed in, so this module doesn't import train.py back)."""
    _quiet_batch_size_warning()
    a, total = settings.adaptive, settings.grpo.max_steps
    sizes = checks.allowed_groups(settings)
    gpu = settings.device != "cpu" and hardware.cuda_available()
    model, tokenizer = models.load(settings.model, models.model_path(settings.model), gpu)
    if gpu and not settings.model.quantization.load_in_4bit:  # the trainer moves it later; the profile comes first
        model = model.to("cuda")
    prompts = training_prompts(settings, tokenizer)
    step, group, checkpoint, trainer, spent = 0, settings.grpo.num_generations, None, None, 0
    while step < total and stop.signum is None:
        sampler = Sampler(model, tokenizer, checked.rewards, checked.weights, settings.grpo, a.generation_batch)
        profiled = _sample(len(prompts), a.profile_prompts, settings.seed + step)
        scores = sampler.scores([prompts[i] for i in profiled], a.samples_per_prompt, step)
        rates = [sum(s >= a.solved_threshold for s in row) / len(row) for row in scores]
        per_step = checks.with_group(settings, group).grpo.per_device_train_batch_size // group
        min_kept = max(1, per_step - (len(prompts) - len(profiled)))  # prompts left out of the profile train too
        choice = choose(rates, sizes, a.target_mixed_share, a.drop_solved, a.drop_unsolved, min_kept)
        spent += len(profiled) * a.samples_per_prompt
        dropped = {profiled[i] for i in (*choice.dropped_solved, *choice.dropped_unsolved)}
        _record(output_dir, run, step, group, choice, profiled, rates, scores, spent)
        group, end = choice.num_generations, min(step + a.interval, total)
        kept = prompts.select([i for i in range(len(prompts)) if i not in dropped])
        del model, sampler, trainer
        gc.collect()
        trainer = build_trainer(
            checks.with_group(settings, group),
            output_dir,
            monitor,
            checked,
            stop=stop,
            stage=Stage(kept, final=end >= total, callbacks=[StageBounds(end)]),
        )
        trainer.args.ignore_data_skip = True
        trainer.args.eval_on_start = trainer.args.eval_on_start and checkpoint is None  # once, before step 1
        trainer.train(resume_from_checkpoint=str(checkpoint.path) if checkpoint else None)
        if trainer.state.global_step <= step and stop.signum is None:
            raise RuntimeError(f"adaptive stage from step {step} trained no step")  # never loop without progress
        step = trainer.state.global_step
        checkpoint = checkpoints.latest(output_dir)
        model, tokenizer = trainer.model, trainer.processing_class
    return trainer


def training_prompts(settings: ExperimentConfig, tokenizer: Any) -> Any:
    """The prompts this run trains on (and profiles): never the held-out ones."""
    return data.load_splits(settings.dataset, tokenizer)[0]


def _sample(size: int, limit: int | None, seed: int) -> list[int]:
    """Row indices to profile: all of them, or a seeded sample of ``limit``, in order."""
    if limit is None or limit >= size:
        return list(range(size))
    return sorted(random.Random(seed).sample(range(size), limit))


def _record(
    output_dir: Path,
    run: Any,
    step: int,
    previous: int,
    choice: Choice,
    profiled: list[int],
    rates: list[float],
    scores: list[list[float]],
    spent: int,
) -> None:
    """The profile and the choice, with its reason: console, metrics.jsonl, adaptive_profiles.jsonl, W&B."""
    if not hardware.is_primary_process():
        return
    verb = "keeps" if choice.num_generations == previous else f"changes {previous} ->"
    log.info("adaptive, step %d: num_generations %s %d (%s)", step, verb, choice.num_generations, choice.reason)
    metrics = {
        "adaptive/num_generations": choice.num_generations,
        "adaptive/solved_share": sum(rates) / len(rates),
        "adaptive/expected_mixed_share": choice.mixed_share,
        "adaptive/profiled_prompts": len(profiled),
        "adaptive/dropped_prompts": len(choice.dropped_solved) + len(choice.dropped_unsolved),
        "adaptive/profile_completions": spent,
    }
    append_metrics(output_dir / METRICS_FILE, step, metrics)
    entry = {
        "step": step,
        "previous": previous,
        "num_generations": choice.num_generations,
        "changed": choice.num_generations != previous,
        "reason": choice.reason,
        "target_reached": choice.reached,
        **{k.split("/", 1)[1]: v for k, v in metrics.items()},
        "dropped_solved": [profiled[i] for i in choice.dropped_solved],
        "dropped_unsolved": [profiled[i] for i in choice.dropped_unsolved],
        "success_rates": dict(zip(map(str, profiled), rates, strict=True)),
        "mean_reward": sum(map(sum, scores)) / sum(map(len, scores)),
    }
    with (output_dir / PROFILES_FILE).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
    if run is not None:
        run.log({**metrics, "train/global_step": step})
        run.summary.update({**metrics, "adaptive/reason": choice.reason})


def _quiet_batch_size_warning() -> None:
    """transformers warns when a resumed checkpoint's batch size differs from the trainer's: here it's the point."""
    logging.getLogger("transformers.trainer_utils").addFilter(
        lambda record: "do not match the ones in the `trainer_state.json`" not in record.getMessage()
    )
