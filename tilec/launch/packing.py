"""Operand packing at launch: a matmul operand whose rows are not 16-byte aligned is copied
into aligned scratch first, and the matmul reads the scratch.

Why: the rows of a ragged f16 operand (K = 4093: 8186-byte rows) are only 2-byte aligned, so
a kernel compiled for that array moves one element at a time from global to shared memory
through registers, where aligned rows take 16-byte ``cp.async`` (about 56 against 430
TFLOP/s on an H200 at 4K). Packing reads and writes each element once, tens of microseconds
for 4K x 4K, before a matmul of several hundred.

Two parts:

- the plan (:func:`plan_packing`), host logic only: which operand tensors to pack, the
  scratch layout of each, and the launch spec the kernel is then compiled for;
- the run-time part (:class:`Packer`): scratch buffers and the pack kernel's launches
  (``backend/pack.py``; ``backend/llvm/pack.py`` when the llvm backend compiled the matmul),
  queued on the matmul's stream, so the order is the stream's and no
  host sync is added.

A packed tensor may also be converted on the way (:attr:`PackedTensor.converted`): 1-byte
weights (i8, f8e4m3, f8e5m2) written to the scratch as f16 or bf16, exactly, by the
converting pack kernel (``backend/pack.py``'s :func:`convert_ptx`), so that the matmul reads
16-bit operands.

Only the tensors that the ``@`` of the main loop reads are packed, never one the kernel
writes. The scratch has the tensor's logical shape and its unit-stride dim; the other dim's
stride (the "row stride") is rounded up to a whole number of 128-byte lines, and the padding
is written as zeros.

The reduction dim is padded too, when that is safe (:func:`paddable_reductions`): if every
tensor with K in its shape is packed and K is read only as the K loop's bound, in whole BK
steps, by loads feeding the product, the scratch gets zeros up to the next multiple of BK
and the kernel is launched (and compiled) with that K. The zeros add nothing to the sums,
and the kernel loses its K-edge masks (4% of a ragged 4K matmul on an H100).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, NamedTuple, Optional, Sequence

from tilec.backend.pack import (DESTINATION_BYTES, DESTINATIONS, ELEMENT_CLASS, SOURCES,
                                VECTOR_BYTES, convert_entry, convert_ptx, pack_entry, pack_ptx,
                                vector_elems)
from tilec.ir.core import Kernel, Op, Value, constant_value, defining_op, uses
from tilec.families.fp8 import FP8_ARCHS
from tilec.families.wgmma import FAMILY as WGMMA
from tilec.families.wgmma_rs import FAMILY as WGMMA_RS
from tilec.ir.types import FP8_DTYPES, TensorType
from tilec.ir.views import matrix_dim, view_source
from tilec.launch.binding import INT32_MAX, Bound, divisibility, tensor_spec
from tilec.passes.dequantize import converted_weights
from tilec.options import Options, Spec, TensorSpec

# "auto" packs a misaligned operand of at least this many elements (one 128x128 tile). An
# estimate, not a measurement: below it the matmul over the tensor is a few latency-bound
# blocks, and the pack launch would cost about what the aligned copies save.
PACK_MIN_ELEMENTS = 128 * 128
# "auto" converts an 8-bit weight on sm_90a when at least this many rows of the other operand
# re-read it. Measured on the H100 (f16 activations, int8 weights, 4096 and 8192 square
# weights; .dbg/dq): at 1024 rows and more, converting (one read of W, one f16 write) then
# the f16 wgmma product beat w8a16's mma.sync product with the registers' conversion; at 512
# and fewer the product is short and the conversion did not pay.
DEQUANTIZE_MIN_ROWS = 1024
# "auto" on sm_90a repacks an operand stored M- or N-major (a [K, N] B) whose rows are
# 16-byte aligned (TMA reads it in place) but not a whole number of 128-byte lines apart,
# when at least this many rows of the other operand re-read it (the copy costs about 464 /
# rows of the product's time at 650 TFLOP/s). H100, tuned tiles, repacked against in place,
# two calls, f16: 8192x8200x8192 660.8 / 678.2 against 485.3 / 544.1 TFLOP/s (cuBLAS 692.8
# / 675.1; bf16 684.3 against 540.9), 4096x4104x4096 543.0 / 546.0 against 499.5 / 501.6
# (cuBLAS 727.8 / 729.5); below the threshold the copy did not pay, 2048x2056x2048 301.1
# against 323.3, 1024x1000x16384 396.1 against 382.0; and a k-major A lost, 4096x4096x4104
# 642.5 against 689.2 (benchmarks/NOTES.md, session 17).
# A cluster's blocks share each B box (TMA multicasts it, Options.cluster), so B's straddled
# lines cost them a cluster's share of what they cost one block, and the copy pays only
# over that many times the rows. H200, f16, cluster 2, persistent, in place against
# repacked, one call: 4096x4104x4096 (128x128) 677.5 against 631.6 TFLOP/s, 6144x6152x4096
# (128x256) 661.1 against 608.0, 8192x8200x8192 (128x256) 646.7 against 662.4
# (benchmarks/NOTES.md, session 19).
PITCH_MIN_ROWS = 4096
# Threads per block of the pack kernel.
PACK_THREADS = 256
ROW_ALIGN_BYTES = 128  # the scratch's rows start on L2 cache lines
MAX_GRID_Y = 65535
# Free scratch buffers kept for calls that bind their arguments each time (kernel(A, B, C)).
POOL_BUFFERS = 4


# ---------------------------------------------------------------------------------- plan

@dataclass(frozen=True)
class PackedTensor:
    """One tensor argument copied to scratch.

    ``inner`` is the scratch's unit-stride dim: the argument's own contiguous dim when it has
    one. ``row_stride`` is the scratch's stride of the other dim, in elements, a multiple of
    a 128-byte line. ``reason`` says why the argument's own vectors were shorter. ``shape``
    is the scratch's: the argument's (``source_shape``) with a reduction dim rounded up to
    whole K steps, the added rows or columns zeros.

    ``dtype`` and ``itemsize`` are the argument's; ``converted`` names the scratch's dtype
    when the pack converts (:meth:`converting`; None: a plain copy, the argument's dtype).
    ``row_stride``, ``nbytes``, ``spec`` and the pack kernel's vectors count the scratch's
    elements (:attr:`scratch_itemsize`), ``strides`` and ``cols`` the argument's."""

    name: str
    dtype: str
    itemsize: int
    shape: tuple[int, int]
    strides: tuple[int, int]  # the argument's, in elements
    inner: int
    row_stride: int
    reason: str
    source_shape: tuple[int, int]
    # A batch of matrices (a 3-D argument; 0 for a 2-D one): the batches the kernel reads.
    # The pack kernel then copies them as one 2-D array (``shape``, ``strides``): the
    # batches' rows one after another, or the one matrix of a batch stride of 0
    # (``shared_batch``), which the scratch keeps shared.
    batches: int = 0
    shared_batch: bool = False
    converted: Optional[str] = None

    def padded(self, dim: int, size: int) -> "PackedTensor":
        """This tensor with its scratch's ``dim`` extended to ``size`` elements of zeros."""
        shape = list(self.shape)
        shape[dim] = size
        row_stride = _row_stride(shape[self.inner], self.scratch_itemsize)
        return dataclasses.replace(self, shape=(shape[0], shape[1]), row_stride=row_stride)

    def converting(self, dtype: str, reason: Optional[str] = None) -> "PackedTensor":
        """This tensor packed into a scratch of ``dtype`` (f16 or bf16) from its 1-byte
        elements (i8, f8e4m3, f8e5m2), the row stride recomputed for the wider elements;
        ``reason``, when given, replaces the tensor's."""
        if self.dtype not in SOURCES or dtype not in DESTINATIONS:
            raise ValueError(f"{self.name}: the pack converts {', '.join(SOURCES)} to "
                             f"{' or '.join(DESTINATIONS)}, not {self.dtype} to {dtype}")
        row_stride = _row_stride(self.shape[self.inner], DESTINATION_BYTES)
        return dataclasses.replace(self, converted=dtype, row_stride=row_stride,
                                   reason=self.reason if reason is None else reason)

    @property
    def scratch_dtype(self) -> str:
        """The dtype the matmul reads the scratch as."""
        return self.converted or self.dtype

    @property
    def scratch_itemsize(self) -> int:
        return DESTINATION_BYTES if self.converted else self.itemsize

    @property
    def outer(self) -> int:
        return 1 - self.inner

    @property
    def rows(self) -> int:
        """The scratch's rows, zero rows of a padded reduction dim included."""
        return self.shape[self.outer]

    @property
    def source_rows(self) -> int:
        return self.source_shape[self.outer]

    @property
    def cols(self) -> int:
        """Elements copied per row: the argument's extent of the unit-stride dim."""
        return self.source_shape[self.inner]

    @property
    def packed_strides(self) -> tuple[int, int]:
        strides = [1, 1]
        strides[self.outer] = self.row_stride
        return (strides[0], strides[1])

    @property
    def argument_shape(self) -> tuple[int, ...]:
        """The scratch as the kernel takes it: 2-D, or 3-D for a batch of matrices."""
        if not self.batches:
            return self.shape
        return (self.batches, self.shape[0] // (1 if self.shared_batch else self.batches),
                self.shape[1])

    @property
    def argument_strides(self) -> tuple[int, ...]:
        if not self.batches:
            return self.packed_strides
        rows = self.argument_shape[1]
        return (0 if self.shared_batch else rows * self.row_stride, *self.packed_strides)

    @property
    def nbytes(self) -> int:
        return self.rows * self.row_stride * self.scratch_itemsize

    @property
    def spec(self) -> TensorSpec:
        """The layout facts of the scratch: unit stride on ``inner`` (of the matrix: the
        batch dim comes first), full 16-byte vectors."""
        return TensorSpec(self.inner + (1 if self.batches else 0),
                          vector_elems(self.scratch_itemsize), self.converted)

    def describe(self) -> str:
        """``A packed to stride 4096 (rows were 2-byte aligned)``, or for a converting
        pack ``W converted to f16, stride 4096`` (and its reason, if it has one)."""
        if self.converted:
            why = f" ({self.reason})" if self.reason else ""
            return f"{self.name} converted to {self.converted}, stride {self.row_stride}{why}"
        return f"{self.name} packed to stride {self.row_stride} ({self.reason})"


@dataclass(frozen=True)
class PackPlan:
    """The tensors a launch packs (none: the launch is as without packing)."""

    tensors: tuple[PackedTensor, ...] = ()
    # Reduction symbols the launch rounds up, each with the size the kernel is launched with.
    padded: tuple[tuple[str, int], ...] = ()
    # Operands whose rows are off 128-byte lines but read in place, each with why, in words:
    # what explain says beside the packed ones.
    in_place: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.tensors)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.tensors)

    def spec(self, spec: Spec) -> Spec:
        """``spec`` with each packed tensor's layout replaced by its scratch's, and what a
        padded symbol divides."""
        packed = {p.name: p.spec for p in self.tensors}
        tensors = tuple((name, packed.get(name, layout)) for name, layout in spec.tensors)
        divisible = dict(spec.divisible)
        divisible.update(divisibility(dict(self.padded)))
        return Spec(tensors, tuple(sorted(divisible.items())))

    def bound(self, bound: Bound) -> Bound:
        """The arguments as the kernel is launched with them: padded symbols' sizes."""
        if not self.padded:
            return bound
        return Bound(bound.tensors, bound.scalars, {**bound.symbols, **dict(self.padded)})

    def options(self, options: Options) -> Options:
        """The options to compile the kernel with: its spec as the packed arguments have it."""
        return options.with_(spec=self.spec(options.spec)) if self.tensors else options

    def describe(self) -> list[str]:
        return ([p.describe() for p in self.tensors]
                + [f"{symbol} padded to {size} with zeros" for symbol, size in self.padded])


