"""Our PTX backend: lowered tile IR -> PTX text, one emitter per op name.

``render(kernel, options)`` returns the PTX and the launch facts (threads, shared bytes,
parameter list). The op table :data:`EMITTERS` is also the capability list: an op missing
from it is reported by name, never silently skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from tilec.families import products
from tilec.families.tma import TURN_BARRIER
from tilec.families.tma_boxes import block_warpgroup
from tilec.ir.core import Block, Kernel, Op
from tilec.ir.types import F32, I32, PRED, ScalarType, TileType
from tilec.options import Options

from . import compute, copies, epilogue, split, tile_order
from .abi import (PROGRAM_ROLES, AbiParam, BlobParam, PointerParam, bind_program_params,
                  folded_axes, printable, ptx_identifier)
from .grid import cluster_tile, cluster_units, program_ids
from .signature import kernel_abi
from .context import Context, TensorRegs, flatten
from .writer import REG_CLASSES, f32_literal, register_class


@dataclass(frozen=True)
class Rendered:
    ptx: str
    entry: str
    threads: int
    smem_bytes: int
    abi: tuple[AbiParam, ...]


# -- scalars: PTX ISA 9.7.1 (integer arithmetic), 9.7.3 (floating point), 9.7.6 (setp) ----
INT_BINARY = {"arith.add": "add.s32", "arith.sub": "sub.s32", "arith.mul": "mul.lo.s32",
              "arith.floordiv": "div.s32", "arith.mod": "rem.s32", "arith.min": "min.s32",
              "arith.max": "max.s32"}
# By a positive constant: a shift or a multiply-high (backend/divide.py), never div/rem.
CONSTANT_DIVISION = {"arith.floordiv": Context.div_const, "arith.mod": Context.mod_const}
# The scalar binary ops (both backends' tables): integer by INT_BINARY (cdiv and floor
# division by a constant in their own way), f32 by FLOAT_BINARY.
SCALAR_BINARY = ("arith.add", "arith.sub", "arith.mul", "arith.div", "arith.floordiv",
                 "arith.cdiv", "arith.mod", "arith.min", "arith.max")
FLOAT_BINARY = {"arith.add": "add.f32", "arith.sub": "sub.f32", "arith.mul": "mul.f32",
                "arith.div": "div.rn.f32", "arith.min": "min.f32", "arith.max": "max.f32"}


def _constant(ctx: Context, op: Op) -> None:
    value = op.attrs["value"]
    rtype = op.result.type
    if rtype.dtype == I32:
        ctx.constants[op.result] = int(value)
        reg = ctx.w.reg("b32")
        ctx.w.emit(f"mov.u32 {reg}, {int(value)};")
    elif rtype.dtype == PRED:
        reg = ctx.w.reg("pred")
        ctx.w.emit(f"setp.ne.u32 {reg}, {int(bool(value))}, 0;")
    else:
        reg = ctx.w.reg("f32")
        ctx.w.emit(f"mov.f32 {reg}, {f32_literal(value)};")
    ctx.bind(op.result, reg)


def _scalar_binary(ctx: Context, op: Op) -> None:
    a, b = op.operands
    is_int = op.result.type.dtype == I32
    divisor = ctx.const(b) if is_int else None
    if op.name == "arith.cdiv":
        bias = ctx.int_op("add.s32", ctx.operand(a), ctx.operand(b))
        bias = ctx.int_op("sub.s32", bias, 1)
        ctx.bind(op.result, ctx.int_op("div.s32", bias, ctx.operand(b)) if divisor is None
                 else ctx.div_const(bias, divisor))
        return
    if op.name in CONSTANT_DIVISION and isinstance(divisor, int) and divisor > 0:
        ctx.bind(op.result, CONSTANT_DIVISION[op.name](ctx, ctx.get(a), divisor))
        return
    table = INT_BINARY if is_int else FLOAT_BINARY
    reg = ctx.w.reg("b32" if is_int else "f32")
    ctx.w.emit(f"{table[op.name]} {reg}, {ctx.get(a)}, {ctx.operand(b)};")
    ctx.bind(op.result, reg)


def _wrap_inc(ctx: Context, op: Op) -> None:
    value = ctx.int_op("add.s32", ctx.get(op.operands[0]), 1)
    wrapped = ctx.w.reg("pred")
    ctx.w.emit(f"setp.eq.s32 {wrapped}, {value}, {op.attrs['modulus']};")
    reg = ctx.w.reg("b32")
    ctx.w.emit(f"selp.b32 {reg}, 0, {value}, {wrapped};")
    ctx.bind(op.result, reg)


def _select(ctx: Context, op: Op) -> None:
    flag, a, b = op.operands
    reg = ctx.w.reg("b32")
    ctx.w.emit(f"selp.b32 {reg}, {ctx.operand(a)}, {ctx.operand(b)}, {ctx.get(flag)};")
    ctx.bind(op.result, reg)


def _compare(ctx: Context, op: Op) -> None:
    reg = ctx.w.reg("pred")
    a, b = op.operands
    ctx.w.emit(f"setp.lt.s32 {reg}, {ctx.get(a)}, {ctx.operand(b)};")
    ctx.bind(op.result, reg)


# -- the grid: PTX ISA 10 (special registers %ctaid) ------------------------------------
def _grid(ctx: Context, op: Op) -> None:
    """Program ids from %ctaid (backend/grid.py: the axes both backends read)."""
    def ctaid(axis: str) -> str:
        reg = ctx.w.reg("b32")
        ctx.w.emit(f"mov.u32 {reg}, %ctaid.{axis};")
        return reg

    roles = ctx.kernel.schedule.roles
    clusters = (roles.cluster, roles.cluster_n) if roles is not None else (1, 1)
    for result, reg in zip(op.results, program_ids(ctx, op, ctaid, *clusters)):
        ctx.bind(result, reg)


def _k_steps(ctx: Context, bounds) -> str:
    """The K steps of a loop over [lb, ub) by step (its operands ``bounds``), at least 0:
    what every tile of a persistent kernel runs."""
    lb, ub, step = (ctx.operand(v) for v in bounds)
    span = ctx.int_op("add.s32", ctx.int_op("sub.s32", ub, lb), ctx.int_op("sub.s32", step, 1))
    steps = (ctx.int_op("div.s32", span, step) if ctx.const(bounds[2]) is None
             else ctx.div_const(span, ctx.const(bounds[2])))
    return ctx.int_op("max.s32", steps, 0)


def _tile_loop(ctx: Context, ops: list[Op], emit_ops, tail: Sequence[Op] = (),
               pingpong: bool = False) -> None:
    """A persistent kernel's loop over the output tiles for one role: ``emit_ops(ctx, ops)``
    for each tile (``ops``: what it runs per tile, holding its K loop): tiles ``%ctaid.x``,
    then every ``%nctaid.x``-th, each bound to the grid's (m, n) in grouped order (a
    batched grid's tile t to batch t / (tiles a batch), then that batch's tiles), and the
    ring iterations of the earlier tiles carried as ``ws.ring_base`` (so stages and phases go
    on round the ring). In a cluster the loop numbers clusters of tiles instead (cluster
    ``%ctaid.x / blocks``, then every ``%nctaid.x / blocks``-th), and each block takes the
    cluster's tile of its rank: the cluster walks the same tiles and ring iterations, which
    the tiles its blocks multicast to each other need. ``tail`` runs once after the last tile, with
    ``ws.ring_base`` the last tile's (so ``ring_base + K steps`` is where the ring ended).

    ``pingpong`` (the consumers of a pingpong kernel): warpgroup w takes the block's tiles
    w, w + 2, ... of the sequence the producer loads, so its first tile is one block stride
    further for w = 1, its stride and ring step twice the block's, its first ring iteration
    w tiles' K steps in; ``ctx.turn`` holds the hand-over's registers for the tile
    (ws.turn_wait / ws.turn_pass): it waits for its turn but on the block's first tile, and
    passes it on where the block has a next tile."""
    w = ctx.w
    gm, tiles, batch = _tile_count(ctx)
    if ctx.kernel.schedule.roles.stream_k:
        _stream_k_loop(ctx, ops, emit_ops, tail, tiles, gm, batch)
        return
    k_loop = next(op for block_op in ops for op in block_op.walk() if op.name == "scf.for")
    trips = _k_steps(ctx, k_loop.operands[:3])
    tile, ring, stride, rank = _first_tile(ctx)
    if pingpong:
        block_stride, stride = stride, ctx.int_op("shl.b32", stride, 1)
        warpgroup = block_warpgroup(ctx)
        w.emit(f"mad.lo.s32 {tile}, {warpgroup}, {block_stride}, {tile};")
        w.emit(f"mul.lo.s32 {ring}, {warpgroup}, {trips};")
    head, done = w.label("tile"), w.label("tiles_done")
    finished = w.reg("pred")
    w.raw(f"{head}:")
    w.emit(f"setp.ge.s32 {finished}, {tile}, {tiles};")
    w.emit(f"@{finished} bra.uni {done};")
    saved_turn = ctx.turn
    if pingpong:
        ctx.turn = _pingpong_turn(ctx, tile, block_stride, tiles, warpgroup)
    _bind_tile(ctx, tile, gm, batch, rank)
    saved, ctx.ring_base = ctx.ring_base, ring
    saved_hooks, ctx.after_tiles = ctx.after_tiles, []
    emit_ops(ctx, ops)
    ctx.ring_base, ctx.turn = saved, saved_turn
    if pingpong:
        w.emit(f"mad.lo.s32 {ring}, {trips}, 2, {ring};")
    else:
        w.emit(f"add.s32 {ring}, {ring}, {trips};")
    w.emit(f"add.s32 {tile}, {tile}, {stride};")
    w.emit(f"bra.uni {head};")
    w.raw(f"{done}:")
    for hook in ctx.after_tiles:
        hook()
    ctx.after_tiles = saved_hooks
    if tail:
        # Every tile runs the same K steps: the last one began at ring - trips (or, with no
        # tile at all, ring_base + trips = 0: nothing ran, and nothing is waited for).
        ctx.ring_base = ctx.int_op("sub.s32", ring, trips)
        emit_ops(ctx, list(tail))
        ctx.ring_base = saved


def _tile_count(ctx: Context) -> tuple[str, str, Optional[int]]:
    """The grid's M tiles (in a cluster, its clusters along M), all its tiles (clusters),
    and its batch axis (the outermost part of the tile index: each batch's tiles in grouped
    order, so consecutive tiles share the batch's matrices in L2) or None."""
    grid = ctx.grid_op
    first, second = folded_axes(grid)
    roles = ctx.kernel.schedule.roles
    gm, gn = cluster_units(ctx, ctx.get(grid.operands[first]), ctx.get(grid.operands[second]),
                           roles.cluster, roles.cluster_n)
    batch = tile_order.batch_axis(grid)
    tiles = ctx.int_op("mul.lo.s32", gm, gn)
    if batch is not None:
        tiles = ctx.int_op("mul.lo.s32", tiles, ctx.get(grid.operands[batch]))
    return gm, tiles, batch


def _first_tile(ctx: Context) -> tuple[str, str, str, Optional[str]]:
    """The block's first tile, its ring count (0) and its stride over the tiles: the
    block's id and the grid's, or in a cluster the cluster's and the clusters', with the
    block's rank in its cluster (else None)."""
    w = ctx.w
    blocks_per_cluster = ctx.kernel.schedule.roles.cluster_blocks
    tile, ring, stride = w.reg("b32"), w.reg("b32"), w.reg("b32")
    rank = None
    if blocks_per_cluster > 1:
        block, blocks = w.reg("b32"), w.reg("b32")
        w.emit(f"mov.u32 {block}, %ctaid.x;")
        w.emit(f"mov.u32 {blocks}, %nctaid.x;")
        rank = ctx.mod_const(block, blocks_per_cluster, nonnegative=True)
        w.emit(f"mov.u32 {tile}, "
               f"{ctx.div_const(block, blocks_per_cluster, nonnegative=True)};")
        w.emit(f"mov.u32 {stride}, "
               f"{ctx.div_const(blocks, blocks_per_cluster, nonnegative=True)};")
    else:
        w.emit(f"mov.u32 {tile}, %ctaid.x;")
        w.emit(f"mov.u32 {stride}, %nctaid.x;")
    w.emit(f"mov.u32 {ring}, 0;")
    return tile, ring, stride, rank


def _pingpong_turn(ctx: Context, tile: str, block_stride: str, tiles: str,
                   warpgroup: str) -> dict:
    """A pingpong warpgroup's hand-over registers for ``tile``: it waits for its turn but
    on the block's first tile, and passes it on where the block has a next tile."""
    w = ctx.w
    waits, passes = w.reg("pred"), w.reg("pred")
    w.emit(f"setp.ge.s32 {waits}, {tile}, {block_stride};")
    following = ctx.int_op("add.s32", tile, block_stride)
    w.emit(f"setp.lt.s32 {passes}, {following}, {tiles};")
    return dict(waits=waits, passes=passes,
                wait_id=ctx.int_op("add.s32", warpgroup, TURN_BARRIER),
                pass_id=ctx.int_op("sub.s32", TURN_BARRIER + 1, warpgroup))


def _bind_tile(ctx: Context, tile: str, gm: str, batch: Optional[int],
               rank: Optional[str] = None) -> None:
    """Bind the grid's ids to linear tile ``tile`` (:mod:`.tile_order`; ``gm``: the M
    tiles, or in a cluster the clusters along M, of whose tiles the block takes that of its
    ``rank``; ``batch``: the grid's batch axis, or None, as the tile count took it)."""
    grid = ctx.grid_op
    first, second = folded_axes(grid)
    group = tile_order.group_rows(ctx.kernel)
    batch_id, pid_m, pid_n = tile_order.coords(ctx, tile, gm, group, batched=batch is not None)
    if batch is not None:
        ctx.bind(grid.results[batch], batch_id)
    if rank is not None:
        roles = ctx.kernel.schedule.roles
        pid_m, pid_n = cluster_tile(ctx, pid_m, pid_n, rank, roles.cluster, roles.cluster_n)
    ctx.bind(grid.results[first], pid_m)
    ctx.bind(grid.results[second], pid_n)


def _stream_k_loop(ctx: Context, ops: list[Op], emit_ops, tail: Sequence[Op], tiles: str,
                   gm: str, batch: Optional[int]) -> None:
    """A stream-K kernel's loop over this block's units (tilec/families/stream_k.py, whose
    :func:`~tilec.families.stream_k.units` is this schedule in Python): whole tiles
    ``%ctaid.x + u * %nctaid.x`` for the first ``dp_units``, then the block's even share of
    the last waves' (tile, K step) iterations, one unit a tile it touches. Both roles walk
    the same units; the ring goes on by each unit's K steps (``ws.ring_base``), and
    ``ctx.stream_k`` holds the unit's registers for ws.k_begin / ws.k_end / ws.sk_fixup
    (``next``: the label after the unit, where a later part, stored, goes). ``batch``: the
    grid's batch axis or None, as ``tiles`` counts it."""
    from tilec.families.stream_k import K_END, SHARED_WAVES
    if tail:
        raise NotImplementedError("a stream-K tile loop has no ops after its last unit "
                                  "(cluster kernels' waits)")
    w = ctx.w
    bounds = next(op for block_op in ops for op in block_op.walk() if op.name == K_END)
    steps = _k_steps(ctx, bounds.operands)
    block, blocks = w.reg("b32"), w.reg("b32")
    w.emit(f"mov.u32 {block}, %ctaid.x;")
    w.emit(f"mov.u32 {blocks}, %nctaid.x;")
    # Data-parallel units: every tile where the blocks divide them (or there are no K
    # steps), else the whole waves but the last SHARED_WAVES - 1.
    waves = ctx.int_op("div.u32", tiles, blocks)
    partial = ctx.int_op("rem.u32", tiles, blocks)
    even = w.reg("pred")
    w.emit(f"setp.eq.u32 {even}, {partial}, 0;")
    w.emit(f"setp.eq.or.s32 {even}, {steps}, 0, {even};")
    whole_waves = ctx.int_op("add.s32", waves, 1)
    w.emit(f"selp.b32 {whole_waves}, {waves}, {whole_waves}, {even};")
    kept = waves
    if SHARED_WAVES > 1:
        kept = ctx.int_op("max.s32", ctx.int_op("sub.s32", waves, SHARED_WAVES - 1), 0)
    dp_units = w.reg("b32")
    w.emit(f"selp.b32 {dp_units}, {whole_waves}, {kept}, {even};")
    dp_tiles = ctx.int_op("min.s32", ctx.int_op("mul.lo.s32", dp_units, blocks), tiles)
    work = ctx.int_op("mul.lo.s32", ctx.int_op("sub.s32", tiles, dp_tiles), steps)
    q = ctx.int_op("div.u32", work, blocks)
    r = ctx.int_op("rem.u32", work, blocks)
    it, unit, ring = w.reg("b32"), w.reg("b32"), w.reg("b32")
    w.emit(f"mad.lo.s32 {it}, {block}, {q}, {ctx.int_op('min.s32', block, r)};")
    end = ctx.int_op("add.s32", it, q)
    extra = w.reg("pred")
    w.emit(f"setp.lt.s32 {extra}, {block}, {r};")
    w.emit(f"@{extra} add.s32 {end}, {end}, 1;")
    divisor = ctx.int_op("max.s32", steps, 1)
    w.emit(f"mov.u32 {unit}, 0;")
    w.emit(f"mov.u32 {ring}, 0;")
    head, done, after = w.label("unit"), w.label("units_done"), w.label("unit_next")
    w.raw(f"{head}:")
    data_parallel, finished = w.reg("pred"), w.reg("pred")
    w.emit(f"setp.lt.s32 {data_parallel}, {unit}, {dp_units};")
    dp_tile = ctx.mad(unit, blocks, block)
    tile_rel = ctx.int_op("div.u32", it, divisor)
    k0_shared = ctx.int_op("sub.s32", it, ctx.int_op("mul.lo.s32", tile_rel, steps))
    k1_shared = ctx.int_op("min.s32", ctx.int_op("add.s32", k0_shared,
                                                 ctx.int_op("sub.s32", end, it)), steps)
    tile, k0, k1 = w.reg("b32"), w.reg("b32"), w.reg("b32")
    w.emit(f"selp.b32 {tile}, {dp_tile}, {ctx.int_op('add.s32', dp_tiles, tile_rel)}, "
           f"{data_parallel};")
    w.emit(f"selp.b32 {k0}, 0, {k0_shared}, {data_parallel};")
    w.emit(f"selp.b32 {k1}, {steps}, {k1_shared}, {data_parallel};")
    w.emit(f"setp.ge.s32 {finished}, {it}, {end};")
    w.emit(f"@{data_parallel} setp.ge.s32 {finished}, {dp_tile}, {tiles};")
    w.emit(f"@{finished} bra.uni {done};")
    _bind_tile(ctx, tile, gm, batch)
    saved, ctx.ring_base = ctx.ring_base, ring
    saved_hooks, ctx.after_tiles = ctx.after_tiles, []
    ctx.stream_k = dict(k0=k0, k1=k1, steps=steps, block=block, q=q, r=r,
                        tile_rel=tile_rel, next=after)
    emit_ops(ctx, ops)
    ctx.stream_k, ctx.ring_base = None, saved
    w.raw(f"{after}:")
    trips = ctx.int_op("sub.s32", k1, k0)
    w.emit(f"add.s32 {ring}, {ring}, {trips};")
    w.emit(f"@!{data_parallel} add.s32 {it}, {it}, {trips};")
    w.emit(f"add.s32 {unit}, {unit}, 1;")
    w.emit(f"bra.uni {head};")
    w.raw(f"{done}:")
    for hook in ctx.after_tiles:
        hook()
    ctx.after_tiles = saved_hooks


# -- structured control flow: PTX ISA 9.7.12 (bra) --------------------------------------
def _move(ctx: Context, dst, src) -> None:
    if isinstance(dst, list):
        for d, s in zip(dst, src):
            _move(ctx, d, s)
        return
    if dst == src:
        return
    ctx.w.emit(f"mov{REG_CLASSES[register_class(dst)][1]} {dst}, {src};")


def _fresh_like(ctx: Context, regs):
    if isinstance(regs, list):
        return [_fresh_like(ctx, r) for r in regs]
    return ctx.w.reg(register_class(regs))


def _for(ctx: Context, op: Op) -> None:
    lb, ub, step, *inits = op.operands
    body = op.regions[0]
    iv = ctx.w.reg("b32")
    ctx.w.emit(f"mov.u32 {iv}, {ctx.operand(lb)};")
    carried = []
    for init, arg in zip(inits, body.args[1:]):
        regs = _fresh_like(ctx, ctx.get(init))
        _move(ctx, regs, ctx.get(init))
        ctx.bind(arg, regs)
        carried.append(regs)
    ctx.bind(body.args[0], iv)
    head, done = ctx.w.label("loop"), ctx.w.label("done")
    exit_pred = ctx.w.reg("pred")
    ctx.w.raw(f"{head}:")
    ctx.w.emit(f"setp.ge.s32 {exit_pred}, {iv}, {ctx.operand(ub)};")
    ctx.w.emit(f"@{exit_pred} bra.uni {done};")
    emit_block(ctx, body.ops[:-1])
    yielded = [ctx.get(v) for v in body.ops[-1].operands]
    _parallel_copy(ctx, flatten(carried), flatten(yielded))
    ctx.w.emit(f"add.s32 {iv}, {iv}, {ctx.operand(step)};")
    ctx.w.emit(f"bra.uni {head};")
    ctx.w.raw(f"{done}:")
    for result, regs in zip(op.results, carried):
        ctx.bind(result, regs)


def _parallel_copy(ctx: Context, dsts: list[str], srcs: list[str]) -> None:
    """``dsts = srcs`` all at once (a loop's carried registers from its yield): through
    temporaries where a source is also a destination. A register carried unchanged (an
    accumulator its product updates in place) is not copied at all; through temporaries,
    each such register cost two moves a K step in the PTX, which ptxas coalesced away."""
    pairs = [(d, s) for d, s in zip(dsts, srcs) if d != s]
    written = {d for d, _ in pairs}
    if any(s in written for _, s in pairs):
        temps = [_fresh_like(ctx, s) for _, s in pairs]
        for t, (_, s) in zip(temps, pairs):
            _move(ctx, t, s)
        pairs = [(d, t) for (d, _), t in zip(pairs, temps)]
    for d, s in pairs:
        _move(ctx, d, s)


def _no_code(ctx: Context, op: Op) -> None:
    """Ops that only move meaning (views) bind their result and emit nothing."""
    if op.name == "tensor.transpose":
        ctx.bind(op.result, ctx.get(op.operands[0]).transposed())


def _batch_view(ctx: Context, op: Op) -> None:
    """One matrix of a 3-D tensor: the base address moved by ``b * stride0`` elements (64-bit:
    the batches of a large tensor span more than 2**31 bytes)."""
    tensor = ctx.get(op.operands[0])
    offset = ctx.wide(ctx.operand(op.operands[1]), tensor.strides[0])
    ptr = ctx.w.reg("b64")
    ctx.w.emit(f"mad.lo.s64 {ptr}, {offset}, {tensor.elem_bytes}, {tensor.ptr};")
    ctx.bind(op.result, TensorRegs(ptr, tensor.strides[1:], tensor.dims[1:], tensor.elem_bytes))


EMITTERS: dict[str, Callable[[Context, Op], None]] = {
    "arith.constant": _constant,
    **{name: _scalar_binary for name in SCALAR_BINARY},
    "arith.lt": _compare,
    "arith.wrap_inc": _wrap_inc,
    "arith.select": _select,
    "tile.grid": _grid,
    "scf.for": _for,
    "tensor.transpose": _no_code,
    "tensor.batch": _batch_view,
    **copies.EMITTERS,
    **products.EMITTERS,  # every product family's fragment loads and products
    **split.EMITTERS,
    **epilogue.EMITTERS,
    **compute.EMITTERS,
}


# Ops the epilogue emits register chunk by register chunk; everything else in the epilogue
# (index arithmetic, views, the final wait) is emitted once, in the first chunk.
CHUNKED = {"frag.load", "tile.store", "tile.cast", "tile.full", "tile.splat", "tile.where",
           *compute.F32_BINARY, *compute.F32_UNARY}
# Registers per chunk: two mma tiles. The epilogue then holds the accumulators plus a few
# loaded values, instead of a second full tile of C, so fused epilogues do not spill.
EPILOGUE_CHUNK = 8


def _emit_body(ctx: Context, ops: list[Op]) -> None:
    """The kernel body: everything up to the last K loop as it is, then the epilogue in
    register chunks when it is made of elementwise work on the accumulator layout; a
    persistent kernel's roles each in a loop over the tiles."""
    roles = ctx.kernel.schedule.roles
    if roles is not None and roles.persistent:
        _emit_persistent(ctx, ops)
        return
    _emit_chunked(ctx, ops)


def _emit_persistent(ctx: Context, ops: list[Op]) -> None:
    """Sizes, shared buffers and barriers once; then the producer's region and the
    consumers' accumulator, K loop and epilogue, each in a loop over this block's tiles
    (:func:`_tile_loop`). Only the accumulator's fill sits between the grid and the producer
    and depends on the tile."""
    grid_at = next(i for i, op in enumerate(ops) if op.name == "tile.grid")
    producer_at = next(i for i, op in enumerate(ops) if op.name == "ws.producer")
    emit_block(ctx, ops[:grid_at])
    ctx.grid_op = ops[grid_at]
    middle = ops[grid_at + 1:producer_at]
    per_tile = [op for op in middle if op.name == "tile.full"]
    ids = set(ctx.grid_op.results)
    once = [op for op in middle if op not in per_tile]
    if any(v in ids for op in once for v in op.operands):
        raise NotImplementedError("a persistent kernel computes nothing from the tile between "
                                  "the grid and the producer but the accumulator's fill")
    emit_block(ctx, once)
    emit_block(ctx, [ops[producer_at]])
    tail = per_tile + ops[producer_at + 1:]
    _tile_loop(ctx, tail, _emit_chunked, pingpong=ctx.kernel.schedule.roles.pingpong)


def epilogue_chunks(ops: list[Op], plan) -> tuple[list[Op], list[tuple[range, list[Op]]]]:
    """How a region's ops are emitted, as (head, chunks): the head (everything up to the
    last K loop, or split-K's meeting, which is one barrier for the whole tile) at once,
    then each chunk's ops with the distributed-tile registers it covers. The epilogue is
    chunked only when it is elementwise work on the accumulator layout; otherwise the
    head is every op and there are no chunks. Both backends emit this plan (the llvm
    backend's emit_body), so their epilogues issue loads of C next to their use."""
    loops = [i for i, op in enumerate(ops) if op.name == "scf.for"]
    if not loops or plan is None:
        return ops, []
    reduces = [i for i, op in enumerate(ops) if op.name in ("split.reduce", "ws.sk_fixup")]
    end = max([loops[-1], *reduces]) + 1
    head, tail = ops[:end], ops[end:]
    chunkable = all(op.name in CHUNKED or not op.regions and not any(
        isinstance(r.type, TileType) for r in op.results) for op in tail)
    if not chunkable:
        return ops, []
    registers = plan.warp_tile[0] * plan.warp_tile[1] // 32
    return head, [(range(start, start + EPILOGUE_CHUNK),
                   [op for op in tail if start == 0 or op.name in CHUNKED])
                  for start in range(0, registers, EPILOGUE_CHUNK)]


def emit_chunked(ctx, ops: list[Op], emit_block: Callable) -> None:
    """Emit ``ops`` by epilogue_chunks with ``emit_block`` (either backend's), setting
    ``ctx.active`` to each chunk's registers."""
    head, chunks = epilogue_chunks(ops, ctx.plan)
    emit_block(ctx, head)
    if not chunks:
        return
    for active, chunk in chunks:
        ctx.active = active
        emit_block(ctx, chunk)
    ctx.active = None


def _emit_chunked(ctx: Context, ops: list[Op]) -> None:
    emit_chunked(ctx, ops, emit_block)


def emit_block(ctx: Context, ops: list[Op]) -> None:
    for op in ops:
        if ctx.options.annotate:
            ctx.w.emit(f"// {_describe_source(ctx, op)}{op.name} [{op.origin or '?'}]")
        if op.loc is not None and ctx.options.line_info:
            ctx.w.emit(f".loc 1 {op.loc.line} {op.loc.col}")
        emitter = EMITTERS.get(op.name)
        if emitter is None:
            raise NotImplementedError(f"the PTX backend cannot emit '{op.name}' "
                                      f"(at {op.loc}); a pass must lower it first")
        emitter(ctx, op)


def _describe_source(ctx: Context, op: Op) -> str:
    """``line 12: `acc += ...` <- `` for an op with a location (the DSL line, trimmed)."""
    if op.loc is None:
        return ""
    lines = ctx.kernel.source_lines
    text = lines[op.loc.line - 1].strip() if 0 < op.loc.line <= len(lines) else ""
    return printable(f"line {op.loc.line}: `{text}` <- ", comment=True)


def _load_params(ctx: Context, abi: list[AbiParam]) -> None:
    w = ctx.w
    by_source: dict[str, dict] = {}
    for p in abi:
        if isinstance(p.type, BlobParam):
            # Passed by value and used in place: the family that added it takes its
            # address (cvta.param) where it needs it.
            reg = p.name
        elif isinstance(p.type, PointerParam):
            raw, reg = w.reg("b64"), w.reg("b64")
            w.emit(f"ld.param{p.type.ptx_type} {raw}, [{p.name}];")
            w.emit(f"cvta.to.global.u64 {reg}, {raw};")
        else:
            reg = w.reg(p.type.register_class)
            w.emit(f"ld.param{p.type.ptx_type} {reg}, [{p.name}];")
        if p.role not in PROGRAM_ROLES:
            ctx.workspace[p.source] = reg
        by_source.setdefault(p.source, {})[(p.role, p.dim)] = reg
    bind_program_params(ctx, by_source, TensorRegs)


# The module-scope names beside the entry: a kernel called like one is renamed.
SHARED_MEMORY = "tilec_smem"
MODULE_NAMES = frozenset({SHARED_MEMORY})


def ptx_header(options: Options, needs: Optional[str] = None) -> list[str]:
    """The module header every PTX text we write starts with: ISA version (the target's, or
    ``needs``, the version the kernel's instructions need, where higher), target and 64-bit
    addressing (PTX ISA, module directives)."""
    version = options.ptx_version
    if needs is not None and _version(needs) > _version(version):
        version = needs
    return [f".version {version}", f".target {options.arch}", ".address_size 64"]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _family_ptx_version(kernel: Kernel) -> Optional[str]:
    """The PTX ISA version the kernel's product family needs, if it names one."""
    plan = kernel.schedule.tiling
    return products.family_of(plan).ptx_version if plan is not None else None


def render(kernel: Kernel, options: Options) -> Rendered:
    """PTX for a kernel that has been through the pipeline."""
    ctx = Context(kernel, options)
    ctx.emit_block = emit_block
    ctx.tile_loop = lambda ops, emit_ops, tail=(): _tile_loop(ctx, ops, emit_ops, tail)
    threads = kernel.schedule.threads
    abi = kernel_abi(kernel)
    _load_params(ctx, abi)
    params_text = ctx.w.body
    ctx.w.body = []
    _emit_body(ctx, kernel.body.ops)

    # The source path and the kernel's name are the user's: ptxas takes printable ASCII only.
    source, entry = printable(kernel.source_file), ptx_identifier(kernel.name, MODULE_NAMES)
    comment = printable(f"Generated by tilec from {kernel.source_file}: kernel '{kernel.name}'",
                        comment=True)
    lines = [f"// {comment}",
             *ptx_header(options, _family_ptx_version(kernel)), ""]
    if options.line_info:
        lines.append(f'.file 1 "{source}"')
    if ctx.smem.total:
        lines.append(f".extern .shared .align {ctx.smem.ring_align} .b8 {SHARED_MEMORY}[];")
    lines.append("")
    decls = [f"\t{p.declaration()}" for p in abi]
    lines.append(f".visible .entry {entry}(")
    lines.append(",\n".join(decls))
    # setmaxnreg needs the register count at entry, which .minnctapersm with .maxntid fixes.
    roles = kernel.schedule.roles
    bounds = f".maxntid {threads}, 1, 1" + (
        f"\n.minnctapersm {roles.blocks_per_sm}" if roles is not None else "")
    lines.append(f")\n{bounds}\n{{")
    lines.extend(ctx.w.declarations())
    lines.append("")
    lines.extend(params_text)
    lines.extend(ctx.w.setup)
    lines.extend(ctx.w.body)
    lines.append("\tret;")
    lines.append("}")
    return Rendered("\n".join(lines) + "\n", entry, threads, ctx.smem.total, tuple(abi))


__all__ = ["render", "ptx_header", "Rendered", "EMITTERS", "emit_block", "f32_literal", "Block",
           "ScalarType", "F32"]
