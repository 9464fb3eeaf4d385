"""The emitter of ``split.reduce``: the K slices of one output tile meet in global memory.

The workspace, two hidden kernel parameters (``backend/abi.py``):

- ``split_partials``: 4-byte words (f32 or i32, the accumulator's type),
  ``tiles x splits x registers x threads``; a block writes its
  partial at ``[tile][slice]``, in groups of four registers a thread, each group of all
  threads contiguous (coalesced 16-byte stores and loads, and every thread reads back
  exactly the elements it holds);
- ``split_counters``: one u32 per output tile, zero before a launch; the last block of a
  tile to arrive sets it back to zero, so the next launch finds it so.

The handshake is the "last block" pattern (PTX ISA 8.0, memory consistency model): every
thread's stores, then a gpu-scope fence and a block barrier, then one acq_rel atomic add per
block; the block that sees ``splits - 1`` is last, learns it in every thread through
``bar.red.or.pred``, fences, and sums the partials with gpu-scope loads (L2, never a stale
L1 line). The others exit. In a warp-specialized kernel the barriers are its consumers' (the
producer warpgroup, whose loads the slice's products have waited for, has left). The sum goes in slice order whichever block is last, so the
result is the same from run to run. An i32 accumulator (int8 products) meets the same way:
its sum wraps as the products' does, and integer addition being associative, it is the
exact (mod 2**32) sum of all K, bit for bit the one-slice kernel's.
"""
from __future__ import annotations

from tilec.ir.core import Kernel, Op, require_grid
from tilec.ir.types import F32, I32

from .abi import POINTER, WORKSPACE_PARAMS, WORKSPACE_SOURCES, AbiParam, cuda_tile_axes
from .context import Context

PARTIAL_BYTES = 4  # every accumulator split-K sums (SPLIT_SUM_DTYPES) is a 4-byte word
# A thread's registers in groups of VECTOR, group g of all threads contiguous: one
# st.global.v4 of a warp writes 512 contiguous bytes.
VECTOR = 4
# The registers of a thread the last block adds a slice of at a time (a multiple of VECTOR).
SUM_CHUNK = 32

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


def vector_width(registers: int) -> int:
    """How many of a thread's registers one workspace access moves: VECTOR where they come
    in whole groups, else one."""
    return VECTOR if registers % VECTOR == 0 else 1


def braced(registers: list[str]) -> str:
    """A PTX vector operand: ``{%f1, %f2, ...}``, or the one register alone."""
    return "{" + ", ".join(registers) + "}" if len(registers) > 1 else registers[0]


def _split_reduce(ctx: Context, op: Op) -> None:
    w = ctx.w
    partial_value, slice_value = op.operands
    splits = op.attrs["splits"]
    partial = ctx.get(partial_value)
    ptx_type, register_class, add = SUMS[partial_value.type.dtype]
    width = vector_width(len(partial))
    vec = f".v{width}" if width > 1 else ""
    group_stride = ctx.plan.threads * width * PARTIAL_BYTES
    slice_bytes = len(partial) // width * group_stride
    partials, counters = (ctx.workspace[source] for source in WORKSPACE_SOURCES)
    tid = ctx.tid()
    tile = _tile_index(ctx)

    # This thread's first group of the tile's slice 0, and of its own slice.
    tile_slot = ctx.int_op("mul.lo.s32", tile, splits)
    tile_base = w.reg("b64")
    w.emit(f"mul.wide.u32 {tile_base}, {tile_slot}, {slice_bytes};")
    w.emit(f"add.s64 {tile_base}, {tile_base}, {partials};")
    w.emit(f"mad.wide.u32 {tile_base}, {tid}, {width * PARTIAL_BYTES}, {tile_base};")
    own = w.reg("b64")
    w.emit(f"mad.wide.u32 {own}, {ctx.get(slice_value)}, {slice_bytes}, {tile_base};")
    for g in range(0, len(partial), width):
        w.emit(f"st.global{vec}.{ptx_type} [{own}+{g // width * group_stride}], "
               f"{braced(partial[g:g + width])};")

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

    # Slice 0, then the later slices added in order, SUM_CHUNK registers at a time, each
    # chunk's slices in a loop: one chunk's loads in flight, where unrolled ptxas hoisted every
    # slice's and spilled (an int8 kernel at 7 slices, a fused 128x256 one at 7).
    total = w.regs(register_class, len(partial))
    for g in range(0, len(total), width):
        w.emit(f"ld.relaxed.gpu.global{vec}.{ptx_type} {braced(total[g:g + width])}, "
               f"[{tile_base}+{g // width * group_stride}];")
    source, remaining, more = w.reg("b64"), w.reg("b32"), w.reg("pred")
    loaded = w.regs(register_class, min(SUM_CHUNK, len(total)))
    for chunk in range(0, len(total), SUM_CHUNK):
        w.emit(f"add.s64 {source}, {tile_base}, {chunk // width * group_stride};")
        w.emit(f"mov.u32 {remaining}, {splits - 1};")
        head = w.label("split_slice")
        w.raw(f"{head}:")
        w.emit(f"add.s64 {source}, {source}, {slice_bytes};")
        sums = total[chunk:chunk + SUM_CHUNK]
        for g in range(0, len(sums), width):
            w.emit(f"ld.relaxed.gpu.global{vec}.{ptx_type} {braced(loaded[g:g + width])}, "
                   f"[{source}+{g // width * group_stride}];")
        for reg, part in zip(sums, loaded):
            w.emit(f"{add} {reg}, {reg}, {part};")
        w.emit(f"sub.s32 {remaining}, {remaining}, 1;")
        w.emit(f"setp.ne.s32 {more}, {remaining}, 0;")
        w.emit(f"@{more} bra.uni {head};")
    ctx.bind(op.result, total)


EMITTERS = {"split.reduce": _split_reduce}
