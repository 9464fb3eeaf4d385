"""The IR layer's ops: every op name the frontend's IR may hold and the generic lowered ops,
what each means, its type rule and its semantic traits.

Each entry is data (:class:`OpDef`): a one-line meaning, operand/result/region counts (None =
any), the attributes it must carry, a check function that raises :class:`IRError` with a
reason, whether it is pure, whether it is elementwise, and how it folds on constants. The
generic ops the passes introduce are :data:`GPU_OPS` (shared buffers, the barrier, split-K,
fragment loads from global memory, the K loop's scalar ops); :data:`IR_OPS` is both. The ops
of an instruction or data-movement family (``frag.mma``, ``copy.*``) are defined in the
family's module (:mod:`tilec.families`); the complete catalogue, with each op's CPU
semantics attached, is :func:`tilec.families.catalogue.op_catalogue`, which whoever runs
lowered IR reads; the passes, the race checker and the verifier read the same definitions
without the semantics (:func:`tilec.families.catalogue.op_definitions`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Optional

from tilec.ir import arith
from tilec.ir.arith import FoldFn
# IRError is defined in core (whose grid query raises it too); its importers find it here.
from tilec.ir.core import IRError, Op
from tilec.ir.types import (ACCUMULATOR_DTYPES, BF16, F16, F8E4M3, F8E5M2, I8, I32, PRED,
                            ScalarType, TensorType, TileType)


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
    whoever evaluates scalar IR. ``evaluate``: its CPU semantics, attached by the interpreter
    and the op catalogue (:mod:`tilec.families.catalogue`) for the IR layer's ops, since the
    CPU sits above the IR, and given by a family to the ops it defines.
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


def require(cond: bool, message: str) -> None:
    if not cond:
        raise IRError(message)


def _scalar_binary(op: Op) -> None:
    a, b = op.operands
    require(isinstance(a.type, ScalarType) and a.type == b.type == op.result.type,
             f"operands and result must be the same scalar type, got {a.type}, {b.type} -> "
             f"{op.result.type}")


def _constant(op: Op) -> None:
    rtype = op.result.type
    require(isinstance(rtype, ScalarType), "constant must be a scalar")
    value = op.attrs["value"]
    if rtype.dtype == I32:
        require(isinstance(value, int), f"i32 constant holds {value!r}")
    elif rtype.dtype == PRED:
        require(isinstance(value, bool), f"pred constant holds {value!r}")
    else:
        require(isinstance(value, (int, float)), f"float constant holds {value!r}")


def _grid(op: Op) -> None:
    require(1 <= len(op.operands) <= 3, "a grid has 1 to 3 axes")
    require(len(op.results) == len(op.operands), "one program id per grid axis")
    for v in list(op.operands) + list(op.results):
        require(v.type == ScalarType(I32), f"grid sizes and program ids are i32, got {v.type}")


def _tile_result(op: Op) -> TileType:
    rtype = op.result.type
    require(isinstance(rtype, TileType), f"result must be a tile, got {rtype}")
    return rtype


def _fill(op: Op) -> None:
    rtype = _tile_result(op)
    require(list(rtype.shape) == list(op.attrs["shape"]), "shape attribute differs from type")


def _splat(op: Op) -> None:
    rtype = _tile_result(op)
    require(isinstance(op.operands[0].type, ScalarType), "splat takes a scalar")
    require(op.operands[0].type.dtype == rtype.dtype, "splat keeps the element type")


def broadcast_compatible(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """numpy's rule: align at the right; each source dim is 1 or equal."""
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def _broadcast(op: Op) -> None:
    src = op.operands[0].type
    rtype = _tile_result(op)
    require(isinstance(src, TileType) and src.dtype == rtype.dtype, "broadcast keeps dtype")
    require(broadcast_compatible(src.shape, rtype.shape),
             f"cannot broadcast {list(src.shape)} to {list(rtype.shape)}")


def _reshape(op: Op) -> None:
    src = op.operands[0].type
    rtype = _tile_result(op)
    require(isinstance(src, TileType) and src.numel == rtype.numel and src.dtype == rtype.dtype,
             f"reshape must keep dtype and element count: {src} -> {rtype}")


def _access_indices(op: Op, first: int, last: int) -> TensorType:
    tensor = op.operands[0].type
    require(isinstance(tensor, TensorType), f"{op.name} reads a tensor, got {tensor}")
    indices = op.operands[first:last]
    require(len(indices) == tensor.rank, f"{tensor.rank}-D tensor needs {tensor.rank} offsets")
    for v in indices:
        require(v.type == ScalarType(I32), f"tile offsets are i32, got {v.type}")
    return tensor


