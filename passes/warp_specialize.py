"""Warp specialization: double buffering's pipeline for the TMA + mbarrier family
(``tilec/families/tma.py``), used by ``passes/double_buffer.py`` when the plan's product family
reads its operands through TMA (wgmma).

Requires: tiling's output (one-stage buffers filled by synchronous copies in the K loop, the
dot between two barriers) and a tiling plan of whole consumer warpgroups.

Produces, for ``stages = S``:
- buffers of S stages, and two rings of S mbarriers (``full``: one arrival, the producer's
  expect_tx, plus the TMA bytes; ``empty``: one arrival per consumer warpgroup), initialised
  before one CTA barrier;
- a ``ws.producer`` region holding its own K loop: wait for stage s to be empty, expect its
  bytes on ``full[s]``, and one ``tma.load`` per operand into stage s;
- the K loop itself for the consumers: wait for ``full[s]``, the dot on stage s; with a
  product family that can leave its products in flight (wgmma: ``in_flight = 1``), the
  arrival on ``empty`` hands back the previous stage, whose products the dot's wait has
  completed, and after the loop a ``wgmma.wait`` and the last stage's arrival; otherwise one
  arrival on ``empty[s]`` after the dot. No CTA barrier after the split (the producer
  warpgroup has exited);
- ``kernel.schedule.pipeline`` and ``kernel.schedule.roles``.

Iteration i uses stage ``i % S`` with phase parity ``(i / S) % 2``: each ring slot completes
one phase per trip round the ring. Both loops carry the stage and the parity (and the
consumers the stage before, which they hand back): the stage goes round with a wrapping
increment and the parity flips as it wraps, so no division runs per K step; the first
iteration's come from ``ws.ring_base`` once per tile. Before (tiling's loop body)::

    copy.global_to_shared %A, %i, %k, %vA {mode = sync}      (and B)
    gpu.barrier
    %d = tile.dot %vA, %vB, %acc
    gpu.barrier
After (S = 4)::

    %full = mbar.alloc {count = 1, role = full} : tile<i64,[4],smem>
    %empty = mbar.alloc {count = 2, role = empty} : tile<i64,[4],smem>
    gpu.barrier
    ws.producer {
      %s0, %p0 = (ws.ring_base % 4, ws.ring_base / 4 % 2)
      scf.for %k = ... iter_args(%s = %s0, %p = %p0) {
        %p_free = arith.sub 1, %p
        mbar.wait %empty, %s, %p_free
        mbar.arrive_expect_tx %full, %s {bytes = 49152}
        tma.load %A, %i, %k, %vA, %full, %s {box = [64, 128], coords = [1, 0], slabs = 1}
        tma.load %B, %k, %j, %vB, %full, %s {box = [64, 64], coords = [1, 0], slabs = 4}
        %s_next = arith.wrap_inc %s {modulus = 4}
        %p_next = arith.select (%s_next < 1), %p_free, %p
      }
    }
    %s0, %p0, %s_before0 = (the same, and (%s0 + 3) % 4)
    scf.for %k = ... iter_args(%acc, %s = %s0, %p = %p0, %s_before = %s_before0) {
      mbar.wait %full, %s, %p
      %d = tile.dot %vA, %vB, %acc {in_flight = 1}
      mbar.arrive %empty, %s_before, (%lb < %k)
      (%s_next, %p_next as the producer's; %s the next %s_before)
    }
    wgmma.wait {in_flight = 0}
    mbar.arrive %empty, %s_last, %ran          (%s_last from ws.ring_base and the trip count)

With ``cluster = 2`` (two blocks along M, launched as a thread-block cluster; 4 alike, in
quarters) the blocks share the operand whose tile does not move along M (B; A in the swapped
product, where A is the program's B): its ``tma.load`` is ``multicast`` (each block loads
1/cluster of every box's rows, whole 8-row swizzle atoms, into every block's stage,
completing on every block's full barrier), each ``mbar.arrive`` on ``empty`` is
``cluster``-wide (this block's barrier and each peer's: the empty count is multiplied by the
cluster), a ``cluster.sync`` follows the barriers' initialisation, and the producer ends with
one wait per stage for every block's consumers to hand it back (the peers arrive on this
block's barriers, which must outlive those arrivals). The pair takes consecutive tiles along the
grid's first axis but a batch's (the M tiles of ``for m, n in grid(...)``; backend/grid.py):
a grid where both operands' tiles move along that axis is refused at the last one's slice,
as is a grid that does not fold its (M, N) tiles into CUDA's x.

With ``cluster_n`` > 1 too (a cluster of ``cluster`` x ``cluster_n`` blocks, rank ``m +
cluster * n``) the blocks of one M row of the cluster share the other operand (A) as those
of one N column share B: both loads are ``multicast``, A's to the ``cluster_n`` blocks
``cluster`` ranks apart (``multicast_stride``), and each block's stage is filled by itself
and the other blocks of its row and column, so the ``empty`` count, and each arrival's
blocks, are ``cluster + cluster_n - 1`` (``mbar.arrive {cluster, cluster_n}``).

With ``consumers = "pingpong"`` (persistent only) the tile is one warpgroup's, and the
block has two consumer warpgroups taking its tiles in turn (backend.ptx._tile_loop): each
stage is handed back by the one warpgroup whose tile it holds (``empty`` counts one arrival,
times the cluster), and ``ws.turn_wait`` before the K loop and ``ws.turn_pass`` after it
(after the products' final wait) order the warpgroups' mainloops as the producer fills the
ring: a warpgroup skips the other's tiles' ring iterations, and waits on a stage's parity
only once every earlier iteration's load has been issued (so it is never a whole round
ahead of the barrier).

Iteration ``i`` of the ring counts the block's earlier tiles too (``ws.ring_base``: 0 unless
the kernel is persistent), so stages and phases go on across a persistent block's tiles.

With ``stream_k`` (persistent, cooperative, no cluster; tilec/families/stream_k.py) both K
loops run from ``ws.k_begin`` to ``ws.k_end`` (each role its own copies, which the tile loop
binds per unit of (tile, K steps)), and ``ws.sk_fixup`` after the products' final wait and
the last hand-back gives the epilogue the tile's whole sum.

A persistent batched program (``tensor.batch`` views of 3-D tensors) loops over batches x
tiles (``roles.batches``; the backend's tile loop binds the grid's batch id per tile): the
producer's region starts with its own copies of the views its loads read, and the views the
consumers read (C's) follow the producer, so both run per tile rather than once between the
grid and the producer.

A batched program in a cluster pairs M tiles within one batch: the pair's B tile is one
batch's (or, with a batch stride of 0, the one matrix's), so the multicast and the ring are
the 2-D kernel's. The tile loop (or, one tile a block, the grid) numbers pairs of M tiles a
batch, ``cdiv(M tiles, 2)``: with an odd count, the last pair's second block lies past M in
every batch; it loads its half of each B box for its peer, reads zeros for A (TMA's bounds
clip at the batch's own M) and stores nothing. Pairing across batches instead would have the
two blocks multicast B tiles of two batches.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tilec.families.products import family_of
from tilec.families.stream_k import FIXUP, K_BEGIN, K_END
from tilec.errors import TileConfigError, located
from tilec.families.tma import (ALLOC, ARRIVE, CLUSTER_SYNC, EXPECT, LOAD, PRODUCER, RING_BASE,
                                TURN_PASS, TURN_WAIT, WAIT, barrier_type, stage_fillers)
from tilec.families.tma_boxes import operand_tma_layout
from tilec.families.wgmma import ATOM_ROWS
from tilec.ir.core import (Block, Builder, Kernel, Op, Value, clone_op, computed_from,
                            find_grid, replace_uses)
from tilec.ir.schedule import WARPGROUP, OperandPlan, PipelinePlan, RolesPlan, TilingPlan
from tilec.ir.types import PRED, ScalarType, i32
from tilec.options import SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK, Options
from tilec.target.smem import BARRIER_BYTES

from .common import clone_slice, constant, crossed_axis, paired_axis

COPY = "copy.global_to_shared"


def _ring_slot(b: Builder, it: Value, stages: int) -> tuple[Value, Value]:
    """Stage ``it % S`` and phase parity ``(it / S) % 2`` of ring iteration ``it``."""
    stage = b.value("arith.mod", [it, constant(b, stages)], i32, "stage")
    rounds = b.value("arith.floordiv", [it, constant(b, stages)], i32, "round")
    parity = b.value("arith.mod", [rounds, constant(b, 2)], i32, "parity")
    return stage, parity


def _ring_start(b: Builder, stages: int) -> tuple[Value, Value]:
    """Stage and parity of the loop's first ring iteration, ``ws.ring_base`` (the block's
    earlier tiles' iterations: 0 unless the kernel is persistent): the only division, once
    per tile."""
    stage, parity = _ring_slot(b, b.value(RING_BASE, [], i32, "ring_base"), stages)
    stage.hint, parity.hint = "stage0", "parity0"
    return stage, parity


def _ring_step(b: Builder, stage: Value, parity: Value, flipped: Value, stages: int
               ) -> tuple[Value, Value]:
    """The next ring iteration's stage and parity from this one's: the stage goes round
    (``stage + 1``, 0 at ``S``) and the parity flips (to ``flipped``, ``1 - parity``) as it
    wraps. No division on the loop's path: ptxas kept ``it % S`` and ``(it / S) % 2`` of a
    persistent kernel on vector registers between the HGMMAs of every stage."""
    following = b.value("arith.wrap_inc", [stage], i32, "next_stage", modulus=stages)
    wrapped = b.value("arith.lt", [following, constant(b, 1)], ScalarType(PRED), "wrapped")
    return following, b.value("arith.select", [wrapped, flipped, parity], i32, "next_parity")


def _k_steps(b: Builder, loop: Op, step: int) -> Value:
    """The K loop's trip count, ``cdiv(ub - lb, step)``."""
    lb, ub = loop.operands[:2]
    return b.value("arith.cdiv", [b.value("arith.sub", [ub, lb], i32, "k_span"),
                                  constant(b, step)], i32, "k_steps")


