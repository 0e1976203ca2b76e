"""``python -m grpo_exp.job.evaluate <job folder | checkpoint | model> [key=value ...]``: score trained weights on
held-out prompts without training.

The job's recorded config (``config.yaml``) says what to score with; overrides change what is scored
(``dataset.eval_samples=256``, ``grpo.num_generations_eval=16`` for pass@16, ``+dataset.task_settings.max_digits=3``
for harder problems of the same task). A job folder is scored with its newest whole weights: its ``model/`` or
its latest whole checkpoint, whichever holds the later step (a job stopped, resumed and killed has checkpoints
newer than its ``model/``); a checkpoint or ``model/`` folder with its own. A curriculum job is scored at the
level its weights had reached; ``dataset.curriculum.start_level=<n>`` scores at another, and explicit
``dataset.task_settings`` overrides win over the level's settings.

TRL's own evaluation does the scoring, as in training, so the numbers are the held-out rows' (``eval/reward``,
``eval/rewards/<part>/mean``, ``eval/pass@k``, ...). The command prints one line (weights and step, reward,
pass@k); the whole record, with what was scored, is appended to the job's ``evaluations.jsonl`` (``--json``
prints it too).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grpo_exp.errors import EXIT_USER_ERROR, UserError
from grpo_exp.folder import (
    CHECKPOINT_PREFIX,
    CONFIG_FILE,
    EVALUATIONS_FILE,
    MODEL_DIR,
    SEAL_FILE,
    JobFolder,
    read_yaml,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from grpo_exp.config.schema import DatasetSettings, ExperimentConfig
    from grpo_exp.spec import JobSpec

log = logging.getLogger("grpo_exp.evaluate")

# A job still training rotates its checkpoints (grpo.save_total_limit) and rewrites model/ when it ends: the
# weights chosen may go while they load. Each try takes the newest whole weights again; a job that saves
# faster than a model loads, this many times in a row, is left to finish.
LOAD_TRIES = 3
TASK_SETTINGS = "dataset.task_settings"
GIST_CHARS = 200  # of a parser's message about a damaged config.yaml: enough to find the place, on one line
RESTORE_HINT = "the job's .hydra/config.yaml holds its config as composed, before derived values"


@dataclass(frozen=True)
class Weights:
    """Trained weights to score: their folder and the step they were saved at (None: a ``model/`` saved
    before grpo-exp recorded its step)."""

    path: Path
    step: int | None

    def __str__(self) -> str:
        return f"{self.path.name} (step {self.step if self.step is not None else 'not recorded'})"


@dataclass(frozen=True)
class Scoring:
    """What one evaluation scores, settled before the model loads."""

    folder: JobFolder
    weights: Weights
    settings: ExperimentConfig
    level: int | None  # the curriculum level the problems are drawn at (None: no curriculum)

    def record(self) -> dict[str, Any]:
        data = self.settings.dataset
        drawn = {"curriculum_level": self.level, "task_settings": data.task_settings} if self.level is not None else {}
        return {"weights": str(self.weights.path), "step": self.weights.step, **drawn}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m grpo_exp.job.evaluate",
        description="Score a job's trained weights (or a checkpoint's) on held-out prompts, without training.",
    )
    p.add_argument(
        "target",
        help="a job folder (its newest whole weights: model/ or a checkpoint), or its checkpoint-<step> or model/",
    )
    p.add_argument("overrides", nargs="*", help="key=value changes to the job's config, e.g. dataset.eval_samples=256")
    p.add_argument("--json", action="store_true", help="print the whole record as JSON instead of the summary line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = evaluate(Path(args.target), args.overrides)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(json.dumps(result, indent=2) if args.json else headline(result))
    return 0


def evaluate(target: Path, overrides: list[str]) -> dict[str, Any]:
    """The held-out numbers of the weights at ``target``, with what was scored; also appended to the job's records."""
    from grpo_exp.spec import build_spec

    folder, chosen = job_of(target)
    cfg = recorded(folder, overrides)
    for _ in range(LOAD_TRIES):
        try:
            scoring = plan(folder, chosen, cfg, overrides)
            spec = build_spec(scoring.settings)
        except UserError as exc:
            raise _cut_short(folder, exc) or exc from None
        try:
            loaded = _load(spec, scoring.weights)
            if loaded is not None:
                result = {**scoring.record(), "overrides": overrides, **_score(spec, *loaded)}
                folder.append_evaluation(result)
                return result
        finally:
            spec.close_helpers()
        if chosen is not None:
            raise UserError(
                f"{chosen} was removed or rewritten while it loaded (is the job still training?): score the job "
                f"folder {folder.path} for its newest whole weights"
            )
        log.warning(
            "%s went while it loaded (the job is still training): scoring its newest whole weights",
            scoring.weights.path,
        )
    raise UserError(
        f"{folder.path} saved new weights each time a model loaded ({LOAD_TRIES} tries): the job is still "
        "training: score it once it ends or is stopped (python run.py resume=<job folder> continues it later)"
    )