def _load(op: Op) -> None:
    tensor = _access_indices(op, 1, len(op.operands))
    rtype = _tile_result(op)
    require(rtype.dtype == tensor.dtype, f"load of {tensor} yields {tensor.dtype} tiles")
    require(list(rtype.shape) == list(op.attrs["shape"]), "shape attribute differs from type")
    require(rtype.rank == tensor.rank, "a load keeps the tensor's rank")


def _store(op: Op) -> None:
    tensor = _access_indices(op, 1, len(op.operands) - 1)
    value = op.operands[-1].type
    require(isinstance(value, TileType), "store writes a tile")
    require(value.dtype == tensor.dtype,
             f"storing a {value.dtype} tile into a {tensor.dtype} tensor")
    require(value.rank == tensor.rank, "a store keeps the tensor's rank")
    if "slabs" in op.attrs:  # staged (passes/tma_store.py): its boxes cover the tile exactly
        inner, rows = op.attrs["box"]
        # The boxes' inner coordinate runs along the tile's columns, or (coords [0, 1]: a
        # C.T tile staged in C's rows) along its rows.
        across, down = value.shape[-1], value.shape[0]
        transposed = list(op.attrs.get("coords", [1, 0])) == [0, 1]
        if transposed:
            across, down = down, across
        # With strips, a slab's boxes are a warpgroup's 64-row strip each, the strips of every
        # warpgroup together the tile's rows.
        strips = op.attrs.get("strips", 1)
        require(inner * op.attrs["slabs"] == across
                and (rows == down if strips == 1 else down % (rows * strips) == 0),
                f"a staged store's {op.attrs['slabs']} boxes of {inner}x{rows}"
                + (f" in {strips} strips" if strips > 1 else "")
                + f" do not cover its {value.shape[0]}x{value.shape[-1]} tile"
                + (" (stored transposed)" if transposed else ""))


def _transpose_view(op: Op) -> None:
    src = op.operands[0].type
    rtype = op.result.type
    require(isinstance(src, TensorType) and src.rank == 2, "transpose takes a 2-D tensor")
    require(rtype == TensorType(src.dtype, (src.shape[1], src.shape[0])),
             "transpose swaps the two dims")


def _batch_view(op: Op) -> None:
    src, index = (v.type for v in op.operands)
    rtype = op.result.type
    require(isinstance(src, TensorType) and src.rank == 3, "tensor.batch takes a 3-D tensor")
    require(index == ScalarType(I32), f"the batch index is an i32, got {index}")
    require(rtype == TensorType(src.dtype, src.shape[1:]),
             "tensor.batch drops the leading (batch) dim")


def _dot(op: Op) -> None:
    a, b, acc = (v.type for v in op.operands)
    rtype = _tile_result(op)
    for t in (a, b, acc):
        require(isinstance(t, TileType) and t.rank == 2, "dot takes 2-D tiles")
    product = op.attrs.get("product_dtype")
    if product is None:
        require(a.dtype == b.dtype, f"dot operands differ in dtype: {a.dtype} @ {b.dtype}")
        product = a.dtype
    else:  # an operand stored in another dtype, converted after its fragment load
        for t in (a, b):
            require(t.dtype == product or (t.dtype, product) in OPERAND_CONVERSIONS,
                    f"dot of {product} cannot convert a {t.dtype} operand")
    require(product in ACCUMULATOR_DTYPES, f"dot of {product} is not supported")
    require(a.shape[1] == b.shape[0],
             f"inner dimensions differ: [{a.shape[0]},{a.shape[1]}] @ [{b.shape[0]},{b.shape[1]}]")
    require(acc.dtype == ACCUMULATOR_DTYPES[product],
            f"dot of {product} accumulates in {ACCUMULATOR_DTYPES[product]}")
    require(tuple(acc.shape) == (a.shape[0], b.shape[1]),
             f"accumulator is {list(acc.shape)}, product is [{a.shape[0]},{b.shape[1]}]")
    require(rtype.shape == acc.shape and rtype.dtype == acc.dtype, "dot returns the acc type")


