"""The saved W&B view of a sweep, built from ``wandb-workspaces`` objects (the ``dashboard`` extra).

One section per swept key with reward, reward std and KL averaged over the runs sharing a value
(min-max band), so group sizes and learning rates compare at a glance; when seeds repeat, first a
section with one line per configuration (its seeds' mean and min-max band, grouped by the runs'
``configuration`` config key). Then the reward parts, the held-out evaluation when the runs have one,
and the outcome: a parallel-coordinates panel from the swept values to the final (and held-out)
reward, a run comparer, the report's interval table (logged by the sweep's ``sweep-report`` run), and
the runs table pinned to them, each run's configuration and seed first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpo_exp.dashboard.sweep import EVAL_REWARD, TRAIN_PREFIX, SweepFacts
from grpo_exp.errors import UserError
from grpo_exp.tracking.sweep_table import INTERVALS_KEY
from grpo_exp.tracking.wandb_run import CONFIGURATION_KEY, SEED_KEY

if TYPE_CHECKING:
    import wandb_workspaces.workspaces as ws

EXTRA = "dashboard"
# The training curves compared per swept value, as (TRL log key, panel title).
COMPARED_CURVES = (("reward", "reward"), ("reward_std", "reward std"), ("kl", "KL"))
# TRL's step, which W&B's own `_step` drifts from once a run is resumed.
X_AXIS = "train/global_step"
GROUP_AGG, GROUP_RANGE = "mean", "minmax"
# Run-summary numbers from summary.json (training/lifecycle.py copies them as summary/<key>) for the outcome panels.
FINAL_REWARD = "summary/final_reward"
TABLE_SUMMARY = (FINAL_REWARD, "summary/peak_reward", "summary/final_kl", "summary/steps")
# The entity in a specification written before anyone said which (the saved view takes the login's).
UNKNOWN_ENTITY = "<your W&B entity>"


def libraries() -> tuple[Any, Any, Any]:
    """``wandb_workspaces``' workspaces, reports and expr modules; a UserError naming the extra without them."""
    try:
        import wandb_workspaces.expr as expr
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    except ImportError as exc:
        raise UserError(
            f"the W&B dashboard needs wandb-workspaces ({exc.name or exc} is missing): pip install -e '.[{EXTRA}]'"
        ) from None
    return ws, wr, expr


def build_workspace(facts: SweepFacts, entity: str | None = None) -> ws.Workspace:
    """The sweep's view: its runs only (filtered by W&B group), its panels, its runs table."""
    ws, wr, expr = libraries()
    sections = [
        ws.Section(
            name=f"By {axis.label} ({axis.key})",
            panels=[
                wr.LinePlot(
                    title=f"{title} by {axis.label}",
                    x=X_AXIS,
                    y=[key],
                    groupby=wr.Config(axis.wandb_key),
                    groupby_aggfunc=GROUP_AGG,
                    groupby_rangefunc=GROUP_RANGE,
                )
                for key, title in _compared(facts)
            ],
            is_open=True,
        )
        for axis in facts.axes
    ]
    if facts.seeded:  # each configuration's seeds as one line and its spread, the report's intervals beside it
        sections.insert(
            0,
            ws.Section(
                name="By configuration (over seeds)",
                panels=[
                    wr.LinePlot(
                        title=f"{title} by configuration",
                        x=X_AXIS,
                        y=[key],
                        groupby=wr.Config(CONFIGURATION_KEY),
                        groupby_aggfunc=GROUP_AGG,
                        groupby_rangefunc=GROUP_RANGE,
                    )
                    for key, title in _compared(facts)
                ],
                is_open=True,
            ),
        )
    if facts.reward_parts:
        sections.append(
            ws.Section(
                name="Reward parts",
                panels=[
                    wr.LinePlot(title=f"reward part: {part}", x=X_AXIS, y=[f"{TRAIN_PREFIX}rewards/{part}/mean"])
                    for part in facts.reward_parts
                ],
                is_open=True,
            )
        )
    if facts.eval_keys:
        sections.append(
            ws.Section(
                name="Held-out evaluation",
                panels=[wr.LinePlot(title=key, x=X_AXIS, y=[key]) for key in facts.eval_keys],
                is_open=True,
            )
        )
    outcome = [(FINAL_REWARD, "final reward")]
    if facts.eval_summary_key:
        outcome.append((facts.eval_summary_key, "held-out reward"))
    column = wr.ParallelCoordinatesPlotColumn
    columns = [column(metric=wr.Config(a.wandb_key), display_name=a.label) for a in facts.axes]
    columns += [column(metric=wr.SummaryMetric(key), display_name=name) for key, name in outcome]
    swept = ", ".join(a.label for a in facts.axes)
    sections.append(
        ws.Section(
            name="Sweep outcome",
            panels=[
                wr.ParallelCoordinatesPlot(title=f"{swept} -> reward", columns=columns),
                wr.RunComparer(diff_only="split"),
                # the report's interval table, logged by the sweep's "sweep-report" run (grpo_exp/report/trackers.py)
                wr.WeavePanelSummaryTable(table_name=INTERVALS_KEY),
            ],
            is_open=True,
        )
    )
    group = expr.Metric("Group")
    return ws.Workspace(
        entity=entity or UNKNOWN_ENTITY,
        project=facts.project,
        name=f"GRPO sweep {facts.name}",
        sections=sections,
        runset_settings=ws.RunsetSettings(
            filters=expr.And(group == facts.groups[0] if len(facts.groups) == 1 else group.isin(facts.groups)),
            pinned_columns=[
                "run:displayName",
                *(_column(expr.groupby_str_to_key(f"config.{key}")) for key in (CONFIGURATION_KEY, SEED_KEY)),
                *(_column(expr.groupby_str_to_key(f"config.{a.wandb_key}")) for a in facts.axes),
                *(f"summary:{key}" for key in dict.fromkeys([*TABLE_SUMMARY, *(k for k, _ in outcome)])),
                "run:state",
            ],
        ),
        settings=ws.WorkspaceSettings(max_runs=max(facts.runs, ws.WorkspaceSettings().max_runs)),
    )


def specification(workspace: ws.Workspace, entity_known: bool) -> dict[str, Any]:
    """What saving would send to W&B (the view's name, place and spec), as JSON-ready data."""
    view = workspace._to_model()  # the library's own wire form; it has no public serializer
    return {
        "entity": workspace.entity if entity_known else None,
        "project": workspace.project,
        "display_name": view.display_name,
        "spec": view.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def default_entity() -> str:
    """The login's default W&B entity (asks the server)."""
    import wandb

    return wandb.Api().default_entity


def save(workspace: ws.Workspace) -> str:
    """Save the view on the W&B server of the current login; its URL."""
    return workspace.save().url


def _compared(facts: SweepFacts) -> list[tuple[str, str]]:
    curves = [(f"{TRAIN_PREFIX}{key}", title) for key, title in COMPARED_CURVES]
    return curves + ([(EVAL_REWARD, "held-out reward")] if EVAL_REWARD in facts.eval_keys else [])


def _column(key: Any) -> str:
    return f"{key.section}:{key.name}"
