"""AST to IR: checks what a tile function means and lowers it to a :class:`tilec.ir.Kernel`.

Every semantic error (unknown names, dtypes, shapes, ranks, non-constant tile sizes, misplaced
grids...) is raised here as a :class:`TileError` pointing at the user's source, before any IR
is returned; the IR handed back passes :func:`tilec.ir.verify`.

Before::

    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m*BM : +BM, k : +BK] @ B[k : +BK, n*BN : +BN]

After (abridged)::

    %m, %n = tile.grid %0, %1 : i32, i32
    %acc = tile.full {shape = [128, 128], value = 0.0} : tile<f32,[128,128]>
    %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 32} (%k: i32, %acc.2: ...) {
      ...
      %acc.3 = tile.dot %5, %8, %acc.2 : tile<f32,[128,128]>
      scf.yield %acc.3
    }
"""
from __future__ import annotations

import difflib
import numbers
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from tilec.errors import (TileError, TileNameError, TileShapeError, TileTypeError, located)
from tilec.frontend import ast
from tilec.ir.core import Block, Builder, Kernel, Loc, Op, Param, Value
from tilec.ir.ops import IRError
from tilec.ir.types import (BF16, F16, F32, I32, TENSOR_DTYPES, Dim, DType, ScalarType,
                            TensorType, TileType)
from tilec.ir.verifier import verify

DTYPES = {"f16": F16, "bf16": BF16, "f32": F32, "i32": I32}
SCALAR_PARAM_DTYPES = (F32, I32)
BUILTINS = ("grid", "range", "cdiv", "min", "max", "zeros", "full", "relu")
TILE_METHODS = ("to",)


# ------------------------------------------------------------------------------ signature

@dataclass(frozen=True)
class ParamInfo:
    """A run-time parameter: a tensor (``dims`` are symbols or sizes) or a scalar."""

    name: str
    kind: str  # "tensor" or "scalar"
    dtype: DType
    dims: tuple[Dim, ...]
    loc: Loc

    @property
    def type(self) -> Union[TensorType, ScalarType]:
        if self.kind == "tensor":
            return TensorType(self.dtype, self.dims)
        return ScalarType(self.dtype)


@dataclass(frozen=True)
class Signature:
    """What a tile function takes: run-time parameters, the shape symbols bound from their
    dims (in order of first appearance) and the compile-time constants with their defaults."""

    name: str
    params: tuple[ParamInfo, ...]
    symbols: tuple[str, ...]
    consts: dict[str, Union[int, float]]
    const_locs: dict[str, Loc] = field(compare=False, repr=False)


def signature(func: ast.FunctionDef) -> Signature:
    """Check the parameter list of ``func`` and describe it."""
    errors = _Errors(func.source_lines)
    params: list[ParamInfo] = []
    consts: dict[str, Union[int, float]] = {}
    const_locs: dict[str, Loc] = {}
    symbols: dict[str, Loc] = {}
    seen: set[str] = set()
    for param in func.params:
        assert not isinstance(param, ast.Unsupported)  # the parser refused those
        if param.name in seen:
            raise errors.at(TileNameError, f"duplicate parameter '{param.name}'", param.loc)
        if param.name in DTYPES or param.name in BUILTINS:
            raise errors.at(TileNameError, f"parameter '{param.name}' hides the built-in "
                            f"'{param.name}'", param.loc, "choose another name")
        seen.add(param.name)
        if isinstance(param, ast.ConstParam):
            consts[param.name] = _default_value(param, errors)
            const_locs[param.name] = param.loc
        elif isinstance(param, ast.ScalarParam):
            dtype = _dtype(param.dtype, errors)
            if dtype not in SCALAR_PARAM_DTYPES:
                raise errors.at(TileTypeError, f"scalar parameters are f32 or i32, not {dtype}",
                                param.dtype.loc,
                                f"for a tensor give its dims: {param.name}: {dtype}[M, K]")
            params.append(ParamInfo(param.name, "scalar", dtype, (), param.loc))
        else:
            dtype = _dtype(param.dtype, errors)
            if dtype not in TENSOR_DTYPES:
                raise errors.at(TileTypeError, f"tensors hold f16, bf16 or f32, not {dtype}",
                                param.dtype.loc)
            if not 1 <= len(param.dims) <= 2:
                raise errors.at(TileShapeError, f"tensors have 1 or 2 dims; '{param.name}' has "
                                f"{len(param.dims)}", param.loc)
            dims: list[Dim] = []
            for dim in param.dims:
                if isinstance(dim, ast.Name):
                    symbols.setdefault(dim.id, dim.loc)
                    dims.append(dim.id)
                elif isinstance(dim.value, int) and dim.value > 0:
                    dims.append(dim.value)
                else:
                    raise errors.at(TileShapeError, "a tensor dimension is a shape symbol (M) or "
                                    "a positive integer", dim.loc)
            params.append(ParamInfo(param.name, "tensor", dtype, tuple(dims), param.loc))
    for symbol, loc in symbols.items():
        if symbol in seen:
            raise errors.at(TileNameError, f"'{symbol}' names both a shape symbol and a "
                            "parameter", loc, "give the dimension another name")
        if symbol in DTYPES or symbol in BUILTINS:
            raise errors.at(TileNameError, f"shape symbol '{symbol}' hides the built-in "
                            f"'{symbol}'", loc)
    return Signature(func.name, tuple(params), tuple(symbols), consts, const_locs)


def _dtype(name: ast.Name, errors: "_Errors") -> DType:
    if name.id not in DTYPES:
        raise errors.at(TileTypeError, f"unknown dtype '{name.id}'", name.loc,
                        _did_you_mean(name.id, DTYPES) or "dtypes are f16, bf16, f32 and i32")
    return DTYPES[name.id]


