"""A float64 reference for matmul-shaped tile programs, computed on whole tensors.

The interpreter runs a kernel one program and one K tile at a time, with the GPU's rounding;
checking a kernel only against it would share its indexing code. This module reads the same
frontend IR as whole-tensor algebra instead: the K loop becomes one full-size matmul, and the
ops around it run once on full-size float64 arrays, so tiles, edge masks and rounding never
enter the result.

It understands the standard form and refuses anything else with a reason
(:class:`Unsupported`)::

    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):        # offsets are program index * tile size
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):                       # loop-carried values only feed dots
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = relu(alpha * acc + bias[n * BN : +BN])   # elementwise

Each tile dimension is labelled with the blocked axis its offset walks (grid axis 0 by 128,
the loop by 32...): a load of ``A`` stands for all of ``A``, elementwise ops follow numpy
broadcasting over the labels, and a store writes the part of the tensor the grid covers.
Casts do not round: the reference is the exact value, up to float64 rounding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np

from tilec.cpu.interpreter import WHERE_COMPARE  # the same comparisons, in float64
from tilec.ir import arith
from tilec.ir.core import Kernel, Op, Value, find_grid
from tilec.ir.ops import CORE_OPS, MATH_FUNCTIONS
from tilec.ir.types import TensorType


class Unsupported(Exception):
    """The program is not in the form this reference evaluates; the message says why."""


@dataclass(frozen=True)
class Blocked:
    """A scalar equal to ``index(source) * block``: a grid coordinate times a tile size, or a
    loop counter stepping by ``block`` from 0."""

    source: str  # "grid axis 0", "loop at line 12"
    block: int


# What a tile dimension walks: a blocked axis, or None for a broadcast (size-1) dimension.
Label = Optional[Blocked]
Scalar = Union[int, float, Blocked]


@dataclass(frozen=True)
class Whole:
    """A tile value seen whole: ``array`` has one dimension per tile dimension, full-size
    where ``labels`` names a blocked axis and of size 1 where it is None."""

    array: np.ndarray
    labels: tuple[Label, ...]


@dataclass(frozen=True)
class CarriedArg:
    """A loop-carried value inside the loop body (iteration argument ``index``)."""

    index: int


@dataclass(frozen=True)
class Accumulated:
    """``carried[index] + total``, where ``total`` sums the dot products of all iterations."""

    index: int
    total: Whole


TileValue = Union[Whole, CarriedArg, Accumulated]

_GELU = np.frompyfunc(MATH_FUNCTIONS["gelu"][1], 1, 1)  # float64 -> float64, one number

# The smallest normal f32. The GPU's math functions are PTX's .ftz forms (backend/compute.py),
# which cannot return a smaller magnitude: the reference's float64 values below it are
# flushed to zero of their sign, as the kernel's are. Otherwise a decision on them, such as
# gelu(x) < 0 for x << 0 (float64: a tiny negative number; the kernel: -0.0), would take the
# other branch of a where() from every kernel.
FLUSH_BELOW = float(np.finfo(np.float32).tiny)


def flush_to_zero(values: Any) -> np.ndarray:
    """float64 values with magnitudes below FLUSH_BELOW as zeros of their sign."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.abs(values) < FLUSH_BELOW, np.copysign(0.0, values), values)


def _flushed(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def flushed(*operands: np.ndarray) -> np.ndarray:
        return flush_to_zero(function(*operands))
    return flushed


ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "tile.add": np.add, "tile.sub": np.subtract, "tile.mul": np.multiply,
    "tile.div": np.divide, "tile.max": np.maximum, "tile.min": np.minimum,
    "tile.neg": np.negative, "tile.relu": lambda a: np.maximum(a, 0.0),
    # The math functions by their definitions, in float64.
    "tile.exp": np.exp, "tile.exp2": np.exp2, "tile.log": np.log, "tile.log2": np.log2,
    "tile.sqrt": np.sqrt, "tile.rsqrt": lambda a: 1.0 / np.sqrt(a), "tile.abs": np.abs,
    "tile.tanh": np.tanh, "tile.sigmoid": lambda a: 1.0 / (1.0 + np.exp(-a)),
    "tile.silu": lambda a: a / (1.0 + np.exp(-a)),
    # 0.5 a (1 + tanh(u)) = a sigmoid(2u), u = sqrt(2/pi) (a + 0.044715 a^3): the same
    # function, without the cancellation of 1 + tanh(u) where a << 0.
    "tile.gelu_tanh": lambda a: a / (1.0 + np.exp(-2.0 * np.sqrt(2.0 / np.pi)
                                                  * (a + 0.044715 * a ** 3))),
    # gelu as the frontend folds a constant (through erfc: no cancellation where a << 0).
    "tile.gelu": lambda a: np.asarray(_GELU(a), dtype=np.float64),
}
ELEMENTWISE.update({name: _flushed(ELEMENTWISE[name]) for name in (
    "tile.exp", "tile.exp2", "tile.log", "tile.log2", "tile.rsqrt", "tile.tanh",
    "tile.sigmoid", "tile.silu", "tile.gelu_tanh", "tile.gelu")})
