"""The emitter of ``split.reduce``: the K slices of one output tile meet in global memory.

The workspace, two hidden kernel parameters (``backend/abi.py``):

- ``split_partials``: 4-byte words (f32 or i32, the accumulator's type),
  ``tiles x splits x registers x threads``; a block writes its
  partial at ``[tile][slice]``, each register of all threads contiguous (coalesced stores
  and loads, and every thread reads back exactly the elements it holds);
- ``split_counters``: one u32 per output tile, zero before a launch; the last block of a
  tile to arrive sets it back to zero, so the next launch finds it so.

The handshake is the "last block" pattern (PTX ISA 8.0, memory consistency model): every
thread's stores, then a gpu-scope fence and a block barrier, then one acq_rel atomic add per
block; the block that sees ``splits - 1`` is last, learns it in every thread through
``bar.red.or.pred``, fences, and sums the partials with gpu-scope loads (L2, never a stale
L1 line). The others exit. In a warp-specialized kernel the barriers are its consumers' (the
producer warpgroup, whose loads the slice's products waited for, has left). The sum goes in
slice order whichever block is last, so the result is the same from run to run. An i32
accumulator (int8 products) meets the same way: its sum wraps as the products' does, and
integer addition being associative, it is the exact (mod 2**32) sum of all K, bit for bit
the one-slice kernel's.
"""
from __future__ import annotations

from tilec.ir.core import Kernel, Op, require_grid
from tilec.ir.types import F32, I32

from .abi import POINTER, WORKSPACE_PARAMS, WORKSPACE_SOURCES, AbiParam, cuda_tile_axes
from .context import Context

PARTIAL_BYTES = 4  # every accumulator split-K sums (SPLIT_SUM_DTYPES) is a 4-byte word

# Accumulator dtype -> the PTX type of its partials' stores and loads, the register class of
# the sum (the accumulator's: mma's .s32 accumulators are b32) and the add.
SUMS = {F32: ("f32", "f32", "add.f32"), I32: ("s32", "b32", "add.s32")}


def kernel_params(kernel: Kernel) -> tuple[AbiParam, ...]:
    """The workspace pointers a split-K (or stream-K) kernel takes after the shape symbols;
    none else."""
    roles = kernel.schedule.roles
    stream_k = roles is not None and roles.stream_k  # its parts meet the same way
    if kernel.schedule.splits <= 1 and not stream_k:
        return ()
    return tuple(AbiParam(name, POINTER, source, "workspace")
                 for name, source in zip(WORKSPACE_PARAMS, WORKSPACE_SOURCES))


def _tile_index(ctx: Context) -> str:
    """The output tile's linear index: the CUDA grid axes before the slice axis."""
    w = ctx.w
    grid = require_grid(ctx.kernel)
    x = w.reg("b32")
    w.emit(f"mov.u32 {x}, %ctaid.x;")
    if cuda_tile_axes(grid) == 1:
        return x
    y, width = w.reg("b32"), w.reg("b32")
    w.emit(f"mov.u32 {y}, %ctaid.y;")
    w.emit(f"mov.u32 {width}, %nctaid.x;")
    return ctx.mad(y, width, x)


def _split_reduce(ctx: Context, op: Op) -> None:
    w = ctx.w
    partial_value, slice_value = op.operands
    splits = op.attrs["splits"]
    partial = ctx.get(partial_value)
    ptx_type, register_class, add = SUMS[partial_value.type.dtype]
    threads = ctx.plan.threads
    register_stride = threads * PARTIAL_BYTES
    slice_bytes = len(partial) * register_stride
    partials, counters = (ctx.workspace[source] for source in WORKSPACE_SOURCES)
    tid = ctx.tid()
    tile = _tile_index(ctx)

    # This thread's first element of the tile's slice 0, and of its own slice.
    tile_slot = ctx.int_op("mul.lo.s32", tile, splits)
    tile_base = w.reg("b64")
    w.emit(f"mul.wide.u32 {tile_base}, {tile_slot}, {slice_bytes};")
    w.emit(f"add.s64 {tile_base}, {tile_base}, {partials};")
    w.emit(f"mad.wide.u32 {tile_base}, {tid}, {PARTIAL_BYTES}, {tile_base};")
    own = w.reg("b64")
    w.emit(f"mad.wide.u32 {own}, {ctx.get(slice_value)}, {slice_bytes}, {tile_base};")
    for index, reg in enumerate(partial):
        w.emit(f"st.global.{ptx_type} [{own}+{index * register_stride}], {reg};")

    w.emit("fence.acq_rel.gpu;")
    w.emit(f"bar.sync {ctx.accumulators_barrier()};")
    counter = w.reg("b64")
    w.emit(f"mad.wide.u32 {counter}, {tile}, 4, {counters};")
    first, arrived, last_here, last = (w.reg("pred"), w.reg("b32"), w.reg("pred"),
                                       w.reg("pred"))
    w.emit(f"setp.eq.u32 {first}, {tid}, 0;")
    w.emit(f"mov.u32 {arrived}, 0;")
    w.emit(f"@{first} atom.acq_rel.gpu.global.add.u32 {arrived}, [{counter}], 1;")
    w.emit(f"setp.eq.and.u32 {last_here}, {arrived}, {splits - 1}, {first};")
    w.emit(f"@{last_here} st.relaxed.gpu.global.u32 [{counter}], 0;")
    w.emit(f"bar.red.or.pred {last}, {ctx.accumulators_barrier()}, {last_here};")
    w.emit(f"@!{last} exit;")
    w.emit("fence.acq_rel.gpu;")

    meeting = w.labels_made

    def total(index: int) -> str:
        if w.labels_made != meeting:
            raise RuntimeError("split.reduce: a sum first read past a label, where the "
                               "paths not through its loads would read it unset")
        reg, loaded = w.reg(register_class), w.reg(register_class)
        for slice_index in range(splits):
            offset = slice_index * slice_bytes + index * register_stride
            target = reg if slice_index == 0 else loaded
            w.emit(f"ld.relaxed.gpu.global.{ptx_type} {target}, [{tile_base}+{offset}];")
            if slice_index:
                w.emit(f"{add} {reg}, {reg}, {loaded};")
        return reg
    ctx.bind(op.result, OnDemand(len(partial), total))


class OnDemand(list):
    """A tile's registers computed where first read: the sum of register i's partials is
    loaded in the epilogue chunk that uses it (the epilogue is emitted a few registers at
    a time), so the sums are never live at once; emitted all at the meeting, ptxas hoisted
    every slice's loads ahead of them and spilled (36 bytes from 4 slices of 128x128 under
    a GELU epilogue on sm_90a; the LLVM backend's 128 sums, a kilobyte). Readers take an
    element outside any conditional block (the epilogue's emitters do), so the value
    dominates every later use; the PTX emitter checks it (no label made since the
    meeting)."""

    def __init__(self, n: int, compute) -> None:
        super().__init__([None] * n)
        self._compute = compute

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if list.__getitem__(self, index) is None:
            list.__setitem__(self, index, self._compute(index))
        return list.__getitem__(self, index)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


EMITTERS = {"split.reduce": _split_reduce}