def _box(operand: OperandPlan, share: Optional["_Share"] = None) -> dict:
    """The tma.load attributes of one operand: boxes one slab of its TMA layout wide (a
    swizzle span: :func:`~tilec.families.tma_boxes.tma_layout`) over the stored rows, the
    inner (contiguous) coordinate along the tile dim stored contiguously; with a ``share``,
    the blocks of a cluster that share the operand's tile (:func:`_cluster_shares`): each
    loads 1/``share.blocks`` of every box's rows into all of them."""
    layout = operand.layout
    inner = layout.slab
    attrs = {"tensor": operand.tensor, "box": [inner, layout.rows],
             "slabs": layout.slabs, "coords": [0, 1] if layout.transposed else [1, 0]}
    if share is not None:
        attrs["multicast"] = share.blocks
        if share.stride > 1:
            attrs["multicast_stride"] = share.stride
    return attrs


def _tma_operands(plan: TilingPlan, options: Options, pad: bool) -> tuple[OperandPlan, ...]:
    """The operands' plans with the layouts TMA writes them in (operand_tma_layout: the
    span tma_swizzle asks for, or its choice, padded slabs where ``pad`` allows)."""
    return tuple(dataclasses.replace(op_plan, layout=operand_tma_layout(
        op_plan.role, op_plan.layout, op_plan.stored_bytes(plan.elem_bytes),
        options.tma_swizzle, pad)) for op_plan in plan.operands)


