"""The stages a job trains in: one for a plain run, several for an adaptive one.

TRL fixes ``num_generations`` when a GRPOTrainer is built, so an adaptive run (``adaptive.enabled``)
trains in stages of ``adaptive.interval`` steps, each a new trainer over the prompts its profile
kept, resumed from the previous stage's checkpoint: the weights, the optimizer and scheduler state,
the step count, ``metrics.jsonl`` and the W&B run all carry on. Before each stage the policy is
profiled on a seeded sample of the training prompts; the choice and its reason go to the console,
``metrics.jsonl`` (``adaptive/*`` rows), ``adaptive_profiles.jsonl`` and the W&B run.

A resumed adaptive run reads its profiles back: stopped inside a stage, it continues that stage
with the group size and prompts recorded for it; stopped at a stage's end, it profiles the
checkpoint's policy for the next one.

Under torchrun or accelerate each stage continues the checkpoint rank 0 found
(``ranks.decided_by_primary``): rank 0 seals a checkpoint once every rank has written its part, so
another rank may look before the seal is there.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from grpo_exp import dataset, models
from grpo_exp.config import checks
from grpo_exp.config.layout import Layout
from grpo_exp.config.schema import ModelSettings, OnCollapse
from grpo_exp.folder import JobFolder
from grpo_exp.spec import JobSpec
from grpo_exp.tracking.metrics import metrics_row
from grpo_exp.tracking.monitor import HealthMonitor
from grpo_exp.tracking.wandb_run import safely
from grpo_exp.training import checkpoints, ranks
from grpo_exp.training.callbacks import RungEnd, StageBounds
from grpo_exp.training.checkpoints import ResumePoint
from grpo_exp.training.collapse.rollback import RollbackStages
from grpo_exp.training.curriculum import CurriculumStages
from grpo_exp.training.group_choice import Choice, choose
from grpo_exp.training.profile import Sampler, sample_rows
from grpo_exp.training.stage import Schedule, Stage
from grpo_exp.training.stops import StopRequest

log = logging.getLogger("grpo_exp.adaptive")
ADAPTER_CONFIG = "adapter_config.json"  # what peft saves beside a LoRA adapter's weights


def schedule_for(
    spec: JobSpec, folder: JobFolder, point: ResumePoint | None, stop: StopRequest, monitor: HealthMonitor
) -> Schedule:
    if spec.settings.adaptive.enabled:
        return AdaptiveStages(spec, folder, point, stop)
    if spec.settings.dataset.curriculum.enabled:
        return CurriculumStages(spec, folder, point, stop)
    if spec.settings.monitor.on_collapse is not OnCollapse.warn:
        return RollbackStages(spec, folder, monitor, point, stop)
    return OneStage(spec, point)


class OneStage:
    """A plain run: the whole run is one stage."""

    def __init__(self, spec: JobSpec, point: ResumePoint | None) -> None:
        rung = spec.settings.sweep.halving.rung_steps  # a rung of successive halving ends the run early
        ends = [RungEnd(rung)] if rung and rung < spec.settings.grpo.max_steps else []
        self.stage = Stage(spec.settings, point.checkpoint if point else None, final=True, callbacks=ends)

    def next_stage(self, previous: Any) -> Stage | None:
        return self.stage if previous is None else None

    def publish(self, run: Any) -> None:
        return None


class AdaptiveStages:
    """Profile, choose a group size, train a stage; again until ``grpo.max_steps``."""

    def __init__(self, spec: JobSpec, folder: JobFolder, point: ResumePoint | None, stop: StopRequest) -> None:
        self.spec, self.folder, self.stop = spec, folder, stop
        self.checkpoint = point.checkpoint if point else None
        self.step = point.step if point else 0
        self.history = [p for p in folder.profiles() if p["step"] <= self.step]  # a resume rewinds them
        last = self.history[-1] if self.history else {}
        self.group = last.get("num_generations", spec.settings.grpo.num_generations)
        self.spent = last.get("profile_completions", 0)
        self.pending: list[tuple[int, dict[str, Any], str]] = []  # profiles for W&B, sent once the run is open
        self.prompts: Any = None  # datasets.Dataset of the training prompts, loaded once

    def next_stage(self, previous: Any) -> Stage | None:
        settings = self.spec.settings
        model = tokenizer = None
        if previous is not None:
            if previous.state.global_step <= self.step and self.stop.signum is None:
                raise RuntimeError(f"adaptive stage from step {self.step} trained no step")  # never loop in place
            self.step = previous.state.global_step
            # rank 0 seals the checkpoint after the save's barrier: another rank could still find it unsealed
            self.checkpoint = ranks.decided_by_primary(lambda: checkpoints.latest(self.folder.path))
            model, tokenizer = previous.model, previous.processing_class
        if self.step >= settings.grpo.max_steps or self.stop.signum is not None:
            return None
        last = self.history[-1] if self.history else None
        starts = last is None or self.step >= self._end(last["step"])  # else: a stop cut this stage short
        if starts and model is None:
            model, tokenizer = self._policy()
        prompts = self._prompts(tokenizer)
        if starts:  # profile the policy for the stage's group size; a stage cut short keeps its recorded one
            last = self._profile(model, tokenizer, prompts)
        del model
        dropped = set(last["dropped_solved"]) | set(last["dropped_unsolved"])
        end = self._end(last["step"])
        return Stage(
            checks.with_group(settings, last["num_generations"], self.spec.layout.processes),
            self.checkpoint,
            final=end >= settings.grpo.max_steps,
            prompts=prompts.select([i for i in range(len(prompts)) if i not in dropped]),
            callbacks=[StageBounds(end)],
        )

    def publish(self, run: Any) -> None:
        if run is not None:
            for step, metrics, reason in self.pending:
                safely(lambda m=metrics, s=step: run.log({**m, "train/global_step": s}))
                safely(lambda m=metrics, r=reason: run.summary.update({**m, "adaptive/reason": r}))
            self.pending.clear()

    def _end(self, start: int) -> int:
        return min(start + self.spec.settings.adaptive.interval, self.spec.settings.grpo.max_steps)

    def _policy(self) -> tuple[Any, Any]:
        """The policy to profile before the first stage this process trains: the base model, or a checkpoint's."""
        settings, layout = self.spec.settings, self.spec.layout
        model, tokenizer = load_policy(settings.model, self.checkpoint.path if self.checkpoint else None, layout)
        if layout.gpu and not settings.model.quantization.load_in_4bit:  # profiled before the trainer places it
            model = model.to(f"cuda:{layout.local_rank}")
        return model, tokenizer

    def _prompts(self, tokenizer: Any) -> Any:
        """The prompts this run trains on (and profiles), never the held-out ones; the same in every stage."""
        if self.prompts is None:
            cfg = self.spec.settings.model
            tokenizer = tokenizer or models.load_tokenizer(cfg, models.model_path(cfg))
            self.prompts = dataset.load_splits(self.spec.settings.dataset, tokenizer, self.spec.shown_tools())[0]
        return self.prompts

    def _profile(self, model: Any, tokenizer: Any, prompts: Any) -> dict[str, Any]:
        """Profile the policy at ``self.step`` and choose the next stage's group size; the recorded profile."""
        spec, a = self.spec, self.spec.settings.adaptive
        sampler = Sampler(
            model,
            tokenizer,
            list(spec.rewards),
            list(spec.weights),
            spec.settings.grpo,
            a.generation_batch,
            spec.tools,
            spec.environments,
        )
        profiled = sample_rows(len(prompts), a.profile_prompts, spec.settings.seed + self.step)
        scores = sampler.scores([prompts[i] for i in profiled], a.samples_per_prompt, self.step)
        rates = [sum(s >= a.solved_threshold for s in row) / len(row) for row in scores]
        stage = checks.with_group(spec.settings, self.group, spec.layout.processes)
        per_step = stage.grpo.per_device_train_batch_size // self.group
        min_kept = max(1, per_step - (len(prompts) - len(profiled)))  # prompts left out of the profile train too
        choice = choose(rates, list(spec.groups), a.target_mixed_share, a.drop_solved, a.drop_unsolved, min_kept)
        self.spent += len(profiled) * a.samples_per_prompt
        entry = self._record(choice, profiled, rates, scores)
        self.group = choice.num_generations
        self.history.append(entry)
        return entry

    def _record(
        self, choice: Choice, profiled: list[int], rates: list[float], scores: list[list[float]]
    ) -> dict[str, Any]:
        """The profile and the choice, with its reason: console, metrics.jsonl, adaptive_profiles.jsonl, W&B."""
        step, previous = self.step, self.group
        metrics = {
            "adaptive/num_generations": choice.num_generations,
            "adaptive/solved_share": sum(rates) / len(rates),
            "adaptive/expected_mixed_share": choice.mixed_share,
            "adaptive/profiled_prompts": len(profiled),
            "adaptive/dropped_prompts": len(choice.dropped_solved) + len(choice.dropped_unsolved),
            "adaptive/profile_completions": self.spent,
        }
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
        if self.spec.layout.primary:
            verb = "keeps" if choice.num_generations == previous else f"changes {previous} ->"
            log.info("adaptive, step %d: num_generations %s %d (%s)", step, verb, choice.num_generations, choice.reason)
            self.folder.append_row(metrics_row(step, metrics))
            self.folder.append_profile(entry)
            self.pending.append((step, metrics, choice.reason))
        return entry


def load_policy(settings: ModelSettings, checkpoint: Path | None, layout: Layout | None = None) -> tuple[Any, Any]:
    """The model as trained up to ``checkpoint`` (the base model without one), and its tokenizer.

    A full fine-tune's checkpoint holds the whole model; a LoRA one, the adapter over the base."""
    base = models.model_path(settings)
    adapter = checkpoint is not None and (checkpoint / ADAPTER_CONFIG).is_file()
    model = models.load_model(settings, str(checkpoint) if checkpoint is not None and not adapter else base, layout)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(checkpoint))
    return model, models.load_tokenizer(settings, base)
