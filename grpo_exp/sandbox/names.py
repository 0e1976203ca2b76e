"""Where each name a test reads comes from: the dataset's trusted code, or the candidate.

A test is trusted dataset code, but it names things it does not define: the function under
test, and helpers the problem supplies (HumanEval's prompt defines ``poly``, ``encode_cyclic``...;
MBPP tests use ``Counter`` or ``math`` that the reference solution imported). Only the function
under test may come from the candidate: were a helper also taken from the candidate's program,
the candidate could redefine it (an ``encode_cyclic`` that does nothing, and a decoder that does
nothing either, passes). So, in this order, a free name of the tests is

1. bound by the problem's trusted code (``helpers``: the prompt's definitions, the test's own
   imports, MBPP's ``test_setup_code``), which runs in the grader before the tests;
2. a standard module of ``TEST_MODULES``, the grader's own;
3. one of the candidate's names when the problem says which (``entry_point``, and what the
   reference solution defines at top level): a handle into the sandbox;
4. a public class or function of one of those modules (``Counter``, ``reduce``, ``sqrt``), unless
   it is also a module's name (``time``): the grader's own.
   When the problem does not name the candidate's functions, only classes are taken this way,
   since a lowercase name (``gcd``) may well be the function under test;
5. anything else: the candidate's.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

# Standard modules a test may use without importing them (MBPP tests lean on the candidate's
# imports). They are bound to the grader's real modules so the candidate cannot replace them.
TEST_MODULES = (
    "math", "cmath", "re", "string", "random", "collections", "itertools", "functools", "heapq",
    "bisect", "statistics", "fractions", "decimal", "operator", "copy", "datetime", "json",
)  # fmt: skip


def free_names(trees: Sequence[ast.AST]) -> set[str]:
    """Names read but bound nowhere in ``trees`` and not builtins (conservative)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                bound.update(node.names)
    return {name for name in loaded - bound if not hasattr(builtins, name)}


def defined_names(source: str) -> set[str]:
    """Functions and classes ``source`` defines at top level (empty when it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def prompt_helpers(prompt: str, entry_point: str) -> str:
    """The trusted definitions of a HumanEval-style code prompt, without the stub to complete.

    Empty unless ``prompt`` is Python that defines ``entry_point`` at top level (a prose prompt
    defines nothing). Docstrings and other bare expressions are dropped; imports, helper
    functions, classes and constants are kept.
    """
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    stub = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point]
    if not stub:
        return ""
    kept = [n for n in tree.body if n not in stub and not isinstance(n, ast.Expr)]
    return ast.unparse(ast.Module(kept, type_ignores=[])) if kept else ""


def std_object(name: str, classes_only: bool) -> Any:
    """The grader's own ``name`` from the first of ``TEST_MODULES`` exporting it, or None."""
    found = _std_exports().get(name)
    if found is None or (classes_only and not isinstance(found, type)):
        return None
    return found


@cache
def _std_exports() -> dict[str, Any]:
    exports: dict[str, Any] = {}
    for module_name in TEST_MODULES:
        module = importlib.import_module(module_name)
        public = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        for name in public:
            value = getattr(module, name, None)
            if callable(value) and not isinstance(value, type(module)) and name not in sys.stdlib_module_names:
                exports.setdefault(name, value)  # not ``time`` (datetime.time): a test may mean the module
    return exports