def _default_value(param: ast.ConstParam, errors: "_Errors") -> Union[int, float]:
    node, sign = param.default, 1
    while isinstance(node, ast.UnaryOp):
        sign = -sign if node.op == "-" else sign
        node = node.operand
    if not isinstance(node, ast.Constant) or node.value is None:
        raise errors.at(TileTypeError, f"the default of constant '{param.name}' must be a "
                        "number", param.default.loc, f"for example {param.name}=128")
    return sign * node.value


def resolve_consts(sig: Signature, overrides: Optional[dict[str, Any]], loc: Loc,
                   source_lines: Sequence[str]) -> dict[str, Union[int, float]]:
    """The constants' final values: defaults, replaced by the user's overrides."""
    errors = _Errors(source_lines)
    consts = dict(sig.consts)
    for name, value in (overrides or {}).items():
        if name not in consts:
            known = ", ".join(consts) or "none"
            hint = _did_you_mean(name, consts)
            raise errors.at(TileNameError, f"unknown constant '{name}' for '{sig.name}' "
                            f"(its constants: {known})", loc, hint)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise errors.at(TileTypeError, f"constant '{name}' must be a number, got "
                            f"{value!r}", sig.const_locs.get(name, loc))
        if isinstance(consts[name], int):
            if not isinstance(value, numbers.Integral):
                raise errors.at(TileTypeError, f"constant '{name}' is an integer, got "
                                f"{value!r}", sig.const_locs.get(name, loc))
            value = int(value)
        else:
            value = float(value)
        consts[name] = value
    return consts


# ------------------------------------------------------------------- values while lowering

@dataclass(frozen=True)
class ConstValue:
    """A compile-time number. ``name`` (the constant's, if it is one) becomes the hint of the
    ``arith.constant`` emitted where a run-time value is needed."""

    value: Union[int, float]
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class DTypeValue:
    dtype: DType


Operand = Union[Value, ConstValue, DTypeValue]


@dataclass
class Binding:
    """What a name stands for: ``kind`` is param, symbol, const, program_id, loop_var or var;
    ``loc`` is where it was last bound."""

    value: Operand
    kind: str
    loc: Loc


class _Errors:
    def __init__(self, source_lines: Sequence[str]):
        self.source_lines = tuple(source_lines)

    def at(self, cls: type[TileError], message: str, loc: Optional[Loc],
           hint: str = "") -> TileError:
        return located(cls, message, loc, self.source_lines, hint)


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"did you mean '{close[0]}'?" if close else ""


def _article(dtype: DType) -> str:
    """"an f16", "a bf16": the article follows how the dtype is read out."""
    return "an" if str(dtype)[0] in "fi" else "a"


def _plural(count: int, noun: str, plural: str = "") -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {plural or noun + 's'}"


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _is_tile(value: Operand) -> bool:
    return isinstance(value, Value) and isinstance(value.type, TileType)


def _is_tensor(value: Operand) -> bool:
    return isinstance(value, Value) and isinstance(value.type, TensorType)


def _is_scalar(value: Operand) -> bool:
    return isinstance(value, Value) and isinstance(value.type, ScalarType)


def _is_matmul(node: ast.Expr) -> bool:
    return isinstance(node, ast.BinOp) and node.op == "@"


def _describe(value: Operand) -> str:
    if isinstance(value, ConstValue):
        return f"the number {value.value}"
    if isinstance(value, DTypeValue):
        return f"the dtype {value.dtype}"
    vtype = value.type
    if isinstance(vtype, TensorType):
        return f"the tensor '{value.hint}'" if value.hint else "a tensor"
    article = _article(vtype.dtype)
    if isinstance(vtype, TileType):
        return f"{article} {vtype.dtype} tile {_shape_text(vtype.shape)}"
    return f"{article} {vtype.dtype} scalar"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# Operators by their DSL spelling: the arith / tile op names and the compile-time fold.
_SCALAR_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "//": "floordiv", "%": "mod",
               "cdiv": "cdiv", "min": "min", "max": "max"}
_TILE_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div", "min": "min", "max": "max"}
_FOLD: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "cdiv": _cdiv, "min": min, "max": max}
_INTEGER_ONLY = ("//", "%", "cdiv")


def _spelled(op: str, left: str, right: str) -> str:
    """How the operation reads in a message: ``f16 + bf16`` or ``max(f16, bf16)``."""
    return f"{op}({left}, {right})" if op.isidentifier() else f"{left} {op} {right}"


# ------------------------------------------------------------------------------- lowering

def lower(func: ast.FunctionDef, consts: Optional[dict[str, Any]] = None,
          source_lines: Optional[Sequence[str]] = None) -> Kernel:
    """Lower ``func`` with its constants (defaults replaced by ``consts``) to a verified
    kernel. ``source_lines`` default to the lines the parser kept on ``func``."""
    lines = tuple(source_lines) if source_lines is not None else func.source_lines
    lowering = _Lowering(func, lines)
    try:
        kernel = lowering.run(consts)
        verify(kernel)
    except TileError:
        raise
    except IRError as err:
        raise lowering.errors.at(TileError, f"internal compiler error: the frontend built "
                                 f"invalid IR: {err}", lowering.loc) from err
    except Exception as err:  # a compiler bug still points at the user's code
        raise lowering.errors.at(TileError, f"internal compiler error while lowering: "
                                 f"{type(err).__name__}: {err}", lowering.loc) from err
    return kernel