# Conversions of an operand of `@` in registers after its fragment load, (stored dtype,
# product dtype) (backend: tilec/families/mma_sync.py's CONVERT_PTX). 16-bit sources are
# loaded like the product's; 8-bit ones (w8a16 weights: i8, or f8e4m3 / f8e5m2 on sm_89+;
# operand B only) by frag.ldbytes (tilec/families/byte_operands.py).
OPERAND_CONVERSIONS = frozenset({(BF16, F16), (F16, BF16), (I8, F16), (I8, BF16),
                                 (F8E4M3, F16), (F8E4M3, BF16), (F8E5M2, F16),
                                 (F8E5M2, BF16)})


def _elementwise(op: Op) -> None:
    rtype = _tile_result(op)
    for v in op.operands:
        require(isinstance(v.type, TileType), f"{op.name} takes tiles, got {v.type}")
        require(v.type.shape == rtype.shape,
                 f"shapes differ: {list(v.type.shape)} vs {list(rtype.shape)}")
        require(v.type.dtype == rtype.dtype,
                 f"dtypes differ: {v.type.dtype} vs {rtype.dtype}")
    require(rtype.dtype.is_float, f"{op.name} on {rtype.dtype} tiles")


def _where(op: Op) -> None:
    x, y, a, b = (v.type for v in op.operands)
    rtype = _tile_result(op)
    require(op.attrs["compare"] in WHERE_COMPARISONS.values(),
            f"unknown comparison {op.attrs['compare']!r}")
    for t in (x, y, a, b):
        require(isinstance(t, TileType) and t.shape == rtype.shape,
                f"tile.where takes tiles of the result's shape, got {t}")
    require(x.dtype == y.dtype and x.dtype.is_float, f"compares {x.dtype} with {y.dtype}")
    require(a.dtype == b.dtype == rtype.dtype, f"selects {a.dtype} / {b.dtype} as {rtype.dtype}")
    require(rtype.dtype.is_float, f"tile.where on {rtype.dtype} tiles")


def _cast(op: Op) -> None:
    src = op.operands[0].type
    rtype = _tile_result(op)
    require(isinstance(src, TileType) and src.shape == rtype.shape, "cast keeps the shape")
    require(rtype.dtype == op.attrs["dtype"], "dtype attribute differs from type")


def _for(op: Op) -> None:
    lb, ub, step, *inits = op.operands
    for v in (lb, ub, step):
        require(v.type == ScalarType(I32), "loop bounds are i32")
    body = op.regions[0]
    require(len(body.args) == 1 + len(inits), "body takes the induction var and iter args")
    require(len(op.results) == len(inits), "one result per iter arg")
    for init, arg, res in zip(inits, body.args[1:], op.results):
        require(init.type == arg.type == res.type,
                 f"iter arg types differ: {init.type}, {arg.type}, {res.type}")
    require(bool(body.ops) and body.ops[-1].name == "scf.yield",
             "a loop body ends with scf.yield")
    yielded = body.ops[-1].operands
    require([v.type for v in yielded] == [v.type for v in inits],
             "scf.yield must yield the iter args' types")
    require(isinstance(op.attrs.get("step_const"), int) and op.attrs["step_const"] > 0,
             "loop step must be a positive compile-time constant")


def _gelu_tanh(x: float) -> float:
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu(x: float) -> float:
    # 0.5 x (1 + erf(x / sqrt 2)) written with erfc: no cancellation where x << 0.
    return 0.5 * x * math.erfc(-x / math.sqrt(2.0))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# The elementwise math functions of tiles (the DSL's ``exp(x)`` ... ``gelu_tanh(x)``, ops
# ``tile.<name>``): what each means, and its value on one number in float64, with which the
# frontend folds a compile-time constant (it raises ValueError or OverflowError outside the
# function's domain or range). They keep the tile's dtype; 16-bit tiles compute in f32.
MATH_FUNCTIONS: dict[str, tuple[str, Callable[[float], float]]] = {
    "exp": ("e ** a", math.exp),
    "exp2": ("2 ** a", lambda x: 2.0 ** x),
    "log": ("ln(a)", math.log),
    "log2": ("log2(a)", math.log2),
    "sqrt": ("sqrt(a)", math.sqrt),
    "rsqrt": ("1 / sqrt(a)", lambda x: 1.0 / math.sqrt(x)),
    "abs": ("|a|", abs),
    "tanh": ("tanh(a)", math.tanh),
    "sigmoid": ("1 / (1 + e ** -a)", _sigmoid),
    "silu": ("a / (1 + e ** -a)", lambda x: x * _sigmoid(x)),
    "gelu_tanh": ("0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a ** 3)))", _gelu_tanh),
    "gelu": ("0.5 a (1 + erf(a / sqrt(2)))", _gelu),
}

