"""Calls: the built-in functions (cdiv, min, max, relu, the math functions of
:data:`tilec.ir.ops.MATH_FUNCTIONS`, zeros, full, where (:mod:`.selects`)), matched to their
parameters by position or keyword, and the tile method ``.to(dtype)``."""
from __future__ import annotations

from typing import Optional, Sequence

from tilec.errors import TileError, TileNameError, TileShapeError, TileTypeError
from tilec.frontend import ast
from tilec.frontend.diagnostics import did_you_mean, start_loc
from tilec.frontend.operands import (BUILTINS, TILE_METHODS, ConstValue, DTypeValue, Operand,
                                     describe, dtype_list, is_scalar, is_tile)
from tilec.frontend.selects import SelectLowering
from tilec.ir.ops import MATH_FUNCTIONS
from tilec.ir.types import F32, FP8_DTYPES, TILE_DTYPES, DType, TileType


class CallLowering(SelectLowering):
    """Lowers calls of built-in functions and of tile methods."""

    def _expr_Call(self, node: ast.Call) -> Operand:
        if isinstance(node.func, ast.Attribute):
            return self._method_call(node, node.func)
        if not isinstance(node.func, ast.Name):
            raise self.error(TileError, "only built-in functions can be called", node.loc)
        name = node.func.id
        if name in self.env:
            raise self.error(TileError, f"'{name}' is not a function", node.func.loc)
        if name in ("grid", "range"):
            where = ("the top-level loop: for m, n in grid(...)" if name == "grid"
                     else "a loop: for k in range(...)")
            raise self.error(TileError, f"{name}(...) can only be the iterable of {where}",
                             node.loc)
        if name in MATH_FUNCTIONS:
            return self._call_math(node, name)
        handler = getattr(self, "_call_" + name, None) if name in BUILTINS else None
        if handler is None:
            known = ", ".join(b for b in BUILTINS if b not in ("grid", "range"))
            hint = did_you_mean(name, BUILTINS) or f"the functions are: {known}"
            raise self.error(TileNameError, f"unknown function '{name}'", node.func.loc, hint)
        return handler(node)

    def _arguments(self, node: ast.Call, name: str, params: Sequence[str],
                   required: int) -> dict[str, ast.Expr]:
        """Match a call's arguments to the parameters of built-in ``name``."""
        usage = f"{name}({', '.join(params)})"
        if len(node.args) > len(params):
            raise self.error(TileError, f"{name}() takes at most {len(params)} arguments",
                             node.args[len(params)].loc, usage)
        bound: dict[str, ast.Expr] = dict(zip(params, node.args))
        for keyword in node.keywords:
            if keyword.name not in params:
                raise self.error(TileError, f"{name}() has no parameter '{keyword.name}'",
                                 keyword.loc, usage)
            if keyword.name in bound:
                raise self.error(TileError, f"{name}() got '{keyword.name}' twice",
                                 keyword.loc, usage)
            bound[keyword.name] = keyword.value
        for param in params[:required]:
            if param not in bound:
                raise self.error(TileError, f"{name}() is missing its '{param}' argument",
                                 node.loc, usage)
        return bound

    def _call_cdiv(self, node: ast.Call) -> Operand:
        args = self._arguments(node, "cdiv", ("a", "b"), 2)
        a, b = self.expr(args["a"]), self.expr(args["b"])
        for value in (a, b):
            if not (isinstance(value, ConstValue) or is_scalar(value)):
                raise self.error(TileTypeError, f"cdiv() takes integers, not {describe(value)}",
                                 node.loc)
        return self._binary("cdiv", a, b, node)

    def _call_min(self, node: ast.Call) -> Operand:
        return self._min_max(node, "min")

    def _call_max(self, node: ast.Call) -> Operand:
        return self._min_max(node, "max")

    def _min_max(self, node: ast.Call, which: str) -> Operand:
        if node.keywords or len(node.args) < 2:
            raise self.error(TileError, f"{which}() takes two or more values", node.loc,
                             f"{which}(a, b)")
        values = [self.expr(arg) for arg in node.args]
        result = values[0]
        for value in values[1:]:
            result = self._binary(which, result, value, node)
        return result

    def _call_relu(self, node: ast.Call) -> Operand:
        value = self.expr(self._arguments(node, "relu", ("x",), 1)["x"])
        if isinstance(value, ConstValue):
            return ConstValue(max(value.value, 0))
        if not is_tile(value):
            raise self.error(TileTypeError, f"relu() takes a tile, not {describe(value)}",
                             node.loc)
        self._require_float_tile(value, "relu()", node)
        return self.builder.value("tile.relu", [value], value.type)

    def _call_math(self, node: ast.Call, name: str) -> Operand:
        """``exp(x)`` ... ``gelu_tanh(x)``: one tile, same shape and dtype (a constant folds)."""
        value = self.expr(self._arguments(node, name, ("x",), 1)["x"])
        if isinstance(value, ConstValue):
            try:
                return ConstValue(float(MATH_FUNCTIONS[name][1](float(value.value))))
            except (ValueError, OverflowError, ZeroDivisionError) as err:
                raise self.error(TileError, f"{name}({value.value}) has no f32 value: {err}",
                                 node.loc) from None
        if not is_tile(value):
            raise self.error(TileTypeError, f"{name}() takes a tile, not {describe(value)}",
                             node.loc)
        self._require_float_tile(value, f"{name}()", node)
        return self.builder.value(f"tile.{name}", [value], value.type)

    def _call_zeros(self, node: ast.Call) -> Operand:
        args = self._arguments(node, "zeros", ("shape", "dtype"), 1)
        shape = self._tile_shape(args["shape"])
        dtype = self._tile_dtype(args.get("dtype"), node)
        return self.builder.value("tile.full", [], TileType(dtype, shape), shape=shape,
                                  value=0.0)

    def _call_full(self, node: ast.Call) -> Operand:
        args = self._arguments(node, "full", ("shape", "value", "dtype"), 2)
        shape = self._tile_shape(args["shape"])
        value = self.expr(args["value"])
        dtype = self._tile_dtype(args.get("dtype"), node)
        result = TileType(dtype, shape)
        if isinstance(value, ConstValue):
            return self.builder.value("tile.full", [], result, shape=shape,
                                      value=self._float_constant(value.value,
                                                                 start_loc(args["value"])))
        if is_scalar(value) and value.type.dtype == F32:
            splat = self.builder.value("tile.splat", [value], TileType(F32, shape),
                                       shape=shape)
            return self._cast(splat, dtype)
        raise self.error(TileTypeError, f"full() fills with a number or an f32 scalar, not "
                         f"{describe(value)}", args["value"].loc)

    def _tile_shape(self, node: ast.Expr) -> tuple[int, ...]:
        items = node.elts if isinstance(node, (ast.ListExpr, ast.TupleExpr)) else (node,)
        if not 1 <= len(items) <= 2:
            raise self.error(TileShapeError, f"tiles have 1 or 2 dims, not {len(items)}",
                             node.loc)
        return tuple(self._constant_size(item, "a tile dimension") for item in items)

    def _tile_dtype(self, node: Optional[ast.Expr], call: ast.Call,
                    converting: bool = False) -> DType:
        """The dtype argument of zeros / full, or of .to() (``converting``), which also
        takes the 8-bit floats: tiles are not made in them, only converted to them to be
        stored (an fp8 output)."""
        if node is None:
            return F32
        taken = TILE_DTYPES + FP8_DTYPES if converting else TILE_DTYPES
        value = self.expr(node)
        if not isinstance(value, DTypeValue):
            raise self.error(TileTypeError, f"expected a dtype ({dtype_list(taken)}), "
                             f"got {describe(value)}", node.loc)
        if value.dtype not in taken:
            raise self.error(TileTypeError, f"tiles are made in {dtype_list(TILE_DTYPES)}, "
                             f"not {value.dtype}", node.loc,
                             f"make it in f32 and convert it: .to({value.dtype})"
                             if value.dtype in FP8_DTYPES else "")
        return value.dtype

    def _method_call(self, node: ast.Call, method: ast.Attribute) -> Operand:
        if method.attr not in TILE_METHODS:
            raise self.error(TileError, f"unknown method '.{method.attr}()'", method.loc,
                             "tiles have .to(dtype) and .T")
        value = self.expr(method.value)
        args = self._arguments(node, "to", ("dtype",), 1)
        dtype = self._tile_dtype(args["dtype"], node, converting=True)
        if not is_tile(value):
            raise self.error(TileTypeError, f".to() converts tiles, not {describe(value)}",
                             method.loc)
        with self.builder.located(method.loc):
            return self._cast(value, dtype)