def _stage_bytes(operands: Sequence[OperandPlan], plan: TilingPlan) -> int:
    """One stage of every operand, padded slabs stored (and loaded) whole."""
    return sum(o.layout.size * o.stored_bytes(plan.elem_bytes) for o in operands)


def _producer_tail(p: Builder, empty: Value, loop: Op, step: int, stages: int) -> None:
    """The producer's last waits, one per stage, for the consumers of both blocks of a
    cluster to hand every stage back: the peer block's consumers arrive on this block's
    empty barriers, and the block must not exit before they have (the block's shared
    memory, barriers included, goes with it)."""
    trips = _k_steps(p, loop, step)
    base = p.value(RING_BASE, [], i32, "ring_base")
    end = p.value("arith.add", [base, trips], i32, "ring_end")
    for j in range(stages):
        it = p.value("arith.add", [end, constant(p, j)], i32, "it_after")
        stage, parity = _ring_slot(p, it, stages)
        free = p.value("arith.sub", [constant(p, 1), parity], i32, "parity_free")
        p.op(WAIT, [empty, stage, free])


@dataclasses.dataclass(frozen=True)
class _Share:
    """The blocks of a cluster that share one operand's tile: ``blocks`` of them, whose
    cluster ranks are ``stride`` apart (1: along M, the blocks of one N column; the
    cluster's M extent: along N, the blocks of one M row)."""
    blocks: int
    stride: int

    @property
    def flag(self) -> str:
        """The option that makes this share."""
        return "cluster" if self.stride == 1 else "cluster_n"


def _still_along(kernel: Kernel, grid: Op, axis: int, copies: list[Op],
                 roles: list[str]) -> list[str]:
    """The operands whose tiles do not move along grid ``axis``."""
    axis_value = grid.results[axis]
    return [role for copy, role in zip(copies, roles)
            if not any(computed_from(v, [axis_value]) for v in copy.operands)]