class _Lowering:
    def __init__(self, func: ast.FunctionDef, source_lines: tuple[str, ...]):
        self.func = func
        self.source_lines = source_lines
        self.errors = _Errors(source_lines)
        self.loc: Loc = func.loc  # the node being lowered: where internal errors point
        self.env: dict[str, Binding] = {}
        self.builder = Builder(Block())
        # Names bound only inside a finished loop -> that loop's place, for a better error
        # than "unknown name" when they are used after it.
        self.loop_locals: dict[str, tuple[Loc, bool]] = {}
        # While lowering the grid sizes: the program ids about to be defined.
        self.grid_targets: Optional[set[str]] = None

    def error(self, cls: type[TileError], message: str, loc: Optional[Loc],
              hint: str = "") -> TileError:
        return self.errors.at(cls, message, loc, hint)

    # ---- the kernel
    def run(self, overrides: Optional[dict[str, Any]]) -> Kernel:
        func = self.func
        sig = signature(func)
        consts = resolve_consts(sig, overrides, func.loc, self.source_lines)
        body = self.builder.block
        params: list[Param] = []
        for info in sig.params:
            params.append(Param(info.name, info.type, info.loc))
            self.env[info.name] = Binding(body.add_arg(info.type, info.name), "param",
                                          info.loc)
        for symbol in sig.symbols:
            self.env[symbol] = Binding(body.add_arg(ScalarType(I32), symbol), "symbol",
                                       func.loc)
        for name, value in consts.items():
            self.env[name] = Binding(ConstValue(value, name), "const", sig.const_locs[name])
        self._kernel_body(func)
        return Kernel(func.name, params, list(sig.symbols), consts, body, func.file,
                      self.source_lines)

    def _kernel_body(self, func: ast.FunctionDef) -> None:
        statements = [s for s in func.body if not isinstance(s, ast.PassStmt)]
        grid_loops = [s for s in statements if _is_grid_loop(s)]
        for stmt in statements:
            if _is_grid_loop(stmt) and stmt is grid_loops[0]:
                continue
            if _is_grid_loop(stmt):
                raise self.error(TileError, "a tile function has a single grid loop", stmt.loc,
                                 "put all the work inside the first grid loop")
            if isinstance(stmt, ast.ForStmt):
                raise self.error(TileError, "the top-level loop of a tile function must be "
                                 "`for ... in grid(...)`", stmt.loc,
                                 "range loops go inside the grid loop")
            raise self.error(TileError, "a tile function's body is a single "
                             "`for ... in grid(...)` loop; this statement is outside it",
                             stmt.loc, "move it inside the grid loop")
        if not grid_loops:
            raise self.error(TileError, f"'{func.name}' has no grid loop", func.loc,
                             "its body must be `for pid in grid(...):` around all the work")
        self._grid(grid_loops[0])

    def _grid(self, loop: ast.ForStmt) -> None:
        call = loop.iter
        assert isinstance(call, ast.Call)
        if call.keywords:
            raise self.error(TileError, "grid() takes no keyword arguments",
                             call.keywords[0].loc)
        if not 1 <= len(call.args) <= 3:
            raise self.error(TileShapeError, f"a grid has 1 to 3 axes, not {len(call.args)}",
                             call.loc)
        if len(loop.targets) != len(call.args):
            axes = _plural(len(call.args), "axis", "axes")
            ids = _plural(len(loop.targets), "program id")
            raise self.error(TileShapeError, f"the grid has {axes} but the loop names {ids}",
                             loop.targets[0].loc, "name one program id per grid size: "
                             "for m, n in grid(cdiv(M, BM), cdiv(N, BN))")
        for i, target in enumerate(loop.targets):
            self._check_new_name(target, "program id")
            if target.id in [t.id for t in loop.targets[:i]]:
                raise self.error(TileNameError, f"program id '{target.id}' is named twice",
                                 target.loc)
        self.grid_targets = {t.id for t in loop.targets}
        sizes = [self._index(self.expr(arg), arg, "a grid size") for arg in call.args]
        self.grid_targets = None
        with self.builder.located(loop.loc):
            op = self.builder.op("tile.grid", sizes, [ScalarType(I32)] * len(sizes),
                                 hints=[t.id for t in loop.targets])
        for target, pid in zip(loop.targets, op.results):
            self.env[target.id] = Binding(pid, "program_id", target.loc)
        self._statements(loop.body)

    # ---- statements
    def _statements(self, statements: Sequence[ast.Stmt]) -> None:
        for stmt in statements:
            self.loc = stmt.loc
            with self.builder.located(stmt.loc):
                if isinstance(stmt, ast.ForStmt):
                    self._range_loop(stmt)
                elif isinstance(stmt, ast.Assign):
                    self._assign(stmt.target, stmt.value, None, stmt.loc)
                elif isinstance(stmt, ast.AugAssign):
                    value = ast.BinOp(stmt.target, stmt.op, stmt.value, loc=stmt.op_loc)
                    self._assign(stmt.target, value, stmt.op, stmt.loc)
                elif isinstance(stmt, ast.ExprStmt):
                    self.expr(stmt.value)
                    raise self.error(TileError, "this expression's value is not used",
                                     stmt.loc, "assign it to a name, or store it into a "
                                     "tensor: C[... : +BM, ...] = value")
                elif not isinstance(stmt, ast.PassStmt):
                    raise self.error(TileError, "this statement is not supported in tile "
                                     "programs", stmt.loc)

    def _assign(self, target: ast.Expr, value_node: ast.Expr, augmented: Optional[str],
                loc: Loc) -> None:
        if isinstance(target, ast.Name):
            self._check_assignable(target)
            value = self.expr(value_node)
            if isinstance(value, ConstValue) and not value.name:
                value = ConstValue(value.value, target.id)
            elif isinstance(value, Value) and not value.hint and isinstance(value.owner, Op):
                value.hint = target.id  # names the IR after the user's variables
            self.env[target.id] = Binding(value, "var", loc)
        elif isinstance(target, ast.Subscript):
            value = self.expr(value_node)
            self._store(target, value, value_node)
        else:
            what = f"`{augmented}=`" if augmented else "assignment"
            raise self.error(TileError, f"cannot use {what} on this expression", target.loc,
                             "assign to a name, or store into a tensor: "
                             "C[... : +BM, ...] = tile")

    def _check_assignable(self, target: ast.Name) -> None:
        binding = self.env.get(target.id)
        messages = {
            "param": (f"cannot assign to parameter '{target.id}'",
                      "parameters are read-only: store into a tensor with "
                      f"{target.id}[... : +SIZE] = tile, or use a new name"),
            "symbol": (f"cannot assign to shape symbol '{target.id}'", "use a new name"),
            "const": (f"cannot assign to compile-time constant '{target.id}'",
                      "constants take their default or an override when compiling"),
            "program_id": (f"cannot assign to program id '{target.id}'", "use a new name"),
            "loop_var": (f"cannot assign to loop variable '{target.id}'", "use a new name"),
        }
        if binding is not None and binding.kind in messages:
            message, hint = messages[binding.kind]
            raise self.error(TileError, message, target.loc, hint)
        if binding is None and (target.id in DTYPES or target.id in BUILTINS):
            raise self.error(TileError, f"cannot assign to the built-in name '{target.id}'",
                             target.loc, "use a new name")

    def _check_new_name(self, target: ast.Name, what: str) -> None:
        if target.id in self.env or target.id in DTYPES or target.id in BUILTINS:
            raise self.error(TileNameError, f"{what} '{target.id}' hides an existing name",
                             target.loc, "choose a name not used before")

    def _range_loop(self, loop: ast.ForStmt) -> None:
        call = loop.iter
        if _is_grid_loop(loop):
            raise self.error(TileError, "grid loops cannot be nested: only the top-level loop "
                             "of a tile function is a grid", call.loc,
                             "loops inside the grid iterate over range(...)")
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id == "range"):
            raise self.error(TileError, "loops inside the grid iterate over range(...)",
                             call.loc, "for k in range(0, K, BK):")
        if len(loop.targets) != 1:
            raise self.error(TileError, "a range loop has one loop variable",
                             loop.targets[1].loc)
        if call.keywords:
            raise self.error(TileError, "range() takes no keyword arguments",
                             call.keywords[0].loc)
        if not 1 <= len(call.args) <= 3:
            raise self.error(TileError, f"range() takes 1 to 3 arguments, not {len(call.args)}",
                             call.loc)
        target = loop.targets[0]
        self._check_new_name(target, "loop variable")
        # range(stop), range(start, stop) or range(start, stop, step), as in Python.
        args = list(call.args)
        start_node = args.pop(0) if len(args) > 1 else None
        stop_node = args.pop(0)
        step_node = args[0] if args else None
        start = self.expr(start_node) if start_node else ConstValue(0)
        stop = self.expr(stop_node)
        step = self.expr(step_node) if step_node else ConstValue(1)
        if not (isinstance(step, ConstValue) and isinstance(step.value, int)
                and step.value > 0):
            raise self.error(TileError, "the loop step must be a positive compile-time "
                             "integer", _start_loc(step_node or call),
                             "use a constant such as BK")
        lower_bound = self._index(start, start_node or call, "the loop start")
        upper_bound = self._index(stop, stop_node, "the loop stop")
        step_value = self._index(step, step_node or call, "the loop step")

        # Loop-carried values: names bound before the loop and assigned in it.
        carried = [name for name in _assigned_names(loop.body)
                   if name in self.env and self.env[name].kind == "var"]
        inits = [self._carry_in(name) for name in carried]
        body = Block()
        induction = body.add_arg(ScalarType(I32), target.id)
        outer_env = self.env
        self.env = dict(outer_env)
        self.env[target.id] = Binding(induction, "loop_var", target.loc)
        for name, init in zip(carried, inits):
            self.env[name] = Binding(body.add_arg(init.type, name), "var",
                                     outer_env[name].loc)
        with self.builder.at(body):
            self._statements(loop.body)
            yielded = [self._carry_out(name, init.type) for name, init in zip(carried, inits)]
            with self.builder.located(loop.loc):
                self.builder.op("scf.yield", yielded)
        inner_env, self.env = self.env, outer_env
        for name in inner_env:
            if name not in outer_env:
                self.loop_locals[name] = (loop.loc, name == target.id)
        with self.builder.located(loop.loc):
            op = self.builder.op("scf.for", [lower_bound, upper_bound, step_value, *inits],
                                 [init.type for init in inits], {"step_const": step.value},
                                 [body], hints=carried)
        for name, result in zip(carried, op.results):
            self.env[name] = Binding(result, "var", inner_env[name].loc)

    def _carry_in(self, name: str) -> Value:
        binding = self.env[name]
        value = binding.value
        if isinstance(value, ConstValue):
            with self.builder.located(binding.loc):
                dtype = I32 if isinstance(value.value, int) else F32
                return self._scalar_constant(value, dtype)
        if isinstance(value, Value) and isinstance(value.type, (TileType, ScalarType)):
            return value
        raise self.error(TileError, f"'{name}' holds {_describe(value)}, which cannot change "
                         "inside a loop", binding.loc, "use a new name inside the loop")

    def _carry_out(self, name: str, expected: Union[TileType, ScalarType]) -> Value:
        binding = self.env[name]
        value = binding.value
        if isinstance(value, ConstValue) and isinstance(expected, ScalarType):
            if expected.dtype == F32 or isinstance(value.value, int):
                with self.builder.located(binding.loc):
                    return self._scalar_constant(value, expected.dtype)
        if isinstance(value, Value) and value.type == expected:
            return value
        now = value.type if isinstance(value, Value) else _describe(value)
        hint = "a value carried around a loop keeps its type"
        if (isinstance(now, TileType) and isinstance(expected, TileType)
                and now.dtype != expected.dtype):
            hint += f"; convert it with .to({expected.dtype})"
        raise self.error(TileTypeError, f"'{name}' changes type inside the loop: {expected} "
                         f"before it, {now} here", binding.loc, hint)

    # ---- expressions
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
                         _did_you_mean(node.id, candidates))

    def _expr_ListExpr(self, node: ast.ListExpr) -> Operand:
        raise self.error(TileError, "a list is only meaningful as a tile shape, as in "
                         "zeros([BM, BN], f32)", node.loc)

    def _expr_TupleExpr(self, node: ast.TupleExpr) -> Operand:
        raise self.error(TileError, "a tuple is only meaningful as a tile shape, as in "
                         "zeros((BM, BN), f32)", node.loc)

    def _expr_Unsupported(self, node: ast.Unsupported) -> Operand:
        raise self.error(TileError, node.message, node.loc, node.hint)

    def _expr_UnaryOp(self, node: ast.UnaryOp) -> Operand:
        value = self.expr(node.operand)
        if isinstance(value, (DTypeValue,)) or _is_tensor(value):
            raise self.error(TileTypeError, f"cannot apply unary '{node.op}' to "
                             f"{_describe(value)}", node.loc)
        if node.op == "+":
            return value
        if isinstance(value, ConstValue):
            return ConstValue(-value.value)
        if _is_tile(value):
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
        return self._binary(node.op, left, right, node)

    def _binary(self, op: str, left: Operand, right: Operand, node: ast.Node) -> Operand:
        """``left op right`` for any mix of numbers, scalars and tiles; ``op`` is an operator
        or ``min`` / ``max`` / ``cdiv``."""
        for side in (left, right):
            if isinstance(side, DTypeValue) or _is_tensor(side):
                hint = ("load a tile first: A[off : +SIZE, ...]" if _is_tensor(side) else "")
                raise self.error(TileTypeError, f"cannot use {_describe(side)} in "
                                 f"{_spelled(op, 'a', 'b')}", node.loc, hint)
        if isinstance(left, ConstValue) and isinstance(right, ConstValue):
            return self._fold(op, left.value, right.value, node)
        if _is_tile(left) or _is_tile(right):
            return self._tile_binary(op, left, right, node)
        return self._scalar_binary(op, left, right, node)

    def _fold(self, op: str, a: Union[int, float], b: Union[int, float],
              node: ast.Node) -> ConstValue:
        if op in _INTEGER_ONLY and not (isinstance(a, int) and isinstance(b, int)):
            raise self.error(TileTypeError, f"{_spelled(op, 'a', 'b')} takes integers, got "
                             f"{a} and {b}", node.loc)
        if op in ("/", "//", "%", "cdiv") and b == 0:
            raise self.error(TileError, "division by zero in a constant expression", node.loc)
        if op == "cdiv" and b < 0:
            raise self.error(TileError, "cdiv by a negative number", node.loc)
        return ConstValue(_FOLD[op](a, b))

    def _scalar_binary(self, op: str, left: Operand, right: Operand,
                       node: ast.Node) -> Value:
        dtypes = {side.type.dtype for side in (left, right) if isinstance(side, Value)}
        if len(dtypes) > 1:
            raise self.error(TileTypeError, "cannot combine an i32 scalar with an f32 scalar",
                             node.loc)
        dtype = dtypes.pop()
        if dtype == I32 and op == "/":
            raise self.error(TileTypeError, "'/' divides floats; integers use '//'", node.loc)
        if dtype == F32 and op in _INTEGER_ONLY:
            raise self.error(TileTypeError, f"{_spelled(op, 'a', 'b')} takes integers, not f32 "
                             "scalars", node.loc)
        if op in _INTEGER_ONLY and isinstance(right, ConstValue) and right.value <= 0:
            raise self.error(TileError, f"{_spelled(op, 'a', 'b')} needs a positive divisor",
                             node.loc)
        operands = [self._scalar_operand(side, dtype, node) for side in (left, right)]
        return self.builder.value(f"arith.{_SCALAR_OPS[op]}", operands, ScalarType(dtype))

    def _scalar_operand(self, value: Operand, dtype: DType, node: ast.Node) -> Value:
        if isinstance(value, ConstValue):
            if dtype == I32 and not isinstance(value.value, int):
                raise self.error(TileTypeError, f"{value.value} is not an integer, and this "
                                 "is integer arithmetic", node.loc)
            return self._scalar_constant(value, dtype)
        assert isinstance(value, Value)
        return value

    def _scalar_constant(self, value: ConstValue, dtype: DType) -> Value:
        number = value.value if dtype == I32 else float(value.value)
        return self.builder.value("arith.constant", [], ScalarType(dtype), value.name,
                                  value=number)

    def _tile_binary(self, op: str, left: Operand, right: Operand, node: ast.Node) -> Value:
        if op not in _TILE_OPS:
            raise self.error(TileTypeError, f"{_spelled(op, 'a', 'b')} is not defined on "
                             "tiles", node.loc)
        sides = (left, right)
        for side in sides:
            if _is_scalar(side) and side.type.dtype != F32:
                raise self.error(TileTypeError, f"{_describe(side)} cannot be combined with a "
                                 "tile", node.loc, "only numbers and f32 scalars mix with "
                                 "tiles")
        dtypes = [side.type.dtype for side in sides if isinstance(side, Value)]
        if len(set(dtypes)) == 1:
            dtype = dtypes[0]
        elif F32 in dtypes:
            dtype = F32  # the 16-bit side is widened, as numpy would
        else:
            names = [str(side.type.dtype) if isinstance(side, Value) else "number"
                     for side in sides]
            raise self.error(TileTypeError, f"dtypes differ: {_spelled(op, *names)}",
                             node.loc, f"convert one side first, e.g. x.to({dtypes[0]}) or "
                             "x.to(f32)")
        shapes = [side.type.shape for side in sides if _is_tile(side)]
        shape = shapes[0]
        for other in shapes[1:]:
            broadcast = _broadcast_shapes(shape, other)
            if broadcast is None:
                hint = ""
                if 1 in (len(shape), len(other)):
                    hint = ("make a 1-D tile a column with t[:, None] or a row with "
                            "t[None, :]")
                raise self.error(TileShapeError, f"shapes do not broadcast: "
                                 f"{_spelled(op, _shape_text(shape), _shape_text(other))}",
                                 node.loc, hint)
            shape = broadcast
        operands = [self._tile_operand(side, dtype, shape) for side in sides]
        return self.builder.value(f"tile.{_TILE_OPS[op]}", operands, TileType(dtype, shape))

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
            if not _is_tile(value):
                hint = "load a tile first: A[off : +SIZE, ...]" if _is_tensor(value) else ""
                raise self.error(TileTypeError, f"'@' multiplies tiles; its {side} operand is "
                                 f"{_describe(value)}", node.loc, hint)
            if value.type.rank != 2:
                raise self.error(TileShapeError, f"'@' multiplies 2-D tiles; its {side} "
                                 f"operand is {_describe(value)}", node.loc,
                                 "make a 1-D tile 2-D with t[None, :] or t[:, None]")
        a, b = left.type, right.type
        if a.dtype != b.dtype:
            raise self.error(TileTypeError, f"dot operands differ in dtype: {a.dtype} @ "
                             f"{b.dtype}", node.loc,
                             "convert one side with .to(...); both must be f16, both bf16 "
                             "or both f32")
        if a.dtype not in (F16, BF16, F32):
            raise self.error(TileTypeError, f"'@' multiplies f16, bf16 or f32 tiles, not "
                             f"{a.dtype}", node.loc)
        if a.shape[1] != b.shape[0]:
            raise self.error(TileShapeError, f"inner dimensions differ: {_shape_text(a.shape)} "
                             f"@ {_shape_text(b.shape)}", node.loc)
        return left, right

    def _dot(self, a: Value, b: Value, accumulator: Optional[Value], node: ast.Node) -> Value:
        shape = (a.type.shape[0], b.type.shape[1])
        result = TileType(F32, shape)
        with self.builder.located(node.loc):
            if accumulator is None:
                accumulator = self.builder.value("tile.full", [], result, shape=shape,
                                                 value=0.0)
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
        if _is_tile(other) and other.type.dtype == F32 and other.type.shape == shape:
            return self._dot(a, b, other, product_node)
        product = self._dot(a, b, None, product_node)
        if product_on_right:
            return self._binary("+", other, product, node)
        return self._binary("+", product, other, node)

    # ---- calls
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
        handler = getattr(self, "_call_" + name, None) if name in BUILTINS else None
        if handler is None:
            known = ", ".join(b for b in BUILTINS if b not in ("grid", "range"))
            hint = _did_you_mean(name, BUILTINS) or f"the functions are: {known}"
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
            if not (isinstance(value, ConstValue) or _is_scalar(value)):
                raise self.error(TileTypeError, f"cdiv() takes integers, not {_describe(value)}",
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
        if not _is_tile(value):
            raise self.error(TileTypeError, f"relu() takes a tile, not {_describe(value)}",
                             node.loc)
        return self.builder.value("tile.relu", [value], value.type)

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
                                      value=float(value.value))
        if _is_scalar(value) and value.type.dtype == F32:
            splat = self.builder.value("tile.splat", [value], TileType(F32, shape),
                                       shape=shape)
            return self._cast(splat, dtype)
        raise self.error(TileTypeError, f"full() fills with a number or an f32 scalar, not "
                         f"{_describe(value)}", args["value"].loc)

    def _tile_shape(self, node: ast.Expr) -> tuple[int, ...]:
        items = node.elts if isinstance(node, (ast.ListExpr, ast.TupleExpr)) else (node,)
        if not 1 <= len(items) <= 2:
            raise self.error(TileShapeError, f"tiles have 1 or 2 dims, not {len(items)}",
                             node.loc)
        return tuple(self._constant_size(item, "a tile dimension") for item in items)

    def _tile_dtype(self, node: Optional[ast.Expr], call: ast.Call) -> DType:
        if node is None:
            return F32
        value = self.expr(node)
        if not isinstance(value, DTypeValue):
            raise self.error(TileTypeError, f"expected a dtype (f16, bf16, f32), got "
                             f"{_describe(value)}", node.loc)
        if value.dtype not in TENSOR_DTYPES:
            raise self.error(TileTypeError, f"tiles hold f16, bf16 or f32, not "
                             f"{value.dtype}", node.loc)
        return value.dtype

    def _method_call(self, node: ast.Call, method: ast.Attribute) -> Operand:
        if method.attr not in TILE_METHODS:
            raise self.error(TileError, f"unknown method '.{method.attr}()'", method.loc,
                             "tiles have .to(dtype) and .T")
        value = self.expr(method.value)
        args = self._arguments(node, "to", ("dtype",), 1)
        dtype = self._tile_dtype(args["dtype"], node)
        if not _is_tile(value):
            raise self.error(TileTypeError, f".to() converts tiles, not {_describe(value)}",
                             method.loc)
        with self.builder.located(method.loc):
            return self._cast(value, dtype)

    # ---- attributes, tensor accesses, indexing
    def _expr_Attribute(self, node: ast.Attribute) -> Operand:
        if node.attr in TILE_METHODS:
            raise self.error(TileError, f"'.{node.attr}' is a method: call it, as in "
                             f"x.{node.attr}(f16)", node.loc)
        if node.attr != "T":
            raise self.error(TileError, f"unknown attribute '.{node.attr}'", node.loc,
                             "tiles and tensors have .T; tiles have .to(dtype)")
        if isinstance(node.value, ast.Subscript):
            base = self.expr(node.value.value)
            if _is_tensor(base):
                # T[rows, cols].T reads the same elements as T.T[cols, rows].
                return self._load(base, node.value, transposed_at=node.loc)
            value = self._index_tile(base, node.value)
        else:
            value = self.expr(node.value)
        if _is_tensor(value):
            return self._transpose_view(value, node)
        if _is_tile(value):
            raise self.error(TileError, "'.T' applies to a tensor parameter (A.T) or to a tile "
                             "loaded from one (A[...].T), not to a computed tile", node.loc)
        raise self.error(TileTypeError, f"'.T' applies to tensors, not to {_describe(value)}",
                         node.loc)

    def _transpose_view(self, tensor: Value, node: ast.Node) -> Value:
        ttype = tensor.type
        if ttype.rank != 2:
            raise self.error(TileShapeError, f"'.T' needs a 2-D tensor; "
                             f"{_describe(tensor)} is {ttype.rank}-D", node.loc)
        view = TensorType(ttype.dtype, (ttype.shape[1], ttype.shape[0]))
        hint = f"{tensor.hint}_T" if tensor.hint else ""
        with self.builder.located(node.loc):
            return self.builder.value("tensor.transpose", [tensor], view, hint)

    def _expr_Subscript(self, node: ast.Subscript) -> Operand:
        base = self.expr(node.value)
        if _is_tensor(base):
            return self._load(base, node)
        return self._index_tile(base, node)

    def _load(self, tensor: Value, node: ast.Subscript,
              transposed_at: Optional[Loc] = None) -> Value:
        offsets, sizes = self._tensor_slices(tensor, node)
        if transposed_at is not None:
            tensor = self._transpose_view(tensor, node)
            offsets.reverse()
            sizes.reverse()
        shape = tuple(sizes)
        with self.builder.located(node.loc):
            return self.builder.value("tile.load", [tensor, *offsets],
                                      TileType(tensor.type.dtype, shape), shape=shape)

    def _tensor_slices(self, tensor: Value, node: ast.Subscript) -> tuple[list[Value],
                                                                           list[int]]:
        rank = tensor.type.rank
        name = tensor.hint or "T"
        example = ", ".join(["off : +SIZE"] * rank)
        if len(node.indices) != rank:
            raise self.error(TileShapeError, f"{_describe(tensor)} is {rank}-D but this access "
                             f"has {_plural(len(node.indices), 'slice')}", node.loc,
                             f"write {name}[{example}]")
        offsets: list[Value] = []
        sizes: list[int] = []
        for index in node.indices:
            if not isinstance(index, ast.Slice):
                raise self.error(TileShapeError, "a tensor access takes slices, not single "
                                 "indices", index.loc, "write `start : +SIZE`, e.g. "
                                 "`m*BM : +BM` (`i : +1` for one row)")
            if index.step is not None:
                raise self.error(TileShapeError, "slice steps are not supported",
                                 index.step.loc)
            if index.size is not None:
                size = self._constant_size(index.size, "a tile size")
            elif index.stop is not None:
                size = self._size_from_stop(index)
            else:
                raise self.error(TileShapeError, "a tensor access needs the tile size",
                                 index.loc, "write `start : +SIZE`, e.g. `k : +BK`")
            if index.start is None:
                with self.builder.located(index.loc):
                    offset = self._scalar_constant(ConstValue(0), I32)
            else:
                offset = self._index(self.expr(index.start), index.start, "a tile offset")
            offsets.append(offset)
            sizes.append(size)
        return offsets, sizes

    def _size_from_stop(self, index: ast.Slice) -> int:
        """``start : stop`` is accepted when ``stop - start`` folds to a constant."""
        assert index.stop is not None
        for node in ast.iter_nodes(index.stop):
            if isinstance(node, ast.Name):
                self._lookup_only(node)
        difference = _linear_difference(index.stop, index.start, self._constant_of)
        if difference is None:
            raise self.error(TileShapeError, "the tile size (stop - start) is not a "
                             "compile-time constant", _start_loc(index.stop),
                             "write `start : +SIZE`, e.g. `k : +BK`")
        if difference <= 0:
            raise self.error(TileShapeError, f"this slice is empty (stop - start = "
                             f"{difference})", index.loc)
        return difference

    def _lookup_only(self, node: ast.Name) -> None:
        """Raise the usual error for an unknown name without lowering anything."""
        if node.id not in self.env and node.id not in DTYPES and node.id not in BUILTINS:
            self._expr_Name(node)

    def _constant_of(self, name: str) -> Optional[int]:
        binding = self.env.get(name)
        if binding is not None and isinstance(binding.value, ConstValue):
            value = binding.value.value
            return value if isinstance(value, int) else None
        return None

    def _constant_size(self, node: ast.Expr, what: str) -> int:
        value = self.expr(node)
        if not isinstance(value, ConstValue):
            raise self.error(TileShapeError, f"{what} must be a compile-time constant",
                             _start_loc(node),
                             "use constants (BM=128), integer literals and arithmetic on them")
        if not isinstance(value.value, int):
            raise self.error(TileShapeError, f"{what} must be an integer, not {value.value}",
                             _start_loc(node), "use // for integer division")
        if value.value <= 0:
            raise self.error(TileShapeError, f"{what} must be positive, not {value.value}",
                             _start_loc(node))
        return value.value

    def _index_tile(self, base: Operand, node: ast.Subscript) -> Value:
        """``t[:, None]`` and ``t[None, :]``: a 1-D tile as a column or a row."""
        if not _is_tile(base):
            raise self.error(TileTypeError, f"cannot index {_describe(base)}", node.loc)
        pattern = tuple(_index_kind(index) for index in node.indices)
        if base.type.rank == 1 and pattern == ("all", "none"):
            shape = (base.type.shape[0], 1)
        elif base.type.rank == 1 and pattern in (("none", "all"), ("none",)):
            shape = (1, base.type.shape[0])
        else:
            raise self.error(TileShapeError, "a tile can only be indexed as t[:, None] or "
                             f"t[None, :] (on 1-D tiles); this is {_describe(base)}",
                             node.loc, "load the part you need from the tensor instead")
        with self.builder.located(node.loc):
            return self.builder.value("tile.reshape", [base], base.type.with_(shape=shape))

    def _index(self, value: Operand, node: ast.Node, what: str) -> Value:
        """An i32 run-time value for an offset, a bound or a grid size."""
        if isinstance(value, ConstValue):
            if not isinstance(value.value, int):
                raise self.error(TileTypeError, f"{what} must be an integer, not "
                                 f"{value.value}", _start_loc(node))
            with self.builder.located(_start_loc(node)):
                return self._scalar_constant(value, I32)
        if _is_scalar(value) and value.type.dtype == I32:
            return value
        raise self.error(TileTypeError, f"{what} must be an integer scalar, not "
                         f"{_describe(value)}", _start_loc(node))

    # ---- stores
    def _store(self, target: ast.Subscript, value: Operand, value_node: ast.Expr) -> None:
        tensor = self.expr(target.value)
        if not _is_tensor(tensor):
            raise self.error(TileError, f"cannot store into {_describe(tensor)}", target.loc,
                             "stores go into tensor parameters: C[... : +BM, ...] = tile")
        dtype = tensor.type.dtype
        name = tensor.hint or "the tensor"
        offsets, sizes = self._tensor_slices(tensor, target)
        shape = tuple(sizes)
        with self.builder.located(target.loc):
            if isinstance(value, ConstValue) or (_is_scalar(value)
                                                 and value.type.dtype == dtype):
                value = self._tile_operand(value, dtype, shape)
            if not _is_tile(value):
                raise self.error(TileTypeError, f"cannot store {_describe(value)} into "
                                 f"'{name}', {_article(dtype)} {dtype} tensor",
                                 _start_loc(value_node))
            if value.type.dtype != dtype:
                raise self.error(TileTypeError, f"storing {_describe(value)} into '{name}', "
                                 f"{_article(dtype)} {dtype} tensor", _start_loc(value_node),
                                 f"convert it first: (...).to({dtype})")
            if value.type.shape != shape:
                raise self.error(TileShapeError, f"storing {_describe(value)} into a "
                                 f"{_shape_text(shape)} slice of '{name}'", target.loc,
                                 "the slice sizes must equal the tile's shape")
            self.builder.op("tile.store", [tensor, *offsets, value])


