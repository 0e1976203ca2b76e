"""The package's shape: no import cycles between our modules, no module past ~400 lines without saying why."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "grpo_exp"
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """grpo_exp modules that ``path`` imports at any depth (a lazy import can still close a cycle)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("grpo_exp"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("grpo_exp"))
    return found


def test_no_import_cycles():
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}
    # a package's __init__ importing its own submodules is how packages work, not a cycle
    graph = {name: {m for m in deps if not m.startswith(f"{name}.")} for name, deps in graph.items()}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


def test_long_modules_say_why():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            assert "long" in docstring.lower(), f"{path.name}: {text.count(chr(10))} lines and no reason given"


# Each layer and the layers it may import from (besides itself and the base modules), bottom up.
BASE = {
    "errors",
    "registry",
    "cache",
    "hardware",
    "shipped",
    "folder",
    "quiet",
    "user_code",
    "deadline",
    "helper_process",
    "proc",
}
DOMAIN = {"rewards", "sandbox", "models", "dataset", "agents", "tasks"}
MAY_IMPORT = {
    "config": set(),
    "sandbox": set(),
    "agents": {"config"},
    # reasoning-gym's problems and curricula; their verifiers run under the code sandbox's launcher
    "tasks": {"config", "sandbox"},
    # the tool-call part checks a call against the tool's signature; the task parts call the task's verifier
    "rewards": {"config", "sandbox", "agents", "tasks"},
    # the embedded model's agent warm-up calls the shipped tools; its task warm-up draws the task's problems
    "models": {"config", "agents", "tasks"},
    # a verifiable dataset's references are checked by its verifier (rewards/math); a task's problems are drawn
    "dataset": {"config", "rewards", "tasks"},
    # the job spec combines the config with the model, the data and the rewards; a curriculum's metric is checked
    # against what held-out evaluations log (tracking/held_out.py)
    "spec": {"config", "tracking", *DOMAIN},
    "memory": {"config", "spec", *DOMAIN},  # plans a spec's memory; reads the tiny model's recipe
    # the monitor reads the solved shares the rewards log (rewards/solved.py); held_out.py names the curriculum level
    # and the episode metrics' names are the environments' (agents/env_runner.py)
    "tracking": {"config", "rewards", "tasks", "agents"},
    "training": {"config", "spec", "memory", "tracking", *DOMAIN},  # a job writes its memory plan when it starts
    "report": {"config", "tracking"},
    "dashboard": {"config", "tracking"},
    # one job: the command's preflight, its run (training), its resume plan
    "job": {"config", "spec", "memory", "tracking", "training", *DOMAIN},
    # a sweep runs jobs (job.preflight, job.resume); its end runs the report; its launcher packs jobs onto GPUs
    # by their memory plans
    "sweep": {"config", "spec", "memory", "tracking", "training", "job", "report", "dashboard", *DOMAIN},
    # python -m grpo_exp.plan composes jobs as run.py does (job.preflight); its probe samples as training does
    # and it says how a sweep's jobs would be packed (sweep/packing.py)
    "plan": {"config", "spec", "memory", "job", "tracking", "training", "sweep", *DOMAIN},
}
# Entry points above every layer.
TOOLS = {"schema_gen": {"config"}}