def _cluster_shares(kernel: Kernel, grid: Op, copies: list[Op], roles: list[str],
                    options: Options) -> dict[str, _Share]:
    """The operands whose tiles the blocks of a cluster share, each with its blocks. The
    blocks take consecutive tiles along the grid's first axis but the batch's (backend/grid.py
    folds it into CUDA's x as the M tiles), ``cluster`` of them, and with ``cluster_n`` as
    many columns of those along the second; TMA multicasts one tile to the blocks of a column
    (B in ``A[m] @ B[n]``; A in the swapped product ``B.T[n] @ A.T[m]``, passes/swap_product.py,
    whose A is the program's B) and another to those of a row (A), so each must not move
    along its axis. A grid written ``for n, m in grid(...)`` pairs N tiles: the plain
    product's B then moves, and its A is shared down a column."""
    paired = paired_axis(kernel, grid)
    shares: dict[str, _Share] = {}
    for axis, blocks, stride in ((paired, options.cluster, 1),
                                 (crossed_axis(kernel, grid), options.cluster_n,
                                  options.cluster)):
        if blocks == 1:
            continue
        still = [role for role in _still_along(kernel, grid, axis, copies, roles)
                 if role not in shares]
        if not still:
            axis_value = grid.results[axis]
            name = axis_value.hint or f"axis {axis}"
            flag = _Share(blocks, stride).flag
            raise located(TileConfigError, f"{flag}={blocks} pairs the blocks of "
                          f"consecutive tiles along grid axis {axis} ({name}), which share "
                          "one operand tile; "
                          + ("both operands' tiles move along that axis" if shares == {}
                             else "the other operand's tile, shared along the other axis, "
                             "is the only one that does not move along it"),
                          copies[-1].loc, kernel.source_lines,
                          "index one operand's tile by the other grid axis and k only, or "
                          f"compile without {flag}")
        role = "B" if stride == 1 and "B" in still else still[0]
        shares[role] = _Share(blocks, stride)
    return shares


def _check_cluster_shares(kernel: Kernel, copy: Op, operand: OperandPlan,
                          share: _Share) -> None:
    """Each of the blocks sharing ``operand`` loads rows [rank, rank + 1) / blocks of every
    box into every one's stage (:func:`_box`); TMA swizzles whole 8-row atoms, so a share
    must be whole atoms. An operand's stored rows are BM, BN or BK, multiples of 16
    (wgmma's block rules): a pair's halves always are, quarters only from 32 rows."""
    rows, blocks = operand.layout.rows, share.blocks
    if rows % (ATOM_ROWS * blocks):
        raise located(TileConfigError, f"{share.flag}={blocks} divides the {rows} rows of "
                      f"{operand.tensor}'s shared tile into {blocks} shares of "
                      f"{rows / blocks:g}, but TMA's swizzle writes whole {ATOM_ROWS}-row "
                      "atoms", copy.loc, kernel.source_lines,
                      f"use a tile whose {operand.tensor} rows are a multiple of "
                      f"{ATOM_ROWS * blocks}, or a smaller cluster")


def _tile_dependent(kernel: Kernel, loop: Op) -> list[Op]:
    """The ops between the grid and the K loop that compute from the tile's ids, in order:
    batch views (``tensor.batch``) and offsets common to the loop and the epilogue, which
    CSE leaves there (``m * BM`` where the program reads C before its K loop)."""
    grid = find_grid(kernel)
    if grid is None:
        return []
    top = kernel.body.ops
    ids = set(grid.results)
    dependent = []
    for op in top[top.index(grid) + 1:top.index(loop)]:
        if any(v in ids for inner in op.walk() for v in inner.operands):
            dependent.append(op)
            ids.update(op.results)
    return dependent


def _ops_per_tile(ops: list[Op], top: list[Op], producer: Block) -> list[Op]:
    """A persistent kernel's tile-dependent ``ops`` (:func:`_tile_dependent`, among the
    kernel's ``top`` ops) made per tile: each role loops over the tiles on its own, and what
    lies between the grid and the producer runs once, before either loop. The producer gets
    its own copies of those its loads read, and of what they read in turn, first in its
    region (its per-tile ops); those the consumers read (the epilogue's C view, offsets)
    are returned, for the caller to place after the producer with the consumers' per-tile
    ops."""
    read = {v for op in producer.ops for inner in op.walk() for v in inner.operands}
    needed = []
    for op in reversed(ops):
        if any(result in read for result in op.results):
            needed.insert(0, op)
            read.update(op.operands)
    copies: dict[Value, Value] = {}
    clones = [clone_op(op, copies) for op in needed]
    for old, new in copies.items():
        replace_uses(producer, old, new)
    producer.ops[:0] = clones
    used = {v for op in top for inner in op.walk() for v in inner.operands}
    return [op for op in ops if any(result in used for result in op.results)]