@functools.lru_cache(maxsize=256)  # per lowered kernel: plain calls plan on every launch
def operand_tensors(kernel: Kernel) -> tuple[str, ...]:
    """The tensor parameters that the kernel's matmuls (``tile.dot``) load their operands
    from (converted in the loop or not), in order, each once: the tensors the main loop
    copies to shared memory. Takes the frontend's tile IR (after tiling, the dot reads
    shared buffers instead)."""
    names: list[str] = []
    for op in kernel.walk():
        if op.name != "tile.dot":
            continue
        for value in op.operands[:2]:
            tensor = _loaded_tensor(value)
            if tensor is None:
                continue
            source = view_source(kernel, tensor)
            if source is not None and source.name not in names:
                names.append(source.name)
    return tuple(names)


def plan_packing(kernel: Kernel, tensors: Mapping[str, Any], policy: str,
                 written: Sequence[str] = (), arch: Optional[str] = None,
                 backend: str = "ptx", cluster: int = 1,
                 options: Optional[Options] = None) -> PackPlan:
    """Which of the kernel's operand tensors to pack, for these arguments.

    ``kernel`` is the frontend's tile IR; ``tensors`` maps parameter names to ArrayArgs
    (pointer, dtype, shape, strides); ``policy`` is :attr:`Options.pack`; ``written`` names
    the parameters the kernel stores to, never packed; ``arch``, ``backend`` and
    ``cluster`` the target, the backend and the blocks sharing each B load (Options.arch,
    Options.backend, Options.cluster). A tensor is packed
    when its widest aligned vector (:func:`tilec.launch.binding.tensor_spec`) is shorter than
    16 bytes, it is 2-D (or a batch of matrices copied as one 2-D array:
    :func:`_pack_batches`) and not empty, and, under "auto", what is copied holds at least
    :data:`PACK_MIN_ELEMENTS` elements. An 8-bit weight converted in the K loop is packed
    converted (:func:`convert_to`, which reads ``options``' shaping of wgmma's blocks),
    aligned or not."""
    if policy == "off":
        return PackPlan()
    packed, in_place = {}, []
    for name in operand_tensors(kernel):
        if name in written or name not in tensors:
            continue
        pitch = repitch(kernel, tensors, name, policy, arch, backend, cluster,
                        options.cluster_n if options is not None else 1)
        entry = _pack_tensor(tensors[name], policy,
                             convert_to(kernel, tensors, name, policy, arch, backend,
                                        options),
                             pitch.why if pitch is not None and pitch.repack else None)
        if entry is not None:
            packed[name] = entry
        elif pitch is not None:
            in_place.append(f"{name} read in place ({pitch.why})")
    padded = []
    reductions = paddable_reductions(kernel, tuple(packed)) if packed else ()
    for symbol, step in reductions:
        dims = {param.name: param.type.dims_of(symbol) for param in kernel.params
                if param.name in packed}
        size = next(packed[name].shape[d[0]] for name, d in dims.items() if d)
        whole = -(-size // step) * step
        if whole == size or whole > INT32_MAX:
            continue
        for name, found in dims.items():
            if found:
                packed[name] = packed[name].padded(found[0], whole)
        padded.append((symbol, whole))
    return PackPlan(tuple(packed.values()), tuple(padded), tuple(in_place))


def convert_to(kernel: Kernel, tensors: Mapping[str, Any], name: str, policy: str,
               arch: Optional[str], backend: str = "ptx",
               options: Optional[Options] = None) -> Optional[tuple[str, str]]:
    """The 16-bit dtype a launch converts 8-bit weight ``name`` to before the kernel runs
    (``passes/dequantize.py`` types the kernel's reads so) and why, or None to read it as it
    is.

    Only a tensor that :func:`~tilec.passes.dequantize.converted_weights` lists. Converted
    when the registers cannot convert it (it is operand A, or not stored k contiguous, as an
    ``[K, N]`` weight is, or fp8 on sm_80/sm_86), under "always", and under "auto" where the
    wgmma family may take the converted product (sm_90a with a backend that emits wgmma: the
    PTX backend's) when at least :data:`DEQUANTIZE_MIN_ROWS` rows of the other operand
    re-read it: one conversion then costs less than the mma.sync product that the
    registers' conversion needs costs over wgmma's. Under the llvm backend the wgmma family
    declines every block, so the converted product would run mma.sync too, and the weight
    stays 8-bit, converted in registers."""
    dtype = dict(_converted_weights(kernel)).get(name)
    if dtype is None or name not in tensors:
        return None
    reads = _operand_reads(kernel, tensors, name)
    partner_rows = reads.partner_rows
    # wgmma's register form reads both operands through TMA: rows 16-byte aligned as
    # launched (the launch packs misaligned ones large enough to pay), and takes the block
    # as ``options`` shape it; or nothing takes A.
    shaping = dataclasses.replace(options or Options(), arch=arch, backend=backend)
    a_in_registers = reads.a_block is not None and \
        WGMMA_RS.target_problem(arch, backend) is None and \
        WGMMA_RS.shaping_problem(reads.a_block, shaping) is None and \
        all(rows_aligned_at_launch(tensors[t], policy) for t in (name, reads.partner))
    if not (reads.in_registers or a_in_registers):
        return dtype.short, ("registers convert only a k-contiguous operand B, or on sm_90a "
                             "a k-contiguous operand A in K steps of 128")
    stored = next(p.type.dtype for p in kernel.params if p.name == name)
    if stored in FP8_DTYPES and arch not in FP8_ARCHS:  # cvt.rn.f16x2.e4m3x2: sm_89 on
        return dtype.short, f"{arch} converts no fp8 in registers"
    if policy == "always":
        return dtype.short, "pack always"
    if a_in_registers:
        return None  # wgmma's register form converts A: the product is on wgmma already
    if WGMMA.target_problem(arch, backend) is None and partner_rows >= DEQUANTIZE_MIN_ROWS:
        return dtype.short, f"{partner_rows} rows re-read it: the {dtype} product on wgmma"
    return None


class Pitch(NamedTuple):
    """An operand whose rows are 16-byte aligned but not whole 128-byte lines apart, on a
    target that reads it through TMA: whether the launch repacks it, and why in words."""

    repack: bool
    why: str


def repitch(kernel: Kernel, tensors: Mapping[str, Any], name: str, policy: str,
            arch: Optional[str], backend: str = "ptx", cluster: int = 1,
            cluster_n: int = 1) -> Optional[Pitch]:
    """Whether a launch packs operand ``name`` though its rows are aligned, or None where
    the question does not arise (k-major operands among them: their boxes lose nothing
    measurable to the pitch): on a target
    whose wgmma family reads operands through TMA (sm_90a, the PTX backend), rows 16-byte
    aligned but not a whole number of 128-byte lines apart, under "always", or under "auto"
    when the operand is stored M- or N-major (its k not contiguous) and :data:`PITCH_MIN_ROWS`
    rows of the other operand re-read it (the copy, one read and one write of the tensor,
    then costs less than the boxes straddling lines), ``cluster`` times as many for an
    operand B that a cluster of that many blocks shares, ``cluster_n`` times for an A that
    a cluster's M row of that many shares."""
    arg = tensors[name]
    if policy == "off" or WGMMA.target_problem(arch, backend) is not None \
            or len(arg.shape) != 2 or arg.size == 0 or arg.itemsize not in ELEMENT_CLASS:
        return None
    spec = tensor_spec(arg)
    if spec.contiguous_dim is None or spec.vec_elems * arg.itemsize < VECTOR_BYTES:
        return None  # packed anyway, as misaligned
    pitch = arg.strides[1 - spec.contiguous_dim] * arg.itemsize
    if pitch % ROW_ALIGN_BYTES == 0 or arg.shape[1 - spec.contiguous_dim] == 1:
        return None
    why = f"rows {pitch} bytes apart, not whole 128-byte lines"
    if policy == "always":
        return Pitch(True, why)
    reads = _operand_reads(kernel, tensors, name)
    if reads.k_major:
        return None
    sharing_blocks = cluster if reads.operand_b else cluster_n
    least = PITCH_MIN_ROWS * sharing_blocks
    if reads.partner_rows >= least:
        return Pitch(True, why)
    sharing = f", a cluster of {sharing_blocks} sharing each box" if sharing_blocks > 1 else ""
    return Pitch(False, f"{why}, re-read by {reads.partner_rows} rows: repacked from "
                        f"{least}{sharing}")


@functools.lru_cache(maxsize=256)  # per lowered kernel: plain calls plan on every launch
def _converted_weights(kernel: Kernel) -> tuple:
    return tuple(converted_weights(kernel).items())


class OperandReads(NamedTuple):
    """How the ``@`` operands read one tensor: the most rows (or columns) of the other
    operand that re-read it; whether every read could convert it in registers (operand B, k
    contiguous); whether every read has k, the contracted dim, contiguous; whether every
    read is as operand B; where every read is as operand A, k contiguous (what wgmma's
    register form converts), the product's block (BM, BN, BK), else None."""

    partner_rows: int
    in_registers: bool
    k_major: bool
    operand_b: bool
    a_block: Optional[tuple[int, int, int]]
    partner: str  # the other operand's tensor (one of them, where several reads differ)


def _operand_reads(kernel: Kernel, tensors: Mapping[str, Any], name: str) -> OperandReads:
    rows, in_registers, k_major, operand_b, a_registers = 0, True, True, True, True
    partner_name, bm, bn, bk = "", 0, 0, 0
    for dot in kernel.walk():
        if dot.name != "tile.dot":
            continue
        tensors_read = [_loaded_tensor(v) for v in dot.operands[:2]]
        sources = [view_source(kernel, t) if t is not None else None for t in tensors_read]
        for role, source in enumerate(sources):
            partner = sources[1 - role]
            if source is None or source.name != name or partner is None \
                    or partner.name not in tensors:
                continue
            arg = tensors[name]
            contiguous = matrix_dim(len(arg.shape), tensor_spec(arg).contiguous_dim)
            tile_contiguous = (None if contiguous is None
                               else 1 - contiguous if source.transposed else contiguous)
            in_registers &= role == 1 and tile_contiguous == 0
            a_registers &= role == 0 and tile_contiguous == 1
            (bm, bk), bn = dot.operands[0].type.shape, dot.operands[1].type.shape[1]
            operand_b &= role == 1
            k_major &= tile_contiguous == 1 - role  # A's tile is [M, K], B's [K, N]
            partner_name = partner.name
            shape = tuple(tensors[partner.name].shape[-2:])
            view = shape[::-1] if partner.transposed else shape
            rows = max(rows, view[0] if role == 1 else view[1])
    a_block = (bm, bn, bk) if a_registers and partner_name else None
    return OperandReads(rows, in_registers, k_major, operand_b, a_block, partner_name)


def _loaded_tensor(value: Value) -> Optional[Value]:
    """The tensor (view) a ``@`` operand is loaded from, through a ``tile.cast``."""
    op = defining_op(value)
    if op is not None and op.name == "tile.cast":
        op = defining_op(op.operands[0])
    return op.operands[0] if op is not None and op.name == "tile.load" else None


@functools.lru_cache(maxsize=256)
def paddable_reductions(kernel: Kernel,
                        packed: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """The shape symbols a launch packing ``packed`` may round up to a multiple of their K
    loop's step, each with that step (pairs: the result is cached and shared). ``kernel``
    is the frontend's tile IR.

    A symbol qualifies when (1) its only use is as the bound of an ``scf.for`` from 0 with
    a constant step; (2) every tensor parameter with the symbol in its shape is packed, so
    all of them get the zeros; (3) each load of those tensors sits in that loop, starts at
    the loop index along the symbol's dim and spans one step there; and (4) each load feeds
    only ``tile.dot`` operands, with the symbol's dim as the contracted one. Then the added
    elements are zeros that only meet other zeros or enter sums."""
    steps = []
    for loop in kernel.walk():
        if loop.name != "scf.for" or "step_const" not in loop.attrs:
            continue
        upper = loop.operands[1]
        symbol = next((s for s in kernel.symbols if kernel.symbol_value(s) is upper), None)
        if (symbol is None or constant_value(loop.operands[0]) != 0
                or len(uses(kernel, upper)) != 1):
            continue
        step = loop.attrs["step_const"]
        tensors = [p.name for p in kernel.params if isinstance(p.type, TensorType)
                   and symbol in p.type.shape]
        if all(name in packed and _loads_whole_steps(kernel, loop, name, symbol, step)
               for name in tensors):
            steps.append((symbol, step))
    return tuple(steps)


def _loads_whole_steps(kernel: Kernel, loop: Op, name: str, symbol: str, step: int) -> bool:
    index = loop.regions[0].args[0]
    views = [kernel.param_value(name)]
    loads = []
    while views:
        for op, position in uses(kernel, views.pop()):
            if op.name == "tensor.transpose":
                views.append(op.result)
            elif op.name == "tile.load" and position == 0:
                loads.append(op)
            else:
                return False
    for load in loads:
        dims = load.operands[0].type.dims_of(symbol)
        if load not in loop.regions[0].ops or len(dims) != 1:
            return False
        dim = dims[0]
        if load.operands[1 + dim] is not index or load.attrs["shape"][dim] != step:
            return False
        contracted = {0: 1, 1: 0}  # the dot's operand -> its contracted dim
        for user, position in uses(kernel, load.result):
            if user.name != "tile.dot" or contracted.get(position) != dim:
                return False
    return True


def rows_aligned_at_launch(arg: Any, policy: str) -> bool:
    """Whether an operand's rows are 16-byte aligned in the kernel: as passed, or once the
    launch packs it (:func:`_pack_tensor` under ``policy``)."""
    spec = tensor_spec(arg)
    if spec.contiguous_dim is not None and spec.vec_elems * arg.itemsize >= VECTOR_BYTES:
        return True
    return _pack_tensor(arg, policy) is not None


def _pack_tensor(arg: Any, policy: str, converted: Optional[tuple[str, str]] = None,
                 repitched: Optional[str] = None) -> Optional[PackedTensor]:
    """``converted``: (dtype, why) for a weight the launch converts, packed however it is
    laid out; ``repitched``: why aligned rows are packed (:func:`repitch`); else packed when
    misaligned (and, under "auto", large enough)."""
    if len(arg.shape) == 3:
        return _pack_batches(arg, policy, converted)
    if len(arg.shape) != 2 or arg.size == 0 or arg.itemsize not in ELEMENT_CLASS:
        return None
    spec = tensor_spec(arg)
    aligned = spec.contiguous_dim is not None and spec.vec_elems * arg.itemsize >= VECTOR_BYTES
    if converted is None and repitched is None and \
            (aligned or policy == "auto" and arg.size < PACK_MIN_ELEMENTS):
        return None
    inner = spec.contiguous_dim
    if inner is None:  # no unit stride: the scratch makes the dim of the smaller stride one
        inner = 0 if arg.strides[0] < arg.strides[1] else 1
    row_stride = _row_stride(arg.shape[inner], arg.itemsize)
    if row_stride > INT32_MAX:  # the kernel takes 32-bit strides
        return None
    packed = PackedTensor(arg.name, arg.dtype, arg.itemsize, tuple(arg.shape),
                          tuple(arg.strides), inner, row_stride,
                          repitched or _reason(arg, spec.contiguous_dim), tuple(arg.shape))
    return packed if converted is None else packed.converting(*converted)


def _pack_batches(arg: Any, policy: str,
                  converted: Optional[tuple[str, str]] = None) -> Optional[PackedTensor]:
    """A batch of matrices whose rows are contiguous (its last dim unit-stride), packed as
    one 2-D array: its batches' rows one after another when each batch starts where the
    previous one's rows end (as a contiguous or row-padded array's do), or its one matrix
    for a batch stride of 0. Other 3-D layouts are read in place."""
    batches, rows, cols = arg.shape
    batch_stride, row_stride, col_stride = arg.strides
    if arg.size == 0 or col_stride != 1 and cols > 1:
        return None
    shared = batch_stride == 0 or batches == 1
    if not shared and batch_stride != rows * row_stride:
        return None
    flat_rows = rows if shared else batches * rows
    if flat_rows > INT32_MAX:
        return None
    flat = dataclasses.replace(arg, shape=(flat_rows, cols), strides=(row_stride, 1))
    packed = _pack_tensor(flat, policy, converted)
    if packed is None:
        return None
    return dataclasses.replace(packed, batches=batches, shared_batch=shared)


def _row_stride(cols: int, itemsize: int) -> int:
    """Rows start on 128-byte lines, not just 16-byte vectors: a tile row then spans whole
    lines, where a 16-byte-aligned stride would touch one more line per row."""
    per_line = ROW_ALIGN_BYTES // itemsize
    return -(-cols // per_line) * per_line


def _reason(arg: Any, contiguous: Optional[int]) -> str:
    """Why the argument's vectors are shorter than 16 bytes, in words."""
    if contiguous is None:
        return "no dim had unit stride"
    causes = []
    rows = _alignment(arg.strides[1 - contiguous] * arg.itemsize)
    if rows < VECTOR_BYTES:
        causes.append(f"{'rows' if contiguous == 1 else 'columns'} were {rows}-byte aligned")
    address = _alignment(arg.ptr)
    if address < VECTOR_BYTES:
        causes.append(f"its address was {address}-byte aligned")
    return " and ".join(causes)


def _alignment(value: int) -> int:
    """The largest power of two dividing ``value``, up to 16 (0 is aligned to anything)."""
    alignment = 1
    while alignment < VECTOR_BYTES and value % (alignment * 2) == 0:
        alignment *= 2
    return alignment


def row_major_launch(kernel: Kernel, sizes: Mapping[str, int], policy: str,
                     written: Sequence[str] = (), arch: Optional[str] = None,
                     backend: str = "ptx", cluster: int = 1,
                     peel: Any = None, options: Optional[Options] = None
                     ) -> tuple[PackPlan, Spec]:
    """For C-contiguous, 16-byte aligned arrays of the given shape-symbol sizes (what
    ``tilec run`` stages its host arrays as): what a launch packs, and the spec it compiles
    the kernel for; with ``peel`` (a :class:`tilec.launch.peeling.Peel`), its whole tiles'
    launch, over views of those arrays. Needs a size for every symbol; for the CLI's
    ``run`` and ``explain``."""
    from tilec.launch.binding import spec_for
    from tilec.launch.peeling import peeled_bounds
    from tilec.runtime.arrays import ArrayArg, c_strides

    tensors = {}
    for param in kernel.params:
        if isinstance(param.type, TensorType):
            shape = tuple(sizes[d] if isinstance(d, str) else d for d in param.type.shape)
            tensors[param.name] = ArrayArg(param.name, 0, param.type.dtype.short, shape,
                                           c_strides(shape), device=0)
    bound = Bound(tensors, {}, dict(sizes))
    if peel is not None:
        bound = peeled_bounds(kernel, bound, peel)[0]
    plan = plan_packing(kernel, bound.tensors, policy, written, arch, backend, cluster,
                        options)
    return plan, plan.spec(spec_for(bound))


# ------------------------------------------------------------------------------ run time

@dataclass(frozen=True)
class PackLaunch:
    """One launch of the pack kernel: what ``tilec.runtime.driver.launch`` takes."""

    function: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple


def pack_geometry(packed: PackedTensor) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of the pack kernel for one tensor: a block's x threads cover a row's
    vectors (short rows share a block with the next rows, so few threads idle), its y
    threads rows; the grid's y stops at 65535 and the kernel loops over the remaining rows."""
    vectors = packed.row_stride // vector_elems(packed.scratch_itemsize)
    block_x = min(PACK_THREADS, 1 << max(vectors - 1, 0).bit_length())
    block_y = PACK_THREADS // block_x
    grid = (-(-vectors // block_x), min(-(-packed.rows // block_y), MAX_GRID_Y), 1)
    return grid, (block_x, block_y, 1)


_FUNCTIONS: dict[tuple[Any, str, str], Any] = {}


def backend_pack_ptx(backend: str):
    """``pack_ptx(itemsize, arch)`` of a backend (Options.backend): a launch whose matmul
    the llvm backend compiled packs with the pack kernel LLVM compiled too."""
    if backend == "llvm":
        from tilec.backend.llvm.pack import pack_ptx as llvm_pack_ptx
        return llvm_pack_ptx
    return pack_ptx


def _loaded(itemsize: int, arch: str, backend: str) -> Any:
    key = (itemsize, arch, backend)
    if key not in _FUNCTIONS:
        from tilec.runtime import load_module
        module = load_module(backend_pack_ptx(backend)(itemsize, arch),
                             name=pack_entry(itemsize))
        _FUNCTIONS[key] = module.function(pack_entry(itemsize))
    return _FUNCTIONS[key]


def pack_function(itemsize: int, arch: str) -> Any:
    """The loaded pack kernel for elements of ``itemsize`` bytes, loaded once per process."""
    return _loaded(itemsize, arch, "ptx")


def convert_function(source: str, dest: str, arch: str) -> Any:
    """The loaded pack kernel converting ``source`` elements to ``dest`` ones
    (:func:`tilec.backend.pack.convert_ptx`), loaded once per process. The PTX backend's
    kernel whichever backend compiled the matmul: the llvm backend has no converting pack
    kernel of its own, so a converting launch of an llvm-compiled matmul runs this one."""
    key = ((source, dest), arch, "ptx")
    if key not in _FUNCTIONS:
        from tilec.runtime import load_module
        entry = convert_entry(source, dest)
        _FUNCTIONS[key] = load_module(convert_ptx(source, dest, arch),
                                      name=entry).function(entry)
    return _FUNCTIONS[key]


def llvm_pack_function(itemsize: int, arch: str) -> Any:
    """:func:`pack_function` for launches whose matmul the llvm backend compiled: the pack
    kernel LLVM compiled (``backend/llvm/pack.py``)."""
    return _loaded(itemsize, arch, "llvm")


def _pack_function(backend: str):
    # Looked up when called, by name: the PTX backend's, or the llvm backend's.
    return llvm_pack_function if backend == "llvm" else pack_function


def pack_launch(packed: PackedTensor, source: Any, scratch_ptr: int, arch: str,
                backend: str = "ptx") -> PackLaunch:
    """The launch that copies ``source`` (an ArrayArg on the GPU) into the scratch at
    ``scratch_ptr`` (``packed.nbytes`` bytes, 16-byte aligned), converting its elements
    to ``packed.converted`` when that is set (with either backend: :func:`convert_function`).
    The strides and ``cols`` passed count the source's elements, the scratch's row stride
    the scratch's."""
    from tilec.runtime import I32Arg, PtrArg
    grid, block = pack_geometry(packed)
    # The strides the pack kernel walks: the argument's (of the 2-D array a batch of
    # matrices is copied as).
    args = (PtrArg(source.ptr), PtrArg(scratch_ptr), I32Arg(packed.rows),
            I32Arg(packed.source_rows), I32Arg(packed.cols),
            I32Arg(packed.strides[packed.outer]), I32Arg(packed.strides[packed.inner]),
            I32Arg(packed.row_stride))
    if packed.converted:
        function = convert_function(packed.dtype, packed.converted, arch)
    else:
        function = _pack_function(backend)(packed.itemsize, arch)
    return PackLaunch(function, grid, block, args)


class Packer:
    """The pack launches of one plan for one set of GPU arguments.

    ``scratch`` maps each packed tensor's name to a device buffer of at least its
    ``nbytes``. :attr:`args` are the arguments to launch the matmul with: each packed
    tensor replaced by its scratch (padded strides, the scratch's dtype; the ArrayArg keeps
    the buffer alive)."""

    def __init__(self, plan: PackPlan, tensors: Mapping[str, Any], arch: str,
                 scratch: Mapping[str, Any], backend: str = "ptx"):
        from tilec.runtime import ArrayArg
        self.plan = plan
        self.args = dict(tensors)
        self.launches: list[PackLaunch] = []
        for packed in plan.tensors:
            source, buffer = tensors[packed.name], scratch[packed.name]
            if buffer.nbytes < packed.nbytes:
                raise ValueError(f"scratch for {packed.name} has {buffer.nbytes} bytes, "
                                 f"{packed.nbytes} needed")
            self.args[packed.name] = ArrayArg(
                packed.name, buffer.ptr, packed.scratch_dtype, packed.argument_shape,
                packed.argument_strides, source.device, readonly=True, keepalive=buffer)
            self.launches.append(pack_launch(packed, source, buffer.ptr, arch, backend))

    def launch(self, stream=None) -> None:
        """Queue the pack kernels on ``stream``; a matmul queued after them reads the
        packed data."""
        from tilec.runtime import launch
        for pack in self.launches:
            launch(pack.function, pack.grid, pack.block, 0, stream, pack.args)


def owned_scratch(plan: PackPlan) -> dict[str, Any]:
    """New scratch buffers for the plan, freed when the last reference goes (a prepared
    launch keeps them for its lifetime)."""
    from tilec.runtime import DeviceBuffer
    return {p.name: DeviceBuffer(p.nbytes) for p in plan.tensors}


class ScratchPool:
    """Free scratch buffers, reused by size: repeated ``kernel(A, B, C)`` calls on operands of
    one shape pack into the same memory instead of allocating and freeing it each time.

    A buffer is lent to one launch at a time (:meth:`take` removes it from the pool). Pooled
    scratch is only written and read on the legacy default stream, which orders every later
    borrower's pack behind this launch's matmul, so a buffer may go back as soon as the
    launches using it are queued. At most ``limit`` free buffers are kept, the most recently
    returned; tilec runs on one device per process, so the size is the whole key."""

    def __init__(self, limit: int = POOL_BUFFERS):
        self.limit = limit
        self._free: list[Any] = []
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> Any:
        with self._lock:
            for index, buffer in enumerate(self._free):
                if buffer.nbytes == nbytes:
                    return self._free.pop(index)
        from tilec.runtime import DeviceBuffer
        return DeviceBuffer(nbytes)

    def give(self, buffer: Any) -> None:
        with self._lock:
            self._free.append(buffer)
            cut = max(len(self._free) - self.limit, 0)
            evicted, self._free = self._free[:cut], self._free[cut:]
        for old in evicted:
            old.free()

    def clear(self) -> None:
        """Free every pooled buffer."""
        with self._lock:
            evicted, self._free = self._free, []
        for old in evicted:
            old.free()

    def sizes(self) -> list[int]:
        """The sizes of the free buffers, oldest first."""
        with self._lock:
            return [buffer.nbytes for buffer in self._free]

    def __len__(self) -> int:
        return len(self._free)


SCRATCH_POOL = ScratchPool()


@contextlib.contextmanager
def pooled_scratch(plan: PackPlan, pool: Optional[ScratchPool] = None
                   ) -> Iterator[dict[str, Any]]:
    """Scratch for the plan lent from the pool (:data:`SCRATCH_POOL` by default) and given
    back on exit. Only for launches on the legacy default stream (see :class:`ScratchPool`)."""
    pool = SCRATCH_POOL if pool is None else pool
    buffers = {p.name: pool.take(p.nbytes) for p in plan.tensors}
    try:
        yield buffers
    finally:
        for buffer in buffers.values():
            pool.give(buffer)
