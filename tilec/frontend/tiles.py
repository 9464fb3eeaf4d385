"""Tile expressions: unary and binary operators on any mix of numbers, scalars and tiles, with
numpy-style broadcasting and f32 promotion, casts, and matrix products (``acc + a @ b``
becomes one ``tile.dot``)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from tilec.errors import TileError, TileShapeError, TileTypeError
from tilec.frontend import ast
from tilec.frontend.arithmetic import TILE_OPS
from tilec.frontend.diagnostics import shape_text, spelled
from tilec.frontend.operands import (ConstValue, DTypeValue, Operand, describe, dtype_list,
                                     is_scalar, is_tensor, is_tile)
from tilec.frontend.scalars import ScalarLowering
from tilec.ir.core import Value
from tilec.ir.types import (ACCUMULATOR_DTYPES, ARITHMETIC_DTYPES, F32, FP8_DTYPES, DType,
                            ScalarType, TileType)

# The hint where a tensor is used as if it were a tile.
_LOAD_A_TILE_HINT = "load a tile first: A[off : +SIZE, ...]"
MAX_POWER = 64  # |n| in x ** n: repeated squaring keeps it to 12 multiplies
Shape = tuple[int, ...]


class TileLowering(ScalarLowering):
    """Lowers arithmetic that involves tiles, and matrix products."""

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> Operand:
        value = self.expr(node.operand)
        if node.op == "not":
            self._compile_time(node, value)
            return ConstValue(int(not value.value))
        if isinstance(value, (DTypeValue,)) or is_tensor(value):
            raise self.error(TileTypeError, f"cannot apply unary '{node.op}' to "
                             f"{describe(value)}", node.loc)
        if node.op == "+":
            return value
        if isinstance(value, ConstValue):
            return ConstValue(-value.value)
        if is_tile(value):
            self._require_float_tile(value, f"unary '{node.op}'", node)
            return self.builder.value("tile.neg", [value], value.type)
        return self._binary("-", ConstValue(0), value, node)

    def _expr_BinOp(self, node: ast.BinOp) -> Operand:
        if node.op == "@":
            a, b = self._matmul_operands(node)
            return self._dot(a, b, None, node)
        if node.op == "+" and (_is_matmul(node.left) or _is_matmul(node.right)):
            return self._add_to_product(node)
        left = self.expr(node.left)
        right = self.expr(node.right)
        if node.op == "**":
            return self._power(left, right, node)
        return self._binary(node.op, left, right, node)

    def _power(self, base: Operand, exponent: Operand, node: ast.BinOp) -> Operand:
        """``base ** n`` for a constant integer n: numbers fold; tiles and scalars become
        products by repeated squaring (at most 2 log2 |n| multiplies, each rounding as ``*``
        does), and a negative n the reciprocal of that (``1 / base ** -n``)."""
        if not (isinstance(exponent, ConstValue) and isinstance(exponent.value, int)
                and abs(exponent.value) <= MAX_POWER):
            raise self.error(TileTypeError, f"`**` takes a constant integer exponent from "
                             f"-{MAX_POWER} to {MAX_POWER}, not {describe(exponent)}", node.loc,
                             "x ** 2, x ** 3, x ** -1; use exp() and log() for other powers")
        n = exponent.value
        if isinstance(base, ConstValue):
            if base.value == 0 and n < 0:
                raise self.error(TileError, "0 raised to a negative power in a constant "
                                 "expression", node.loc)
            return ConstValue(base.value ** n)
        if n == 0:  # 1 for every x, NaN and inf included (as numpy and Python say)
            if not is_tile(base):
                return ConstValue(1.0)
            shape = base.type.shape
            return self.builder.value("tile.full", [], TileType(base.type.dtype, shape),
                                      shape=shape, value=1.0)
        result, square, k = None, base, abs(n)
        while k:
            if k & 1:
                result = square if result is None else self._binary("*", result, square, node)
            k >>= 1
            if k:
                square = self._binary("*", square, square, node)
        return self._binary("/", ConstValue(1.0), result, node) if n < 0 else result

    def _binary(self, op: str, left: Operand, right: Operand, node: ast.Node) -> Operand:
        """``left op right`` for any mix of numbers, scalars and tiles; ``op`` is an operator
        or ``min`` / ``max`` / ``cdiv``."""
        for side in (left, right):
            if isinstance(side, DTypeValue) or is_tensor(side):
                hint = _LOAD_A_TILE_HINT if is_tensor(side) else ""
                raise self.error(TileTypeError, f"cannot use {describe(side)} in "
                                 f"{spelled(op, 'a', 'b')}", node.loc, hint)
        if isinstance(left, ConstValue) and isinstance(right, ConstValue):
            return self._fold(op, left.value, right.value, node)
        if is_tile(left) or is_tile(right):
            return self._tile_binary(op, left, right, node)
        return self._scalar_binary(op, left, right, node)

    def _tile_binary(self, op: str, left: Operand, right: Operand, node: ast.Node) -> Value:
        if op not in TILE_OPS:
            raise self.error(TileTypeError, f"{spelled(op, 'a', 'b')} is not defined on "
                             "tiles", node.loc)
        sides = (left, right)
        for side in sides:
            if is_tile(side):
                self._require_float_tile(side, spelled(op, "a", "b"), node)
            if is_scalar(side) and side.type.dtype != F32:
                raise self.error(TileTypeError, f"{describe(side)} cannot be combined with a "
                                 "tile", node.loc, "only numbers and f32 scalars mix with "
                                 "tiles")
        names = [str(side.type.dtype) if isinstance(side, Value) else "number"
                 for side in sides]
        dtype = self._promoted_dtype(sides, spelled(op, *names), node)
        assert dtype is not None, "a tile is among the sides"

        def mismatch(shape: Shape, other: Shape) -> tuple[str, str]:
            hint = ("make a 1-D tile a column with t[:, None] or a row with t[None, :]"
                    if 1 in (len(shape), len(other)) else "")
            return (f"shapes do not broadcast: "
                    f"{spelled(op, shape_text(shape), shape_text(other))}", hint)
        shape = self._broadcast_shape(sides, mismatch, node)
        operands = [self._tile_operand(side, dtype, shape) for side in sides]
        return self.builder.value(f"tile.{TILE_OPS[op]}", operands, TileType(dtype, shape))

    def _promoted_dtype(self, sides: Sequence[Operand], spelled_as: str,
                        node: ast.Node) -> Optional[DType]:
        """The one dtype ``sides`` take, as arithmetic promotes them: theirs where they agree,
        f32 where one is f32 (the 16-bit side widened, as numpy would); None where all are
        numbers (which adopt their partner's dtype). ``spelled_as``: the sides as the error
        names them where they cannot agree."""
        dtypes = [side.type.dtype for side in sides if isinstance(side, Value)]
        if len(set(dtypes)) <= 1:
            return dtypes[0] if dtypes else None
        if F32 in dtypes:
            return F32
        raise self.error(TileTypeError, f"dtypes differ: {spelled_as}", node.loc,
                         f"convert one side first, e.g. x.to({dtypes[0]}) or x.to(f32)")

    def _broadcast_shape(self, sides: Sequence[Operand],
                         mismatch: Callable[[Shape, Shape], tuple[str, str]],
                         node: ast.Node) -> Shape:
        """The shape the tiles among ``sides`` (one at least) broadcast to, numpy's rule
        folded left to right; where the shape so far and the next do not broadcast,
        ``mismatch(shape, other)`` gives the error's message and hint."""
        shapes = [side.type.shape for side in sides if is_tile(side)]
        shape = shapes[0]
        for other in shapes[1:]:
            broadcast = _broadcast_shapes(shape, other)
            if broadcast is None:
                message, hint = mismatch(shape, other)
                raise self.error(TileShapeError, message, node.loc, hint)
            shape = broadcast
        return shape

    def _require_float_tile(self, value: Value, what: str, node: ast.Node) -> None:
        """Tile arithmetic is float arithmetic: an integer tile (an i32 accumulator, i8
        data) is converted explicitly first, so where rounding happens is written down."""
        dtype = value.type.dtype
        if dtype in FP8_DTYPES:
            raise self.error(TileTypeError, f"{what} on {describe(value)}: 8-bit float tiles "
                             "are multiplied, converted and stored, not computed on", node.loc,
                             "convert it first: x.to(f32); or multiply it with '@'")
        if dtype not in ARITHMETIC_DTYPES:
            raise self.error(TileTypeError, f"{what} on {describe(value)}: arithmetic on "
                             f"tiles is float arithmetic", node.loc,
                             "convert it first: x.to(f32)")

    def _tile_operand(self, value: Operand, dtype: DType, shape: tuple[int, ...]) -> Value:
        """``value`` as a tile of ``dtype`` and ``shape``: cast, broadcast or splat."""
        if isinstance(value, ConstValue):
            scalar = self._scalar_constant(value, dtype)
            return self.builder.value("tile.splat", [scalar], TileType(dtype, shape),
                                      shape=shape)
        assert isinstance(value, Value)
        if isinstance(value.type, ScalarType):
            return self.builder.value("tile.splat", [value], TileType(dtype, shape),
                                      shape=shape)
        value = self._cast(value, dtype)
        if value.type.shape != shape:
            value = self.builder.value("tile.broadcast", [value], TileType(dtype, shape))
        return value

    def _cast(self, value: Value, dtype: DType) -> Value:
        if value.type.dtype == dtype:
            return value
        return self.builder.value("tile.cast", [value], value.type.with_(dtype=dtype),
                                  dtype=dtype)

    # ---- matrix products
    def _matmul_operands(self, node: ast.BinOp) -> tuple[Value, Value]:
        left = self.expr(node.left)
        right = self.expr(node.right)
        for side, value in (("left", left), ("right", right)):
            if not is_tile(value):
                hint = _LOAD_A_TILE_HINT if is_tensor(value) else ""
                raise self.error(TileTypeError, f"'@' multiplies tiles; its {side} operand is "
                                 f"{describe(value)}", node.loc, hint)
            if value.type.rank != 2:
                raise self.error(TileShapeError, f"'@' multiplies 2-D tiles; its {side} "
                                 f"operand is {describe(value)}", node.loc,
                                 "make a 1-D tile 2-D with t[None, :] or t[:, None]")
        a, b = left.type, right.type
        multiplied = dtype_list(tuple(ACCUMULATOR_DTYPES))
        if a.dtype != b.dtype:
            raise self.error(TileTypeError, f"dot operands differ in dtype: {a.dtype} @ "
                             f"{b.dtype}", node.loc,
                             f"convert one side with .to(...); both {multiplied}")
        if a.dtype not in ACCUMULATOR_DTYPES:
            raise self.error(TileTypeError, f"'@' multiplies {multiplied} tiles, not "
                             f"{a.dtype}", node.loc)
        if a.shape[1] != b.shape[0]:
            raise self.error(TileShapeError, f"inner dimensions differ: {shape_text(a.shape)} "
                             f"@ {shape_text(b.shape)}", node.loc)
        return left, right

    def _dot(self, a: Value, b: Value, accumulator: Optional[Value], node: ast.Node) -> Value:
        shape = (a.type.shape[0], b.type.shape[1])
        result = TileType(ACCUMULATOR_DTYPES[a.type.dtype], shape)
        with self.builder.located(node.loc):
            if accumulator is None:
                accumulator = self.builder.value("tile.full", [], result, shape=shape,
                                                 value=0.0)
            elif accumulator.type.dtype != result.dtype:
                raise self.error(TileTypeError, f"{a.type.dtype} products accumulate in "
                                 f"{result.dtype}, not {accumulator.type.dtype}", node.loc,
                                 f"make the accumulator {result.dtype}: zeros([BM, BN], "
                                 f"{result.dtype})")
            return self.builder.value("tile.dot", [a, b, accumulator], result)

    def _add_to_product(self, node: ast.BinOp) -> Operand:
        """``acc + x @ y`` (or ``x @ y + acc``) accumulates into ``acc`` when it is an f32
        tile of the product's shape: one ``tile.dot``, as the hardware does it."""
        product_on_right = _is_matmul(node.right)
        product_node = node.right if product_on_right else node.left
        assert isinstance(product_node, ast.BinOp)
        # Python evaluates the left operand first; the IR keeps that order.
        if product_on_right:
            other = self.expr(node.left)
            a, b = self._matmul_operands(product_node)
        else:
            a, b = self._matmul_operands(product_node)
            other = self.expr(node.right)
        shape = (a.type.shape[0], b.type.shape[1])
        # An accumulator-typed tile (f32, i32) takes the product; the wrong one of the two
        # for these operands is refused there, naming the right one.
        if is_tile(other) and other.type.shape == shape and other.type.dtype in set(
                ACCUMULATOR_DTYPES.values()):
            return self._dot(a, b, other, product_node)
        product = self._dot(a, b, None, product_node)
        if product_on_right:
            return self._binary("+", other, product, node)
        return self._binary("+", product, other, node)


def _is_matmul(node: ast.Expr) -> bool:
    return isinstance(node, ast.BinOp) and node.op == "@"


def _broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """numpy's rule: align at the right; each pair of dims is equal or has a 1."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + a
    b = (1,) * (rank - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b))