def job_of(target: Path) -> tuple[JobFolder, Path | None]:
    """The job folder, and the weights folder ``target`` names itself (None: the job's newest whole ones)."""
    target = target.resolve()  # a relative path that vanished would read as a hub model's name
    if (target.name.startswith(CHECKPOINT_PREFIX) or target.name == MODEL_DIR) and (
        target.parent / CONFIG_FILE
    ).is_file():
        return JobFolder(target.parent), target
    folder = JobFolder(target)
    if not folder.config.is_file():
        raise UserError(
            f"{target} is neither a job folder (no {CONFIG_FILE}) nor the {MODEL_DIR}/ or a checkpoint of one"
        )
    return folder, None


def plan(folder: JobFolder, chosen: Path | None, cfg: DictConfig, overrides: list[str]) -> Scoring:
    """The weights to score (``chosen``, else the newest whole ones), and the settings to score them with:
    a curriculum job's problems at the level those weights had reached."""
    from grpo_exp.config.loading import to_settings

    weights = weights_at(chosen) if chosen is not None else newest_weights(folder)
    settings = to_settings(cfg)
    settings = dataclasses.replace(settings, grpo=dataclasses.replace(settings.grpo, beta=0.0))  # no reference model
    level = None
    if settings.dataset.curriculum.enabled:
        level, data = _at_reached_level(folder, weights, settings.dataset, overrides)
        settings = dataclasses.replace(settings, dataset=data)
    return Scoring(folder, weights, settings, level)


def newest_weights(folder: JobFolder) -> Weights:
    """The job's newest whole weights: its ``model/`` or its latest whole checkpoint, by step."""
    from grpo_exp.training import checkpoints

    latest = checkpoints.latest(folder.path)
    newest = Weights(latest.path, latest.step) if latest else None
    why = _model_problem(folder.model) if folder.model.is_dir() else None
    if folder.model.is_dir() and why is None:
        model = Weights(folder.model, _sealed_step(folder.model))
        if newest is None or _later_or_same(model, newest):
            return model
    if newest is not None:
        if why:
            log.warning("%s can't be scored (%s): scoring %s", folder.model, why, newest)
        return newest
    what = f"its {MODEL_DIR}/ can't be scored ({why})" if why else f"no {MODEL_DIR}/"
    raise UserError(
        f"{folder.path} holds no whole weights: {what}, and no whole checkpoint; "
        f"train it again or continue it (python run.py resume={folder.path})"
    )


def weights_at(path: Path) -> Weights:
    """The weights of a folder named on the command line, when whole."""
    from grpo_exp.training import checkpoints

    if not path.is_dir():
        raise UserError(f"{path} does not exist; give the job folder, or one of its checkpoint-<step> folders")
    if path.name == MODEL_DIR:
        if why := _model_problem(path):
            raise UserError(f"{path} can't be scored: {why}; give the job folder to score its latest whole checkpoint")
        return Weights(path, _sealed_step(path))
    if why := checkpoints.problem(path):
        raise UserError(f"{path} can't be scored: {why}; give the job folder to score its newest whole weights")
    return Weights(path, _sealed_step(path))