# ------------------------------------------------------------------------------- helpers

def _start_loc(node: ast.Node) -> Loc:
    """Where an expression starts (a BinOp's own loc is its operator's, an Attribute's its
    name's): the caret for "this expression must be ..." errors."""
    while isinstance(node, (ast.BinOp, ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.BinOp):
            node = node.left
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            node = node.value
    return node.loc


def _is_grid_loop(stmt: ast.Stmt) -> bool:
    return (isinstance(stmt, ast.ForStmt) and isinstance(stmt.iter, ast.Call)
            and isinstance(stmt.iter.func, ast.Name) and stmt.iter.func.id == "grid")


def _assigned_names(statements: Sequence[ast.Stmt]) -> list[str]:
    """Names assigned in ``statements`` (nested loops included), in order of first
    assignment."""
    names: dict[str, None] = {}
    for stmt in statements:
        if isinstance(stmt, (ast.Assign, ast.AugAssign)) and isinstance(stmt.target, ast.Name):
            names.setdefault(stmt.target.id)
        elif isinstance(stmt, ast.ForStmt):
            for name in _assigned_names(stmt.body):
                names.setdefault(name)
    return list(names)


def _broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """numpy's rule: align at the right; each pair of dims is equal or has a 1."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + a
    b = (1,) * (rank - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b))


def _index_kind(index: Union[ast.Expr, ast.Slice]) -> str:
    if isinstance(index, ast.Constant) and index.value is None:
        return "none"
    if isinstance(index, ast.Slice) and index == ast.Slice(loc=index.loc):
        return "all"
    return "other"


# A linear form: coefficients of opaque terms (keyed by their canonical text), "" for 1.
_Linear = dict[str, int]


def _linear_difference(stop: ast.Expr, start: Optional[ast.Expr],
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
            return {"": _FOLD[node.op](left.get("", 0), right.get("", 0))}
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
