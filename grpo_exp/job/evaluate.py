"""``python -m grpo_exp.job.evaluate <job folder | checkpoint> [key=value ...]``: score trained weights on
held-out prompts without training.

The job's recorded config (``config.yaml``) says what to score with; overrides change what is scored
(``dataset.eval_samples=256``, ``grpo.num_generations_eval=16`` for pass@16, ``+dataset.task_settings.max_digits=3``
for harder problems of the same task). A job folder is scored with its final model (``model/``), else its latest
checkpoint; a checkpoint folder with its own weights. TRL's own evaluation does the scoring, as in training, so
the numbers are the held-out rows' (``eval/reward``, ``eval/rewards/<part>/mean``, ``eval/pass@k``, ...). They
are printed as JSON and appended to the job's ``evaluations.jsonl`` with what was scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from grpo_exp.errors import EXIT_USER_ERROR, UserError
from grpo_exp.folder import CHECKPOINT_PREFIX, CONFIG_FILE, JobFolder


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_exp.job.evaluate",
        description="Score a job's trained weights (or a checkpoint's) on held-out prompts, without training.",
    )
    p.add_argument("target", help="a job folder (its model/, else its latest checkpoint) or a checkpoint-<step> folder")
    p.add_argument("overrides", nargs="*", help="key=value changes to the job's config, e.g. dataset.eval_samples=256")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = evaluate(Path(args.target), args.overrides)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(json.dumps(result, indent=2))
    return 0


def locate(target: Path) -> tuple[JobFolder, Path]:
    """The job folder and the weights to score: a checkpoint's own, else the job's final model or latest checkpoint."""
    from grpo_exp.training import checkpoints

    if target.name.startswith(CHECKPOINT_PREFIX) and (target.parent / CONFIG_FILE).is_file():
        if (why := checkpoints.problem(target)) is not None:
            raise UserError(f"{target} can't be scored: {why}")
        return JobFolder(target.parent), target
    folder = JobFolder(target)
    if not folder.config.is_file():
        raise UserError(f"{target} is neither a job folder (no {CONFIG_FILE}) nor a checkpoint of one")
    if folder.model.is_dir():
        return folder, folder.model
    latest = checkpoints.latest(target)
    if latest is None:
        raise UserError(f"{target} holds no trained weights: no {folder.model.name}/ and no whole checkpoint")
    return folder, latest.path


def evaluate(target: Path, overrides: list[str]) -> dict[str, Any]:
    """The held-out numbers of the weights at ``target``, with what was scored; also appended to the job's records."""
    from grpo_exp.config.loading import to_settings
    from grpo_exp.spec import build_spec

    folder, weights = locate(target)
    cfg = _recorded(folder, overrides)
    settings = to_settings(cfg)
    settings = dataclasses.replace(settings, grpo=dataclasses.replace(settings.grpo, beta=0.0))  # no reference model
    spec = build_spec(settings)
    metrics = _score(spec, weights)
    result = {"weights": str(weights), "overrides": overrides, **metrics}
    folder.append_evaluation(result)
    return result


def _recorded(folder: JobFolder, overrides: list[str]) -> Any:
    """The job's recorded config with ``overrides`` (``+key=value`` adds a key, as with run.py)."""
    import yaml
    from omegaconf import OmegaConf

    from grpo_exp.config.errors import describe_config_error
    from grpo_exp.config.schema import ExperimentConfig

    try:
        cfg = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), OmegaConf.load(folder.config))
        for override in overrides:
            key, sign, value = override.partition("=")
            if not sign:
                raise UserError(f"{override}: give overrides as key=value")
            if key.startswith("+"):
                OmegaConf.update(cfg, key[1:], yaml.safe_load(value), force_add=True)
            else:
                cfg.merge_with_dotlist([override])
    except UserError:
        raise
    except Exception as exc:  # OmegaConf's messages span lines
        raise UserError(describe_config_error(exc)) from None
    cfg.resume = "never"
    return cfg


def _score(spec: Any, weights: Path) -> dict[str, float]:
    """TRL's evaluation of the weights on the job's held-out prompts, keyed as metrics.jsonl keys them."""
    from trl import GRPOTrainer

    from grpo_exp import dataset
    from grpo_exp.tracking.metrics import metrics_row
    from grpo_exp.training.schedule import load_policy
    from grpo_exp.training.trainer import grpo_config

    settings = spec.settings
    model, tokenizer = load_policy(settings.model, weights, spec.layout)
    _, held_out = dataset.load_splits(settings.dataset, tokenizer, spec.tools + spec.environments.tools())
    if held_out is None:
        raise UserError("the job holds no prompts out: give dataset.eval_fraction above 0 (or a dataset.eval_path)")
    with tempfile.TemporaryDirectory(prefix="grpo-exp-eval-") as scratch:
        args = grpo_config(settings, spec.layout, Path(scratch), list(spec.weights), False, held_out=len(held_out))
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=list(spec.rewards),
            args=args,
            train_dataset=held_out,
            eval_dataset=held_out,
            tools=list(spec.tools) or None,
            environment_factory=spec.environments.factory,
        )
        logs = trainer.evaluate()
    row = metrics_row(0, logs)
    row.pop("step")
    return {"held_out_prompts": len(held_out), **row}


if __name__ == "__main__":
    sys.exit(main())
