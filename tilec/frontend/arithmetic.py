"""The DSL's arithmetic operators as data: the arith / tile op each spelling lowers to, the
compile-time fold of each, and the linear forms that prove a slice's size is constant."""
from __future__ import annotations

from typing import Any, Callable, Optional

from tilec.frontend import ast
from tilec.ir import arith

# Operators by their DSL spelling: the arith / tile op names and the compile-time fold.
SCALAR_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod",
              "cdiv": "cdiv", "min": "min", "max": "max"}
TILE_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "min": "min", "max": "max"}
# DSL constants fold as the Python numbers they are written as: the ops' exact meaning
# (arith.EXACT), not the fold of i32 IR values, which wraps.
FOLD: dict[str, Callable[[Any, Any], Any]] = {
    spelling: arith.EXACT[name] for spelling, name in SCALAR_OPS.items()}
INTEGER_ONLY = tuple(spelling for spelling, name in SCALAR_OPS.items()
                     if name in arith.INTEGER_ONLY)


# A linear form: coefficients of opaque terms (keyed by their canonical text), "" for 1.
_Linear = dict[str, int]


def linear_difference(stop: ast.Expr, start: Optional[ast.Expr],
                      constant_of: Callable[[str], Optional[int]]) -> Optional[int]:
    """``stop - start`` when it is the same for every run-time value (``m*BM + BM`` minus
    ``m*BM`` is ``BM``), else None."""
    difference = _linear(stop, constant_of)
    if start is not None:
        for term, coefficient in _linear(start, constant_of).items():
            difference[term] = difference.get(term, 0) - coefficient
    if any(coefficient for term, coefficient in difference.items() if term):
        return None
    return difference.get("", 0)


def _linear(node: ast.Expr, constant_of: Callable[[str], Optional[int]]) -> _Linear:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return {"": node.value}
    if isinstance(node, ast.Name):
        value = constant_of(node.id)
        return {"": value} if value is not None else {repr(node): 1}
    if isinstance(node, ast.UnaryOp):
        inner = _linear(node.operand, constant_of)
        return inner if node.op == "+" else {t: -c for t, c in inner.items()}
    if isinstance(node, ast.BinOp) and node.op in ("+", "-", "*", "//", "%"):
        left, right = _linear(node.left, constant_of), _linear(node.right, constant_of)
        left_const = set(left) <= {""}
        right_const = set(right) <= {""}
        if left_const and right_const and not (node.op in ("//", "%")
                                               and right.get("", 0) == 0):
            return {"": FOLD[node.op](left.get("", 0), right.get("", 0))}
        if node.op in ("+", "-"):
            sign = 1 if node.op == "+" else -1
            total = dict(left)
            for term, coefficient in right.items():
                total[term] = total.get(term, 0) + sign * coefficient
            return total
        if node.op == "*" and (left_const or right_const):
            factor, terms = (left.get("", 0), right) if left_const else (right.get("", 0), left)
            return {t: factor * c for t, c in terms.items()}
    return {repr(node): 1}
