"""Near-miss variants of reference solutions, for the code warm-up of the tiny model.

A model warmed up only on correct solutions has nothing left to learn from unit tests; one warmed
up on a mix of correct and subtly wrong solutions samples both, and GRPO can move it towards the
ones that pass. Each variant changes one thing a programmer gets wrong: an operator, a
comparison, a constant off by one, a returned value, or a line that breaks the syntax.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable

# Operator swaps that keep the code running but change its answer.
_BINARY_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv}
_COMPARE_SWAPS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}


def wrong_variant(reference: str, rng: random.Random) -> str:
    """``reference`` with one plausible mistake; falls back to a syntax error when no mutation applies."""
    mutations: list[Callable[[ast.Module, random.Random], bool]] = [
        _swap_operator,
        _swap_comparison,
        _nudge_constant,
        _return_none,
    ]
    rng.shuffle(mutations)
    for mutate in mutations:
        tree = ast.parse(reference)
        if mutate(tree, rng):
            return ast.unparse(tree)
    return _break_syntax(reference)


def _swap_operator(tree: ast.Module, rng: random.Random) -> bool:
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.BinOp | ast.AugAssign) and type(n.op) in _BINARY_SWAPS]
    if not nodes:
        return False
    node = rng.choice(nodes)
    node.op = _BINARY_SWAPS[type(node.op)]()
    return True


def _swap_comparison(tree: ast.Module, rng: random.Random) -> bool:
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Compare) and type(n.ops[0]) in _COMPARE_SWAPS]
    if not nodes:
        return False
    node = rng.choice(nodes)
    node.ops[0] = _COMPARE_SWAPS[type(node.ops[0])]()
    return True


def _nudge_constant(tree: ast.Module, rng: random.Random) -> bool:
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int]
    if not nodes:
        return False
    node = rng.choice(nodes)
    node.value += rng.choice((-1, 1))
    return True


def _return_none(tree: ast.Module, rng: random.Random) -> bool:
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
    if not nodes:
        return False
    rng.choice(nodes).value = None
    return True


def _break_syntax(reference: str) -> str:
    """Drop the colon that opens the function body: the commonest syntax slip."""
    return reference.replace("):", ")", 1)
