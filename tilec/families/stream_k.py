"""Stream-K for persistent warp-specialized kernels (``options.stream_k``, RolesPlan.stream_k).

A persistent grid of P blocks over T output tiles of S K steps each loses the part of a wave
its last tiles leave idle: the most loaded block runs ceil(T / P) tiles, the average T / P.
Stream-K (CUTLASS's "DP + SK" hybrid) gives every block the same number of K steps, +-1:

- the first ``dp`` tiles are whole (data-parallel) units, dealt round the blocks as before
  (block b: tiles b, b + P, ...): ``dp = P * (T / P - (SHARED_WAVES - 1))`` (every whole
  wave but the last SHARED_WAVES - 1), or all T when P divides T (nothing to even out) or
  the tiles have no K steps;
- the other tiles' ``(T - dp) * S`` (tile, K step) iterations, in order (tile-major), are
  cut into P contiguous ranges, block b's from ``b * q + min(b, r)``, ``q + (b < r)`` long
  (``q, r = divmod(work, P)``); a range is walked as units of one tile each.

Unit ``(tile, k0, k1)`` runs K steps ``[k0, k1)`` of the tile (the K loops' bounds are
``ws.k_begin`` / ``ws.k_end``, which the backend's tile loop binds per unit, and the ring
goes on by ``k1 - k0``). A tile split over several blocks is *owned* by the block holding
its step 0; ``ws.sk_fixup`` (after the products' final wait):

- a block holding a later part (``k0 > 0``) stores its f32/i32 accumulators to its own
  workspace slot (one per block: only a block's first stream-K unit can start inside a tile,
  so it writes at most one part), makes them visible (``fence.acq_rel.gpu``, the consumers'
  barrier, then ``red.release.gpu`` on its flag), and skips the epilogue;
- the owner (``k0 == 0 < k1 < S``) adds the parts of blocks b + 1, b + 2, ... (those whose
  range starts inside the tile) in that order, so the sum is the same from run to run: for
  each, thread 0 spins on the block's flag (``ld.acquire.gpu``) and sets it back to 0 (so the
  next launch finds the workspace as it was made: no memset per launch), the consumers
  meet, and every thread loads its own registers (``ld.relaxed.gpu``: from L2);
- then the epilogue runs as for any tile.

Why it cannot deadlock: every block of the grid is resident at once (P is at most one block
per SM times blocks_per_sm, the occupancy the kernel is compiled for). An owner waits only
for parts that are the *first* stream-K unit of a block with a higher index; a block reaches
that unit after its data-parallel tiles, which wait on no other block, and stores its part
without waiting on anyone. So every awaited flag is set by a block that is running and waits
on nothing first. The owner's unit is its block's last (its range ends inside the tile), so
its waiting holds no ring stage another unit needs.

The CPU executor runs one whole tile per program (``ws.k_begin`` / ``ws.k_end`` are the K
loop's full range and ``ws.sk_fixup`` passes the sum through); :func:`units` is the schedule
as Python, which the tests check covers every (tile, K step) once and which the backend's
PTX computes (backend.ptx._stream_k_loop).
"""
from __future__ import annotations

from typing import Any

from tilec.backend.abi import WORKSPACE_SOURCES
from tilec.backend.split import PARTIAL_BYTES
from tilec.backend.context import Context
from tilec.ir.core import Op
from tilec.ir.ops import OpDef, require
from tilec.ir.types import F32, I32, TileType

K_BEGIN, K_END, FIXUP = "ws.k_begin", "ws.k_end", "ws.sk_fixup"
# The waves whose K steps the blocks share: the partial last wave and SHARED_WAVES - 1 whole
# ones before it. H100, 128x256x64 st3, one call against the same kernel without stream-K:
# 2 (CUTLASS's DP + SK default) ran 4096^3 at 0.68 of it, 8192^3 0.94-0.98 and
# 32x1024^3 0.89; 1 (now) 0.93, 0.99-1.00 and 0.93 (benchmarks/NOTES.md): stream-K is not
# chosen by tuned_config.
SHARED_WAVES = 1
# Each thread's registers in groups of VECTOR, group g of all threads contiguous: one
# st.global.v4 of a warp writes 512 contiguous bytes.
VECTOR = 4
# The workspace: split-K's two hidden parameters (backend/abi.py), here one part slot and one
# flag per block (tilec/launch/split_workspace.py).
SUMS = {F32: ("f32", "add.f32"), I32: ("s32", "add.s32")}