SCALAR_OPS = frozenset(f"arith.{name}" for name in arith.EXACT)


def fold_scalar(op: Op, operands: list[Any]) -> Any:
    """A scalar op on known values: integers as the op's fold (wrapped, as the GPU computes
    them), floats exactly in float64 (the reference's precision)."""
    dtype = op.result.type.dtype
    fold = CORE_OPS[op.name].fold
    if op.name == "arith.constant" or (fold is not None and dtype in arith.INT_BITS):
        return fold(operands, op.attrs, dtype)
    a, b = operands
    return arith.EXACT[op.name.removeprefix("arith.")](a, b)


def reference(kernel: Kernel, tensors: dict[str, np.ndarray],
              scalars: dict[str, Union[int, float]]) -> dict[str, np.ndarray]:
    """The written tensors' contents after ``kernel`` runs, in float64.

    ``kernel`` is the frontend's IR (before any pass); ``tensors`` are float64 copies of every
    tensor argument (outputs included: what a store does not cover keeps its value), and
    ``scalars`` the scalar arguments. Raises :class:`Unsupported` for other program forms.
    """
    batches = _batch_count(kernel, tensors)
    if batches is None:
        return _Evaluator(kernel, tensors, scalars).run()
    # A batched program is the 2-D program once per batch: each run sees batch ``b`` of
    # every 3-D tensor (a view, so its stores land in the whole tensor it returns).
    whole = {name: np.array(array, dtype=np.float64) for name, array in tensors.items()}
    written: dict[str, np.ndarray] = {}
    for batch in range(batches):
        written.update(_Evaluator(kernel, whole, scalars, batch, copy=False).run())
    return written


def _batch_count(kernel: Kernel, tensors: dict[str, np.ndarray]) -> Optional[int]:
    """The batch count of a program with ``tensor.batch`` views (the first dim of the 3-D
    tensors, which must agree), or None for a program without."""
    if not any(op.name == "tensor.batch" for op in kernel.walk()):
        return None
    counts = {np.shape(tensors[p.name])[0] for p in kernel.params
              if isinstance(p.type, TensorType) and p.type.rank == 3}
    if len(counts) != 1:
        raise Unsupported(f"the 3-D tensors disagree on the batch count ({sorted(counts)})")
    return counts.pop()


