"""A CPU interpreter of the tile IR on numpy, with the GPU's numerics.

It runs the frontend's IR, and ``tilec bisect`` checks the IR after every later pass against
its results (the float64 reference, :mod:`tilec.cpu.reference`, checks it in turn), so it
follows what the hardware does rather than what numpy does by default:

- ``tile.load`` reads the in-bounds part of a tile and fills the rest with 0 (negative offsets
  included); ``tile.store`` writes only the in-bounds part (the ragged edges). Offsets are
  element offsets into the tensor, one per dimension.
- ``tile.dot`` of f16/bf16 tiles multiplies exactly and rounds once to f32 per dot op:
  ``acc = f32(acc + f64(a) @ f64(b))``. Products of two 16-bit floats are exact in f64 and a
  K-tile's sum is within f64 rounding of exact, so this is at least as accurate as mma.sync's
  f32 accumulation; it is not bit-identical to it. f32 @ f32 is computed in f32; with
  ``f32_math="tf32"`` (the option the GPU compiles with) each input is first rounded to tf32
  as ``cvt.rna.tf32.f32`` does (:func:`round_tf32`), as the tensor cores see it.
- Elementwise ops round to the tile's dtype: f16 and bf16 are computed in f32 and rounded
  once, which is correctly rounded for + - * / because f32 has more than twice their precision
  plus two bits (Figueroa's double-rounding bound). Casts round to nearest even; float to int
  casts round to nearest even and saturate, NaN -> 0 (PTX ``cvt.rni.sat``).
- ``tile.dot`` of i8 tiles into an i32 accumulator is exact: summed in int64 and wrapped to
  int32 (two's complement), as ``mma.sync ... .s32.s8.s8.s32`` without ``.satfinite`` does;
  int to 16-bit float casts go through f32 (``cvt.rn.f32.s32`` then one more rounding), as
  the GPU converts them, and int to int casts wrap (``cvt.s8.s32`` keeps the low byte).
- ``tile.max``/``min``/``relu`` propagate NaN (numpy ``maximum``/``minimum``).
- Scalar integer ops are their op definitions' ``fold`` (:mod:`tilec.ir.arith`): they wrap
  like the hardware's 32/64-bit registers; ``arith.floordiv`` and ``arith.mod`` are Python's
  ``//`` and ``%``; ``arith.cdiv`` is ceiling division.

Values at run time:

============  ===========================================================================
IR type       Python value
============  ===========================================================================
i32, i64      ``int``
pred          ``bool``
f16, f32      ``numpy.float16`` / ``numpy.float32`` scalar
bf16          ``numpy.float32`` scalar holding a bf16-representable value
tile          ``numpy.ndarray`` of :func:`storage_dtype` (bf16 tiles: float32 holding
              bf16-rounded values, so numpy can compute on them)
tensor        :class:`TensorRef`: a view of the caller's array (bf16, fp8: their raw bits)
============  ===========================================================================

Each op's meaning is one entry of :data:`SEMANTICS` (op name -> function), a plain table
attached to the op definitions as their ``evaluate``: here for :data:`OWN_OPS`, the ops this
module runs by itself (what the frontend emits, and the scalar and split-K ops the passes
add), and by the op catalogue (:func:`tilec.families.catalogue.op_catalogue`) beside the
executor's and the families' semantics. :func:`run_kernel` runs each op's ``evaluate`` from
the op table it is given (by default :data:`OWN_OPS` and the ops passes registered, each
carrying its own ``evaluate``); lowered IR is run with the catalogue.

Programs run one after another, each to completion: the ops before ``tile.grid`` are
evaluated once (they compute the grid, as the host does at launch); the rest of the body runs
once per grid point. A kernel without ``tile.grid`` runs as a single program.
"""
from __future__ import annotations

import copy

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType
from typing import Any, Callable, Optional

import numpy as np

from tilec.ir import arith
from tilec.ir.arith import INT_BITS
from tilec.ir.core import Block, Kernel, Op, Param, Value
from tilec.ir.ops import IR_OPS, OpDef, registered_ops
from tilec.ir.types import (BF16, F8E4M3, F8E5M2, F16, F32, I8, I32, I64, PRED, DType, ScalarType,
                            TensorType, TileType)
from tilec.options import F32_MATH
from tilec.target.bf16 import from_bf16_bits, to_bf16_bits
from tilec.target import fp8
from tilec.target.erfc import ERFC_P

try:  # optional: bf16 arrays may also be given as ml_dtypes.bfloat16
    import ml_dtypes
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None

__all__ = ["run_kernel", "SEMANTICS", "OWN_OPS", "SemanticsFn", "InterpState", "TensorRef",
           "InterpreterError", "storage_dtype", "round_to_dtype", "round_tf32"]


