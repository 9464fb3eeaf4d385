"""``where(cond, a, b)``: elementwise selection, the DSL's only run-time choice.

``cond`` is a comparison (``<`` ``<=`` ``>`` ``>=`` ``==`` ``!=``) of tiles, scalars and numbers,
or comparisons combined with ``and`` / ``or`` / ``not``. Python's boolean words rather than
numpy's ``&`` / ``|`` / ``~``: ``x > 0 and x < 1`` reads as meant, whereas ``&`` binds tighter
than ``<`` (``x > 0 & x < 1`` is a chained comparison in Python). A condition is not a value:
it lives only inside ``where(...)``, so no predicate tiles exist. Each comparison becomes one
``tile.where`` (``x compare y ? a : b``); the words become nested selects:

    where(c1 and c2, a, b) = where(c1, where(c2, a, b), b)
    where(c1 or c2, a, b)  = where(c1, a, where(c2, a, b))
    where(not c, a, b)     = where(c, b, a)

which hold elementwise for NaN too (a comparison with NaN is false, ``!=`` true, and ``not``
negates that). Parts known when compiling fold as Python would (``BM > 64 and x > 0``).

The comparison's two sides take one dtype, the two values another, each as arithmetic
promotes (same dtype, or f32 when one side is f32); numbers adopt their partner's dtype, and
two numbers as values adopt the comparison's. All four broadcast to one shape.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from tilec.errors import TileTypeError
from tilec.frontend import ast
from tilec.frontend.diagnostics import shape_text, start_loc
from tilec.frontend.operands import (ConstValue, DTypeValue, Operand, describe, is_scalar,
                                     is_tensor, is_tile)
from tilec.frontend.scalars import COMPARE
from tilec.frontend.tiles import TileLowering
from tilec.ir.core import Value
from tilec.ir.ops import WHERE_COMPARISONS
from tilec.ir.types import F32, DType, TileType

WHERE_USAGE = "where(x > 0, x, 0.01 * x); combine comparisons with and / or / not"


@dataclass(frozen=True)
class _Comparison:
    """``x op y`` with at least one side known only when the kernel runs."""

    compare: str  # the attribute of tile.where
    x: Operand
    y: Operand
    node: ast.Compare


@dataclass(frozen=True)
class _Combined:
    """``and`` / ``or`` of two conditions, or ``not`` of one (``right`` None)."""

    word: str
    left: "_Condition"
    right: "Optional[_Condition]" = None


_Condition = Union[ConstValue, _Comparison, _Combined]


class SelectLowering(TileLowering):
    """Lowers ``where(cond, a, b)``."""

    def _call_where(self, node: ast.Call) -> Operand:
        args = self._arguments(node, "where", ("cond", "a", "b"), 3)
        cond = self._condition(args["cond"])
        values = []
        for name in ("a", "b"):
            value = self.expr(args[name])
            self._check_selectable(value, args[name], "selects")
            values.append(value)
        return self._select(cond, values[0], values[1], node)

    def _check_selectable(self, value: Operand, node: ast.Expr, verb: str) -> None:
        if isinstance(value, DTypeValue) or is_tensor(value) or (
                is_scalar(value) and value.type.dtype != F32):
            hint = ("load a tile first: A[off : +SIZE, ...]" if is_tensor(value)
                    else "tiles, numbers and f32 scalars")
            raise self.error(TileTypeError, f"where() {verb} tiles, numbers or f32 scalars, "
                             f"not {describe(value)}", start_loc(node), hint)
        if is_tile(value):  # and of a float dtype, as every tile operation takes them
            self._require_float_tile(value, f"where() {verb}", node)

    def _condition(self, node: ast.Expr) -> _Condition:
        if isinstance(node, ast.Compare):
            x, y = self.expr(node.left), self.expr(node.right)
            if isinstance(x, ConstValue) and isinstance(y, ConstValue):
                return ConstValue(int(COMPARE[node.op](x.value, y.value)))
            for side, side_node in ((x, node.left), (y, node.right)):
                self._check_selectable(side, side_node, "compares")
            return _Comparison(WHERE_COMPARISONS[node.op], x, y, node)
        if isinstance(node, ast.BoolOp):
            left = self._condition(node.left)
            if isinstance(left, ConstValue):  # Python's short circuit
                return left if (node.op == "and") != bool(left.value) else \
                    self._condition(node.right)
            right = self._condition(node.right)
            if isinstance(right, ConstValue):  # c and True = c, c and False = False, ...
                return left if (node.op == "and") == bool(right.value) else right
            return _Combined(node.op, left, right)
        if isinstance(node, ast.UnaryOp) and node.op == "not":
            inner = self._condition(node.operand)
            if isinstance(inner, ConstValue):
                return ConstValue(int(not inner.value))
            return _Combined("not", inner)
        value = self.expr(node)
        if isinstance(value, ConstValue):
            return ConstValue(int(bool(value.value)))
        raise self.error(TileTypeError, f"where() takes a comparison as its condition, not "
                         f"{describe(value)}", start_loc(node),
                         f"{WHERE_USAGE} (a condition cannot be kept in a variable)")

    def _select(self, cond: _Condition, a: Operand, b: Operand, node: ast.Call) -> Operand:
        if isinstance(cond, ConstValue):
            return a if cond.value else b
        if isinstance(cond, _Combined):
            if cond.word == "not":
                return self._select(cond.left, b, a, node)
            assert cond.right is not None
            if cond.word == "and":
                return self._select(cond.left, self._select(cond.right, a, b, node), b, node)
            return self._select(cond.left, a, self._select(cond.right, a, b, node), node)
        return self._where(cond, a, b, node)

    def _where(self, cond: _Comparison, a: Operand, b: Operand, node: ast.Call) -> Value:
        sides = (cond.x, cond.y, a, b)
        if not any(is_tile(side) for side in sides):
            raise self.error(TileTypeError, "where() selects between tiles: here the "
                             "condition and both values are scalars", node.loc,
                             "`if` decides constants when compiling; where() needs a tile "
                             "among its arguments")
        texts = ", ".join(shape_text(side.type.shape) if is_tile(side) else "scalar"
                          for side in sides)
        shape = self._broadcast_shape(sides, lambda *_: (
            f"where()'s tiles do not broadcast to one shape: x, y, a, b are {texts}",
            "make a 1-D tile a column with t[:, None] or a row with t[None, :]"), node)
        compared = self._where_dtype((cond.x, cond.y), None, cond.node)
        selected = self._where_dtype((a, b), compared, node)
        operands = [self._tile_operand(side, dtype, shape)
                    for side, dtype in zip(sides, (compared, compared, selected, selected))]
        return self.builder.value("tile.where", operands, TileType(selected, shape),
                                  compare=cond.compare)

    def _where_dtype(self, pair: Sequence[Operand], fallback: Optional[DType],
                     node: ast.Node) -> DType:
        """The dtype two sides take, as arithmetic promotes them."""
        dtypes = [str(side.type.dtype) for side in pair if isinstance(side, Value)]
        dtype = self._promoted_dtype(pair, " and ".join(dtypes), node)
        if dtype is None:  # two numbers: the values adopt the comparison's dtype
            assert fallback is not None, "a comparison of two numbers folds"
            return fallback
        return dtype