def package_imports() -> dict[str, set[str]]:
    """Which other layers each layer's modules import, read from the code."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        own = layer(module_name(path))
        targets = {layer(t) for t in imports(path) if t.startswith("grpo_exp.")}
        found.setdefault(own, set()).update(targets - {own, "grpo_exp"})
    return found


def mutual_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, deps in graph.items() for b in deps if a < b and a in graph.get(b, set()))


def test_the_layer_map_points_one_way():
    try:
        TopologicalSorter(MAY_IMPORT).prepare()
    except CycleError as exc:
        raise AssertionError(f"the layer map has a cycle: {' -> '.join(exc.args[1])}") from None


def test_no_two_packages_import_each_other():
    pairs = mutual_pairs(package_imports())
    assert not pairs, "packages importing each other: " + "; ".join(f"{a} <-> {b}" for a, b in pairs)


def test_a_pair_importing_each_other_is_caught():
    assert mutual_pairs({"config": {"models"}, "models": {"config"}, "data": {"config"}}) == [("config", "models")]


def layer(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def test_layers_import_only_the_layers_below_them():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        own = layer(module_name(path))
        if own in BASE or own == "grpo_exp":
            allowed = BASE  # base modules import only each other
        else:
            allowed = {own, *BASE, *MAY_IMPORT.get(own, TOOLS.get(own, set()))}
        for target in imports(path):
            name = layer(target) if target != "grpo_exp" else "grpo_exp"
            if target.startswith("grpo_exp.") and name not in allowed and f"grpo_exp.{name}" != target + "":
                wrong.append(f"{module_name(path)} imports {target}")
    assert not wrong, "imports against the layers: " + "; ".join(sorted(set(wrong)))


def test_layer_map_names_every_package():
    packages = {layer(module_name(p)) for p in PACKAGE.rglob("*.py")} - {"grpo_exp"}
    assert packages == BASE | set(MAY_IMPORT) | set(TOOLS)


def string_literals(path: Path) -> list[str]:
    """The module's string constants, docstrings left out (they may name files to explain them)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_each_job_folder_name_is_written_in_the_folder_module_only():
    from grpo_exp import folder

    # file names and name patterns; bare folder names ("model", "wandb") are ordinary words in code
    names = [v for k, v in vars(folder).items() if k.isupper() and isinstance(v, str) and any(c in v for c in ".-")]
    assert {"config.yaml", "metrics.jsonl", "summary.json", "run_info.json", "adaptive_profiles.jsonl"} <= set(names)
    found = {name: [] for name in names}
    for path in PACKAGE.rglob("*.py"):
        for literal in string_literals(path):
            for name in names:
                if name in literal and name.strip("*-") == literal.strip("*-/"):
                    found[name].append(path.relative_to(PACKAGE).as_posix())
    elsewhere = {name: paths for name, paths in found.items() if set(paths) - {"folder.py"}}
    assert not elsewhere, f"job-folder names written outside folder.py: {elsewhere}"


def package_nodes() -> list[tuple[Path, ast.AST]]:
    """Every syntax node of the package, with its file."""
    return [(path, node) for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text("utf-8")))]


def test_the_gpu_is_decided_in_one_function():
    """torch's answer about the machine (``hardware.machine``) is asked for in config/layout.py alone."""
    callers = [
        f"{module_name(path)}:{node.lineno}"
        for path, node in package_nodes()
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and getattr(node.func.value, "id", None) == "hardware"
        and node.func.attr in ("machine", "cuda_available")
    ]
    assert len(callers) == 1 and callers[0].startswith("grpo_exp.config.layout:"), callers


def test_the_optimizer_to_trl_table_exists_once():
    """TRL's names for our optimizer keys are written in config/trl_map.py alone; all else reads its table."""
    from grpo_exp.config.trl_map import OPTIMIZER_FIELDS

    renamed = {trl for ours, trl in OPTIMIZER_FIELDS.items() if trl != ours}
    holders = {module_name(path) for path in PACKAGE.rglob("*.py") if renamed & set(string_literals(path))}
    assert holders == {"grpo_exp.config.trl_map"}, holders


def test_no_two_classes_share_a_name():
    """A class name finds one class: two ``Job`` or ``Remedy`` classes send a reader to the wrong file."""
    where: dict[str, list[str]] = {}
    for path, node in package_nodes():
        if isinstance(node, ast.ClassDef):
            where.setdefault(node.name, []).append(module_name(path))
    shared = {name: modules for name, modules in where.items() if len(modules) > 1}
    assert not shared, f"class names defined more than once: {shared}"


def test_cfg_is_always_the_composed_hydra_config():
    """``cfg`` is Hydra's DictConfig; the validated config is ``settings`` and its groups are named for themselves."""
    wrong = [
        f"{module_name(path)}:{node.lineno} cfg: {ast.unparse(node.annotation)}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.arg)
        and node.arg == "cfg"
        and node.annotation is not None
        and ast.unparse(node.annotation).strip("'\"") != "DictConfig"
    ]
    assert not wrong, wrong