# The comparisons ``where(x OP y, a, b)`` selects with: the DSL's spelling -> the ``compare``
# attribute of ``tile.where``. Each is IEEE's: false when x or y is NaN, except ``!=``
# (true), as in Python and numpy.
WHERE_COMPARISONS: dict[str, str] = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge",
                                     "==": "eq", "!=": "ne"}

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
    OpDef("tensor.batch", "the 2-D tensor at one batch index of a 3-D tensor (no data moves)",
          2, 1, check=_batch_view, pure=True),
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
      for name, meaning in [("neg", "-a"), ("relu", "max(a, 0)"),
                            *((name, meaning) for name, (meaning, _) in MATH_FUNCTIONS.items())]],
    OpDef("tile.where", "operands x, y, a, b: a where `x compare y` holds, else b",
          4, 1, attrs=("compare",), check=_where, pure=True, elementwise=True),
    OpDef("tile.cast", "convert elements to another dtype (round to nearest even)", 1, 1,
          attrs=("dtype",), check=_cast, pure=True, elementwise=True),
    OpDef("scf.for", "a counted loop with loop-carried values", None, None, regions=1,
          attrs=("step_const",), check=_for),
    OpDef("scf.yield", "the values a loop body carries to the next iteration", None, 0),
]}

def _smem_alloc(op: Op) -> None:
    rtype = op.result.type
    require(isinstance(rtype, TileType) and rtype.space == "smem" and rtype.rank == 3,
             "smem.alloc yields a [stages, rows, cols] shared tile")
    require(rtype.shape[0] == op.attrs["stages"] >= 1, "stage count differs from the type")


def _smem_stage(op: Op) -> None:
    buf, stage = op.operands
    rtype = op.result.type
    require(isinstance(buf.type, TileType) and buf.type.space == "smem", "stage of a buffer")
    require(stage.type == ScalarType(I32), "the stage index is i32")
    require(isinstance(rtype, TileType) and rtype.space == "smem"
             and rtype.shape == buf.type.shape[1:] and rtype.dtype == buf.type.dtype,
             "a stage view is one [rows, cols] slice of the buffer")
    require(rtype.layout == buf.type.layout, "a stage view keeps the buffer's layout")


def _compare(op: Op) -> None:
    a, b = op.operands
    require(a.type == b.type == ScalarType(I32), "comparisons take i32 operands")
    require(op.result.type == ScalarType(PRED), "comparisons yield pred")


def check_fragment_result(op: Op) -> None:
    """The type rule every fragment op shares: it yields a register tile with a layout."""
    rtype = op.result.type
    require(isinstance(rtype, TileType) and rtype.space == "reg" and rtype.layout is not None,
            f"{op.name} yields a distributed tile with a layout")


def _frag_load(op: Op) -> None:
    tensor, *offsets = op.operands
    require(isinstance(tensor.type, TensorType), "frag.load reads a tensor")
    require(len(offsets) == tensor.type.rank, "one offset per tensor dim")
    dims = op.attrs["dims"]
    rtype = op.result.type
    require(len(dims) == rtype.rank, "one entry of dims per tile dim")
    named = [d for d in dims if d >= 0]
    require(len(set(named)) == len(named) and all(d < tensor.type.rank for d in named),
             "dims names each tensor dim at most once (-1 broadcasts)")
    require(rtype.dtype == tensor.type.dtype, "loads keep the element type")
    check_fragment_result(op)


# The accumulators split-K's slices can meet in (backend/split.py keeps one 4-byte word per
# element in the workspace): f32 sums, and i32 ones, which wrap as the products do and,
# integer addition being associative, are exact whatever the order.
SPLIT_SUM_DTYPES = ("f32", "i32")


def _split_reduce(op: Op) -> None:
    partial, slice_id = op.operands
    require(isinstance(partial.type, TileType) and partial.type.space == "reg"
             and partial.type.dtype.short in SPLIT_SUM_DTYPES,
             "split.reduce sums an f32 or i32 register tile")
    require(slice_id.type == ScalarType(I32), "the slice index is i32")
    require(op.result.type == partial.type, "the sum has the partial's type")
    require(isinstance(op.attrs["splits"], int) and op.attrs["splits"] >= 2,
             "split.reduce needs at least 2 splits")