def _model_problem(path: Path) -> str | None:
    """Why a ``model/`` folder can't be scored, or None when it is whole: by its seal, or for one saved before
    grpo-exp sealed it, by its weights files."""
    from grpo_exp.training import checkpoints

    if (path / SEAL_FILE).is_file():
        return checkpoints.problem(path)
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))
    weights = [f for f in files if f.name != "training_args.bin"]  # the trainer's arguments, not weights
    if not weights:
        return "it holds no weights file (model.safetensors)"
    for file in weights:
        if file.stat().st_size == 0:
            return f"{file.name} is empty"
        if file.suffix == ".safetensors" and not checkpoints.safetensors_whole(file):
            return f"{file.name} is damaged"
    return None


def _sealed_step(path: Path) -> int | None:
    """The step a seal records (None: no seal: a ``model/`` saved before grpo-exp recorded it)."""
    try:
        step = json.loads((path / SEAL_FILE).read_text(encoding="utf-8"))["step"]
    except (OSError, ValueError, KeyError):
        return None
    return step if isinstance(step, int) else None


def _later_or_same(model: Weights, checkpoint: Weights) -> bool:
    """Whether ``model/`` holds weights at least as new as ``checkpoint``: by step, or for a ``model/`` without
    one, by when each was written (its newest file against the checkpoint's seal)."""
    if model.step is not None:
        return model.step >= (checkpoint.step or 0)
    written = max(f.stat().st_mtime for f in model.path.iterdir() if f.is_file())
    return written >= (checkpoint.path / SEAL_FILE).stat().st_mtime


def _at_reached_level(
    folder: JobFolder, weights: Weights, data: DatasetSettings, overrides: list[str]
) -> tuple[int, DatasetSettings]:
    """A curriculum job's dataset as scored: its problems drawn at the level ``weights`` had reached (read from
    metrics.jsonl, as a resume reads it) unless ``dataset.curriculum.start_level`` is given, with the level's
    settings for the keys it sets and the task settings given here winning over them."""
    from grpo_exp.dataset import check_dataset
    from grpo_exp.job.resume import override_key
    from grpo_exp.tasks.curriculum import at_level, level_reached, task_settings

    check_dataset(data)  # the task, its settings and the level given, before the level's settings are drawn
    keys = [override_key(o) for o in overrides]
    level = data.curriculum.start_level
    if "dataset.curriculum.start_level" not in keys:
        level = level_reached(folder.rows(), weights.step, level)
    if any(key == TASK_SETTINGS for key in keys):
        given = set(data.task_settings)
    else:
        given = {key.removeprefix(TASK_SETTINGS + ".").split(".")[0] for key in keys if key.startswith(TASK_SETTINGS)}
    drawn = task_settings(at_level(data, level)) | {k: v for k, v in data.task_settings.items() if k in given}
    curriculum = dataclasses.replace(data.curriculum, enabled=False, start_level=level)
    return level, dataclasses.replace(data, task_settings=drawn, curriculum=curriculum)