class InterpreterError(RuntimeError):
    """The kernel did something the interpreter cannot give a meaning to (an op without
    semantics, a division by zero in scalar code, a negative grid size...)."""


# ----------------------------------------------------------------------------------------
# bf16 rounding (bits <-> float32 come from the runtime: one source of truth)

def _f64_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float64 values to bf16 with a single rounding.

    Going through float32 with round-to-nearest would round twice; rounding to float32 *to
    odd* first keeps the sticky information, and float32 has more than bf16's precision plus
    two bits, so the second rounding is then exact (Boldo and Melquiond).
    """
    wide = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):  # overflow to inf is the rounding we want
        narrow = wide.astype(np.float32)
    bits = narrow.copy().view(np.uint32)
    finite = np.isfinite(wide)
    # Round-to-nearest may have rounded away from zero: step back one ulp to truncate.
    away = finite & (np.abs(narrow.astype(np.float64)) > np.abs(wide))
    bits[away] -= 1
    inexact = finite & (bits.view(np.float32).astype(np.float64) != wide)
    bits[inexact] |= 1
    return to_bf16_bits(bits.view(np.float32))


# ----------------------------------------------------------------------------------------
# dtypes and rounding

_STORAGE = {F16: np.dtype(np.float16), BF16: np.dtype(np.float32), F32: np.dtype(np.float32),
            I32: np.dtype(np.int32), I64: np.dtype(np.int64), PRED: np.dtype(np.bool_),
            I8: np.dtype(np.int8), F8E4M3: np.dtype(np.float32), F8E5M2: np.dtype(np.float32)}
_FP8_NAMES = {F8E4M3: "f8e4m3", F8E5M2: "f8e5m2"}


@dataclass(frozen=True)
class _BitFormat:
    """A float dtype numpy has no type of its own for (bf16, the 8-bit floats): tensors hold
    its bits as ``raw`` (an ml_dtypes array of type ``ml_name`` is viewed as them), tiles its
    values in float32, each exact there."""

    raw: np.dtype
    ml_name: str
    decode: Callable[[np.ndarray], np.ndarray]  # bits -> float32 values
    encode: Callable[[np.ndarray], np.ndarray]  # values of the dtype -> bits


_BIT_FORMATS: Mapping[DType, _BitFormat] = {
    BF16: _BitFormat(np.dtype(np.uint16), "bfloat16", from_bf16_bits, to_bf16_bits),
    **{dtype: _BitFormat(np.dtype(np.uint8), fp8.ML_DTYPES_NAMES[name],
                         partial(fp8.decode, name=name), partial(fp8.encode, name=name))
       for dtype, name in _FP8_NAMES.items()},
}


def storage_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype a tile of ``dtype`` is held in (bf16: float32 with bf16 values)."""
    return _STORAGE[dtype]


def round_to_dtype(dtype: DType, values: Any) -> np.ndarray:
    """Float values (float32 or float64) rounded once, to nearest even, to a float ``dtype``;
    returned in :func:`storage_dtype`."""
    values = np.asarray(values)
    if dtype == BF16:
        if values.dtype == np.float64:
            return from_bf16_bits(_f64_to_bf16_bits(values))
        return from_bf16_bits(to_bf16_bits(values))
    if dtype in (F16, F32):
        # numpy converts float64 and float32 to float16 directly, to nearest even.
        with np.errstate(over="ignore"):
            return values.astype(_STORAGE[dtype])
    if dtype in _FP8_NAMES:
        # cvt.rn.satfinite: out-of-range values and infinities to the largest finite value.
        bits = _BIT_FORMATS[dtype]
        return bits.decode(bits.encode(values))
    raise InterpreterError(f"cannot round to {dtype}: not a float type")


TF32_DROPPED_BITS = 13  # f32 has 23 mantissa bits, tf32 10 (Options.f32_math="tf32")