def _wrap_inc(op: Op) -> None:
    require(op.operands[0].type == op.result.type == ScalarType(I32), "wrap_inc is on i32")
    require(isinstance(op.attrs["modulus"], int) and op.attrs["modulus"] >= 1,
             "wrap_inc needs a positive modulus")


def _select(op: Op) -> None:
    flag, a, b = op.operands
    require(flag.type == ScalarType(PRED), "select chooses by a pred")
    require(a.type == b.type == op.result.type == ScalarType(I32), "select chooses between i32s")


# The generic ops the passes introduce as they lower tile ops toward the GPU: shared buffers
# and their stage views (tiling / double buffering), the CTA barrier, split-K's meeting,
# fragment loads from global memory and the scalar ops of the K loop. The ops of one
# instruction or data-movement family (frag.mma, copy.*) are defined in its module
# (tilec/families/) and joined to these by the op catalogue.
GPU_OPS: dict[str, OpDef] = {d.name: d for d in [
    OpDef("arith.lt", "a < b", 2, 1, check=_compare, pure=True, fold=arith.fold_less),
    OpDef("arith.wrap_inc", "(a + 1) % modulus for 0 <= a < modulus: circular buffer indices",
          1, 1, attrs=("modulus",), check=_wrap_inc, pure=True, fold=arith.fold_wrap_inc),
    OpDef("arith.select", "b where the predicate holds, else c: a ring's phase flipping as its "
          "stage wraps", 3, 1, check=_select, pure=True, fold=arith.fold_select),
    OpDef("frag.load", "each thread loads the elements it owns in the result layout; dims[i] "
          "is the tensor dim tile dim i walks (-1: broadcast); a tensor dim no tile dim walks "
          "is read at its offset alone (a [1, N] or [M, 1] view); out of bounds reads 0",
          None, 1, attrs=("dims",), check=_frag_load, pure=True),
    # Not pure: its size is the tiling plan's shared-memory budget, read or not.
    OpDef("smem.alloc", "a shared-memory buffer of one or more stages", 0, 1,
          attrs=("stages", "role"), check=_smem_alloc),
    OpDef("smem.stage", "the view of one stage of a shared buffer", 2, 1, check=_smem_stage,
          pure=True),
    OpDef("split.reduce", "operands: a K slice's partial tile and the slice index; the last "
          "block of the output tile to get here gets the sum of all `splits` partials in "
          "slice order and goes on, the others end", 2, 1, attrs=("splits",),
          check=_split_reduce, elementwise=True),  # not pure: it ends programs
    OpDef("gpu.barrier", "all threads of the block reach this point (bar.sync 0)", 0, 0),
]}

# Every op the IR layer defines: what the frontend emits and the generic lowered ops. The
# verifier's default; the interpreter's default is those of these it has semantics for.
IR_OPS: Mapping[str, OpDef] = MappingProxyType({**CORE_OPS, **GPU_OPS})

# The dialects (name prefixes) of tilec's own ops, the families' (``frag.``, ``copy.``,
# defined in tilec/families/) among them: a registered op names a dialect of its own, so a
# pass cannot take the name of an op this layer cannot see.
BUILTIN_DIALECTS = frozenset({"arith", "tile", "tensor", "scf", "smem", "copy", "gpu", "split",
                              "frag", "wgmma", "tma", "mbar", "ws", "cluster"})

# Op kinds added by passes (ours or a user's) with register_op.
_REGISTERED: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> None:
    """Let a pass (ours or a user's) add op kinds, in a dialect of their own
    (:data:`BUILTIN_DIALECTS`); a name may be defined once. The verifier's and the
    interpreter's defaults and the op catalogue
    (:func:`tilec.families.catalogue.op_catalogue`) list them beside the built-in ops; give
    the OpDef an ``evaluate`` for the interpreter to run it."""
    builtin = IR_OPS.get(opdef.name)
    dialect = opdef.name.partition(".")[0]
    if builtin is None and dialect in BUILTIN_DIALECTS:
        raise ValueError(f"op '{opdef.name}' is in the dialect '{dialect}', whose ops are "
                         "already defined by tilec: give a pass's ops a dialect of its own")
    existing = builtin or _REGISTERED.get(opdef.name)
    if existing is not None and existing != opdef:
        raise ValueError(f"op '{opdef.name}' is already defined")
    if builtin is None:
        _REGISTERED[opdef.name] = opdef


def registered_ops() -> Mapping[str, OpDef]:
    """The op kinds passes added with :func:`register_op`, by name."""
    return dict(_REGISTERED)
