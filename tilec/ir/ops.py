"""The core ops: every op name the frontend's IR may hold, what it means, its type rule and
its semantic traits.

Each entry is data (:class:`OpDef`): a one-line meaning, operand/result/region counts (None =
any), the attributes it must carry, a check function that raises :class:`IRError` with a
reason, whether it is pure, whether it is elementwise, and how it folds on constants. The
ops the passes introduce are in :mod:`tilec.ir.ops_gpu`; the complete catalogue, with each
op's CPU semantics attached, is :func:`tilec.families.catalogue.op_catalogue`, which the verifier, the
interpreter, dead-code removal and the tests read.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tilec.ir import arith
from tilec.ir.arith import FoldFn
from tilec.ir.core import Op
from tilec.ir.types import (F32, I32, MMA_INPUT_DTYPES, PRED, ScalarType, TensorType,
                            TileType)


class IRError(Exception):
    """An IR invariant does not hold."""


# (interpreter state, op, operand values) -> one value per result: the signature of
# :data:`tilec.cpu.interpreter.SemanticsFn`, spelled with Any since the IR sits below the CPU.
EvaluateFn = Callable[[Any, Op, list[Any]], Sequence[Any]]


@dataclass(frozen=True)
class OpDef:
    """One op kind.

    ``pure``: no side effects (no stores, no synchronisation, no effect on the launch), so
    dead-code removal drops it when nothing uses its results. ``elementwise``: element (i, j)
    of the result depends only on element (i, j) of each tile operand (fills have none), so
    the op computes in whatever layout its operands have and a pass may give its result that
    layout. ``fold``: the op's value on integer constants (:mod:`tilec.ir.arith`), for
    whoever evaluates scalar IR. ``evaluate``: its CPU semantics, attached by the catalogue
    (:mod:`tilec.families`) since the interpreter sits above the IR.
    """

    name: str
    doc: str
    operands: Optional[int]
    results: Optional[int]
    regions: int = 0
    attrs: tuple[str, ...] = ()
    check: Optional[Callable[[Op], None]] = None
    pure: bool = False
    elementwise: bool = False
    fold: Optional[FoldFn] = None
    evaluate: Optional[EvaluateFn] = None


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise IRError(message)


def _scalar_binary(op: Op) -> None:
    a, b = op.operands
    _require(isinstance(a.type, ScalarType) and a.type == b.type == op.result.type,
             f"operands and result must be the same scalar type, got {a.type}, {b.type} -> "
             f"{op.result.type}")


def _constant(op: Op) -> None:
    rtype = op.result.type
    _require(isinstance(rtype, ScalarType), "constant must be a scalar")
    value = op.attrs["value"]
    if rtype.dtype == I32:
        _require(isinstance(value, int), f"i32 constant holds {value!r}")
    elif rtype.dtype == PRED:
        _require(isinstance(value, bool), f"pred constant holds {value!r}")
    else:
        _require(isinstance(value, (int, float)), f"float constant holds {value!r}")


def _grid(op: Op) -> None:
    _require(1 <= len(op.operands) <= 3, "a grid has 1 to 3 axes")
    _require(len(op.results) == len(op.operands), "one program id per grid axis")
    for v in list(op.operands) + list(op.results):
        _require(v.type == ScalarType(I32), f"grid sizes and program ids are i32, got {v.type}")


def _tile_result(op: Op) -> TileType:
    rtype = op.result.type
    _require(isinstance(rtype, TileType), f"result must be a tile, got {rtype}")
    return rtype


def _fill(op: Op) -> None:
    rtype = _tile_result(op)
    _require(list(rtype.shape) == list(op.attrs["shape"]), "shape attribute differs from type")


def _splat(op: Op) -> None:
    rtype = _tile_result(op)
    _require(isinstance(op.operands[0].type, ScalarType), "splat takes a scalar")
    _require(op.operands[0].type.dtype == rtype.dtype, "splat keeps the element type")


def broadcast_compatible(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """numpy's rule: align at the right; each source dim is 1 or equal."""
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def _broadcast(op: Op) -> None:
    src = op.operands[0].type
    rtype = _tile_result(op)
    _require(isinstance(src, TileType) and src.dtype == rtype.dtype, "broadcast keeps dtype")
    _require(broadcast_compatible(src.shape, rtype.shape),
             f"cannot broadcast {list(src.shape)} to {list(rtype.shape)}")


