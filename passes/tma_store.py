"""TMA-store epilogue: the warp-specialized consumers write their output tile into a shared
staging tile, and one thread stores it to global memory with TMA, a box per slab one swizzle
span wide (``cp.async.bulk.tensor`` shared -> global, PTX ISA 9.7.9.25.5.2): 128 bytes where
the tile's rows are whole 128-byte lines, else 64 or 32 (a 16-bit BN of 96 or 208).

Direct stores from the accumulator layout write each row in 16-byte pieces (f16: four
threads of two elements), scattered over 8 rows per instruction; TMA writes whole 128-byte
lines, clips the tile at the tensor's edges itself, and runs while the consumers go on.

Requires: warp specialization's schedule (``schedule.roles``) and the fragments pass (the
stored value in the accumulator layout).

Produces: the ``tile.store`` of the consumers' tile marked ``via = "tma"`` with its box
(``box = [S, BM]``, ``slabs = BN / S``, ``coords = [1, 0]``: the column offset is the inner
coordinate; S the columns of the widest span BN's bytes take); ``staging_buffers = 2``
where a 16- or 32-bit tile's whole staging does not fit beside the ring but two one-slab
buffers do (the slabs then go out in turn, one written while the one before is stored); and
its staging writes (``writes``: ``stmatrix``, one stmatrix.x4 of four 8x8 matrices of 16-bit
pairs where a thread's registers form them and it holds at most 64, else ``pairs``,
st.shared a register pair at a time: :func:`tilec.families.staged_store.staging_writes`).
The backend (:mod:`tilec.families.staged_store`) lays the staging tile out in TMA's swizzle
of that span (:func:`~tilec.families.tma_boxes.tma_layout`), so each thread's writes of a
row pair are conflict-free; the row stores (``via = "rows"``) read 128-byte slabs only.

``schedule.epilogue`` says which way the tile goes, and why not TMA when it does not: a 2-D
output (or one batch of a 3-D one, through a 3-D map) of 8-, 16- or 32-bit elements (f32 or
i32 in 8-byte writes of a register pair; an fp8 or i8 output in 2-byte writes) stored where
TMA can address it (unit-stride rows, 16-byte aligned: the launch spec), one store, and room
in shared memory for the tile or, for 16- and 32-bit tiles, two of its slabs. The CPU
semantics are the store's own: TMA skips out-of-bounds elements as the masked store does.

A swapped product's tile (passes/swap_product.py: C.T, stored through a transposed view)
is staged in C's rows: ``writes = "stmatrix.trans"``, each run of four 8x8 matrices of C.T
(or a last run of two) stored transposed, so each matrix row is 8 values of one row of C, a
16-byte chunk in TMA's swizzle (:func:`tilec.families.staged_store.transposed_stmatrix_groups`
says which layouts), and the boxes are C's (``coords = [0, 1]``: C.T's view takes the
column offset first). 16-bit outputs to TMA only, the whole tile staged at once; elsewhere
the direct stores, and why. H200, f16, one call, TFLOP/s, against the direct stores (each
thread's 2-byte elements, 8 lanes writing 16 bytes of one row of C): 300x3000x8192 445.2 /
437.6, 600x4104x8192 694.6 / 670.6, 700x3000x8192 568.6 / 550.0, 260x4104x8192 516.9 /
508.2 (benchmarks/NOTES.md, session 33).

Unit-stride rows that are not 16-byte aligned (C of 4095x4097: 2-byte aligned rows) are
staged all the same, marked ``via = "rows"`` (no tensor map): after the staging writes the
consumers copy the tile out a row at a time, each warp instruction 64 contiguous bytes of
one row (:func:`tilec.families.staged_store.store_rows`), where direct stores from the accumulator
layout scatter 2- or 4-byte pieces over 8 rows per instruction. On an H100 that scatter,
not the products, set the time of 8x4095x4097x128 (benchmarks/NOTES.md, session 9).

Before / after::

    tile.store %C, %5, %6, %c {masked = [true, true]}
    tile.store %C, %5, %6, %c {masked = [true, true], via = tma, tensor = C,
                               box = [64, 128], slabs = 4, coords = [1, 0]}
"""
from __future__ import annotations

