"""Whether the embedded model can give the replies the reward scores, before it is built or loaded.

The tiny model knows only what its warm-up showed it (``model.recipe.scenarios``). A reward that
scores one reply form, say reasoning-gym's ``<answer>`` tags, names the warm-up scenario that
teaches it (``reward.reply_format``); a tiny model warmed up on none of it scores 0 on every
completion, GRPO has nothing to compare, and the run trains for nothing. Both sides are config
data: the check reads them, and the fix it names is found in conf/ (the model configs whose warm-up
has the scenario, and the recipes that choose them). A hub model has no recipe: the reward probe
(``python -m grpo_exp.plan --probe``) is its check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_exp.config.schema import CONF_DIR, ExperimentConfig
from grpo_exp.errors import UserError

PROBE_COMMAND = "python -m grpo_exp.plan --probe"


def check_reply_format(settings: ExperimentConfig) -> None:
    """A one-line ``UserError`` when the embedded model's warm-up never showed it the reward's reply form."""
    wanted, recipe = settings.reward.reply_format, settings.model.recipe
    if wanted is None or recipe is None or recipe.scenarios.get(wanted):
        return
    taught = ", ".join(name for name, share in recipe.scenarios.items() if share) or "nothing"
    fixes = " or ".join(teaching(wanted, CONF_DIR)) or f"a model.recipe with scenarios.{wanted} above 0"
    raise UserError(
        f"the reward scores replies the embedded model was never warmed up on (reward.reply_format={wanted}; its "
        f"warm-up: {taught}), so every reward would be 0: use {fixes} (any model: {PROBE_COMMAND} shows whether "
        "its reward can move)"
    )


def teaching(scenario: str, conf_dir: Path) -> list[str]:
    """The command-line choices that give a model warmed up on ``scenario``: the recipes that choose such a
    model first (they set the rest of the job to match), then the model configs themselves."""
    models = [path.stem for path in sorted((conf_dir / "model").glob("*.yaml")) if _warms_up_on(path, scenario)]
    recipes = [
        path.stem
        for path in sorted((conf_dir / "recipe").glob("*.yaml"))
        if any({"override /model": model} in _read(path).get("defaults", []) for model in models)
    ]
    return [*(f"+recipe={name}" for name in recipes), *(f"model={name}" for name in models)]


def _warms_up_on(path: Path, scenario: str) -> bool:
    recipe = (_read(path).get("model") or {}).get("recipe") or {}
    return bool((recipe.get("scenarios") or {}).get(scenario))


def _read(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