def recorded(folder: JobFolder, overrides: list[str]) -> DictConfig:
    """The job's recorded config with ``overrides`` (``+key=value`` adds a key, as with run.py)."""
    import yaml
    from omegaconf import DictConfig, OmegaConf

    from grpo_exp.config.errors import describe_config_error
    from grpo_exp.config.loading import to_settings
    from grpo_exp.config.schema import ExperimentConfig

    path = folder.config
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(ExperimentConfig), OmegaConf.load(path))
        to_settings(cfg)
    except Exception as exc:  # YAML's and OmegaConf's errors span lines; the user needs the file and the gist
        gist = str(exc) if isinstance(exc, UserError) else describe_config_error(exc)
        raise UserError(
            f"{path} can't be read as the job's config ({' '.join(gist.split())[:GIST_CHARS]}): restore it "
            f"({RESTORE_HINT})"
        ) from None
    for override in overrides:
        key, sign, value = override.partition("=")
        if not sign:
            raise UserError(f"{override}: give overrides as key=value")
        name = key.lstrip("+~")
        if "." not in name and isinstance(cfg.get(name), DictConfig):
            raise UserError(
                f"{override}: {name} is a group of settings, and the job's weights were trained with its recorded "
                f"{name}; the eval-only command changes its keys only ({name}.<key>=<value>)"
            )
        try:
            if key.startswith("+"):
                OmegaConf.update(cfg, name, yaml.safe_load(value), force_add=True)
            else:
                cfg.merge_with_dotlist([override])
        except Exception as exc:  # OmegaConf's messages span lines
            raise UserError(describe_config_error(exc)) from None
    cfg.resume = "never"
    return cfg


def _cut_short(folder: JobFolder, exc: UserError) -> UserError | None:
    """A refusal that names the recorded config when it lacks sections a job records (None when it has them all):
    a file cut short reads as the schema's defaults for the rest, which fail in ways that don't name it."""
    from grpo_exp.config.schema import ExperimentConfig

    record = read_yaml(folder.config) or {}
    lacking = [f.name for f in dataclasses.fields(ExperimentConfig) if f.name not in record]
    if not lacking:
        return None
    return UserError(
        f"{folder.config} lacks {', '.join(lacking)} (cut short or edited?) and is refused: {exc}; "
        f"restore it ({RESTORE_HINT})"
    )


def _load(spec: JobSpec, weights: Weights) -> tuple[Any, Any] | None:
    """The model at ``weights`` and its tokenizer; None when the weights went while they loaded (a job still
    training rotated them away)."""
    from grpo_exp.training import checkpoints
    from grpo_exp.training.schedule import load_policy

    path = weights.path
    try:
        return load_policy(spec.settings.model, path, spec.layout)
    except Exception:
        if not path.is_dir() or (_model_problem(path) if path.name == MODEL_DIR else checkpoints.problem(path)):
            return None
        raise


def _score(spec: JobSpec, model: Any, tokenizer: Any) -> dict[str, Any]:
    """TRL's evaluation of the model on the job's held-out prompts, keyed as metrics.jsonl keys them."""
    from trl import GRPOTrainer

    from grpo_exp import dataset
    from grpo_exp.tracking.metrics import metrics_row
    from grpo_exp.training.trainer import grpo_config

    settings = spec.settings
    _, held_out = dataset.load_splits(settings.dataset, tokenizer, spec.shown_tools())
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
    return {"held_out_prompts": len(held_out), "generations_per_prompt": settings.grpo.num_generations_eval, **row}


def headline(result: dict[str, Any]) -> str:
    """The record in one line: the weights and their step, the held-out reward and pass@k, where the rest is."""
    from grpo_exp.tracking.metrics import EVAL_PREFIX, EVAL_REWARD

    weights = Weights(Path(result["weights"]), result["step"])
    passes = sorted(
        (int(k.removeprefix(EVAL_PREFIX + "pass@")), v)
        for k, v in result.items()
        if k.startswith(EVAL_PREFIX + "pass@")
    )
    numbers = [f"reward {result[EVAL_REWARD]:.3f}", *(f"pass@{k} {v:.3f}" for k, v in passes)]
    level = f", level {result['curriculum_level']}" if result.get("curriculum_level") is not None else ""
    where = weights.path.parent / EVALUATIONS_FILE
    return (
        f"{weights}: {', '.join(numbers)} on {result['held_out_prompts']} held-out prompts{level}, "
        f"n={result['generations_per_prompt']} completions each; the full record: {where}"
    )


if __name__ == "__main__":
    sys.exit(main())