@dataclasses.dataclass
class _Loads:
    """The K loop's copies into shared memory, which the producer's TMA loads replace: their
    views and ring buffers, the operands' TMA layouts, and the operands a cluster shares."""
    copies: list[Op]
    views: list[Value]
    buffers: list[Value]
    roles: list[str]
    operands: tuple[OperandPlan, ...] = ()
    shared: dict[str, _Share] = dataclasses.field(default_factory=dict)

    @property
    def by_role(self) -> dict[str, OperandPlan]:
        return {op_plan.role: op_plan for op_plan in self.operands}


@dataclasses.dataclass
class _Ring:
    """The ring's barriers and what every role's ops need of them."""
    stages: int
    full: Value
    empty: Value
    stage_bytes: int
    cluster: int
    cluster_n: int

    @property
    def arrive_attrs(self) -> dict:
        attrs = {"cluster": self.cluster} if self.cluster > 1 else {}
        if self.cluster_n > 1:
            attrs["cluster_n"] = self.cluster_n
        return attrs


def _ring_share(stages: int, options: Options) -> int:
    """The shared memory a block's ring may take: its share of the SM's, less the
    reservation and the barriers."""
    return (SMEM_PER_SM // options.blocks_per_sm - SMEM_RESERVED_PER_BLOCK
            - 2 * stages * BARRIER_BYTES)


def _ring_loads(kernel: Kernel, loop: Op, dot: Op, stages: int, options: Options) -> _Loads:
    """The loop's copies, their buffers given ``stages`` stages in TMA's layouts: padded
    128-byte slabs where the ring has room for them (the swizzle pass may pick another of
    TMA's whole spans)."""
    plan: TilingPlan = kernel.schedule.tiling
    copies = [op for op in loop.regions[0].ops if op.name == COPY]
    views = [c.operands[-1] for c in copies]
    buffers = [v.owner.operands[0] for v in views]
    loads = _Loads(copies, views, buffers, [buffer.owner.attrs["role"] for buffer in buffers])
    try:
        loads.operands = _tma_operands(plan, options, pad=True)
        if stages * _stage_bytes(loads.operands, plan) > _ring_share(stages, options):
            loads.operands = _tma_operands(plan, options, pad=False)
    except ValueError as err:
        raise located(TileConfigError, str(err), dot.loc, kernel.source_lines) from None
    by_role = loads.by_role
    for view, buffer, role in zip(views, buffers, loads.roles):
        layout = by_role[role].layout
        buffer.type = buffer.type.with_(shape=(stages, *buffer.type.shape[1:]), layout=layout)
        buffer.owner.attrs["stages"] = stages
        view.type = view.type.with_(layout=layout)
    return loads


def _consumer_warpgroups(kernel: Kernel, dot: Op, options: Options) -> tuple[int, int]:
    """The block's consumer warpgroups, and those that compute one tile (and so hand its
    stages back): pingpong's block has two, each on tiles of its own."""
    plan: TilingPlan = kernel.schedule.tiling
    tile_warpgroups = plan.threads // WARPGROUP
    if options.consumers != "pingpong":
        return tile_warpgroups, tile_warpgroups
    if tile_warpgroups != 1:
        raise located(TileConfigError, "consumers='pingpong' gives each consumer warpgroup a "
                      f"whole tile, but this {plan.block[0]}-row tile takes "
                      f"{tile_warpgroups} warpgroups", dot.loc, kernel.source_lines,
                      "use a tile of one warpgroup's rows (BM=64 on wgmma, or BM=128 with "
                      "warpgroup_rows=128), or consumers='cooperative'")
    return 2, tile_warpgroups


def _check_ring_fits(kernel: Kernel, dot: Op, operands: Sequence[OperandPlan], stages: int,
                     options: Options) -> int:
    """One stage's bytes, where ``stages`` of them fit the block's share of shared memory."""
    plan: TilingPlan = kernel.schedule.tiling
    blocks = options.blocks_per_sm
    share = _ring_share(stages, options)
    stage_bytes = _stage_bytes(operands, plan)
    if stages * stage_bytes > share:
        padded = [f"{o.role}'s {o.layout.slab * o.stored_bytes(plan.elem_bytes)}-byte"
                  for o in operands if o.layout.padded]
        raise located(TileConfigError, (f"{blocks} blocks per SM leave each" if blocks > 1
                                        else "a block has")
                      + f" {share} bytes of shared memory; {stages} stages of this tile need "
                      f"{stages * stage_bytes}"
                      + (f" ({' and '.join(padded)} slabs padded)" if padded else ""),
                      dot.loc, kernel.source_lines,
                      "use fewer stages, a smaller tile"
                      + (", or blocks_per_sm=1" if blocks > 1 else "")
                      + (", or a tma_swizzle the rows are whole spans of" if padded else ""))
    return stage_bytes