def _reshape(op: Op) -> None:
    src = op.operands[0].type
    rtype = _tile_result(op)
    _require(isinstance(src, TileType) and src.numel == rtype.numel and src.dtype == rtype.dtype,
             f"reshape must keep dtype and element count: {src} -> {rtype}")


def _access_indices(op: Op, first: int, last: int) -> TensorType:
    tensor = op.operands[0].type
    _require(isinstance(tensor, TensorType), f"{op.name} reads a tensor, got {tensor}")
    indices = op.operands[first:last]
    _require(len(indices) == tensor.rank, f"{tensor.rank}-D tensor needs {tensor.rank} offsets")
    for v in indices:
        _require(v.type == ScalarType(I32), f"tile offsets are i32, got {v.type}")
    return tensor


def _load(op: Op) -> None:
    tensor = _access_indices(op, 1, len(op.operands))
    rtype = _tile_result(op)
    _require(rtype.dtype == tensor.dtype, f"load of {tensor} yields {tensor.dtype} tiles")
    _require(list(rtype.shape) == list(op.attrs["shape"]), "shape attribute differs from type")
    _require(rtype.rank == tensor.rank, "a load keeps the tensor's rank")


def _store(op: Op) -> None:
    tensor = _access_indices(op, 1, len(op.operands) - 1)
    value = op.operands[-1].type
    _require(isinstance(value, TileType), "store writes a tile")
    _require(value.dtype == tensor.dtype,
             f"storing a {value.dtype} tile into a {tensor.dtype} tensor")
    _require(value.rank == tensor.rank, "a store keeps the tensor's rank")


def _transpose_view(op: Op) -> None:
    src = op.operands[0].type
    rtype = op.result.type
    _require(isinstance(src, TensorType) and src.rank == 2, "transpose takes a 2-D tensor")
    _require(rtype == TensorType(src.dtype, (src.shape[1], src.shape[0])),
             "transpose swaps the two dims")


def _dot(op: Op) -> None:
    a, b, acc = (v.type for v in op.operands)
    rtype = _tile_result(op)
    for t in (a, b, acc):
        _require(isinstance(t, TileType) and t.rank == 2, "dot takes 2-D tiles")
    _require(a.dtype == b.dtype, f"dot operands differ in dtype: {a.dtype} @ {b.dtype}")
    _require(a.dtype in MMA_INPUT_DTYPES + (F32,), f"dot of {a.dtype} is not supported")
    _require(a.shape[1] == b.shape[0],
             f"inner dimensions differ: [{a.shape[0]},{a.shape[1]}] @ [{b.shape[0]},{b.shape[1]}]")
    _require(acc.dtype == F32, "dot accumulates in f32")
    _require(tuple(acc.shape) == (a.shape[0], b.shape[1]),
             f"accumulator is {list(acc.shape)}, product is [{a.shape[0]},{b.shape[1]}]")
    _require(rtype.shape == acc.shape and rtype.dtype == acc.dtype, "dot returns the acc type")


def _elementwise(op: Op) -> None:
    rtype = _tile_result(op)
    for v in op.operands:
        _require(isinstance(v.type, TileType), f"{op.name} takes tiles, got {v.type}")
        _require(v.type.shape == rtype.shape,
                 f"shapes differ: {list(v.type.shape)} vs {list(rtype.shape)}")
        _require(v.type.dtype == rtype.dtype,
                 f"dtypes differ: {v.type.dtype} vs {rtype.dtype}")
    _require(rtype.dtype.is_float, f"{op.name} on {rtype.dtype} tiles")


def _cast(op: Op) -> None:
    src = op.operands[0].type
    rtype = _tile_result(op)
    _require(isinstance(src, TileType) and src.shape == rtype.shape, "cast keeps the shape")
    _require(rtype.dtype == op.attrs["dtype"], "dtype attribute differs from type")


def _for(op: Op) -> None:
    lb, ub, step, *inits = op.operands
    for v in (lb, ub, step):
        _require(v.type == ScalarType(I32), "loop bounds are i32")
    body = op.regions[0]
    _require(len(body.args) == 1 + len(inits), "body takes the induction var and iter args")
    _require(len(op.results) == len(inits), "one result per iter arg")
    for init, arg, res in zip(inits, body.args[1:], op.results):
        _require(init.type == arg.type == res.type,
                 f"iter arg types differ: {init.type}, {arg.type}, {res.type}")
    _require(bool(body.ops) and body.ops[-1].name == "scf.yield",
             "a loop body ends with scf.yield")
    yielded = body.ops[-1].operands
    _require([v.type for v in yielded] == [v.type for v in inits],
             "scf.yield must yield the iter args' types")
    _require(isinstance(op.attrs.get("step_const"), int) and op.attrs["step_const"] > 0,
             "loop step must be a positive compile-time constant")