# The modules whose private names (``_x`` methods and ``self._x`` attributes) grpo_exp may touch only in
# the fence, training/trl_private.py: TRL's trainers and transformers' Trainer, read as source (no import).
FENCE = PACKAGE / "training" / "trl_private.py"
FENCED_LIBRARIES = ("trl", "transformers")
FENCED_MODULES = ("trl.trainer.grpo_trainer", "trl.trainer.base_trainer", "transformers.trainer")
PATCHED_MODULE = "trl.trainer.grpo_trainer"  # the fence swaps one of its module globals (the completions table)


def private_names(module: str) -> set[str]:
    """The ``_x`` methods and ``self._x`` attributes a library module defines or uses."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    found = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))):
        name = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "self":
            name = node.attr
        if name and name.startswith("_") and not name.startswith("__"):
            found.add(name)
    return found


def own_names(tree: ast.AST) -> set[str]:
    """Private names a module defines itself: its functions and methods, and attributes it assigns."""
    found = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if isinstance(target, ast.Attribute):
                found.add(target.attr)
            elif isinstance(target, ast.Name):
                found.add(target.id)
    return found


def private_uses(source: str, private: set[str]) -> list[str]:
    """Where ``source`` overrides a private method of the fenced libraries (a method of that name), names a
    private attribute of theirs (``x._name`` or ``getattr(x, "_name")`` for a name it does not define
    itself) or imports a private name or module of theirs."""
    tree = ast.parse(source)
    theirs = private - own_names(tree)
    found = [  # a method of a class named as one of theirs overrides it, once mixed into a trainer
        f"{method.lineno}: def {method.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for method in node.body
        if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef) and method.name in private
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in theirs:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr"):
            names = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            found += [f"{node.lineno}: {node.func.id}(..., {n!r})" for n in names if n in theirs]
        elif isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[0] not in FENCED_LIBRARIES:
                    continue
                imported = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
                private_part = any(p.startswith("_") for p in parts[1:]) or any(n.startswith("_") for n in imported)
                if private_part or module == PATCHED_MODULE:
                    found.append(f"{node.lineno}: import of {module}")
    return found


def test_private_names_of_trl_and_transformers_are_used_in_the_fence_only():
    """Issue 53: every private TRL/transformers name grpo_exp needs lives in training/trl_private.py."""
    private = set().union(*(private_names(m) for m in FENCED_MODULES))
    assert {"_generate_and_score_completions", "_calculate_rewards", "_metrics", "_load_from_checkpoint"} <= private
    found = {
        module_name(path): uses
        for path in PACKAGE.rglob("*.py")
        if path != FENCE and (uses := private_uses(path.read_text(encoding="utf-8"), private))
    }
    assert not found, f"private TRL/transformers names outside {FENCE.name}: {found}"
    assert private_uses(FENCE.read_text(encoding="utf-8"), private), "the fence names none: is it still needed?"


@pytest.mark.parametrize(
    "source",
    [
        "trainer._metrics['train'].clear()",
        "GRPOTrainer._get_tool_suffix_ids(trainer, replies)",
        "self._load_from_checkpoint(path)",
        "value = getattr(trainer, '_metrics')",
        "from transformers.trainer import _is_peft_model",
        "import trl.trainer.grpo_trainer as grpo_module",
        "class Mine:\n    def _generate_and_score_completions(self, inputs):\n        return inputs",
    ],
)
def test_a_private_name_outside_the_fence_is_caught(source):
    private = {"_metrics", "_get_tool_suffix_ids", "_load_from_checkpoint", "_calculate_rewards"}
    private |= {"_generate_and_score_completions"}
    assert private_uses(source, private)


def test_a_private_name_of_the_modules_own_is_not_theirs():
    assert not private_uses("class S:\n    def _sample(self):\n        self._step = 1", {"_step", "_generate"})