def _cluster_shared(kernel: Kernel, loop: Op, loads: _Loads,
                    options: Options) -> dict[str, _Share]:
    """The operands whose tiles a cluster's blocks share (none without a cluster), once the
    grid is one a cluster can group and the shares are whole swizzle atoms."""
    if options.cluster_blocks == 1:
        return {}
    grid = find_grid(kernel)
    if grid is None or not grid.attrs.get("raster_group"):
        # A cluster groups M (and N) tiles where the grid folds its (M, N) tiles into
        # CUDA's x (backend/grid.py): a 2-D grid, or a batched one whose batch views all
        # take one axis (tiling's batch_axis). The blocks of a cluster then share their
        # batch too.
        grouping = (f"cluster={options.cluster} pairs M tiles" if options.cluster_n == 1 else
                    f"cluster={options.cluster}, cluster_n={options.cluster_n} group M and N "
                    "tiles")
        raise located(TileConfigError, f"{grouping} of a grid whose (M, N) tiles fold into "
                      "CUDA's x: a 2-D grid, or "
                      "a 3-D one whose other axis is the batch index of every batched "
                      "tensor; this grid is neither", (grid or loop).loc, kernel.source_lines,
                      "compile without cluster")
    shares = _cluster_shares(kernel, grid, loads.copies, loads.roles, options)
    for role, share in shares.items():
        _check_cluster_shares(kernel, loads.copies[loads.roles.index(role)],
                              loads.by_role[role], share)
    return shares


def _barriers(pre: Builder, stages: int, stage_bytes: int, tile_warpgroups: int,
              options: Options) -> _Ring:
    """The full and empty barrier rings, initialised before either role starts: every
    consumer warpgroup hands each stage back to each block that fills it (itself, and the
    other blocks of its cluster's M row and N column)."""
    fillers = stage_fillers(options.cluster, options.cluster_n)
    full = pre.value(ALLOC, [], barrier_type(stages), "full", count=1, role="full")
    empty = pre.value(ALLOC, [], barrier_type(stages), "empty",
                      count=tile_warpgroups * fillers, role="empty")
    pre.op("gpu.barrier")
    if fillers > 1:
        # The peers' multicasts and arrivals land in this block's barriers: every block's
        # initialisations first.
        pre.op(CLUSTER_SYNC)
    return _Ring(stages, full, empty, stage_bytes, options.cluster, options.cluster_n)


def _stream_k_bounds(loop: Op, options: Options) -> tuple[list[Op], list[Op], list[Value]]:
    """Stream-K: both roles' K loops run over the unit's steps (ws.k_begin / ws.k_end, bound
    per unit by the tile loop), each role with its own copies of the bounds. The producer's
    bound ops, the consumers' (the loop takes theirs) and the producer loop's operands."""
    producer_bounds = list(loop.operands[:3])
    if not options.stream_k:
        return [], [], producer_bounds
    full_range = list(loop.operands[:3])
    bounds = Builder(Block(), loop.loc)
    producer_bounds[:2] = [bounds.value(K_BEGIN, full_range[::2], i32, "k_begin"),
                           bounds.value(K_END, full_range, i32, "k_end")]
    consumer = Builder(Block(), loop.loc)
    loop.operands[:2] = [consumer.value(K_BEGIN, full_range[::2], i32, "k_begin"),
                         consumer.value(K_END, full_range, i32, "k_end")]
    return bounds.block.ops, consumer.block.ops, producer_bounds


