"""The package's shape: no import cycles between our modules, no module past ~400 lines without saying why."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

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
