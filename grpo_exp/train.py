"""One GRPO job: model, prompts and rewards from the config into TRL's GRPOTrainer, results on disk.

Writes to the job folder: ``config.yaml`` (the config as run, derived values included),
``metrics.jsonl`` (every logged step), ``summary.json`` (also when the job fails or stops),
``run_info.json`` (provenance, the W&B run id, resumes), ``checkpoint-<step>/`` (sealed, see
``checkpoints``), ``model/`` (final weights or LoRA adapter), and the W&B run (``wandb/`` offline).
A resumed job (``resume.ResumePoint``) continues all of these where its checkpoint left them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import time
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from grpo_exp import batch, checkpoints, data, hardware, models, provenance
from grpo_exp.checkpoints import CheckpointSeal
from grpo_exp.config import ExperimentConfig, OptimizerSettings
from grpo_exp.errors import describe_failure
from grpo_exp.metrics import (
    METRICS_FILE,
    SUMMARY_FILE,
    objective_value,
    read_eval_metrics,
    read_metrics,
    summarize,
    summarize_eval,
    write_summary,
)
from grpo_exp.monitor import HealthMonitor
from grpo_exp.outcome import format_outcome
from grpo_exp.resume import RUN_INFO_FILE, ResumePoint, rewind_metrics
from grpo_exp.stops import JobStopped, StopRequest
from grpo_exp.tracking import RunIdentity, continue_history, resolve_mode, view_hint, wandb_run
from grpo_exp.trl_schema import TrlGrpoFields
from grpo_exp.validate import Checked, validate

if TYPE_CHECKING:
    from grpo_exp.adaptive.stages import Stage

log = logging.getLogger(__name__)


def train(
    settings: ExperimentConfig,
    output_dir: Path,
    identity: RunIdentity,
    checked: Checked | None = None,
    resume_point: ResumePoint | None = None,
) -> float:
    """Run the job (or continue it from ``resume_point``); returns its ``objective`` (NaN when there is none).

    ``checked`` is what validation built (the reward functions); without it the job validates here.
    Raises ``JobStopped`` after a clean stop (a signal), once the checkpoint, model and summary are saved.
    """
    checked = checked or validate(settings)
    started = time.perf_counter()
    primary = hardware.is_primary_process()  # with several processes, one logs and writes files
    output_dir.mkdir(parents=True, exist_ok=True)
    resolved = dataclasses.asdict(settings)  # as run: derived values (e.g. the batch size) included
    monitor = HealthMonitor(settings.monitor)
    outcome: dict[str, Any] = {"status": "failed"}
    run_info = resume_point.run_info if resume_point else {}
    if resume_point:
        outcome["resumed_from"] = resume_point.step
        if resume_point.checkpoint:
            monitor.load_state_dict(resume_point.checkpoint.state.get("monitor", {}))
        if primary:
            rewind_metrics(output_dir / METRICS_FILE, resume_point.step)
        known = run_info.get("wandb", {})
        identity = dataclasses.replace(identity, name=known.get("name", identity.name), group=known.get("group"))
    if primary:
        (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved), encoding="utf-8")
    gpu = settings.device != "cpu" and hardware.cuda_available()
    record = provenance.record(settings.seed, provenance.device_name(gpu))
    logger = settings.logger if primary else dataclasses.replace(settings.logger, backend="none")
    stop = StopRequest()
    hint = None
    info = _run_info(run_info, record, resume_point)
    if primary:
        _write_run_info(output_dir, info)  # before the model loads: a job killed then still has its record
    mode = resolve_mode(logger)
    with wandb_run(
        logger, identity, {**resolved, "provenance": record}, output_dir, info.get("wandb", {}).get("id")
    ) as opening:
        run = None
        try:
            if settings.adaptive.enabled:  # stages of their own group size (adaptive/stages.py)
                from grpo_exp.adaptive.stages import train_in_stages

                run, _, hint = _join_wandb(opening, info, output_dir, mode, None, primary)  # profiles log from step 0

                def build_stage(*args: Any, **kwargs: Any) -> Any:
                    stage_trainer = build_trainer(*args, tracked=run is not None, **kwargs)
                    _follow(stage_trainer, run, 0)
                    return stage_trainer

                with stop.listening():
                    trainer = train_in_stages(settings, output_dir, monitor, run, checked, stop, build_stage)
            else:
                trainer = build_trainer(settings, output_dir, monitor, checked, stop=stop, tracked=opening is not None)
                run, sent, hint = _join_wandb(opening, info, output_dir, mode, resume_point, primary)
                if run is not None:
                    _follow(trainer, run, sent)
                outcome["startup_s"] = round(time.perf_counter() - started, 2)
                checkpoint = resume_point and resume_point.checkpoint
                with stop.listening():
                    trainer.train(resume_from_checkpoint=str(checkpoint.path) if checkpoint else None)
            if settings.save_model:
                trainer.save_model(str(output_dir / "model"))
            outcome["status"] = "completed" if stop.signum is None else "interrupted"
        except BaseException as exc:
            outcome["error"] = describe_failure(exc)
            outcome["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            raise
        finally:
            outcome["wall_time_s"] = round(time.perf_counter() - started, 2)
            summary = _summary(settings, output_dir, monitor, identity, outcome, write=primary)
            run = run or _opened(opening)
            if run is not None:
                run.summary.update({f"summary/{k}": v for k, v in summary.items() if _scalar(v)})
        if stop.signum is not None:
            if run is not None:
                run.mark_preempting()
            latest = checkpoints.latest(output_dir)
            raise JobStopped(stop.exit_code, summary["steps"], str(latest.path) if latest else None, stop.handover())
    if primary:
        print(format_outcome(summary, output_dir, hint), flush=True)
    value = summary.get("objective_value")
    return float(value) if value is not None else float("nan")


def build_trainer(
    settings: ExperimentConfig,
    output_dir: Path,
    monitor: HealthMonitor,
    checked: Checked,
    stop: StopRequest | None = None,
    tracked: bool = False,
    stage: Stage | None = None,
):
    """Everything heavy happens here: torch, transformers and trl load, the model loads.

    With ``tracked``, the trainer logs to the W&B run that ``_follow`` hands it once open.
    ``stage``: one stage of an adaptive run (its prompts and stage-end callbacks; adaptive/stages.py)."""
    import datasets
    from transformers import set_seed
    from transformers.trainer_callback import ProgressCallback

    from grpo_exp.job_trainer import JobTrainer, library_bars_off
    from grpo_exp.trainer_callbacks import FinalEvaluation, JobCallback, SignalProgress, StopCallback

    _quiet_library_noise()
    datasets.disable_progress_bars()  # the prompt set maps in milliseconds; its bars would only clutter
    set_seed(settings.seed)
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    gpu = settings.device != "cpu" and hardware.cuda_available()
    path = models.model_path(settings.model)
    model, tokenizer = models.load(settings.model, path, gpu)
    dataset, held_out = data.load_splits(settings.dataset, tokenizer)
    dataset = stage.prompts if stage else dataset
    with library_bars_off():  # the reference model would repeat the policy's "Loading weights" bar
        trainer = JobTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=checked.rewards,
            args=grpo_config(
                settings,
                output_dir,
                checked.weights,
                gpu,
                report_to_wandb=tracked,
                held_out=0 if held_out is None else len(held_out),
            ),
            train_dataset=dataset,
            eval_dataset=held_out,
            peft_config=models.lora_config(settings.model),
            callbacks=[
                JobCallback(output_dir / METRICS_FILE, monitor, finish=stage is None or stage.final),
                CheckpointSeal(monitor),
                StopCallback(stop or StopRequest()),
                *([FinalEvaluation()] if held_out is not None else []),
                *(stage.callbacks if stage else ()),
            ],
            print_completions=settings.grpo.print_completions,
        )
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(SignalProgress())
    return trainer


def _join_wandb(
    opening: Future | None,
    info: dict[str, Any],
    output_dir: Path,
    mode: str,
    resume_point: ResumePoint | None,
    primary: bool,
) -> tuple[Any, int, str | None]:
    """Wait for the W&B run opening in the background; record its id in ``run_info.json`` and, after
    a resume, join its history to the stopped run's. Returns the run, the last step W&B holds, and
    how to see the run (all None/0 when tracking is off)."""
    if opening is None:
        return None, 0, None
    run = opening.result()
    info["wandb"] = {"id": run.id, "name": run.name, "group": run.group, "project": run.project}
    if primary:
        _write_run_info(output_dir, info)
    sent = 0
    if resume_point:
        sent = continue_history(run, mode, output_dir, resume_point.step, read_metrics(output_dir / METRICS_FILE))
    return run, sent, view_hint(run, mode, output_dir)


def _follow(trainer: Any, run: Any, sent_step: int) -> None:
    """Hand the opened W&B run to the trainer: alerts go to its summary, and after a resume the
    steps W&B holds already (up to ``sent_step``) are not sent twice."""
    from transformers.integrations import WandbCallback

    from grpo_exp.trainer_callbacks import JobCallback, ResumedWandbCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, JobCallback):
            callback.run = run
    if sent_step:
        trainer.remove_callback(WandbCallback)
        trainer.add_callback(ResumedWandbCallback(sent_step))


def _opened(opening: Future | None) -> Any:
    """The W&B run, once its opening has ended; None when tracking is off or it failed to open."""
    return opening.result() if opening is not None and opening.exception() is None else None


def grpo_config(
    settings: ExperimentConfig,
    output_dir: Path,
    weights: list[float],
    gpu: bool,
    report_to_wandb: bool,
    held_out: int = 0,
):
    """TRL's GRPOConfig: every field of the ``grpo`` group as is, plus what other groups and the job set.

    ``held_out``: how many held-out prompts the job evaluates; without any, TRL's evaluation is off."""
    from trl import GRPOConfig

    g, opt = settings.grpo, settings.optimizer
    fields = {f.name: _plain(getattr(g, f.name)) for f in dataclasses.fields(TrlGrpoFields)}
    fields.update(
        output_dir=str(output_dir),
        seed=settings.seed,
        use_cpu=not gpu,
        bf16=gpu if g.bf16 is None else g.bf16,
        report_to=["wandb"] if report_to_wandb else "none",
        disable_tqdm=False if g.disable_tqdm is None else g.disable_tqdm,
        learning_rate=opt.lr,
        optim=opt.name,
        weight_decay=opt.weight_decay,
        warmup_steps=opt.warmup_steps,
        lr_scheduler_type=_scheduler(opt),
        max_grad_norm=opt.max_grad_norm,
        gradient_accumulation_steps=opt.gradient_accumulation_steps,
        adam_beta1=opt.adam_beta1,
        adam_beta2=opt.adam_beta2,
        # grpo.save_steps=0 (the default) means no checkpoints; TRL itself wants a positive interval.
        save_strategy=_plain(g.save_strategy) if g.save_steps else "no",
        save_steps=g.save_steps or 1,
        use_vllm=g.use_vllm and gpu,
        reward_weights=weights,
    )
    if held_out:
        fields.update(per_device_eval_batch_size=batch.eval_batch(settings, held_out))
    else:
        fields.update(eval_strategy="no", eval_on_start=False)
    return GRPOConfig(**fields)


