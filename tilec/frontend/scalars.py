"""The base layer of lowering: its state (the environment of names, the IR builder), the
dispatch of expressions, names and literals, compile-time folding, and arithmetic on i32 / f32
scalars and indices."""
from __future__ import annotations

import operator

import struct
from typing import Optional, Union

from tilec.errors import TileError, TileNameError, TileShapeError, TileTypeError
from tilec.frontend import ast
from tilec.frontend.arithmetic import FOLD, INTEGER_ONLY, SCALAR_OPS
from tilec.frontend.diagnostics import LocatedErrors, did_you_mean, spelled, start_loc
from tilec.frontend.operands import (BUILTINS, DTYPES, Binding, ConstValue, DTypeValue,
                                     Operand, describe, is_scalar)
from tilec.ir.core import Block, Builder, Loc, Value
from tilec.ir.types import F32, I32, DType, ScalarType

# The range of the DSL's integers (i32) as PTX's .s32 holds them.
I32_MIN, I32_MAX = -2**31, 2**31 - 1


class ScalarLowering:
    """Lowers names, numbers and scalar arithmetic; the layers above add tiles, calls,
    tensor accesses and statements."""

    def __init__(self, func: ast.FunctionDef, source_lines: tuple[str, ...]):
        self.func = func
        self.source_lines = source_lines
        self.errors = LocatedErrors(source_lines)
        self.loc: Loc = func.loc  # the node being lowered: where internal errors point
        self.env: dict[str, Binding] = {}
        self.builder = Builder(Block())
        # The kernel's top level: batch views of tensors (tensor.batch) go there, right
        # after the grid, once per (tensor, program id).
        self.kernel_block = self.builder.block
        self.batch_views: dict[tuple[Value, Value], Value] = {}
        # Names bound only inside a finished loop -> that loop's place, for a better error
        # than "unknown name" when they are used after it.
        self.loop_locals: dict[str, tuple[Loc, bool]] = {}
        # While lowering the grid sizes: the program ids about to be defined.
        self.grid_targets: Optional[set[str]] = None
        # Names in the sides of compile-time `if`s not taken (never lowered).
        self.untaken_names: set[str] = set()
        # While lowering the condition of an `if` statement: that statement.
        self.branch_test: Optional[ast.IfStmt] = None

    def error(self, cls: type[TileError], message: str, loc: Optional[Loc],
              hint: str = "") -> TileError:
        return self.errors.at(cls, message, loc, hint)

    def expr(self, node: ast.Expr) -> Operand:
        self.loc = node.loc
        method = getattr(self, "_expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(TileError, "this is not an expression", node.loc)
        with self.builder.located(node.loc):
            return method(node)

    def _expr_Constant(self, node: ast.Constant) -> Operand:
        if node.value is None:
            raise self.error(TileError, "None is only meaningful in t[:, None] and t[None, :]",
                             node.loc)
        return ConstValue(node.value)

    def _expr_Name(self, node: ast.Name) -> Operand:
        binding = self.env.get(node.id)
        if binding is not None:
            if self.grid_targets is not None and binding.kind == "param":
                raise self.error(TileError, f"grid sizes may use only shape symbols and "
                                 f"constants; '{node.id}' is a parameter", node.loc)
            return binding.value
        if node.id in DTYPES:
            return DTypeValue(DTYPES[node.id])
        if node.id in BUILTINS:
            raise self.error(TileError, f"'{node.id}' is a function: call it", node.loc)
        if self.grid_targets is not None and node.id in self.grid_targets:
            raise self.error(TileError, "grid sizes cannot depend on the program ids",
                             node.loc, "use shape symbols and constants: cdiv(M, BM)")
        if node.id in self.loop_locals:
            loop_loc, is_loop_var = self.loop_locals[node.id]
            what = "the loop variable of" if is_loop_var else "assigned only inside"
            hint = "" if is_loop_var else "to use it after the loop, assign it before the loop"
            raise self.error(TileNameError, f"'{node.id}' is {what} the loop at line "
                             f"{loop_loc.line}; it does not exist after that loop", node.loc,
                             hint)
        candidates = list(self.env) + list(DTYPES) + list(BUILTINS)
        raise self.error(TileNameError, f"unknown name '{node.id}'", node.loc,
                         did_you_mean(node.id, candidates))

    def _expr_ListExpr(self, node: ast.ListExpr) -> Operand:
        raise self.error(TileError, "a list is only meaningful as a tile shape, as in "
                         "zeros([BM, BN], f32)", node.loc)

    def _expr_TupleExpr(self, node: ast.TupleExpr) -> Operand:
        raise self.error(TileError, "a tuple is only meaningful as a tile shape, as in "
                         "zeros((BM, BN), f32)", node.loc)

    def _expr_Compare(self, node: ast.Compare) -> Operand:
        left, right = self.expr(node.left), self.expr(node.right)
        self._compile_time(node, left, right)
        return ConstValue(int(COMPARE[node.op](left.value, right.value)))

    def _expr_BoolOp(self, node: ast.BoolOp) -> Operand:
        left = self.expr(node.left)
        self._compile_time(node, left)
        if (node.op == "and") != bool(left.value):  # Python's short circuit
            return left
        right = self.expr(node.right)
        self._compile_time(node, right)
        return right

    def _compile_time(self, node: ast.Node, *values: Operand) -> None:
        """Comparisons and and/or/not decide at compile time: their operands are constants."""
        for value in values:
            if not isinstance(value, ConstValue) and self.branch_test is not None:
                raise self.error(TileTypeError, f"`if` cannot branch on {describe(value)}, "
                                 "known only when the kernel runs: `if` decides when "
                                 "compiling", node.loc, RUNTIME_IF_HINT)
            if not isinstance(value, ConstValue):
                raise self.error(TileTypeError, f"`{node.op}` takes compile-time constants "
                                 f"(constant parameters, numbers), not {describe(value)}",
                                 node.loc, BRANCH_HINT)

    def _expr_Unsupported(self, node: ast.Unsupported) -> Operand:
        raise self.error(TileError, node.message, node.loc, node.hint)

    def _fold(self, op: str, a: Union[int, float], b: Union[int, float],
              node: ast.Node) -> ConstValue:
        if op in INTEGER_ONLY and not (isinstance(a, int) and isinstance(b, int)):
            raise self.error(TileTypeError, f"{spelled(op, 'a', 'b')} takes integers, got "
                             f"{a} and {b}", node.loc)
        if op in ("/", "//", "%", "cdiv") and b == 0:
            raise self.error(TileError, "division by zero in a constant expression", node.loc)
        if op == "cdiv" and b < 0:
            raise self.error(TileError, "cdiv by a negative number", node.loc)
        return ConstValue(FOLD[op](a, b))

    def _scalar_binary(self, op: str, left: Operand, right: Operand,
                       node: ast.Node) -> Value:
        dtypes = {side.type.dtype for side in (left, right) if isinstance(side, Value)}
        if len(dtypes) > 1:
            raise self.error(TileTypeError, "cannot combine an i32 scalar with an f32 scalar",
                             node.loc)
        dtype = dtypes.pop()
        if dtype == I32 and op == "/":
            raise self.error(TileTypeError, "'/' divides floats; integers use '//'", node.loc)
        if dtype == F32 and op in INTEGER_ONLY:
            raise self.error(TileTypeError, f"{spelled(op, 'a', 'b')} takes integers, not f32 "
                             "scalars", node.loc)
        if op in INTEGER_ONLY and isinstance(right, ConstValue) and right.value <= 0:
            raise self.error(TileError, f"{spelled(op, 'a', 'b')} needs a positive divisor",
                             node.loc)
        operands = [self._scalar_operand(side, dtype, node) for side in (left, right)]
        return self.builder.value(f"arith.{SCALAR_OPS[op]}", operands, ScalarType(dtype))

    def _scalar_operand(self, value: Operand, dtype: DType, node: ast.Node) -> Value:
        if isinstance(value, ConstValue):
            if dtype == I32 and not isinstance(value.value, int):
                raise self.error(TileTypeError, f"{value.value} is not an integer, and this "
                                 "is integer arithmetic", node.loc)
            return self._scalar_constant(value, dtype, node.loc)
        assert isinstance(value, Value)
        return value

    def _scalar_constant(self, value: ConstValue, dtype: DType,
                         loc: Optional[Loc] = None) -> Value:
        """The constant as an IR value; an integer that i32 cannot hold is refused here,
        where a folded constant (65536 * 65536) first becomes a run-time value, rather than
        wrapping silently or reaching the PTX as a number ptxas rejects."""
        if dtype == I32 and not I32_MIN <= value.value <= I32_MAX:
            raise self.error(TileTypeError, f"the integer {value.value} does not fit in i32 "
                             f"({I32_MIN}..{I32_MAX})", loc or self.loc,
                             "indices, bounds and integer scalars in tile programs are i32")
        number = value.value if dtype == I32 else self._float_constant(value.value, loc)
        return self.builder.value("arith.constant", [], ScalarType(dtype), value.name,
                                  value=number)

    def _float_constant(self, number: Union[int, float], loc: Optional[Loc] = None) -> float:
        """``number`` as the f32 constant it becomes in the PTX; a finite number beyond
        f32's range (1e40) is refused rather than crashing the backend. (inf, as 1e400
        reads in Python, stays inf.)"""
        try:
            struct.pack(">f", float(number))  # as the backend packs it
        except (OverflowError, struct.error):
            raise self.error(TileTypeError, f"the number {number:g} is outside f32's range "
                             "(about ±3.4e38)", loc or self.loc) from None
        return float(number)

    def _constant_size(self, node: ast.Expr, what: str) -> int:
        value = self.expr(node)
        if not isinstance(value, ConstValue):
            raise self.error(TileShapeError, f"{what} must be a compile-time constant",
                             start_loc(node),
                             "use constants (BM=128), integer literals and arithmetic on them")
        if not isinstance(value.value, int):
            raise self.error(TileShapeError, f"{what} must be an integer, not {value.value}",
                             start_loc(node), "use // for integer division")
        if value.value <= 0:
            raise self.error(TileShapeError, f"{what} must be positive, not {value.value}",
                             start_loc(node))
        return value.value

    def _index(self, value: Operand, node: ast.Node, what: str) -> Value:
        """An i32 run-time value for an offset, a bound or a grid size."""
        if isinstance(value, ConstValue):
            if not isinstance(value.value, int):
                raise self.error(TileTypeError, f"{what} must be an integer, not "
                                 f"{value.value}", start_loc(node))
            with self.builder.located(start_loc(node)):
                return self._scalar_constant(value, I32, start_loc(node))
        if is_scalar(value) and value.type.dtype == I32:
            return value
        raise self.error(TileTypeError, f"{what} must be an integer scalar, not "
                         f"{describe(value)}", start_loc(node))


COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "==": operator.eq, "!=": operator.ne}
# Said wherever a branch or a comparison meets a value known only when the kernel runs.
BRANCH_HINT = ("tile programs branch only when compiling; on tiles select elementwise with "
               "where(x > 0, x, 0.01 * x) (or max, min, relu)")
# Said where an `if` statement meets a value known only when the kernel runs.
RUNTIME_IF_HINT = ("select elementwise instead: y = where(x > 0, a, b) takes a where the "
                   "comparison holds and b elsewhere")

