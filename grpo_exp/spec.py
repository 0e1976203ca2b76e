"""The job spec: what one job runs with, settled before anything heavy loads.

A composed config becomes a spec in five steps, each once:

1. check: the schema's types (``loading``), then the ranges and the rules between keys (``checks``),
   and keys the chosen group does not read (``group_keys``);
2. derive: the batch that holds whole groups on the launch's processes;
3. resolve: the model source (path and cache key), the data's columns;
4. build: the reward functions, whose columns are checked against the data's, and the agent's tools
   and environments; then whether the embedded model can give the replies the reward scores
   (``reply_format``), after the checks of the keys the user typed, so that those are named first;
5. decide: the layout (device, precision, processes), from torch, and what it rules out. Last, so
   a bad config is refused before torch is imported; ``check_config`` (``--cfg job``) stops before it.

Everything after it (the trainer, the lifecycle, W&B, the summary) reads the spec and checks
nothing again. The spec is frozen; its ``settings`` are the derived config as run (the batch size
filled in) and are not to be changed.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_exp import dataset, hardware, models
from grpo_exp.agents.env_runner import EnvironmentRunner, EnvironmentSet, build_environments
from grpo_exp.agents.runner import ToolRunner, Toolset, build_tools
from grpo_exp.agents.tools import Tool
from grpo_exp.config import batch, checks, layout
from grpo_exp.config.group_keys import check_group_keys
from grpo_exp.config.layout import Layout
from grpo_exp.config.reply_format import check_reply_format
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.errors import UserError
from grpo_exp.models import ModelSource
from grpo_exp.rewards.agent import ENVIRONMENT_PART
from grpo_exp.rewards.compose import WeightedReward, build_rewards, required_columns
from grpo_exp.tracking import held_out

NO_ENVIRONMENT = EnvironmentSet()  # a job whose agent acts in no environment (or has no agent)


@dataclass(frozen=True)
class JobSpec:
    settings: ExperimentConfig
    layout: Layout
    model: ModelSource
    rewards: tuple[WeightedReward, ...]
    weights: tuple[float, ...]
    groups: tuple[int, ...]  # the group sizes an adaptive run may choose from (empty when it is off)
    tools: tuple[Tool, ...]  # what the model may call during its rollouts, run in tool_runner (empty: no agent)
    tool_runner: ToolRunner | None  # the helper process the tools' calls run in; closed when the job ends
    warnings: tuple[str, ...]  # the article's advice that does not stop a run
    environments: EnvironmentSet = NO_ENVIRONMENT  # TRL's environment_factory and the process it runs in

    def shown_tools(self) -> tuple[Tool, ...]:
        """Every tool the model is shown in its prompts: the stateless tools, then each environment's
        methods (TRL renders them all into the chat template, so they count in a prompt's length)."""
        return self.tools + self.environments.tools()

    def close_helpers(self) -> None:
        """End the helper processes the tools and environments run in (with all they started)."""
        _close(self.tool_runner, self.environments.runner)


def build_spec(settings: ExperimentConfig) -> JobSpec:
    """Check, derive, resolve and build; a one-line ``UserError`` for the first problem."""
    built = _build_config(settings)
    where = layout.decide(settings)  # last: the config is sound before torch is asked about the machine
    warnings = (*built.warnings, *where.notes, *layout.check_hardware(settings, where))
    return JobSpec(
        settings,
        where,
        built.model,
        built.rewards,
        built.weights,
        built.groups,
        built.toolset.tools,
        built.toolset.runner,
        warnings,
        built.environments,
    )


def check_config(settings: ExperimentConfig) -> None:
    """Every check of ``build_spec`` that needs no torch (steps 1-4): what ``--cfg job`` runs, so it
    refuses what a run would refuse without asking the machine anything."""
    built = _build_config(settings)
    _close(built.toolset.runner, built.environments.runner)


def _close(*runners: ToolRunner | EnvironmentRunner | None) -> None:
    for runner in runners:
        if runner is not None:
            runner.close()


@dataclass(frozen=True)
class _Built:
    """Steps 1-4 of the spec: what the config alone decides."""

    groups: tuple[int, ...]
    warnings: tuple[str, ...]
    model: ModelSource
    toolset: Toolset
    rewards: tuple[WeightedReward, ...]
    weights: tuple[float, ...]
    environments: EnvironmentSet


def _build_config(settings: ExperimentConfig) -> _Built:
    checks.check(settings)
    held_out.check_curriculum_metric(settings)
    check_group_keys(settings)
    processes = hardware.world_size()
    groups = checks.check_groups(settings, processes)  # before the batch: an adaptive run's sizes say more
    warnings = batch.size_batch(settings, processes)
    checks.check_model(settings)
    model = models.resolve(settings.model)
    columns = dataset.check_dataset(settings.dataset)
    toolset = build_tools(settings.agent)
    rewards, weights = build_rewards(settings.reward, toolset.runner.take_metrics if toolset.runner else None)
    if toolset.tools and not settings.dataset.chat:
        raise UserError("agent.tools need chat prompts (TRL renders the tools into them): set dataset.chat=true")
    environments = build_environments(settings.agent)
    warnings += check_environment_use(environments, rewards, columns, settings)
    if columns is not None:
        _check_columns(rewards, columns, dataset.source_name(settings.dataset))
    check_reply_format(settings)  # after the typed keys' own checks: those name what the user wrote
    return _Built(groups, tuple(warnings), model, toolset, tuple(rewards), tuple(weights), environments)


def check_environment_use(
    environments: EnvironmentSet, rewards: list[WeightedReward], columns: set[str] | None, settings: ExperimentConfig
) -> list[str]:
    """An environment's needs the rest of the config must meet; warnings for what only wastes it."""
    reads_state = [r for r in rewards if r.spec == ENVIRONMENT_PART]
    if not environments.classes:
        if reads_state:
            raise UserError(
                f"reward part {reads_state[0].__name__!r} ({ENVIRONMENT_PART}) reads an environment's get_reward, "
                "but the job has none: set agent.environment (e.g. agent=support_env)"
            )
        return []
    if not settings.dataset.chat:
        raise UserError(
            "an agent.environment needs chat prompts (TRL renders its tools into them): set dataset.chat=true"
        )
    if settings.agent.environments and columns is not None and "environment" not in columns:
        raise UserError(
            "agent.environments picks each row's environment by its `environment` column, which "
            f"{dataset.source_name(settings.dataset)} lacks: add it, or give one agent.environment"
        )
    lacking = [c.__name__ for c in environments.classes if not callable(getattr(c, "get_reward", None))]
    if reads_state and len(lacking) == len(environments.classes):
        raise UserError(
            f"reward part {reads_state[0].__name__!r} ({ENVIRONMENT_PART}) reads get_reward, which "
            f"{', '.join(lacking)} lacks: add def get_reward(self) -> float, or drop the part"
        )
    owners = [c.__name__ for c in environments.classes if c.__name__ not in lacking]
    if owners and not reads_state:
        return [
            f"{', '.join(owners)} defines get_reward, but no reward part reads it: add a part with "
            f"fn: {ENVIRONMENT_PART} to reward.parts"
        ]
    return []


def _check_columns(rewards: list[WeightedReward], columns: set[str], source: str) -> None:
    """A reward naming a column the data lacks would fail only at its first call, after the model loads."""
    for reward in rewards:
        lacking = sorted(required_columns(reward) - columns)
        if lacking:
            raise UserError(
                f"reward part {reward.__name__!r} ({reward.spec}) needs the column {lacking[0]!r}, which {source} "
                f"lacks; its columns: {', '.join(sorted(columns))}"
            )