from typing import Optional

from tilec.families.staged_store import (STMATRIX_TRANS, STRIP_ROWS, register_units,
                                        staging_writes, transposed_stmatrix_groups)
from tilec.families.tma_boxes import SLAB_BYTES, SWIZZLE_128B, spans_for, swizzle_128b
from tilec.ir.core import Kernel, Op, Param, clone_kernel
from tilec.ir.schedule import EpiloguePlan
from tilec.ir.types import TileType
from tilec.ir.views import view_source
from tilec.options import SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK, Options
from tilec.target.layout import DistributedLayout, SmemLayout
from tilec.target.smem import place, total_with_staging

NAME = "tma_store"

def addressing_problem(layout: DistributedLayout, elem_bytes: int = 2) -> Optional[str]:
    """Why the backend's staging writes cannot use their cheap form for this accumulator
    layout (None when they can): every register of a thread must stay in the thread's rows
    modulo 8 (so the swizzle's XOR is the thread's), and a register pair's columns inside
    one 16-byte chunk from the thread's first column. With 4-byte elements (a chunk of 4)
    the thread's first column may reach into the next chunk when the registers' chunks
    leave that bit clear: the thread's chunk then adds to the register's without a carry
    and XORs into the swizzle per thread (tilec.families.staged_store._stage_registers)."""
    chunk = 1 << swizzle_128b(elem_bytes).base  # elements per 16-byte chunk
    if layout.warps[1] != 1:
        return "the warps split the tile's columns"
    first_cols = (layout.lane_grid[1] - 1) * layout.lane_step[1]
    thread_chunks = first_cols // chunk  # the chunk bits the thread's first column sets
    offsets = layout.register_offsets()
    if len(offsets) % 2:
        return "the registers do not come in column pairs"
    for index in range(0, len(offsets), 2):
        (r, c), (r2, c2) = offsets[index], offsets[index + 1]
        if (r2, c2) != (r, c + 1) or r % (1 << SWIZZLE_128B.bits):
            return "a register pair is not two neighbours on the thread's rows modulo 8"
        if c % chunk + 1 + first_cols % chunk >= chunk or (c // chunk) & _bits(thread_chunks):
            return "a register pair crosses a 16-byte chunk"
    return None


def _bits(n: int) -> int:
    """n and every bit below its highest."""
    return (1 << n.bit_length()) - 1


def _store_problem(kernel: Kernel, store: Op, options: Options,
                   aligned: bool = True) -> Optional[str]:
    """Why the store cannot go through the staging tile (None when it can); ``aligned``:
    to TMA, which needs C's rows 16-byte aligned (else: to the consumers' row stores)."""
    value = store.operands[-1]
    vtype: TileType = value.type
    layout = vtype.layout
    if not isinstance(layout, DistributedLayout) or layout.operand != "C":
        return "the stored tile is not in the accumulator layout"
    elem_bytes = vtype.dtype.bytes
    if elem_bytes != 2 and not aligned:
        return (f"C is {vtype.dtype} and its rows are not 16-byte aligned: TMA cannot store "
                "them, and the row stores take 16-bit tiles")
    transposed = _transposed_source(kernel, store)
    if transposed is not None:
        problem = _transposed_problem(layout, elem_bytes, aligned)
        if problem is not None:
            return problem
        if transposed.batch is not None:
            return "C.T is stored transposed, a batch of it (TMA's 3-D map is C's)"
    param = _stored_param(kernel, store)
    if param is None:
        return "C is not a 2-D tensor parameter or one batch of a 3-D one (a vector)"
    spec = options.spec.tensor(param.name, param.type.rank, elem_bytes)
    # The rows' unit-stride dim: the last, of a matrix or of a batch of them (3-D map).
    if (spec.contiguous_dim != param.type.rank - 1
            or aligned and spec.vec_elems * elem_bytes < 16):
        return (f"'{param.name}' is not known to have unit-stride, 16-byte aligned rows "
                "(the launch spec)")
    return None if transposed is not None else addressing_problem(layout, elem_bytes)


def _transposed_source(kernel: Kernel, store: Op):
    """The tensor view the store writes its tile through where that view is transposed (a
    swapped product's C.T: passes/swap_product.py); None otherwise."""
    source = view_source(kernel, store.operands[0])
    return source if source is not None and source.transposed else None


def _transposed_problem(layout: DistributedLayout, elem_bytes: int,
                        aligned: bool) -> Optional[str]:
    """Why a tile stored through a transposed view cannot be staged in C's rows (None when
    it can): stmatrix.trans moves 16-bit elements, the registers in its runs
    (staged_store.transposed_stmatrix_groups), to TMA (the row stores read tiles as
    stored)."""
    if elem_bytes != 2:
        return (f"C.T is stored transposed: staging it in C's rows takes stmatrix.trans, "
                f"which moves 16-bit elements, not {8 * elem_bytes}-bit ones")
    if not transposed_stmatrix_groups(layout, elem_bytes):
        return ("C.T is stored transposed, and its registers do not fall in the runs of "
                "four 8x8 matrices stmatrix.trans writes")
    if not aligned:
        return "C.T is stored transposed, and C's rows are not 16-byte aligned for TMA"
    return None


def _stored_param(kernel: Kernel, store: Op) -> Optional[Param]:
    """The parameter the store writes a tile of (through a transposed view too): a 2-D one,
    or a batch of a 3-D one (whose TMA map is 3-D: tilec/launch/tensor_maps.py); None for
    other views and vectors."""
    source = view_source(kernel, store.operands[0])
    if source is None:
        return None
    param = next(p for p in kernel.params if p.name == source.name)
    return param if param.type.rank == 2 + (source.batch is not None) else None


def run(kernel: Kernel, options: Options) -> Kernel:
    if kernel.schedule.roles is None:
        return kernel
    kernel = clone_kernel(kernel)
    stores = [op for op in kernel.body.ops if op.name == "tile.store"]
    if len(stores) != 1:
        plan = EpiloguePlan("direct", reason=f"{len(stores)} stores (TMA takes one)")
        kernel.schedule = kernel.schedule.with_(epilogue=plan)
        return kernel
    store = stores[0]
    problem = _store_problem(kernel, store, options)
    # C's rows not 16-byte aligned: staged all the same, the consumers store the rows.
    via = "tma" if problem is None else "rows"
    if problem is not None and _store_problem(kernel, store, options, aligned=False) is None:
        problem = None
    # The staging tile: the stored one, or C's rows of a C.T tile stored transposed.
    transposed = _transposed_source(kernel, store) is not None
    bm, bn = store.operands[-1].type.shape[::-1] if transposed else \
        kernel.schedule.tiling.block[:2]
    elem_bytes = store.operands[-1].type.dtype.bytes
    # A pingpong kernel's warpgroups each stage a tile of their own.
    copies = 2 if kernel.schedule.roles.pingpong else 1
    # The staging tile is laid out, and stored, a box of columns a swizzle span wide at a
    # time: the widest span its rows take.
    if via == "tma":
        spans = spans_for(SmemLayout(bm, bn), elem_bytes)
    else:  # the row stores read 128-byte slabs only
        spans = (SLAB_BYTES,) if bn * elem_bytes % SLAB_BYTES == 0 else ()
    span = spans[0] if spans else SLAB_BYTES
    inner = span // elem_bytes
    if problem is None and not spans:
        unit = ("32 bytes, TMA's narrowest swizzle span" if via == "tma" else
                "128 bytes, the swizzle rows the row stores read")
        problem = (f"BN = {bn} columns of {store.operands[-1].type.dtype} "
                   f"({bn * elem_bytes} bytes) are not a whole number of {unit}")
    staging = bm * bn * elem_bytes * copies
    buffers = 0  # the whole tile staged at once
    # 128-row warpgroups hold two m64 strips' registers, one after the other: slabs taking
    # turns go out a slab of a strip at a time (staged_store.register_units).
    strips = getattr(store.operands[-1].type.layout, "strips", 1)
    if problem is None:
        # The ring and its barriers, and the staging tile after them as the backend places it.
        used = total_with_staging(place(kernel), 0)
        limit = SMEM_PER_SM // kernel.schedule.roles.blocks_per_sm - SMEM_RESERVED_PER_BLOCK
        if used + staging > limit:
            slab_buffers = SLAB_BUFFERS * bm * inner * elem_bytes
            if via == "tma" and copies == 1 and elem_bytes in SLABS_IN_TURN_BYTES \
                    and not transposed and _slabs_in_turn(store, bn // inner, inner, strips) \
                    and used + slab_buffers <= limit:
                staging, buffers = slab_buffers, SLAB_BUFFERS
            else:
                problem = (f"its {staging}-byte staging tile does not fit beside the ring's "
                           f"{used} bytes (a block may have {limit})")
    if problem is not None:
        kernel.schedule = kernel.schedule.with_(epilogue=EpiloguePlan("direct",
                                                                      reason=problem))
        return kernel
    # "rows" has no tensor map: the consumers address C themselves.
    tensor = {"tensor": _stored_param(kernel, store).name} if via == "tma" else {}
    copies_attr = {"staging_copies": copies} if copies > 1 else {}
    buffers_attr = {"staging_buffers": buffers} if buffers else {}
    strips = strips if buffers else 1
    strips_attr = {"strips": strips} if strips > 1 else {}
    box_rows = bm if strips == 1 else STRIP_ROWS
    writes = STMATRIX_TRANS if transposed else \
        staging_writes(store.operands[-1].type.layout, elem_bytes)
    # C.T's view takes (n, m) offsets: n, C's column, is the box's inner coordinate.
    store.attrs.update(via=via, **tensor, box=[inner, box_rows], slabs=bn // inner,
                       coords=[0, 1] if transposed else [1, 0], writes=writes,
                       **copies_attr, **buffers_attr, **strips_attr)
    kernel.schedule = kernel.schedule.with_(epilogue=EpiloguePlan(
        via, staging, (inner, box_rows), bn // inner, writes=writes, buffers=buffers,
        span=span, strips=strips))
    return kernel


# Where the whole tile's staging does not fit (128x256 f16 beside four stages of its ring,
# 128x256 f32 beside three),
# its slabs go out in turn through this many one-slab buffers: the consumers write slab s
# into buffer s % 2 while slab s - 1's TMA store reads the other.
SLAB_BUFFERS = 2
# The element sizes whose tiles go out in turn (an 8-bit tile's 128x256 fits whole). 32-bit
# ones too: the f32 C of 16-bit products and the int8 rows' i32 C at 128x256 (128 KiB whole,
# beside three or four stages: direct stores before), H200, one call, x the direct stores:
# f16 / bf16 with C f32 1.03 / 1.03 at 4096^3, 1.11 / 1.11 at 8192^3; i8 1.04 and 1.07
# (benchmarks/NOTES.md, session 24).
SLABS_IN_TURN_BYTES = (2, 4)


def _slabs_in_turn(store: Op, slabs: int, inner: int, strips: int) -> bool:
    """Whether the tile can go out a slab (of a strip, with 128-row warpgroups) at a time
    through SLAB_BUFFERS buffers: more units than buffers, and each thread's registers in
    unit order (a unit's registers one run of indices, the units ascending), so the writes
    of one unit end before the next one's begin. An odd count costs a persistent block one
    more meeting a tile (staged_store._store_slabs_in_turn)."""
    if slabs * strips <= SLAB_BUFFERS:
        return False
    order = register_units(store.operands[-1].type.layout, inner, slabs, strips)
    return order == sorted(order)
