"""Stores through a staging tile (sm_90 warp-specialized kernels): the consumers write
their accumulator registers into shared memory in TMA's swizzle of the store's span (128
bytes, or 64 or 32 where the tile's rows are not whole 128-byte lines; stmatrix, or
st.shared a register pair at a time), meet, and the tile goes out as TMA boxes
(``tile.store {via = tma}``, ``cp.async.bulk.tensor`` from shared memory, PTX ISA
9.7.9.25.5.2), or, where C's rows are not 16-byte aligned, as rows the consumers copy
themselves (``via = rows``). ``passes/tma_store.py`` chooses the route and the writes; the
TMA family (:mod:`tilec.families.tma`) lends its ``store_emitters`` these.
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence

from tilec.backend.context import CONSUMER_BARRIER, Context, c_thread_coords
from tilec.ir.core import Op
from tilec.target.layout import DistributedLayout

from .row_store import StagedRows, copy_rows_out
from .tma_boxes import (SLAB_BYTES, Box, atom_row_shift, block_warpgroup, box_coordinates,
                        tensor_map_address, thread_is, tma_swizzle)


def _stage_registers(ctx: Context, op: Op, reuse_wait: str = "") -> Optional[str]:
    """The staging part of a store through shared memory, emitted a chunk of registers at a
    time: each thread writes its register pairs into the staging tile, in TMA's swizzle of
    the box's span. Returns the staging tile's address after the last chunk (None before it).
    ``reuse_wait``: what a persistent kernel's leader waits for before the next tile's
    first write overwrites the staging tile (then all consumers meet); the wait after the
    last tile is the store's (:func:`_last_store_read`)."""
    w = ctx.w
    layout = op.operands[-1].type.layout
    roles = ctx.kernel.schedule.roles
    state = ctx.op_state.setdefault(op, {})
    # The leader's predicate first (its registers' numbering is the golden PTX's).
    leader = thread_is(ctx, None, 0) if reuse_wait else None
    if "staging" not in state:
        state["staging"] = ctx.smem.of(op).offset
        if roles.persistent:
            # The previous tile's stores must have read the staging tile.
            if leader is not None:
                w.emit(f"@{leader} {reuse_wait}")
            w.emit(_consumers_meet(ctx))
    # Element (row, col) sits at slab col / S, row, chunk (col % S) / 8 ^ row % 8: the
    # thread's row modulo 8 is the same in all its registers (tma_store checked), so the
    # XOR is per thread and per chunk, and the rest of the offset an immediate. The
    # addresses are remade per chunk of registers: kept across the epilogue, they spill.
    staging = ctx.int_op("add.s32", ctx.smem_base(), state["staging"])
    if roles.pingpong:
        # Each warpgroup stages its own tile (tma_store placed one copy a warpgroup).
        staging = ctx.mad(block_warpgroup(ctx), ctx.smem.of(op).stage_bytes, staging)
    _write_staging(ctx, op, staging)
    if ctx.active is not None and ctx.active.stop < len(layout.cached_offsets()):
        return None
    return staging


def _write_staging(ctx: Context, op: Op, staging: str) -> None:
    """The registers ``ctx.indices`` names into the staging tile at ``staging``, by the
    writes the tma_store pass chose."""
    value = op.operands[-1]
    layout, eb, rows = value.type.layout, value.type.dtype.bytes, staging_rows(op)
    regs, box = ctx.get(value), Box.of(op)
    keep = ctx.kernel.schedule.roles.persistent
    buffers = op.attrs.get("staging_buffers", 0)
    if op.attrs.get("writes") == STMATRIX:
        _stage_by_stmatrix(ctx, layout, regs, box, rows, staging, keep, buffers)
    elif op.attrs.get("writes") == STMATRIX_TRANS:
        _stage_by_stmatrix_trans(ctx, layout, regs, box, rows, staging)
    else:
        _stage_by_pairs(ctx, layout, regs, box, rows, staging, eb, keep, buffers)


def staging_rows(op: Op) -> int:
    """The rows of a store's staging tile: the stored tile's, or where it is the transpose
    of what it stores (``stmatrix.trans`` writes: a swapped product's C.T tile into C's
    rows), its columns."""
    shape = op.operands[-1].type.shape
    return shape[1] if op.attrs.get("writes") == STMATRIX_TRANS else shape[0]