def _producer(loop: Op, loads: _Loads, ring: _Ring, unit_bounds: list[Op],
              producer_bounds: list[Value]) -> Block:
    """The producer's region: its own loop over the same K range, copies only, each a TMA
    load of the stage's box completing on its full barrier once the stage is free; in a
    cluster, the tail that waits for every block's hand-backs."""
    body = loop.regions[0]
    iv = body.args[0]
    stages = ring.stages
    region = Block()
    region.ops.extend(unit_bounds)
    start = Builder(region, loop.loc)
    stage0, parity0 = _ring_start(start, stages)
    ploop_body = Block()
    k = ploop_body.add_arg(i32, "k")
    stage = ploop_body.add_arg(i32, "stage")
    parity = ploop_body.add_arg(i32, "parity")
    p = Builder(ploop_body, loop.loc)
    free = p.value("arith.sub", [constant(p, 1), parity], i32, "parity_free")
    p.op(WAIT, [ring.empty, stage, free])
    p.op(EXPECT, [ring.full, stage], attrs={"bytes": ring.stage_bytes})
    by_role = loads.by_role
    for copy, view, buffer, role in zip(loads.copies, loads.views, loads.buffers, loads.roles):
        with p.located(copy.loc):
            rank = copy.operands[0].type.rank
            tensor, *offsets = clone_slice(list(copy.operands[:1 + rank]), body, p, {iv: k})
            stage_view = p.value("smem.stage", [buffer, stage], view.type, view.hint)
            p.op(LOAD, [tensor, *offsets, stage_view, ring.full, stage],
                 attrs=_box(by_role[role], loads.shared.get(role)))
    p.op("scf.yield", list(_ring_step(p, stage, parity, free, stages)))
    ploop = Op("scf.for", [*producer_bounds, stage0, parity0], [], dict(loop.attrs),
               [ploop_body], loop.loc)
    ploop.results = [Value(i32, "stage_end", ploop), Value(i32, "parity_end", ploop)]
    region.ops.append(ploop)
    if ring.cluster * ring.cluster_n > 1:
        tail = Builder(Block(), loop.loc)
        _producer_tail(tail, ring.empty, loop, loop.attrs["step_const"], stages)
        region.ops.extend(tail.block.ops)
    return region


def _consumer_loop(loop: Op, dot: Op, loads: _Loads, ring: _Ring, in_flight: bool,
                   pre: Builder) -> None:
    """The consumers' loop in place: wait for the stage, compute on it, hand it back. The
    stage, its phase parity and (with products left ``in_flight``) the stage before are
    carried by the loop, each tile's first from ws.ring_base (worked out in ``pre``)."""
    body = loop.regions[0]
    iv = body.args[0]
    lb = loop.operands[0]
    stages = ring.stages
    start = Builder(pre.block, loop.loc)
    stage0, parity0 = _ring_start(start, stages)
    carried = [stage0, parity0]
    stage = body.add_arg(i32, "stage")
    parity = body.add_arg(i32, "parity")
    if in_flight:
        before = start.value("arith.add", [stage0, constant(start, stages - 1)], i32,
                             "stage_before0")
        carried.append(start.value("arith.mod", [before, constant(start, stages)], i32,
                                   "previous_stage0"))
        previous = body.add_arg(i32, "previous_stage")
    loop.operands.extend(carried)
    loop.results.extend(Value(i32, f"{arg.hint}_end", loop) for arg in body.args[-len(carried):])
    c = Builder(Block(), loop.loc)
    kept = [op for op in body.ops if op not in loads.copies and op.name != "gpu.barrier"
            and not (op.name == "smem.stage" and op.results[0] in loads.views)]
    at = kept.index(dot)
    c.block.ops.extend(kept[:at])
    c.op(WAIT, [ring.full, stage, parity])
    read_views = [c.value("smem.stage", [buffer, stage], view.type, view.hint)
                  for buffer, view in zip(loads.buffers, loads.views)]
    dot.operands = [*read_views, dot.operands[2]]
    c.block.ops.append(dot)
    if in_flight:
        # This stage's products run on while the next stage's are issued; once they are
        # issued (the product waits for all groups but the newest), the previous stage is
        # read and goes back to the producer.
        dot.attrs["in_flight"] = 1
        not_first = c.value("arith.lt", [lb, iv], ScalarType(PRED), "not_first")
        c.op(ARRIVE, [ring.empty, previous, not_first], attrs=ring.arrive_attrs)
    else:
        c.op(ARRIVE, [ring.empty, stage], attrs=ring.arrive_attrs)
    yield_op = kept[-1]
    c.block.ops.extend(kept[at + 1:-1])
    flipped = c.value("arith.sub", [constant(c, 1), parity], i32, "flipped")
    yield_op.operands.extend(_ring_step(c, stage, parity, flipped, stages))
    if in_flight:
        yield_op.operands.append(stage)
    c.block.ops.append(yield_op)
    body.ops = c.block.ops


def _last_hand_back(after: Builder, loop: Op, ring: _Ring, in_flight_wait: str) -> None:
    """The last stage's products finish, and the stage goes back (a persistent kernel's
    producer fills it again for the next tile). Its index is worked out again from the ring
    count, once per tile, rather than read from the loop's carried stage: with that register
    live after the loop, ptxas serialized a persistent kernel's wgmmas (C7514, "non wgmma
    instructions reading accumulator registers")."""
    lb = loop.operands[0]
    after.op(in_flight_wait, attrs={"in_flight": 0})
    trips = _k_steps(after, loop, loop.attrs["step_const"])
    base = after.value(RING_BASE, [], i32, "ring_base")
    last_it = after.value("arith.add", [base, after.value(
        "arith.sub", [trips, constant(after, 1)], i32, "last_step")], i32, "last_it")
    last = after.value("arith.mod", [last_it, constant(after, ring.stages)], i32, "last_stage")
    ran = after.value("arith.lt", [lb, loop.operands[1]], ScalarType(PRED), "ran")
    after.op(ARRIVE, [ring.empty, last, ran], attrs=ring.arrive_attrs)