# -- the schedule, as the backend computes it --------------------------------------------
def data_parallel_tiles(tiles: int, steps: int, blocks: int) -> int:
    """The tiles dealt whole: all of them when the blocks divide them (or there are no K
    steps), else every wave but the last SHARED_WAVES (the partial one and whole ones
    before it)."""
    if steps == 0 or tiles % blocks == 0:
        return tiles
    return max(tiles // blocks - (SHARED_WAVES - 1), 0) * blocks


def units(tiles: int, steps: int, blocks: int) -> list[list[tuple[int, int, int]]]:
    """Each block's units ``(tile, k0, k1)``, in the order it runs them."""
    dp = data_parallel_tiles(tiles, steps, blocks)
    q, r = divmod((tiles - dp) * steps, blocks)
    out = []
    for b in range(blocks):
        mine = [(t, 0, steps) for t in range(b, dp, blocks)]
        it = b * q + min(b, r)
        end = it + q + (b < r)
        while it < end:
            tile, k0 = divmod(it, steps)
            k1 = min(steps, k0 + end - it)
            mine.append((dp + tile, k0, k1))
            it += k1 - k0
        out.append(mine)
    return out


def partial_holders(tile: int, tiles: int, steps: int, blocks: int, owner: int) -> list[int]:
    """The blocks whose parts the owner of a split ``tile`` adds, in the order it adds them
    (as ws.sk_fixup walks them: blocks after the owner whose range starts inside the tile)."""
    dp = data_parallel_tiles(tiles, steps, blocks)
    q, r = divmod((tiles - dp) * steps, blocks)
    end = (tile - dp + 1) * steps
    holders, j = [], owner + 1
    while j < blocks and j * q + min(j, r) < end:
        holders.append(j)
        j += 1
    return holders


# -- PTX ---------------------------------------------------------------------------------
def _unit(ctx: Context, op: Op) -> dict:
    unit = ctx.stream_k
    if unit is None:
        raise NotImplementedError(f"'{op.name}' (at {op.loc}) is bound by a persistent "
                                  "stream-K kernel's tile loop")
    return unit


def _k_begin(ctx: Context, op: Op) -> None:
    """The unit's first K element: ``lb + k0 * step``."""
    lb, step = op.operands
    unit = _unit(ctx, op)
    ctx.bind(op.result, ctx.mad(unit["k0"], ctx.operand(step), ctx.operand(lb)))


def _k_end(ctx: Context, op: Op) -> None:
    """The unit's end: ``min(lb + k1 * step, ub)`` (the tile's last step may be short)."""
    lb, ub, step = op.operands
    unit = _unit(ctx, op)
    end = ctx.mad(unit["k1"], ctx.operand(step), ctx.operand(lb))
    ctx.bind(op.result, ctx.int_op("min.s32", end, ctx.operand(ub)))


def _vector(regs: list[str]) -> str:
    return "{" + ", ".join(regs) + "}"


def _fixup(ctx: Context, op: Op) -> None:
    w = ctx.w
    unit = _unit(ctx, op)
    acc = ctx.get(op.operands[0])
    ptx_type, add = SUMS[op.operands[0].type.dtype]
    threads = ctx.kernel.schedule.roles.consumer_threads
    width = VECTOR if len(acc) % VECTOR == 0 else 1
    group_stride = threads * width * PARTIAL_BYTES
    slot_bytes = len(acc) * threads * PARTIAL_BYTES
    partials, flags = (ctx.workspace[source] for source in WORKSPACE_SOURCES)
    tid = ctx.tid()
    vec = f".v{width}" if width > 1 else ""
    leader = w.reg("pred")
    w.emit(f"setp.eq.u32 {leader}, {tid}, 0;")

    def slot(block: str) -> str:
        base = w.reg("b64")
        w.emit(f"mul.wide.u32 {base}, {block}, {slot_bytes};")
        w.emit(f"add.s64 {base}, {base}, {partials};")
        w.emit(f"mad.wide.u32 {base}, {tid}, {width * PARTIAL_BYTES}, {base};")
        return base

    def flag(block: str) -> str:
        address = w.reg("b64")
        w.emit(f"mad.wide.u32 {address}, {block}, 4, {flags};")
        return address

    # A later part: into this block's slot, released on its flag; no epilogue.
    not_later, whole = w.label("sk_owner"), w.label("sk_whole")
    later = w.reg("pred")
    w.emit(f"setp.eq.s32 {later}, {unit['k0']}, 0;")
    w.emit(f"@{later} bra.uni {not_later};")
    own = slot(unit["block"])
    for g in range(0, len(acc), width):
        w.emit(f"st.global{vec}.{ptx_type} [{own}+{g // width * group_stride}], "
               f"{_vector(acc[g:g + width]) if width > 1 else acc[g]};")
    w.emit("fence.acq_rel.gpu;")
    w.emit(f"bar.sync {ctx.accumulators_barrier()};")
    w.emit(f"@{leader} red.release.gpu.global.add.u32 [{flag(unit['block'])}], 1;")
    w.emit(f"bra.uni {unit['next']};")
    w.raw(f"{not_later}:")
    # The owner of a split tile: the later parts, block by block.
    split = w.reg("pred")
    w.emit(f"setp.ge.s32 {split}, {unit['k1']}, {unit['steps']};")
    w.emit(f"@{split} bra.uni {whole};")
    tile_end = ctx.mad(unit["tile_rel"], unit["steps"], unit["steps"])
    j = w.reg("b32")
    w.emit(f"add.s32 {j}, {unit['block']}, 1;")
    head, spin = w.label("sk_part"), w.label("sk_spin")
    w.raw(f"{head}:")
    start = ctx.int_op("add.s32", ctx.int_op("mul.lo.s32", j, unit["q"]),
                       ctx.int_op("min.s32", j, unit["r"]))
    beyond = w.reg("pred")
    w.emit(f"setp.ge.s32 {beyond}, {start}, {tile_end};")
    w.emit(f"@{beyond} bra.uni {whole};")
    address = flag(j)
    seen, waiting = w.reg("b32"), w.reg("pred")
    w.emit(f"@!{leader} bra {spin}_done;")
    w.raw(f"{spin}:")
    w.emit(f"ld.acquire.gpu.global.u32 {seen}, [{address}];")
    w.emit(f"setp.eq.u32 {waiting}, {seen}, 0;")
    w.emit(f"@{waiting} bra {spin};")
    w.emit(f"st.relaxed.gpu.global.u32 [{address}], 0;")
    w.raw(f"{spin}_done:")
    w.emit(f"bar.sync {ctx.accumulators_barrier()};")
    w.emit("fence.acq_rel.gpu;")
    source = slot(j)
    loaded = w.regs("f32" if ptx_type == "f32" else "b32", width)
    for g in range(0, len(acc), width):
        target = _vector(loaded) if width > 1 else loaded[0]
        w.emit(f"ld.relaxed.gpu.global{vec}.{ptx_type} {target}, "
               f"[{source}+{g // width * group_stride}];")
        for reg, part in zip(acc[g:g + width], loaded):
            w.emit(f"{add} {reg}, {reg}, {part};")
    w.emit(f"add.s32 {j}, {j}, 1;")
    w.emit(f"bra.uni {head};")
    w.raw(f"{whole}:")
    ctx.bind(op.result, acc)


EMITTERS = {K_BEGIN: _k_begin, K_END: _k_end, FIXUP: _fixup}


# -- the IR and the CPU ------------------------------------------------------------------
def _check_bounds(op: Op) -> None:
    require(all(v.type.dtype == I32 and not isinstance(v.type, TileType)
                for v in op.operands), f"{op.name} takes the K loop's i32 bounds and step")


def _check_fixup(op: Op) -> None:
    value = op.operands[0]
    require(isinstance(value.type, TileType) and value.type.dtype in SUMS,
            "ws.sk_fixup meets an f32 or i32 accumulator tile")
    require(op.result.type == value.type, "ws.sk_fixup's result is its accumulator's type")


def _execute_begin(state: Any, op: Op, operands: list[Any]) -> list[Any]:
    return [operands[0]]  # the CPU runs a program's whole tile: all of its K steps


def _execute_end(state: Any, op: Op, operands: list[Any]) -> list[Any]:
    return [operands[1]]


def _execute_fixup(state: Any, op: Op, operands: list[Any]) -> list[Any]:
    return [operands[0]]  # a whole tile's sum is the accumulator itself


OP_DEFS = (
    OpDef(K_BEGIN, "stream-K: the first K element of the unit the persistent tile loop runs "
          "(operands: the K loop's lb and step); lb on the CPU, which runs whole tiles", 2,
          1, check=_check_bounds, pure=True, fold=lambda operands, attrs, dtype: operands[0],
          evaluate=_execute_begin),
    OpDef(K_END, "stream-K: the end of the unit's K range (operands: lb, ub, step); ub on the "
          "CPU", 3, 1, check=_check_bounds, pure=True,
          fold=lambda operands, attrs, dtype: operands[1], evaluate=_execute_end),
    OpDef(FIXUP, "stream-K: a tile's parts meet: a later part is stored for the tile's "
          "owner, which skips its epilogue; the owner adds the later parts in block order; "
          "a whole tile passes through (as on the CPU)", 1, 1, check=_check_fixup,
          elementwise=True, evaluate=_execute_fixup),
)