STMATRIX = "stmatrix"
# A swapped product's C.T tile written transposed, into C's rows (passes/tma_store.py).
STMATRIX_TRANS = "stmatrix.trans"
# The most accumulators a thread may hold for its staging writes to be stmatrix: the four
# packed registers each write keeps live at once pushed the 128x256 fused epilogue
# (gemm_epilogue, 128 accumulators a thread) past ptxas's 168-register budget (4 bytes of
# spill); 128x128 tiles (64) have room.
STMATRIX_MAX_REGISTERS = 64
# How explain and the schedule name each way of writing the staging tile.
STAGING_WRITES_TEXT = {STMATRIX: "stmatrix.x4, four 8x8 matrices a write",
                       STMATRIX_TRANS: "stmatrix.x4.trans, four 8x8 matrices of C.T a write, "
                                       "each transposed into 8 rows of C",
                       "pairs": "st.shared, a register pair a write"}


def staging_writes(layout: DistributedLayout, elem_bytes: int) -> str:
    """How the consumers write their registers into the staging tile: ``stmatrix`` where
    :func:`stmatrix_groups` holds, else ``pairs`` (st.shared, a register pair at a time)."""
    return STMATRIX if stmatrix_groups(layout, elem_bytes) else "pairs"


def _stmatrix_runs(layout: DistributedLayout, elem_bytes: int
                   ) -> Optional[list[tuple[int, int, int]]]:
    """A thread's 16-bit registers as the runs stmatrix writes them (PTX ISA 9.7.14.5.16),
    each as (r, c, matrices): the mma fragment's lane grid (8 rows of 4 lanes, a lane two
    neighbouring columns), warps over rows only, and runs of four register pairs at (r, c),
    (r + 8, c), (r, c + 8), (r + 8, c + 8), the last one possibly of the first two pairs
    alone; None where the registers do not fall so."""
    if elem_bytes != 2 or layout.lane_grid != (8, 4) or layout.lane_step != (1, 2) \
            or layout.warps[1] != 1:
        return None
    offsets = layout.register_offsets()
    runs = []
    for start in range(0, len(offsets), 8):
        run = list(offsets[start:start + 8])
        r, c = run[0]
        full = [(r + dr, c + dc + one) for dc in (0, 8) for dr in (0, 8) for one in (0, 1)]
        if len(run) not in (4, 8) or run != full[:len(run)]:
            return None
        runs.append((r, c, len(run) // 2))
    return runs


def stmatrix_groups(layout: DistributedLayout, elem_bytes: int) -> bool:
    """Whether a thread's 16-bit registers fall, eight at a time, on four 8x8 matrices that
    one ``stmatrix.sync.aligned.m8n8.x4`` writes (:func:`_stmatrix_runs`, every run of four
    matrices), r a multiple of 8 and c of 16, so that each matrix row is one 16-byte chunk
    of the staging tile and the pair of chunks shares its swizzle but for the lowest bit;
    and at most STMATRIX_MAX_REGISTERS of them."""
    runs = _stmatrix_runs(layout, elem_bytes)
    return runs is not None and 8 * len(runs) <= STMATRIX_MAX_REGISTERS and \
        all(matrices == 4 and r % 8 == 0 and c % 16 == 0 for r, c, matrices in runs)


def _stage_by_stmatrix(ctx: Context, layout: DistributedLayout, regs: list[str], box: "Box",
                       rows: int, staging: str, keep: bool, buffers: int = 0) -> None:
    """Each run of eight registers (four pairs, four 8x8 matrices: :func:`stmatrix_groups`)
    packed into four 16-bit pairs and written by one stmatrix.x4, where the separate writes
    took four st.shared.b32. Lane t gives the address of row t % 8 of matrix t / 8: the
    matrix's row r + 8 ((t / 8) % 2) + t % 8 of the warp's tile, its chunk c / 8 + t / 16,
    in TMA's swizzle (chunk ^ the row's XOR, :func:`_row_xor`): the chunk's lowest bit is
    the lane's, the rest XORs per run of registers."""
    w = ctx.w
    row, chunk_bit = _stmatrix_lane_coords(ctx, layout, keep)
    row_bytes = box.inner * 2
    row_bits = _row_xor(ctx, row, row_bytes)
    # The thread's part: its row, and its chunk's lowest bit after the swizzle's XOR.
    low = ctx.int_op("shl.b32", ctx.int_op("and.b32", ctx.int_op("xor.b32", row_bits,
                                                                 chunk_bit), 1), 4)
    base = ctx.int_op("add.s32", ctx.mad(row, row_bytes, staging), low)
    # The XOR's other bits (none in a 32-byte span: one run of registers is its two chunks).
    high = row_bytes // 16 - 2
    xor = ctx.int_op("shl.b32", ctx.int_op("and.b32", row_bits, high), 4) if high else None
    offsets = layout.cached_offsets()
    moved: dict[int, str] = {}
    for index in ctx.indices(len(offsets)):
        if index % 8:
            continue
        r, c = offsets[index]
        within = c % box.inner
        unit = _unit(r, c, box.inner, box.slabs, box.strips)
        chunk = within >> 3  # even: the run's first chunk
        if chunk not in moved:
            moved[chunk] = ctx.int_op("add.s32", base, ctx.int_op("xor.b32", xor, chunk << 4)) \
                if xor else base
        immediate = (_slot(unit, buffers) * rows + r) * row_bytes
        _stmatrix(w, regs[index:index + 8], f"{moved[chunk]}+{immediate}")


def _stmatrix(w, run: list[str], address: str, trans: bool = False) -> None:
    """One stmatrix of a run of 16-bit registers, packed in pairs, one 8x8 matrix a pair
    (.x4 for eight registers, .x2 for four), each matrix transposed with ``trans``."""
    packed = []
    for pair in range(len(run) // 2):
        register = w.reg("b32")
        w.emit(f"mov.b32 {register}, {{{run[2 * pair]}, {run[2 * pair + 1]}}};")
        packed.append(register)
    w.emit(f"stmatrix.sync.aligned.m8n8.x{len(packed)}{'.trans' if trans else ''}.shared.b16 "
           f"[{address}], {{{', '.join(packed)}}};")


def transposed_stmatrix_groups(layout: DistributedLayout, elem_bytes: int) -> bool:
    """Whether :func:`_stage_by_stmatrix_trans` can write this C.T tile into C's rows: the
    runs of :func:`_stmatrix_runs` (a last run of two matrices where the columns end 8 past
    a multiple of 16), c a multiple of 8 (a run's rows of C keep their index modulo 8, its
    swizzle) and r of 64 (a warpgroup's strip, so a run's two 8-row halves lie in one slab
    of C's staging tile, whatever its span)."""
    runs = _stmatrix_runs(layout, elem_bytes)
    return runs is not None and all(r % STRIP_ROWS == 0 and c % 8 == 0 for r, c, _ in runs)


def _stage_by_stmatrix_trans(ctx: Context, layout: DistributedLayout, regs: list[str],
                             box: "Box", rows: int, staging: str) -> None:
    """A swapped product's C.T tile (rows along C's n, columns along its m) into C's staging
    tile (``rows`` rows of m, slabs ``box.inner`` wide of n), each run of eight registers
    (four 8x8 matrices at C.T's (r, c), (r + 8, c), (r, c + 8), (r + 8, c + 8)) by one
    stmatrix.x4.trans (a last run of four by .x2: transposed_stmatrix_groups), which
    stores matrix row i as the fragment's column i: 8 values of n
    in one row of m, a 16-byte chunk of C's staging tile. Lane t gives the address of
    row t % 8 of matrix t / 8: m = c + 8 (t / 16) + t % 8, its first n the warp's first
    row + r + 8 ((t / 8) % 2). The run's r (a multiple of 64: transposed_stmatrix_groups)
    moves whole slabs and c whole rows, so each run's address is the lane's base and an
    immediate; a row's swizzle XOR is its index modulo 8, the lane's t % 8."""
    w = ctx.w
    row_bytes = box.inner * 2
    slab_bytes = rows * row_bytes

    def lane_offset() -> str:
        row0, _ = c_thread_coords(ctx, layout, keep=False)
        lane = ctx.int_op("and.b32", ctx.tid(), 31)
        # The warp's first row of C.T, and this lane's matrix's 8 of them: C's first column.
        n = ctx.int_op("add.s32", ctx.int_op("sub.s32", row0, ctx.int_op("shr.u32", lane, 2)),
                       ctx.int_op("shl.b32", ctx.int_op("and.b32", ctx.int_op(
                           "shr.u32", lane, 3), 1), 3))
        m = ctx.int_op("add.s32", ctx.int_op("shl.b32", ctx.int_op("shr.u32", lane, 4), 3),
                       ctx.int_op("and.b32", lane, 7))
        slab = ctx.div_const(n, box.inner, nonnegative=True)
        chunk = ctx.int_op("shr.u32", ctx.mod_const(n, box.inner, nonnegative=True), 3)
        swizzled = ctx.int_op("xor.b32", chunk, _row_xor(ctx, m, row_bytes))
        return ctx.int_op("add.s32", ctx.mad(slab, slab_bytes, ctx.int_op(
            "mul.lo.s32", m, row_bytes)), ctx.int_op("shl.b32", swizzled, 4))

    # One register from the first chunk on: made afresh in each chunk, its parts stayed live
    # across the epilogue and a fused one spilled (gemm_epilogue split in two, 152 rows).
    base = ctx.int_op("add.s32", staging, ctx.w.once(
        ctx.thread_key(("stmatrix.trans", layout, box.inner, rows)), lane_offset))
    offsets = layout.cached_offsets()
    for index in ctx.indices(len(offsets)):
        if index % 8:
            continue
        r, c = offsets[index]
        immediate = r // box.inner * slab_bytes + c * row_bytes
        # A last run of two matrices (four registers) is an .x2.
        _stmatrix(w, regs[index:index + 8], f"{base}+{immediate}", trans=True)


def _stmatrix_lane_coords(ctx: Context, layout: DistributedLayout, keep: bool
                          ) -> tuple[str, str]:
    """The row of the warp's tile whose address this lane gives stmatrix, ``row0 - t / 4 +
    t % 16`` (row0: the lane's own first row, :func:`c_thread_coords`), and its chunk's
    lowest bit, ``t / 16``."""
    def compute() -> tuple[str, str]:
        row0, _ = c_thread_coords(ctx, layout, keep=False)
        tid = ctx.w.reg("b32")
        ctx.w.emit(f"mov.u32 {tid}, %tid.x;")
        lane = ctx.int_op("and.b32", tid, 31)
        row = ctx.int_op("add.s32", ctx.int_op("sub.s32", row0, ctx.int_op("shr.u32", lane, 2)),
                         ctx.int_op("and.b32", lane, 15))
        return row, ctx.int_op("shr.u32", lane, 4)
    return ctx.w.once(ctx.thread_key(("stmatrix", layout)), compute) if keep else compute()


def _stage_by_pairs(ctx: Context, layout: DistributedLayout, regs: list[str], box: "Box",
                    rows: int, staging: str, eb: int, keep: bool, buffers: int = 0) -> None:
    """Each register pair written on its own (st.shared.b16 of two packed 8-bit values,
    st.shared.b32 of two 16-bit ones, st.shared.v2.b32 of two 32-bit ones), in TMA's
    swizzle of the box's span."""
    w = ctx.w
    span = box.inner * eb
    row0, col0 = c_thread_coords(ctx, layout, keep=KEEP_COORDINATES[keep, span < SLAB_BYTES])
    swizzle = tma_swizzle(span, eb)  # a chunk is 16 bytes: 16, 8 or 4 elements
    shift = swizzle.base + (eb.bit_length() - 1)
    row_bits = _row_xor(ctx, row0, span)
    if (layout.lane_grid[1] - 1) * layout.lane_step[1] < 1 << swizzle.base:
        base = ctx.mad(ctx.mad(row0, box.inner, col0), eb, staging)
        xor = ctx.int_op("shl.b32", row_bits, shift)
    else:
        # The thread's first column reaches past its first chunk (32-bit elements): its
        # chunk XORs with the row's, carry-free beside the registers' (the tma_store pass's
        # addressing_problem checked), and only the rest goes into the base.
        low_col = ctx.int_op("and.b32", col0, (1 << swizzle.base) - 1)
        base = ctx.mad(ctx.mad(row0, box.inner, low_col), eb, staging)
        thread_chunk = ctx.int_op("shr.u32", col0, swizzle.base)
        xor = ctx.int_op("shl.b32", ctx.int_op("xor.b32", row_bits, thread_chunk), shift)
    chunks: dict[int, str] = {}
    offsets = layout.cached_offsets()
    for index in ctx.indices(len(offsets)):
        if index % 2:
            continue
        r, c = offsets[index]
        within = c % box.inner
        unit = _unit(r, c, box.inner, box.slabs, box.strips)
        chunk = within >> swizzle.base
        if chunk not in chunks:
            moved = ctx.int_op("xor.b32", xor, chunk << shift)
            chunks[chunk] = ctx.int_op("add.s32", base, moved)
        low = within & ((1 << swizzle.base) - 1)
        immediate = ((_slot(unit, buffers) * rows + r) * box.inner + low) * eb
        write, scratch = STAGING_WRITES[eb]
        for line in write(chunks[chunk], immediate, regs[index], regs[index + 1],
                          *(w.reg(cls) for cls in scratch)):
            w.emit(line)


# Where a thread's coordinates live for its pair writes, by (persistent, narrow span: 64 or
# 32 bytes): kept from the kernel's entry, or recomputed from %tid at the staging. A matter
# of ptxas's 168-register budget in the fused epilogues (gemm_epilogue, ptxas 13.0, f16 C):
# at 128x256 one tile a block spilled 48 bytes keeping them, a persistent block 8
# recomputing them (since level); at 128x208 and 128x224 (narrow) one tile a block spilled
# 8 bytes recomputing them, and 128x208 persistent 8 keeping them. Neither spills at BN 96
# or 160, nor gemm_gelu at any of these.
KEEP_COORDINATES = {(False, False): False, (True, False): True,
                    (False, True): True, (True, True): False}


def _row_xor(ctx: Context, row: str, span: int) -> str:
    """The 16-byte chunk XOR of row ``row`` in TMA's ``span``-byte swizzle (the row's index
    in its 8-row atom, shifted: :func:`~tilec.families.tma_boxes.atom_row_shift`). The
    staging writes' rows keep their index modulo 8 (the tma_store pass checked), so a
    thread's XOR is its first row's."""
    shift = atom_row_shift(span)
    shifted = ctx.int_op("shr.u32", row, shift) if shift else row
    return ctx.int_op("and.b32", shifted, (7 >> shift))


def _slot(unit: int, buffers: int) -> int:
    """Where slab (or unit) ``unit`` sits in the staging tile: its own place where the whole
    tile is staged (``buffers`` 0), else one-slab buffer ``unit % buffers``."""
    return unit % buffers if buffers else unit


# The rows of one m64 instruction's accumulators: a strip of a 128-row warpgroup's tile.
STRIP_ROWS = 64


def _unit(row: int, col: int, inner: int, slabs: int, strips: int) -> int:
    """The staging unit of element (``row``, ``col``) of a thread's tile: its slab
    (``inner`` columns wide), and with ``strips`` m64 strips (slabs taking turns with
    128-row warpgroups, whose registers are strip 0's then strip 1's) the strip's slabs
    after the earlier strips'."""
    return row // STRIP_ROWS % strips * slabs + col // inner


def _write_8_bit_pair(address: str, immediate: int, first: str, second: str, packed: str,
                      low: str, high: str) -> tuple[str, ...]:
    """Two 8-bit elements, each the low byte of a b16 register (backend/compute.py's
    form), packed into one 2-byte write: prmt takes byte 0 of each half of the pair."""
    return (f"mov.b32 {packed}, {{{first}, {second}}};",
            f"prmt.b32 {packed}, {packed}, 0, 0x0020;",
            f"mov.b32 {{{low}, {high}}}, {packed};",
            f"st.shared.b16 [{address}+{immediate}], {low};")


def _write_16_bit_pair(address: str, immediate: int, first: str, second: str,
                       packed: str) -> tuple[str, ...]:
    """Two 16-bit registers packed into one 32-bit word and written."""
    return (f"mov.b32 {packed}, {{{first}, {second}}};",
            f"st.shared.b32 [{address}+{immediate}], {packed};")


def _write_32_bit_pair(address: str, immediate: int, first: str,
                       second: str) -> tuple[str, ...]:
    """Two 32-bit registers in one 8-byte write (stmatrix moves 16-bit elements only, so
    32-bit staging is st.shared; the pair's columns are even: the address is 8-byte
    aligned)."""
    return (f"st.shared.v2.b32 [{address}+{immediate}], {{{first}, {second}}};",)


# Element bytes -> the staging writes of one register pair (the tma_store pass stages 8-bit,
# 16-bit and i32 tiles) and the classes of the scratch registers they take.
STAGING_WRITES = {1: (_write_8_bit_pair, ("b32", "b16", "b16")),
                  2: (_write_16_bit_pair, ("b32",)), 4: (_write_32_bit_pair, ())}


def _consumers_meet(ctx: Context) -> str:
    """The barrier of the threads that compute one tile: all the consumers, or (pingpong)
    the warpgroup's own."""
    roles = ctx.kernel.schedule.roles
    if not roles.pingpong:
        return f"bar.sync {ctx.accumulators_barrier()};"
    barrier = ctx.w.once("tile_barrier", lambda: ctx.int_op(
        "add.s32", block_warpgroup(ctx), CONSUMER_BARRIER))
    return f"bar.sync {barrier}, {roles.tile_threads};"


def store_tile(ctx: Context, op: Op) -> None:
    """A ``tile.store {via = tma}``: the registers into the staging tile
    (:func:`_stage_registers`); after the last chunk the consumers fence their writes for
    the async proxy and meet, and thread 0 stores one box per slab, then waits for the
    stores to have read the staging tile (a persistent kernel waits before the next tile's
    first write, and after its last)."""
    w = ctx.w
    if op.attrs.get("staging_buffers"):
        _store_slabs_in_turn(ctx, op)
        return
    staging = _stage_registers(ctx, op, reuse_wait=f"{READ_WAIT} 0;")
    if staging is None:
        return
    leader = thread_is(ctx, None, 0)
    w.emit("fence.proxy.async.shared::cta;")
    w.emit(_consumers_meet(ctx))
    _issue_boxes(ctx, op, leader, staging, range(Box.of(op).slabs))
    _last_store_read(ctx, leader)


# The leader's wait until its TMA stores have read their staging (all but the newest N
# groups): CUTLASS's tma_store_wait is this .read form too.
READ_WAIT = "cp.async.bulk.wait_group.read"


def _issue_boxes(ctx: Context, op: Op, leader: str, staging: str, units: Sequence[int]
                 ) -> None:
    """The leader's TMA stores of ``units`` (slabs, or with strips a slab of one strip: a
    box of each warpgroup's 64 rows of it) from the staging tile at ``staging``, their bulk
    group committed."""
    w = ctx.w
    box = Box.of(op)
    rows, eb = staging_rows(op), op.operands[-1].type.dtype.bytes
    slot_bytes = box.inner * rows * eb  # a slab of the tile's rows
    buffers = op.attrs.get("staging_buffers", 0)
    tensor_map = tensor_map_address(ctx, op.attrs["tensor"])
    coords = [ctx.get(v) for v in op.operands[1:3]]
    inner, outer = coords[box.coords[0]], coords[box.coords[1]]
    for unit in units:
        strip, slab = divmod(unit, box.slabs)
        x = inner if slab == 0 else ctx.int_op("add.s32", inner, slab * box.inner)
        # Strip s of each warpgroup: its rows 64 s to 64 s + 63, a box of them.
        for first in range(strip * box.outer, rows, box.outer * box.strips):
            y = outer if first == 0 else ctx.int_op("add.s32", outer, first)
            dims, coordinates = box_coordinates(ctx, op.operands[0], x, y)
            address = _slot(unit, buffers) * slot_bytes + first * box.inner * eb
            w.emit(f"@{leader} cp.async.bulk.tensor.{dims}.global.shared::cta.bulk_group "
                   f"[{tensor_map}, {coordinates}], [{staging}+{address}];")
    w.emit(f"@{leader} cp.async.bulk.commit_group;")


def _last_store_read(ctx: Context, leader: str) -> None:
    """Until the stores have read the staging tile, which goes with the block's shared
    memory (their writes to global memory complete with the grid): after the tile of a
    block that computes one, after the last tile of a persistent one."""
    if not ctx.kernel.schedule.roles.persistent:
        ctx.w.emit(f"@{leader} {READ_WAIT} 0;")
    elif not ctx.after_tiles:
        ctx.after_tiles.append(lambda: ctx.w.emit(f"@{leader} {READ_WAIT} 0;"))


def register_units(layout: DistributedLayout, inner: int, slabs: int, strips: int = 1
                   ) -> list[int]:
    """The staging unit (:func:`_unit`) each of a thread's registers falls in, in register
    order: what the slabs-in-turn store writes a unit at a time."""
    return [_unit(row, col, inner, slabs, strips) for row, col in layout.cached_offsets()]


def _store_slabs_in_turn(ctx: Context, op: Op) -> None:
    """A ``tile.store {via = tma, staging_buffers = 2}``: the tile's slabs go out in turn
    through two one-slab buffers. Each slab's registers are written into buffer slab % 2;
    after its last register the consumers fence their writes for the async proxy, the
    leader waits until the previous slab's store has read the other buffer, all meet, and
    the leader stores the slab. The next slab is then written into that other buffer while
    this one is read. With 128-row warpgroups (``strips`` 2) the units are a slab of one
    strip: 64 rows of each warpgroup, a box each. An even unit count leaves buffer 0 free
    for a persistent block's next tile's first unit (the tile's last went out of buffer 1);
    after an odd one the leader waits for that last store's read and the consumers meet
    before the next tile's first write."""
    w = ctx.w
    box = Box.of(op)
    units = box.slabs * box.strips
    unit_of = register_units(op.operands[-1].type.layout, box.inner, box.slabs, box.strips)
    leader = thread_is(ctx, None, 0)
    first_chunk = ctx.active is None or ctx.active.start == 0
    if first_chunk and units % op.attrs["staging_buffers"] \
            and ctx.kernel.schedule.roles.persistent:
        w.emit(f"@{leader} {READ_WAIT} 0;")
        w.emit(_consumers_meet(ctx))
    staging = ctx.int_op("add.s32", ctx.smem_base(), ctx.smem.of(op).offset)
    saved = ctx.active
    for unit, indices in itertools.groupby(ctx.indices(len(unit_of)), key=unit_of.__getitem__):
        indices = list(indices)
        ctx.active = range(indices[0], indices[-1] + 1)
        _write_staging(ctx, op, staging)
        ctx.active = saved
        if indices[-1] + 1 < len(unit_of) and unit_of[indices[-1] + 1] == unit:
            continue  # the unit's other registers come in a later chunk
        w.emit("fence.proxy.async.shared::cta;")
        w.emit(f"@{leader} {READ_WAIT} 0;")
        w.emit(_consumers_meet(ctx))
        _issue_boxes(ctx, op, leader, staging, [unit])
    if ctx.active is None or ctx.active.stop >= len(unit_of):
        _last_store_read(ctx, leader)


def store_rows(ctx: Context, op: Op) -> None:
    """A ``tile.store {via = rows}``: C's rows are not 16-byte aligned (TMA cannot address
    them), so the consumers stage the tile as for TMA (:func:`_stage_registers`), meet, and
    copy it out themselves a row at a time: warp w takes rows w, w + W, ... (W consumer
    warps), lane l columns l and l + 32 of each 64-column slab, so each ``st.global.b16``
    writes 64 contiguous bytes of one row. The accumulator layout's direct stores write 8
    rows per instruction, 2 or 4 bytes each: at a shallow K (8x4095x4097x128) those partial
    sectors, not the products, set the kernel's time. Rows past M end the warp's loop,
    columns past N are masked."""
    staging = _stage_registers(ctx, op)
    if staging is None:
        return
    value = op.operands[-1]
    eb = value.type.dtype.bytes
    rows, _ = value.type.shape
    box = Box.of(op)
    lanes: dict[str, str] = {}

    def setup(lane: str, warp: str) -> None:
        # Lane l's column in a half slab is chunk l / 8 (the second half's chunk + 4, i.e.
        # XOR 4), element l % 8; the chunk XORs the row modulo 8 (TMA's swizzle).
        lanes["chunk"] = ctx.int_op("shl.b32", ctx.int_op("shr.u32", lane, 3), 4)
        lanes["low"] = ctx.int_op("shl.b32", ctx.int_op("and.b32", lane, 7),
                                  eb.bit_length() - 1)

    def row(r: str) -> list[str]:
        row_bits = ctx.int_op("shl.b32", ctx.int_op("and.b32", r, 7), 4)
        swizzled = ctx.int_op("xor.b32", lanes["chunk"], row_bits)
        within = ctx.int_op("or.b32", swizzled, lanes["low"])
        row_start = ctx.mad(r, box.inner * eb, staging)
        first = ctx.int_op("add.s32", row_start, within)
        second = ctx.int_op("add.s32", row_start, ctx.int_op("xor.b32", within, 4 << 4))
        slab_bytes = rows * box.inner * eb
        return [f"{second if half else first}+{slab * slab_bytes}"
                for slab, half in (divmod(part, 2) for part in range(box.slabs * 2))]

    copy_rows_out(ctx, op, ctx.kernel.schedule.roles.tile_threads // 32,
                  _consumers_meet(ctx), StagedRows(
                      parts=box.slabs * 2, setup=setup, row=row, advance=lambda: None,
                      label="rows"))