def round_tf32(values: np.ndarray) -> np.ndarray:
    """f32 values rounded to tf32 as ``cvt.rna.tf32.f32`` does: to the nearest value with 10
    mantissa bits, ties away from zero (adding half of the dropped range to the magnitude
    bits carries into the exponent where it must, up to infinity); NaN stays NaN."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    half = np.uint32(1 << (TF32_DROPPED_BITS - 1))
    kept = np.uint32(~((1 << TF32_DROPPED_BITS) - 1) & 0xFFFFFFFF)
    rounded = ((bits + half) & kept).view(np.float32)
    return np.where(np.isnan(values), values, rounded)


def _scalar(dtype: DType, value: Any) -> Any:
    """A Python number as the run-time value of a scalar of ``dtype``."""
    if dtype in INT_BITS:
        return arith.wrap(dtype, int(value))
    if dtype == PRED:
        return bool(value)
    return round_to_dtype(dtype, np.float64(value))[()]


def _convert(values: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    """``tile.cast``: float -> float rounds to nearest even; float -> int rounds to nearest
    even, saturates and sends NaN to 0 (``cvt.rni.sat``); int -> int wraps."""
    if dst == PRED:
        return values != 0
    if dst.is_float:
        # Every float value of every dtype is exact in f32; integers are exact in f64 up to
        # 2**53, and reach a narrower float through f32, as cvt.rn.f32.s32 then cvt.rn.f16.f32
        # (or the e4m3x2 / e5m2x2 cvt) do.
        wide = values.astype(np.float32 if src.is_float or dst != F32 else np.float64)
        return round_to_dtype(dst, wide)
    if src.is_float:
        info = np.iinfo(_STORAGE[dst])
        rounded = np.rint(values.astype(np.float64))
        rounded = np.where(np.isnan(rounded), 0.0, np.clip(rounded, info.min, info.max))
        return rounded.astype(_STORAGE[dst])
    return values.astype(_STORAGE[dst])


# ----------------------------------------------------------------------------------------
# run-time state

@dataclass(frozen=True)
class TensorRef:
    """A global tensor at run time: a numpy view of the caller's memory.

    ``array`` holds the elements in their memory format (bf16 and fp8 as raw bits), so writes
    through it land in the caller's array, strided views included. ``name`` says where it
    came from, for messages (``"B"``, ``"B.T"``).
    """

    array: np.ndarray
    dtype: DType
    name: str

    def read(self, index: tuple[slice, ...]) -> np.ndarray:
        """Elements at ``index`` as tile values (storage dtype)."""
        part = self.array[index]
        if self.dtype in _BIT_FORMATS:
            return _BIT_FORMATS[self.dtype].decode(part)
        return part.astype(_STORAGE[self.dtype])

    def write(self, index: tuple[slice, ...], values: np.ndarray) -> None:
        """Store tile values (already of this tensor's dtype) at ``index``."""
        if self.dtype in _BIT_FORMATS:
            values = _BIT_FORMATS[self.dtype].encode(values)
        self.array[index] = values


class ProgramEnd(Exception):
    """Raised by an op at which its program ends early (a split-K slice that is not the last
    of its output tile); the launch goes on with the next program."""


class InterpState:
    """What the semantics functions see: the values computed so far, the program id and the
    op table whose ``evaluate`` gives each op its meaning.

    ``env`` maps each IR value to its run-time value. Region ops (``scf.for``) run their
    bodies with :meth:`run_block`; terminators hand their values back with
    :meth:`yield_values`.
    """

    def __init__(self, kernel: Kernel, ops: Mapping[str, OpDef], f32_math: str = "ffma"):
        self.kernel = kernel
        self.ops = ops
        self.f32_math = f32_math  # Options.f32_math: how f32 tile products are computed
        self.env: dict[Value, Any] = {}
        self.program_id: tuple[int, ...] = ()
        # What programs leave for other programs of the launch (split-K partial sums).
        self.meetings: dict[Any, dict[int, Any]] = {}
        self._yielded: list[Optional[list[Any]]] = []
        # Called once the program ends, with whether it ended well (ops whose work goes on
        # beside the program's, such as a warp-specialized producer, finish there).
        self._at_end: list[Callable[[bool], None]] = []

    def fork(self) -> "InterpState":
        """A state for a region that runs beside this one (a producer coroutine): the same
        program and values so far, its own values and region stack from here on."""
        other = copy.copy(self)
        other.env = dict(self.env)
        other._yielded = []
        other._at_end = []
        return other

    def at_program_end(self, hook: Callable[[bool], None]) -> None:
        self._at_end.append(hook)

    def end_program(self, ok: bool) -> None:
        hooks, self._at_end = self._at_end, []
        for hook in hooks:
            hook(ok)

    def error(self, op: Op, message: str) -> InterpreterError:
        where = op.name + (f" at {op.loc}" if op.loc else "")
        if self.program_id:
            where += f" (program {self.program_id})"
        return InterpreterError(f"{where}: {message}")

    def run_ops(self, ops: Sequence[Op]) -> None:
        for op in ops:
            self.run_op(op)

    def run_op(self, op: Op) -> None:
        opdef = self.ops.get(op.name)
        semantics = opdef.evaluate if opdef is not None else None
        if semantics is None:
            raise self.error(op, "no semantics: its op definition has no evaluate")
        try:
            operands = [self.env[v] for v in op.operands]
        except KeyError as err:
            raise self.error(op, f"operand {err.args[0]!r} has no value yet") from None
        results = list(semantics(self, op, operands))
        if len(results) != len(op.results):
            raise self.error(op, f"semantics returned {len(results)} values for "
                                 f"{len(op.results)} results")
        for value, result in zip(op.results, results):
            self._check_result(op, value, result)
            self.env[value] = result

    def run_block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        """Run a region with its block arguments bound to ``args``; returns what its
        terminator yielded (empty when it yields nothing)."""
        if len(args) != len(block.args):
            raise InterpreterError(f"block takes {len(block.args)} arguments, got {len(args)}")
        self.env.update(zip(block.args, args))
        self._yielded.append(None)
        try:
            self.run_ops(block.ops)
        finally:
            yielded = self._yielded.pop()
        return yielded if yielded is not None else []

    def yield_values(self, values: Sequence[Any]) -> None:
        """Called by a terminator: these are the values of the block being run."""
        if not self._yielded:
            raise InterpreterError("a terminator ran outside of a region")
        self._yielded[-1] = list(values)

    def _check_result(self, op: Op, value: Value, result: Any) -> None:
        # Cheap, and it catches a semantics function that disagrees with the
        # op's type before the wrong value spreads.
        rtype = value.type
        if isinstance(rtype, TileType):
            if not isinstance(result, np.ndarray) or result.shape != tuple(rtype.shape) \
                    or result.dtype != _STORAGE[rtype.dtype]:
                got = (f"{result.dtype}{list(result.shape)}" if isinstance(result, np.ndarray)
                       else type(result).__name__)
                raise self.error(op, f"semantics produced {got} for a {rtype}")
        elif isinstance(rtype, TensorType) and not isinstance(result, TensorRef):
            raise self.error(op, f"semantics produced {type(result).__name__} for a {rtype}")


# ----------------------------------------------------------------------------------------
# semantics of the core ops

SemanticsFn = Callable[[InterpState, Op, list[Any]], Sequence[Any]]


def _result_type(op: Op) -> Any:
    return op.results[0].type


# --- scalars ---

def _constant(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return [_scalar(_result_type(op).dtype, op.attrs["value"])]


_FLOAT_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "arith.add": np.add, "arith.sub": np.subtract, "arith.mul": np.multiply,
    "arith.div": np.divide, "arith.min": np.minimum, "arith.max": np.maximum,
}


def _fold(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    """Integer and predicate scalars: the op definition's fold (:mod:`tilec.ir.arith`)."""
    fold = state.ops[op.name].fold
    dtype = _result_type(op).dtype
    if fold is None:
        raise state.error(op, f"not defined on {dtype}")
    try:
        return [fold(operands, op.attrs, dtype)]
    except ZeroDivisionError:
        raise state.error(op, "integer division by zero") from None


def _arith(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    dtype = _result_type(op).dtype
    if dtype in INT_BITS:
        return _fold(state, op, operands)
    if dtype.is_float and op.name in _FLOAT_ARITH:
        # float64 has more than twice f32's precision plus two bits: one rounding at the end
        # gives the correctly rounded f32/f16/bf16 result.
        a, b = operands
        exact = _FLOAT_ARITH[op.name](np.float64(a), np.float64(b))
        return [round_to_dtype(dtype, exact)[()]]
    raise state.error(op, f"not defined on {dtype}")


def _grid(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    if len(state.program_id) != len(op.results):
        raise state.error(op, f"{len(op.results)}-D grid but program id is {state.program_id}")
    return list(state.program_id)


def _split_reduce(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    partial, slice_id = operands
    splits = op.attrs["splits"]
    if not 0 <= slice_id < splits:
        raise state.error(op, f"slice {slice_id} of {splits}")
    # The grid's last axis is the slice: the rest names the output tile.
    arrived = state.meetings.setdefault((op, state.program_id[:-1]), {})
    arrived[slice_id] = partial
    if len(arrived) < splits:
        raise ProgramEnd
    del state.meetings[(op, state.program_id[:-1])]
    total = arrived[0]
    for index in range(1, splits):
        total = total + arrived[index]
    return [total]


# --- making tiles ---

def _full(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    rtype = _result_type(op)
    value = _scalar(rtype.dtype, op.attrs["value"])
    return [np.full(rtype.shape, value, dtype=_STORAGE[rtype.dtype])]


def _splat(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    rtype = _result_type(op)
    return [np.full(rtype.shape, operands[0], dtype=_STORAGE[rtype.dtype])]


def _broadcast(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    # A copy, not numpy's read-only broadcast view: tile values own their elements.
    return [np.array(np.broadcast_to(operands[0], _result_type(op).shape))]


def _reshape(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return [operands[0].reshape(_result_type(op).shape)]


# --- global memory ---

def _transpose(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor = operands[0]
    return [TensorRef(tensor.array.T, tensor.dtype, f"{tensor.name}.T")]


def _batch(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor, index = operands
    if not 0 <= index < tensor.array.shape[0]:
        raise state.error(op, f"batch index {index} is outside '{tensor.name}', which holds "
                              f"{tensor.array.shape[0]} batches")
    return [TensorRef(tensor.array[index], tensor.dtype, f"{tensor.name}[{index}]")]


def _in_bounds(dims: tuple[int, ...], offsets: Sequence[int], sizes: Sequence[int]
               ) -> Optional[tuple[tuple[slice, ...], tuple[slice, ...]]]:
    """The part of a tile at ``offsets`` that lies inside a tensor of shape ``dims``, as
    (tensor index, tile index); None when no element does."""
    in_tensor, in_tile = [], []
    for dim, offset, size in zip(dims, offsets, sizes):
        low, high = max(offset, 0), min(offset + size, dim)
        if high <= low:
            return None
        in_tensor.append(slice(low, high))
        in_tile.append(slice(low - offset, high - offset))
    return tuple(in_tensor), tuple(in_tile)


def _load(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor, *offsets = operands
    rtype = _result_type(op)
    tile = np.zeros(rtype.shape, dtype=_STORAGE[rtype.dtype])
    window = _in_bounds(tensor.array.shape, offsets, rtype.shape)
    if window is not None:
        in_tensor, in_tile = window
        tile[in_tile] = tensor.read(in_tensor)
    return [tile]


def _store(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor, *offsets, tile = operands
    window = _in_bounds(tensor.array.shape, offsets, tile.shape)
    if window is not None:
        in_tensor, in_tile = window
        try:
            tensor.write(in_tensor, tile[in_tile])
        except ValueError as err:  # a read-only array that escaped the up-front check
            raise state.error(op, f"cannot write argument '{tensor.name}': {err}") from None
    return []


# --- compute ---

def _dot(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    a, b, acc = operands
    if not op.operands[0].type.dtype.is_float:
        # i8 @ i8 into i32: exact, wrapping as the integer mma does (no .satfinite).
        exact = acc.astype(np.int64) + np.matmul(a.astype(np.int64), b.astype(np.int64))
        return [((exact + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)]
    product = op.attrs.get("product_dtype")
    if product is not None:  # an operand stored in another dtype: converted as frag.cvt does
        a, b = (round_to_dtype(product, t.astype(np.float32)) if v.type.dtype != product
                else t for t, v in zip((a, b), op.operands))
    if op.operands[0].type.dtype == F32:
        if state.f32_math == "tf32":  # the products of tf32 inputs are exact in f32
            a, b = round_tf32(a), round_tf32(b)
        return [acc + np.matmul(a, b)]
    # Exact products, one rounding to f32 per dot op (see the module docstring).
    exact = acc.astype(np.float64) + np.matmul(a.astype(np.float64), b.astype(np.float64))
    return [exact.astype(np.float32)]


_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "tile.add": np.add, "tile.sub": np.subtract, "tile.mul": np.multiply,
    "tile.div": np.divide, "tile.max": np.maximum, "tile.min": np.minimum,
}
def _sigmoid_f32(a: np.ndarray) -> np.ndarray:
    one = a.dtype.type(1)
    return one / (one + np.exp(-a))


def _gelu_tanh_f32(a: np.ndarray) -> np.ndarray:
    # 0.5 a (1 + tanh(u)) = a sigmoid(2u), the GPU's form: no cancellation where a << 0.
    t = a.dtype.type
    two_u = t(2 * 0.7978845608028654) * (a * (t(1) + t(0.044715) * a * a))
    return a * _sigmoid_f32(two_u)


def _fma_f32(a: np.ndarray, b: Any, c: Any) -> np.ndarray:
    """fma.rn.f32: the f32 product is exact in f64, so one more rounding is within a
    double rounding of the fused result."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def _gelu_f32(a: np.ndarray) -> np.ndarray:
    """gelu in the erf form, step by step as the GPU computes it (backend/compute.py,
    tilec/target/erfc.py): h = erfc(|x| / sqrt 2) / 2 from Numerical Recipes' erfcc, then x h
    for x <= 0 and x (1 - h) for x > 0. numpy's exp2 and 1 / t stand in for ex2.approx and
    rcp.approx (each within about 2 ulp of them); results ex2 would flush are flushed."""
    f = np.float32
    x = a.astype(np.float32)
    z = np.abs(x) * f(0.70710677)
    t = f(1) / _fma_f32(z, f(0.5), f(1))
    p = _fma_f32(t, f(ERFC_P[9]), f(ERFC_P[8]))
    for c in reversed(ERFC_P[:8]):
        p = _fma_f32(p, t, f(c))
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp2(_fma_f32(-z, z, p) * f(1.442695))
    e = np.where(e < np.finfo(np.float32).tiny, f(0), e).astype(np.float32)
    h = t * e * f(0.5)
    with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, as on the GPU
        return x * np.where(x > 0, f(1) - h, h)


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tile.neg": np.negative, "tile.relu": lambda a: np.maximum(a, a.dtype.type(0)),
    # The math functions in f32 (numpy's, within a few ulp); the GPU's are PTX's .approx forms,
    # whose error is larger and which flush subnormals (backend/compute.py).
    "tile.exp": np.exp, "tile.exp2": np.exp2, "tile.log": np.log, "tile.log2": np.log2,
    "tile.sqrt": np.sqrt, "tile.rsqrt": lambda a: a.dtype.type(1) / np.sqrt(a),
    "tile.abs": np.abs, "tile.tanh": np.tanh, "tile.sigmoid": _sigmoid_f32,
    "tile.silu": lambda a: a * _sigmoid_f32(a), "tile.gelu_tanh": _gelu_tanh_f32,
    "tile.gelu": _gelu_f32,
}


def _in_dtype(dtype: DType, compute: Callable[..., np.ndarray], tiles: list[Any]
              ) -> np.ndarray:
    if not dtype.is_float:
        return compute(*tiles).astype(_STORAGE[dtype])
    # f16 and bf16 in f32, then one rounding: correctly rounded (module docstring).
    return round_to_dtype(dtype, compute(*(t.astype(np.float32) for t in tiles)))


def _binary(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return [_in_dtype(_result_type(op).dtype, _BINARY[op.name], operands)]


def _unary(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return [_in_dtype(_result_type(op).dtype, _UNARY[op.name], operands)]


# where's comparisons, by the ``compare`` attribute: IEEE's, as setp's (ne is unordered).
WHERE_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal}


def _where(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    x, y, a, b = operands
    # Comparing in f32 is exact for f16 and bf16 values; a and b are of the result's dtype.
    holds = WHERE_COMPARE[op.attrs["compare"]](x.astype(np.float32), y.astype(np.float32))
    return [np.where(holds, a, b)]


def _cast(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return [_convert(operands[0], op.operands[0].type.dtype, _result_type(op).dtype)]


# --- control flow ---

def _for(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    lower, upper, step, *carried = operands
    if step != op.attrs["step_const"] or step <= 0:
        raise state.error(op, f"step is {step}, step_const is {op.attrs['step_const']}")
    for induction in range(lower, upper, step):
        carried = state.run_block(op.regions[0], [induction, *carried])
    return carried


def _yield(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    state.yield_values(operands)
    return []


# The meaning of each core op (and of split.reduce and the scalar ops the passes add, which
# need nothing beyond this module), by name: the op catalogue makes these the ``evaluate``
# of the op definitions.
SEMANTICS: dict[str, SemanticsFn] = {
    "arith.constant": _constant,
    **{name: _arith for name in ("arith.add", "arith.sub", "arith.mul", "arith.div",
                                 "arith.floordiv", "arith.cdiv", "arith.mod", "arith.min",
                                 "arith.max")},
    "arith.lt": _fold, "arith.wrap_inc": _fold, "arith.select": _fold,
    "tile.grid": _grid, "split.reduce": _split_reduce,
    "tile.full": _full, "tile.splat": _splat, "tile.broadcast": _broadcast,
    "tile.reshape": _reshape, "tensor.transpose": _transpose, "tensor.batch": _batch,
    "tile.load": _load, "tile.store": _store,
    "tile.dot": _dot, **{name: _binary for name in _BINARY},
    **{name: _unary for name in _UNARY}, "tile.cast": _cast, "tile.where": _where,
    "scf.for": _for, "scf.yield": _yield,
}

# The ops this module runs by itself, with their semantics: run_kernel's default.
OWN_OPS: Mapping[str, OpDef] = MappingProxyType(
    {name: replace(IR_OPS[name], evaluate=evaluate) for name, evaluate in SEMANTICS.items()})


# ----------------------------------------------------------------------------------------
# arguments

def _accepted_dtypes(dtype: DType) -> tuple[tuple[np.dtype, ...], str]:
    """The numpy dtypes a tensor argument of ``dtype`` may have, and how to say so."""
    if dtype in _BIT_FORMATS:
        bits = _BIT_FORMATS[dtype]
        accepted = (bits.raw,)
        words = f"numpy {bits.raw} holding {dtype} bits"
        if ml_dtypes is not None and hasattr(ml_dtypes, bits.ml_name):
            accepted += (np.dtype(getattr(ml_dtypes, bits.ml_name)),)
            words += f" or ml_dtypes.{bits.ml_name}"
        return accepted, words
    numpy_dtype = _STORAGE[dtype]
    return (numpy_dtype,), f"numpy {numpy_dtype}"


def _stored_params(kernel: Kernel) -> set[str]:
    """Parameters some ``tile.store`` writes into (through views such as transposes)."""
    names = {value: param.name for param, value in zip(kernel.params, kernel.body.args)}
    stored: set[str] = set()
    for op in kernel.walk():
        if op.name != "tile.store":
            continue
        pending = [op.operands[0]]
        while pending:
            value = pending.pop()
            if value in names:
                stored.add(names[value])
            elif isinstance(value.owner, Op):
                pending.extend(v for v in value.owner.operands
                               if isinstance(v.type, TensorType))
    return stored


def _args_by_name(kernel: Kernel, args: Any) -> dict[str, Any]:
    names = [p.name for p in kernel.params]
    if isinstance(args, Mapping):
        missing = [n for n in names if n not in args]
        unknown = [str(n) for n in args if n not in names]
        if missing:
            raise TypeError(f"kernel '{kernel.name}': missing argument(s) "
                            + ", ".join(f"'{n}'" for n in missing))
        if unknown:
            raise TypeError(f"kernel '{kernel.name}': unexpected argument(s) "
                            + ", ".join(f"'{n}'" for n in unknown)
                            + f" (parameters: {', '.join(names)})")
        return dict(args)
    if isinstance(args, Sequence) and not isinstance(args, (str, bytes)):
        if len(args) != len(names):
            raise TypeError(f"kernel '{kernel.name}' takes {len(names)} arguments "
                            f"({', '.join(names)}), got {len(args)}")
        return dict(zip(names, args))
    raise TypeError(f"kernel '{kernel.name}': arguments must be a dict by parameter name or a "
                    f"sequence in parameter order, got {type(args).__name__}")


class _SymbolTable:
    """Shape symbols bound so far, each with where its value came from."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[int, str]] = {}

    def bind(self, symbol: str, size: int, where: str) -> None:
        if symbol in self.values and self.values[symbol][0] != size:
            size0, where0 = self.values[symbol]
            raise ValueError(f"symbol '{symbol}' is bound inconsistently: {where0} gives "
                             f"{symbol}={size0} but {where} gives {symbol}={size}")
        if size > np.iinfo(np.int32).max:
            raise ValueError(f"symbol '{symbol}' = {size} from {where} does not fit in i32")
        self.values.setdefault(symbol, (size, where))


def _bind_tensor(param: Param, value: Any, symbols: _SymbolTable, stored: bool) -> TensorRef:
    ttype = param.type
    if not isinstance(value, np.ndarray):
        raise TypeError(f"argument '{param.name}': expected a numpy array for {ttype}, "
                        f"got {type(value).__name__}")
    accepted, words = _accepted_dtypes(ttype.dtype)
    if value.dtype not in accepted:
        raise TypeError(f"argument '{param.name}': expected dtype {ttype.dtype} ({words}), "
                        f"got {value.dtype}")
    if value.ndim != ttype.rank:
        raise ValueError(f"argument '{param.name}': expected rank {ttype.rank} for {ttype}, "
                         f"got shape {value.shape} of rank {value.ndim}")
    for axis, (dim, size) in enumerate(zip(ttype.shape, value.shape)):
        if isinstance(dim, int):
            if dim != size:
                raise ValueError(f"argument '{param.name}': dim {axis} must be {dim} for "
                                 f"{ttype}, got shape {value.shape}")
        else:
            symbols.bind(dim, size, f"argument '{param.name}' (dim {axis})")
    # What the GPU's binding refuses (tilec.runtime.arrays), refused here too.
    if any(stride < 0 for stride in value.strides):
        raise ValueError(f"argument '{param.name}' has a negative stride (byte strides "
                         f"{value.strides}); pass a copy (numpy.ascontiguousarray)")
    if any(stride // value.itemsize > np.iinfo(np.int32).max for stride in value.strides):
        raise ValueError(f"argument '{param.name}': strides must fit in 32 bits, got byte "
                         f"strides {value.strides}")
    if stored and not value.flags.writeable:
        raise ValueError(f"argument '{param.name}': the kernel stores into it but the array "
                         f"is read-only")
    # bf16 and fp8 are handled as their bits so that raw and ml_dtypes arrays share one code
    # path; a same-itemsize view keeps the strides, so stores still reach the caller's memory.
    bits = _BIT_FORMATS.get(ttype.dtype)
    array = value.view(bits.raw) if bits is not None else value
    return TensorRef(array, ttype.dtype, param.name)


def _bind_scalar(param: Param, value: Any) -> Any:
    dtype = param.type.dtype
    if dtype == PRED:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"argument '{param.name}': expected a bool for pred, "
                            f"got {type(value).__name__}")
        return bool(value)
    integral = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if dtype in INT_BITS:
        if not integral:
            raise TypeError(f"argument '{param.name}': expected an int for {dtype}, "
                            f"got {type(value).__name__}")
        info = np.iinfo(_STORAGE[dtype])
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"argument '{param.name}': {value} does not fit in {dtype}")
        return int(value)
    if not (integral or isinstance(value, (float, np.floating))):
        raise TypeError(f"argument '{param.name}': expected a number for {dtype}, "
                        f"got {type(value).__name__}")
    return _scalar(dtype, value)


def _bind_arguments(kernel: Kernel, args: Any, symbols: Optional[Mapping[str, int]]
                    ) -> list[Any]:
    """Validate the arguments; return one run-time value per ``kernel.body`` argument."""
    named = _args_by_name(kernel, args)
    table = _SymbolTable()
    for name, size in (symbols or {}).items():
        if name not in kernel.symbols:
            raise ValueError(f"symbols: kernel '{kernel.name}' has no shape symbol '{name}' "
                             f"(symbols: {', '.join(kernel.symbols) or 'none'})")
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 0:
            raise ValueError(f"symbols: '{name}' must be a non-negative int, got {size!r}")
        table.bind(name, int(size), "symbols=")
    stored = _stored_params(kernel)
    values: list[Any] = []
    for param in kernel.params:
        if isinstance(param.type, TensorType):
            values.append(_bind_tensor(param, named[param.name], table,
                                       param.name in stored))
        elif isinstance(param.type, ScalarType):
            values.append(_bind_scalar(param, named[param.name]))
        else:
            raise TypeError(f"parameter '{param.name}' has type {param.type}, which a launch "
                            f"cannot pass")
    for symbol in kernel.symbols:
        if symbol not in table.values:
            raise ValueError(f"symbol '{symbol}' is not bound: no tensor argument has it in "
                             f"its shape; pass symbols={{'{symbol}': ...}}")
        values.append(table.values[symbol][0])
    return values


# ----------------------------------------------------------------------------------------
# launch

def run_kernel(kernel: Kernel, args: Mapping[str, Any] | Sequence[Any], *,
               symbols: Optional[Mapping[str, int]] = None,
               ops: Optional[Mapping[str, OpDef]] = None, f32_math: str = "ffma") -> None:
    """Run ``kernel`` on the CPU, writing its stores into the given arrays in place.

    ``args`` are by parameter name or in ``kernel.params`` order. Tensors are numpy arrays:
    f16 -> float16, f32 -> float32, bf16 -> uint16 arrays of bf16 bits (or
    ``ml_dtypes.bfloat16`` arrays when ml_dtypes is installed); any strides. Scalars are
    Python numbers. (The GPU runtime takes bf16 only as ml_dtypes.bfloat16, since a uint16
    array could mean anything there; here the parameter's type says it is bf16, and raw bits
    are what tests can build without ml_dtypes.) Shape symbols are bound from the arrays'
    shapes; ``symbols`` may bind them explicitly (and must then agree). Raises
    TypeError/ValueError naming the argument for a bad argument, :class:`InterpreterError`
    for a kernel that fails while running. ``ops`` gives each op its meaning (its
    ``evaluate``); by default :data:`OWN_OPS` and the ops passes registered, which cover the
    frontend's IR. Lowered IR needs the op catalogue:
    ``ops=tilec.families.catalogue.op_catalogue()``. ``f32_math`` is the option the GPU
    compiles f32 products with: "tf32" rounds their inputs to tf32.
    """
    if ops is None:
        ops = {**OWN_OPS, **registered_ops()}
    values = _bind_arguments(kernel, args, symbols)
    body = kernel.body.ops
    grid_at = [i for i, op in enumerate(body) if op.name == "tile.grid"]
    nested = [op for top in body for op in list(top.walk())[1:] if op.name == "tile.grid"]
    if len(grid_at) > 1 or nested:
        raise InterpreterError(f"kernel '{kernel.name}': one tile.grid, at the top level, "
                               f"is expected")
    if f32_math not in F32_MATH:
        raise ValueError(f"f32_math must be one of {', '.join(F32_MATH)}, got {f32_math!r}")
    state = InterpState(kernel, ops, f32_math)
    state.env.update(zip(kernel.body.args, values))
    # The IR is IEEE arithmetic: overflow to inf and 0/0 are results, not warnings.
    with np.errstate(all="ignore"):
        if not grid_at:
            state.run_ops(body)
            return
        grid_op = body[grid_at[0]]
        state.run_ops(body[:grid_at[0]])
        sizes = [state.env[v] for v in grid_op.operands]
        if any(size < 0 for size in sizes):
            raise state.error(grid_op, f"negative grid size {sizes}")
        launch_env = state.env
        for program_id in itertools.product(*(range(size) for size in sizes)):
            state.env = dict(launch_env)
            state.program_id = program_id
            ok = False
            try:
                state.run_ops(body[grid_at[0]:])
                ok = True
            except ProgramEnd:
                ok = True
            finally:
                state.end_program(ok)