def build(kernel: Kernel, loop: Op, dot: Op, stages: int, options: Options) -> Kernel:
    """The warp-specialized ring for ``kernel`` (a clone the caller owns)."""
    plan: TilingPlan = kernel.schedule.tiling
    family = family_of(plan)
    loads = _ring_loads(kernel, loop, dot, stages, options)
    consumer_warpgroups, tile_warpgroups = _consumer_warpgroups(kernel, dot, options)
    stage_bytes = _check_ring_fits(kernel, dot, loads.operands, stages, options)
    # Every batch view (of A, B or C), right after the grid, and any other op there that
    # computes from the tile's ids: a persistent kernel's are made per tile (_ops_per_tile).
    batch_views = [op for op in kernel.body.ops[:kernel.body.ops.index(loop)]
                   if op.name == "tensor.batch"]
    tile_dependent = _tile_dependent(kernel, loop)
    loads.shared = _cluster_shared(kernel, loop, loads, options)
    pre = Builder(Block(), loop.loc)
    ring = _barriers(pre, stages, stage_bytes, tile_warpgroups, options)
    unit_bounds, consumer_bounds, producer_bounds = _stream_k_bounds(loop, options)
    acc_index = loop.regions[0].args.index(dot.operands[2]) - 1
    region = _producer(loop, loads, ring, unit_bounds, producer_bounds)
    pre.block.ops.append(Op(PRODUCER, [], [], {}, [region], loop.loc))
    pre.block.ops.extend(consumer_bounds)  # per unit, as what follows the producer
    # With one stage a product group left in flight would hand its stage back one iteration
    # late, after the producer's next load of that very stage: a deadlock (the fuzzer's
    # class 7). One stage waits for each group instead.
    in_flight = family.in_flight_wait is not None and stages > 1
    _consumer_loop(loop, dot, loads, ring, in_flight, pre)

    top = kernel.body.ops
    per_tile: list[Op] = []
    if tile_dependent and options.persistent:
        top = [op for op in top if op not in tile_dependent]
        per_tile = _ops_per_tile(tile_dependent, top, region)
    index = top.index(loop)
    after = Builder(Block(), loop.loc)
    if in_flight:
        _last_hand_back(after, loop, ring, family.in_flight_wait)
    if options.consumers == "pingpong":
        # The warpgroups' mainloops in turn (their tiles' order in the ring): a warpgroup
        # waits for the ring's stages of its tile only once the other has waited for all of
        # its own, so the barrier is never a whole round behind the phase it waits for.
        # The turn passes once the products are complete: a bar.arrive between the last
        # wgmma and its wait made ptxas serialize the wgmmas of the bench's 64x256 f16 C
        # kernel (C7514), which ran at 0.68 of cuBLAS (H100, 4096^3).
        pre.op(TURN_WAIT)
        after.block.ops.insert(1 if in_flight else 0, Op(TURN_PASS, [], [], {}, [], loop.loc))
    if options.stream_k:
        # A tile's parts meet after the products' final wait (a store of the accumulators
        # before it would have ptxas serialize the wgmmas, C7514); the epilogue reads the sum.
        partial = loop.results[acc_index]
        total = after.value(FIXUP, [partial], partial.type, "acc_total")
        epilogue = Block()
        epilogue.ops = top[index + 1:]
        replace_uses(epilogue, partial, total)
    kernel.body.ops = (top[:index] + pre.block.ops + per_tile + top[index:index + 1]
                       + after.block.ops + top[index + 1:])
    kernel.schedule = kernel.schedule.with_(
        tiling=dataclasses.replace(plan, operands=loads.operands),
        pipeline=PipelinePlan(stages),
        roles=RolesPlan(consumer_warpgroups, family.producer_registers,
                        family.consumer_registers(consumer_warpgroups, options.blocks_per_sm),
                        stages, options.blocks_per_sm, options.persistent, options.cluster,
                        cluster_n=options.cluster_n, consumers=options.consumers,
                        batches=options.persistent and bool(batch_views),
                        stream_k=options.stream_k, warpgroup_rows=options.warpgroup_rows))
    return kernel