_INTEGER_ARITH = ("add", "sub", "mul", "floordiv", "cdiv", "mod", "min", "max")

CORE_OPS: dict[str, OpDef] = {d.name: d for d in [
    OpDef("arith.constant", "a compile-time scalar", 0, 1, attrs=("value",), check=_constant,
          pure=True, fold=arith.fold_constant),
    *[OpDef(f"arith.{name}", meaning, 2, 1, check=_scalar_binary, pure=True,
            fold=arith.fold_binary(name) if name in _INTEGER_ARITH else None)
      for name, meaning in [
          ("add", "a + b"), ("sub", "a - b"), ("mul", "a * b"), ("div", "a / b (floats)"),
          ("floordiv", "a // b (integers, b > 0)"), ("cdiv", "(a + b - 1) // b (b > 0)"),
          ("mod", "a % b (b > 0)"), ("min", "min(a, b)"), ("max", "max(a, b)")]],
    # Not pure: it is the launch (its results are the program ids, used or not).
    OpDef("tile.grid", "one program instance per grid point; results are its coordinates",
          None, None, check=_grid),
    OpDef("tile.full", "a tile filled with one constant", 0, 1, attrs=("shape", "value"),
          check=_fill, pure=True, elementwise=True),
    OpDef("tile.splat", "a tile filled with a run-time scalar", 1, 1, attrs=("shape",),
          check=_splat, pure=True, elementwise=True),
    OpDef("tile.broadcast", "numpy broadcasting to a larger shape", 1, 1, check=_broadcast,
          pure=True),
    OpDef("tile.reshape", "same elements, new shape (adds or drops unit dims)", 1, 1,
          check=_reshape, pure=True),
    OpDef("tensor.transpose", "a transposed view of a 2-D tensor (no data moves)", 1, 1,
          check=_transpose_view, pure=True),
    OpDef("tile.load", "read a tile at the given offsets; out-of-bounds elements read 0",
          None, 1, attrs=("shape",), check=_load, pure=True),
    OpDef("tile.store", "write a tile at the given offsets; out-of-bounds elements are skipped",
          None, 0, check=_store),
    OpDef("tile.dot", "acc + a @ b with f32 accumulation", 3, 1, check=_dot, pure=True),
    *[OpDef(f"tile.{name}", meaning, 2, 1, check=_elementwise, pure=True, elementwise=True)
      for name, meaning in [
          ("add", "a + b"), ("sub", "a - b"), ("mul", "a * b"), ("div", "a / b"),
          ("max", "max(a, b)"), ("min", "min(a, b)")]],
    *[OpDef(f"tile.{name}", meaning, 1, 1, check=_elementwise, pure=True, elementwise=True)
      for name, meaning in [("neg", "-a"), ("relu", "max(a, 0)")]],
    OpDef("tile.cast", "convert elements to another dtype (round to nearest even)", 1, 1,
          attrs=("dtype",), check=_cast, pure=True, elementwise=True),
    OpDef("scf.for", "a counted loop with loop-carried values", None, None, regions=1,
          attrs=("step_const",), check=_for),
    OpDef("scf.yield", "the values a loop body carries to the next iteration", None, 0),
]}

# Op kinds added by passes (ours or a user's) with register_op.
_REGISTERED: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> None:
    """Let a pass (ours or a user's) add op kinds; a name may be defined once. The catalogue
    (:func:`tilec.families.catalogue.op_catalogue`) lists them beside the built-in ops; give the OpDef
    an ``evaluate`` for the interpreter to run it."""
    from tilec.ir.ops_gpu import GPU_OPS  # the same layer; imported here, as it imports us

    builtin = CORE_OPS.get(opdef.name) or next(
        (d for d in GPU_OPS if d.name == opdef.name), None)
    existing = builtin or _REGISTERED.get(opdef.name)
    if existing is not None and existing != opdef:
        raise ValueError(f"op '{opdef.name}' is already defined")
    if builtin is None:
        _REGISTERED[opdef.name] = opdef


def registered_ops() -> Mapping[str, OpDef]:
    """The op kinds passes added with :func:`register_op`, by name."""
    return dict(_REGISTERED)