def _plain(value: Any) -> Any:
    """Schema values as TRL expects them: enum members as their strings."""
    return value.value if isinstance(value, enum.Enum) else value


def _scheduler(opt: OptimizerSettings) -> str:
    """transformers' `constant` schedule ignores warm-up; with warm-up asked for, use the one that has it."""
    return "constant_with_warmup" if opt.scheduler == "constant" and opt.warmup_steps else opt.scheduler


def _quiet_library_noise() -> None:
    """Library messages nobody can act on.

    TRL toggles gradient checkpointing around generation through calls transformers 5 deprecates,
    warning on every step."""
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.*deprecated", category=FutureWarning)
    # Resuming a model with tied embeddings: transformers reports the tied lm_head as "missing"
    # from the checkpoint, then ties it; nothing is missing.
    logging.getLogger("transformers.trainer").addFilter(
        lambda record: "checkpoint model loaded: ['lm_head.weight']" not in record.getMessage()
    )


def _summary(
    settings: ExperimentConfig,
    output_dir: Path,
    monitor: HealthMonitor,
    identity: RunIdentity,
    outcome: dict,
    write: bool,
) -> dict[str, Any]:
    rows = read_metrics(output_dir / METRICS_FILE)
    evaluation = summarize_eval(read_eval_metrics(output_dir / METRICS_FILE))
    objective, value = objective_value(evaluation | summarize(rows, settings.monitor.kl_threshold), settings.objective)
    summary = {
        "name": identity.name,
        **outcome,
        **summarize(rows, settings.monitor.kl_threshold),
        **evaluation,
        "objective": objective,  # what the job returned to the sweeper: a held-out one falls back without eval
        "objective_value": value,
        "alerts": [{"kind": a.kind, "step": a.step, "message": a.message} for a in monitor.alerts],
        "overrides": {k: v if _scalar(v) else str(v) for k, v in identity.overrides.items()},
    }
    if write:
        write_summary(output_dir / SUMMARY_FILE, summary)
    return summary


def _run_info(known: dict[str, Any], record: dict[str, Any], resume_point: ResumePoint | None) -> dict[str, Any]:
    """``run_info.json``: the first start's record, the W&B run to continue, and each resume's record."""
    info = dict(known) or {"provenance": record, "resumes": []}
    if resume_point:
        info.setdefault("resumes", []).append({"from_step": resume_point.step, **record})
    return info


def _write_run_info(output_dir: Path, info: dict[str, Any]) -> None:
    (output_dir / RUN_INFO_FILE).write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) or value is None