class _Evaluator:
    def __init__(self, kernel: Kernel, tensors: dict[str, np.ndarray],
                 scalars: dict[str, Union[int, float]], batch: Optional[int] = None,
                 copy: bool = True):
        self.kernel = kernel
        self.tensors = {name: np.array(array, dtype=np.float64, copy=copy or None)
                        for name, array in tensors.items()}
        self.batch = batch  # the batch this run evaluates, for programs with batch views
        self.batch_axis: Optional[str] = None  # the grid axis the batch views index by
        self.env: dict[Value, Any] = {}
        self.sizes: dict[Blocked, int] = {}  # blocked axis -> the extent it walks
        self.grid: dict[str, int] = {}  # grid axis -> programs along it
        self.written: list[str] = []
        self.loop: Optional[tuple[Op, str]] = None  # the loop being evaluated, its source
        self.loop_limit = 0  # how far along K that loop's iterations reach
        symbols: dict[str, int] = {}
        for param, value in zip(kernel.params, kernel.body.args):
            if isinstance(param.type, TensorType):
                self.env[value] = param.name
                for dim, size in zip(param.type.shape, self.tensors[param.name].shape):
                    if isinstance(dim, str):
                        symbols[dim] = size
            else:
                self.env[value] = scalars[param.name]
        for name in kernel.symbols:
            self.env[kernel.symbol_value(name)] = symbols[name]

    def run(self) -> dict[str, np.ndarray]:
        if find_grid(self.kernel) is None:
            raise Unsupported("the kernel has no grid")
        for op in self.kernel.body.ops:
            self.op(op)
        return {name: self.tensors[name] for name in dict.fromkeys(self.written)}

    # -- ops ----------------------------------------------------------------------------
    def op(self, op: Op) -> None:
        where = f"{op.name} (line {op.loc.line})" if op.loc else op.name
        if op.name == "arith.constant":
            self.set(op, fold_scalar(op, []))
        elif op.name in SCALAR_OPS:
            self.set(op, self.scalar_op(op, where))
        elif op.name == "tile.grid":
            for axis, (size, result) in enumerate(zip(op.operands, op.results)):
                self.grid[f"grid axis {axis}"] = self.concrete(size, where)
                self.env[result] = Blocked(f"grid axis {axis}", 1)
        elif op.name == "tensor.transpose":
            name = f"{self.env[op.operands[0]]}.T"
            self.tensors[name] = self.tensors[self.env[op.operands[0]]].T
            self.set(op, name)
        elif op.name == "tensor.batch":
            self.batch_view(op, where)
        elif op.name in ("tile.full", "tile.splat"):
            value = op.attrs["value"] if op.name == "tile.full" else self.concrete(
                op.operands[0], where)
            rank = len(op.attrs["shape"])
            self.set(op, Whole(np.full((1,) * rank, float(value)), (None,) * rank))
        elif op.name == "tile.load":
            self.set(op, self.load(op, where))
        elif op.name == "tile.store":
            self.store(op, where)
        elif op.name == "tile.dot":
            self.set(op, self.dot(op, where))
        elif op.name == "scf.for":
            self.for_loop(op, where)
        elif op.name in ELEMENTWISE:
            self.set(op, self.elementwise(op, where))
        elif op.name == "tile.where":
            compare = WHERE_COMPARE[op.attrs["compare"]]
            operands = [self.whole(v, where) for v in op.operands]
            self.set(op, self.combine(lambda x, y, a, b: np.where(compare(x, y), a, b),
                                      operands, where))
        elif op.name == "tile.cast":
            if not op.attrs["dtype"].is_float:
                raise Unsupported(f"{where}: casts to {op.attrs['dtype']} are not evaluated")
            self.set(op, self.whole(op.operands[0], where))  # exact: no rounding
        elif op.name == "tile.broadcast":
            self.set(op, self.broadcast(op, where))
        elif op.name == "tile.reshape":
            self.set(op, self.reshape(op, where))
        else:
            raise Unsupported(f"{where} is not evaluated by the reference")

    def batch_view(self, op: Op, where: str) -> None:
        """Batch ``self.batch`` of a 3-D tensor, when the view's index is a grid axis that
        runs over exactly the batches (the 2-D program then runs once per batch)."""
        index = self.env[op.operands[1]]
        tensor = self.env[op.operands[0]]
        if not isinstance(index, Blocked) or index.block != 1 or index.source not in self.grid:
            raise Unsupported(f"{where}: the batch index must be a program id")
        if self.batch_axis not in (None, index.source):
            raise Unsupported(f"{where}: batch views index by two grid axes")
        if self.grid[index.source] != self.tensors[tensor].shape[0]:
            raise Unsupported(f"{where}: {index.source} has {self.grid[index.source]} "
                              f"programs but '{tensor}' {self.tensors[tensor].shape[0]} batches")
        self.batch_axis = index.source
        name = f"{tensor}[{self.batch}]"
        self.tensors[name] = self.tensors[tensor][self.batch]
        self.set(op, name)

    def set(self, op: Op, value: Any) -> None:
        self.env[op.result] = value

    def concrete(self, value: Value, where: str) -> Union[int, float]:
        scalar = self.env[value]
        if isinstance(scalar, Blocked):
            raise Unsupported(f"{where}: uses the program or loop index as a value")
        return scalar

    def scalar_op(self, op: Op, where: str) -> Scalar:
        a, b = (self.env[v] for v in op.operands)
        if not isinstance(a, Blocked) and not isinstance(b, Blocked):
            return fold_scalar(op, [a, b])
        # The one index arithmetic allowed: index * tile size (either order).
        if op.name == "arith.mul" and isinstance(a, Blocked) and isinstance(b, int):
            return Blocked(a.source, a.block * b)
        if op.name == "arith.mul" and isinstance(b, Blocked) and isinstance(a, int):
            return Blocked(b.source, b.block * a)
        raise Unsupported(f"{where}: tile offsets must be 'index * tile size'")

    def whole(self, value: Value, where: str) -> Whole:
        tile = self.env[value]
        if not isinstance(tile, Whole):
            raise Unsupported(f"{where}: a loop-carried value is used other than by a dot")
        return tile

    # -- memory -------------------------------------------------------------------------
    def labels(self, op: Op, offsets: list[Value], extents: tuple[int, ...], tensor: str,
               where: str) -> tuple[Label, ...]:
        """Each offset must step through its dimension one whole tile at a time."""
        labels: list[Label] = []
        for dim, (offset, extent) in enumerate(zip(offsets, extents)):
            axis = self.env[offset]
            if not isinstance(axis, Blocked) or axis.block != extent:
                raise Unsupported(f"{where}: dim {dim} of '{tensor}' is not indexed as "
                                  f"'index * {extent}'")
            size = self.tensors[tensor].shape[dim]
            if self.sizes.setdefault(axis, size) != size:
                raise Unsupported(f"{where}: '{tensor}' has {size} elements along "
                                  f"{axis.source}, another tensor {self.sizes[axis]}")
            labels.append(axis)
        return tuple(labels)

    def load(self, op: Op, where: str) -> Whole:
        tensor = self.env[op.operands[0]]
        labels = self.labels(op, op.operands[1:], tuple(op.attrs["shape"]), tensor, where)
        return Whole(self.tensors[tensor].copy(), labels)

    def store(self, op: Op, where: str) -> None:
        if self.loop is not None:
            raise Unsupported(f"{where}: stores inside the K loop are not evaluated")
        tensor = self.env[op.operands[0]]
        value = self.whole(op.operands[-1], where)
        extents = op.operands[-1].type.shape
        labels = self.labels(op, op.operands[1:-1], tuple(extents), tensor, where)
        for dim, (label, have) in enumerate(zip(labels, value.labels)):
            if label.source not in self.grid:
                raise Unsupported(f"{where}: dim {dim} of '{tensor}' is not indexed by the grid")
            if have is not None and have != label:
                raise Unsupported(f"{where}: dim {dim} of the stored value walks {have.source} "
                                  f"but '{tensor}' is indexed by {label.source}")
        target = self.tensors[tensor]
        full = np.broadcast_to(value.array, target.shape)
        # Only the tiles the grid reaches are written; the rest keeps its contents.
        covered = tuple(slice(0, min(size, self.grid[label.source] * label.block))
                        for size, label in zip(target.shape, labels))
        target[covered] = full[covered]
        # A transposed view shares its tensor's memory, so the store went there too.
        self.written.append(tensor.removesuffix(".T").split("[")[0])

    # -- the K loop ---------------------------------------------------------------------
    def for_loop(self, op: Op, where: str) -> None:
        if self.loop is not None:
            raise Unsupported(f"{where}: nested loops are not evaluated")
        lower, upper, step, *inits = op.operands
        if self.concrete(lower, where) != 0 or self.concrete(step, where) != op.attrs[
                "step_const"]:
            raise Unsupported(f"{where}: the loop must count from 0 by a constant step")
        source = f"loop at line {op.loc.line}" if op.loc else "loop"
        body = op.regions[0]
        self.env[body.args[0]] = Blocked(source, op.attrs["step_const"])
        for index, arg in enumerate(body.args[1:]):
            self.env[arg] = CarriedArg(index)
        self.loop = (op, source)
        # The loop runs ceil(upper / step) times: products see K up to that many steps.
        self.loop_limit = -(-self.concrete(upper, where) // op.attrs["step_const"]) * \
            op.attrs["step_const"]
        for inner in body.ops[:-1]:
            self.op(inner)
        self.loop = None
        for index, (init, yielded, result) in enumerate(zip(inits, body.ops[-1].operands,
                                                             op.results)):
            start = self.whole(init, where)
            carried = self.env[yielded]
            if carried == CarriedArg(index):
                self.env[result] = start
            elif isinstance(carried, Accumulated) and carried.index == index:
                self.env[result] = self.combine(np.add, [start, carried.total], where)
            else:
                raise Unsupported(f"{where}: loop-carried value {index} is not an "
                                  "accumulation of dot products")

    def dot(self, op: Op, where: str) -> TileValue:
        if self.loop is None:
            raise Unsupported(f"{where}: dots outside the K loop are not evaluated")
        a, b = (self.whole(v, where) for v in op.operands[:2])
        product = self.product(a, b, self.loop[1], where)
        acc = self.env[op.operands[2]]
        if isinstance(acc, CarriedArg):
            return Accumulated(acc.index, product)
        if isinstance(acc, Accumulated):
            return Accumulated(acc.index, self.combine(np.add, [acc.total, product], where))
        raise Unsupported(f"{where}: a dot in the loop must accumulate into a loop-carried value")

    def product(self, a: Whole, b: Whole, loop: str, where: str) -> Whole:
        inner_a, inner_b = a.labels[1], b.labels[0]
        if inner_a is None or inner_b is None or inner_a != inner_b or \
                inner_a.source != loop:
            raise Unsupported(f"{where}: the dot's inner dimension must walk the K loop "
                              "on both operands")
        if a.labels[0] == inner_a or b.labels[1] == inner_a:
            raise Unsupported(f"{where}: an outer dimension of the dot walks the K loop")
        limit = min(a.array.shape[1], self.loop_limit)
        return Whole(a.array[:, :limit] @ b.array[:limit, :], (a.labels[0], b.labels[1]))

    # -- elementwise and shapes ---------------------------------------------------------
    def elementwise(self, op: Op, where: str) -> Whole:
        # Inside the loop too: elementwise ops on K tiles (scaling A, say) commute with the
        # sum over tiles, so applying them to the whole tensor is exact.
        operands = [self.whole(v, where) for v in op.operands]
        return self.combine(ELEMENTWISE[op.name], operands, where)

    def combine(self, fn: Callable[..., np.ndarray], operands: list[Whole],
                where: str) -> Whole:
        rank = max(len(t.labels) for t in operands)
        labels: list[Label] = [None] * rank
        for tile in operands:
            for dim, label in enumerate(tile.labels, start=rank - len(tile.labels)):
                if label is not None and labels[dim] not in (None, label):
                    raise Unsupported(f"{where}: combines tiles that walk {labels[dim].source} "
                                      f"and {label.source} in the same dimension")
                labels[dim] = labels[dim] or label
        with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the reference's too
            return Whole(fn(*(t.array for t in operands)), tuple(labels))

    def broadcast(self, op: Op, where: str) -> Whole:
        src = self.whole(op.operands[0], where)
        src_shape = op.operands[0].type.shape
        dst_shape = op.result.type.shape
        lead = len(dst_shape) - len(src_shape)
        for dim, (label, extent) in enumerate(zip(src.labels, src_shape)):
            if label is not None and extent != dst_shape[lead + dim]:
                raise Unsupported(f"{where}: broadcasts a dimension that walks {label.source}")
        array = src.array.reshape((1,) * lead + src.array.shape)
        return Whole(array, (None,) * lead + src.labels)

    def reshape(self, op: Op, where: str) -> Whole:
        src = self.whole(op.operands[0], where)
        src_shape: tuple[int, ...] = op.operands[0].type.shape
        dst_shape: tuple[int, ...] = op.result.type.shape
        if [e for e in src_shape if e != 1] != [e for e in dst_shape if e != 1]:
            raise Unsupported(f"{where}: only reshapes that add or drop unit dims are evaluated")
        kept = [dim for dim, extent in enumerate(src_shape) if extent != 1]
        if any(src.labels[dim] is not None for dim, e in enumerate(src_shape) if e == 1):
            raise Unsupported(f"{where}: drops a unit dim that walks a blocked axis")
        squeezed = src.array.reshape([src.array.shape[dim] for dim in kept])
        labels = iter([src.labels[dim] for dim in kept])
        new_labels = tuple(None if extent == 1 else next(labels) for extent in dst_shape)
        sizes = iter(squeezed.shape)
        array = squeezed.reshape([1 if extent == 1 else next(sizes) for extent in dst_shape])
        return Whole(array, new_labels)
