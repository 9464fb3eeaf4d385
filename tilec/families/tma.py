"""The TMA + mbarrier data-movement family (sm_90): tiles reach shared memory through the
tensor memory accelerator (``cp.async.bulk.tensor``, PTX ISA 9.7.9.25.5), issued by one
elected thread of a producer warpgroup, and complete on mbarriers (PTX ISA 9.7.13.15) whose
phases the consumer warpgroups wait on; the consumers hand each stage back through a second
mbarrier. The pipeline is a ring of ``full`` and ``empty`` barrier pairs:

- producer, iteration i, stage s = i % S, parity p = (i / S) % 2: wait ``empty[s]`` for
  parity p ^ 1 (a fresh barrier has completed the phase before its first, so the first S
  waits pass), ``arrive.expect_tx`` on ``full[s]`` with the stage's bytes, one TMA load a
  slab of each operand (one swizzle span wide: :mod:`.tma_boxes`) completing on ``full[s]``;
- consumers: wait ``full[s]`` for parity p (the TMA bytes have landed), compute, and one
  thread of each warpgroup arrives on ``empty[s]``.

Ops (defined here with their CPU semantics): ``mbar.alloc`` (a ring of barriers, initialised
by thread 0), ``mbar.arrive_expect_tx``, ``tma.load``, ``mbar.wait``, ``mbar.arrive`` and
``ws.producer`` (a region only the producer warpgroup runs; its other threads exit, and
``setmaxnreg`` gives their registers to the consumers, PTX ISA 9.7.19.5). The kernel takes one
128-byte tensor map per operand, by value (:meth:`TmaFamily.kernel_params`), which the
launcher encodes (:func:`tensor_map_box`).

On the CPU, the producer region runs as a coroutine beside the consumers (one runs at a time,
switching where a wait cannot complete), a TMA load's elements land, in TMA's swizzle,
when its barrier's phase completes, and a wait that can never complete is an error
naming the barrier.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from tilec.backend.abi import TENSOR_MAP, AbiParam
from tilec.backend.context import Context, SmemView
from tilec.ir.core import Kernel, Op
from tilec.ir.ops import OpDef, require
from tilec.ir.types import I64, TileType
from tilec.target.layout import SmemLayout
from tilec.target.smem import BARRIER_BYTES

from . import stream_k
from .movement import (CompletionWords, Completions, Emitter, Event, MovementFamily, PipelineOps,
                       Tracer)
from .staged_store import store_rows, store_tile
from .tma_boxes import (LOAD, MAX_BOX, SPANS, Box, box_coordinates, is_tma_store,
                        tensor_map_address, thread_is, tma_layout)

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.executor import SharedWrite
    from tilec.cpu.interpreter import InterpState, TensorRef

# The CPU semantics import numpy and the CPU model (tilec.cpu) where they run: compiling
# never runs them, and a cold `tilec compile` should not wait for numpy's import.

ALLOC, EXPECT, WAIT, ARRIVE, PRODUCER, RING_BASE = (
    "mbar.alloc", "mbar.arrive_expect_tx", "mbar.wait", "mbar.arrive", "ws.producer",
    "ws.ring_base")
# A pingpong kernel's hand-over of the tensor cores between its two consumer warpgroups.
TURN_WAIT, TURN_PASS = "ws.turn_wait", "ws.turn_pass"
CLUSTER_SYNC = "cluster.sync"
# Pingpong: warpgroup w's epilogue meets on barrier CONSUMER_BARRIER + w (its 128 threads),
# and waits for its mainloop's turn on TURN_BARRIER + w, which the other warpgroup arrives
# on once its own mainloop's products are complete (both warpgroups count: 256 threads).
TURN_BARRIER = 3


def barrier_type(stages: int) -> TileType:
    """The type of a ring of ``stages`` mbarriers in shared memory."""
    return TileType(I64, (stages,), "smem")


# -- PTX -------------------------------------------------------------------------------------

@dataclass
class Barriers:
    """A ring of mbarriers in shared memory: the u32 address of barrier 0."""

    address: str


def _barrier_address(ctx: Context, bars: Barriers, stage_value) -> str:
    stage = ctx.const(stage_value)
    if stage is not None:
        return ctx.int_op("add.s32", bars.address, stage * BARRIER_BYTES)
    return ctx.mad(ctx.get(stage_value), BARRIER_BYTES, bars.address)


def _alloc(ctx: Context, op: Op) -> None:
    """Barriers sit in the dynamic shared memory like buffers; thread 0 initialises them
    (mbarrier.init, PTX ISA 9.7.13.15.9) and fences the init for the async proxy; a CTA
    barrier (the pass puts one after the allocations) publishes them."""
    placed = ctx.smem.of(op)
    stages = placed.stages
    address = ctx.int_op("add.s32", ctx.smem_base(), placed.offset)
    first = thread_is(ctx, None, 0)
    for stage in range(stages):
        ctx.w.emit(f"@{first} mbarrier.init.shared::cta.b64 [{address}+{stage * BARRIER_BYTES}], "
                   f"{op.attrs['count']};")
    ctx.w.emit(f"@{first} fence.mbarrier_init.release.cluster;")
    ctx.bind(op.result, Barriers(address))


def _expect(ctx: Context, op: Op) -> None:
    address = _barrier_address(ctx, ctx.get(op.operands[0]), op.operands[1])
    ctx.w.emit(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{address}], {op.attrs['bytes']};")


def _cluster_rank(ctx: Context) -> str:
    # Read where it is used: kept from the kernel's entry, it holds a register through the
    # consumers' epilogue, where a fused one spilled for it.
    reg = ctx.w.reg("b32")
    ctx.w.emit(f"mov.u32 {reg}, %cluster_ctarank;")
    return reg


def _multicast_share(ctx: Context, blocks: int, stride: int) -> tuple[str, str]:
    """This block's share (0 to ``blocks`` - 1) of a tile the ``blocks`` blocks of its cluster
    ``stride`` ranks apart share, and the b16 mask of their ranks. Where they are the whole
    cluster the mask is a constant; else (a cluster of cluster x cluster_n blocks, rank m +
    cluster * n: along M, one N column's blocks, stride 1; along N, one M row's, stride
    cluster) the group's first rank, rank - share * stride, shifts it."""
    rank = _cluster_rank(ctx)
    mask = ctx.w.reg("b16")
    pattern = sum(1 << (j * stride) for j in range(blocks))
    if stride == 1 and blocks == ctx.kernel.schedule.roles.cluster_blocks:
        ctx.w.emit(f"mov.b16 {mask}, {pattern};")
        return rank, mask
    share = ctx.mod_const(ctx.div_const(rank, stride, nonnegative=True), blocks,
                          nonnegative=True)
    first = ctx.int_op("sub.s32", rank, share if stride == 1 else
                       ctx.int_op("mul.lo.s32", share, stride))
    wide = ctx.int_op("shl.b32", pattern, first)
    ctx.w.emit(f"cvt.u16.u32 {mask}, {wide};")
    return share, mask


def _load(ctx: Context, op: Op) -> None:
    """One cp.async.bulk.tensor.2d per slab (one swizzle span wide), into consecutive slabs
    of the stage, each completing its bytes on the stage's full barrier. A ``multicast``
    load (n blocks of a cluster sharing the tile, ``multicast_stride`` ranks apart): this
    block loads rows [share / n, (share + 1) / n) of each box into the same place of every
    sharing block's stage, completing on each one's barrier at the same offset
    (``.multicast::cluster``, PTX ISA 9.7.9.25.5.1)."""
    box = Box.of(op)
    offsets = [ctx.get(v) for v in op.operands[1:3]]
    view: SmemView = ctx.get(op.operands[3])
    address = _barrier_address(ctx, ctx.get(op.operands[4]), op.operands[5])
    tensor_map = tensor_map_address(ctx, op.attrs["tensor"])
    inner, outer = offsets[box.coords[0]], offsets[box.coords[1]]
    eb = view.buffer.elem_bytes
    slab_bytes = box.inner * box.outer * eb
    destination, multicast = view.address, ""
    blocks = op.attrs.get("multicast", 1)
    if blocks > 1:
        rows = box.outer // blocks
        share, mask = _multicast_share(ctx, blocks, op.attrs.get("multicast_stride", 1))
        first = ctx.int_op("mul.lo.s32", share, rows)
        outer = ctx.int_op("add.s32", outer, first)
        destination = ctx.mad(first, box.inner * eb, view.address)
        multicast = ".multicast::cluster"
    for slab in range(box.slabs):
        x = inner if slab == 0 else ctx.int_op("add.s32", inner, slab * box.inner)
        dims, coordinates = box_coordinates(ctx, op.operands[0], x, outer)
        ctx.w.emit(f"cp.async.bulk.tensor.{dims}.shared::cluster.global.mbarrier::"
                   f"complete_tx::bytes{multicast} [{destination}+{slab * slab_bytes}], "
                   f"[{tensor_map}, {coordinates}], [{address}]"
                   + (f", {mask};" if multicast else ";"))


def _wait(ctx: Context, op: Op) -> None:
    """Spin on try_wait.parity until the phase of the given parity has completed."""
    address = _barrier_address(ctx, ctx.get(op.operands[0]), op.operands[1])
    parity = ctx.operand(op.operands[2])
    done = ctx.w.reg("pred")
    label = ctx.w.label("wait")
    ctx.w.raw(f"{label}:")
    ctx.w.emit(f"mbarrier.try_wait.parity.shared::cta.b64 {done}, [{address}], {parity};")
    # Not .uni: the threads of a warp may see the phase complete at different times.
    ctx.w.emit(f"@!{done} bra {label};")


def _arrive(ctx: Context, op: Op) -> None:
    """One arrival per consumer warpgroup, from its first thread, after its wgmma reads of
    the stage have completed (wgmma.wait_group is warpgroup-wide); only where the optional
    predicate holds."""
    address = _barrier_address(ctx, ctx.get(op.operands[0]), op.operands[1])
    leader = thread_is(ctx, 127, 0)
    if len(op.operands) > 2:
        leader = ctx.and_pred(leader, ctx.get(op.operands[2]))
    ctx.w.emit(f"@{leader} mbarrier.arrive.shared::cta.b64 _, [{address}];")
    # In a cluster, the barrier at the same offset of every other block that fills this
    # block's stage (mapa, PTX ISA 9.7.9.20): its producer refills the stage in this block
    # too. The arrival keeps the default .release.cta semantics, as CUTLASS's
    # ClusterBarrier::arrive does: with .release.cluster, 4096^3 f16 ran at 501 TFLOP/s
    # against 719 (H100).
    for peer in arrive_peers(op):
        rank = ctx.int_op("xor.b32", _cluster_rank(ctx), peer)
        remote = ctx.w.reg("b32")
        ctx.w.emit(f"mapa.shared::cluster.u32 {remote}, {address}, {rank};")
        ctx.w.emit(f"@{leader} mbarrier.arrive.shared::cluster.b64 _, [{remote}];")


def cluster_peers(cluster: int, cluster_n: int) -> list[int]:
    """The other blocks of a block's cluster M row and N column, each as the xor of its rank
    with this block's (rank m + cluster * n, both extents powers of two)."""
    return [*range(1, cluster), *(j * cluster for j in range(1, cluster_n))]


def stage_fillers(cluster: int, cluster_n: int) -> int:
    """The blocks whose loads fill a block's stage, each of which it hands the stage back
    to: itself and its :func:`cluster_peers`."""
    return 1 + len(cluster_peers(cluster, cluster_n))


def arrive_peers(op: Op) -> list[int]:
    """:func:`cluster_peers` of an ``mbar.arrive`` (its ``cluster`` and ``cluster_n``)."""
    return cluster_peers(op.attrs.get("cluster", 1), op.attrs.get("cluster_n", 1))


def _cluster_sync(ctx: Context, op: Op) -> None:
    """Every thread of every block of the cluster meets (PTX ISA 9.7.13.1)."""
    ctx.w.emit("barrier.cluster.arrive.release.aligned;")
    ctx.w.emit("barrier.cluster.wait.acquire.aligned;")


def _ring_base(ctx: Context, op: Op) -> None:
    """The ring iterations a role ran for earlier tiles of this block: the register a
    persistent kernel's tile loop carries (ctx.ring_base), else 0."""
    if ctx.ring_base is not None:
        ctx.bind(op.result, ctx.ring_base)
        return
    ctx.constants[op.result] = 0
    reg = ctx.w.reg("b32")
    ctx.w.emit(f"mov.u32 {reg}, 0;")
    ctx.bind(op.result, reg)


def _producer(ctx: Context, op: Op) -> None:
    """The warp-specialized split: threads from ``consumer_threads`` on are the producer
    warpgroup. It gives up registers, its elected thread runs the region, and all of it
    exits; the consumers take the registers and go on (setmaxnreg: PTX ISA 9.7.19.5)."""
    roles = ctx.kernel.schedule.roles
    w = ctx.w
    consumer = w.reg("pred")
    w.emit(f"setp.lt.u32 {consumer}, {ctx.tid()}, {roles.consumer_threads};")
    consumers, done = w.label("consumers"), w.label("producer_done")
    w.emit(f"@{consumer} bra.uni {consumers};")  # whole warps: uniform
    w.emit(f"setmaxnreg.dec.sync.aligned.u32 {roles.producer_registers};")
    elected = w.reg("pred")
    w.emit(f"setp.ne.u32 {elected}, {ctx.tid()}, {roles.consumer_threads};")
    w.emit(f"@{elected} bra {done};")  # one thread of the warp goes on: divergent
    # Every tensor map into the constant cache before its first use (CUTLASS's
    # prefetch_tma_descriptor): the first load, and the consumers' first store, would
    # otherwise wait for the 128-byte map to come from memory.
    for tensor in _mapped_tensors(ctx.kernel):
        w.emit(f"prefetch.param.tensormap [{ctx.workspace[tensor]}];")
    if roles.persistent:
        # The region is its K loop, then (in a cluster) the waits for the peer's last
        # hand-backs: those once, after the last tile.
        ops = op.regions[0].ops
        loop_end = max(i for i, inner in enumerate(ops) if inner.name == "scf.for") + 1
        ctx.tile_loop(ops[:loop_end], ctx.emit_block, ops[loop_end:])
    else:
        ctx.emit_block(ctx, op.regions[0].ops)
    w.raw(f"{done}:")
    w.emit("exit;")
    w.raw(f"{consumers}:")
    w.emit(f"setmaxnreg.inc.sync.aligned.u32 {roles.consumer_registers};")
    if roles.pingpong:
        # From here on each warpgroup computes tiles of its own: thread ids are its own.
        ctx.local_tid = True


def _mapped_tensors(kernel) -> list[str]:
    """The tensors whose maps the kernel takes (its TMA loads' and stores'), in order."""
    return list(dict.fromkeys(op.attrs["tensor"] for op in kernel.walk()
                              if op.name == LOAD or is_tma_store(op)))


def _turn_wait(ctx: Context, op: Op) -> None:
    """Pingpong: wait until the other warpgroup's mainloop is done (bar.sync on this
    warpgroup's turn barrier, which the other arrives on; PTX ISA 9.7.13.1); the block's
    first tile has no mainloop before it. The registers come from the tile loop
    (backend.ptx._tile_loop: ctx.turn)."""
    turn = _turn(ctx, op)
    skip = ctx.w.label("turn_held")
    ctx.w.emit(f"@!{turn['waits']} bra.uni {skip};")
    ctx.w.emit(f"bar.sync {turn['wait_id']}, {ctx.kernel.schedule.roles.consumer_threads};")
    ctx.w.raw(f"{skip}:")


def _turn_pass(ctx: Context, op: Op) -> None:
    """Pingpong: the mainloop's products are complete; the other warpgroup's turn
    (bar.arrive on its turn barrier), where the block has a next tile for it. After the
    products' final wait: a bar.arrive between the last wgmma and its wait made ptxas
    serialize the wgmmas (C7514)."""
    turn = _turn(ctx, op)
    skip = ctx.w.label("turn_kept")
    ctx.w.emit(f"@!{turn['passes']} bra.uni {skip};")
    ctx.w.emit(f"bar.arrive {turn['pass_id']}, {ctx.kernel.schedule.roles.consumer_threads};")
    ctx.w.raw(f"{skip}:")


def _turn(ctx: Context, op: Op) -> dict:
    if ctx.turn is None:
        raise NotImplementedError(f"{op.name} (at {op.loc}) outside a pingpong kernel's tile "
                                  "loop")
    return ctx.turn


# -- type rules ------------------------------------------------------------------------------

def _is_barriers(value) -> bool:
    t = value.type
    return isinstance(t, TileType) and t.dtype == I64 and t.space == "smem" and t.rank == 1


def _check_alloc(op: Op) -> None:
    require(_is_barriers(op.result), "mbar.alloc yields a ring of i64 barriers in shared memory")
    require(isinstance(op.attrs["count"], int) and op.attrs["count"] >= 1,
            "a barrier's arrival count is a positive integer")


def _check_barrier_operand(op: Op) -> None:
    require(_is_barriers(op.operands[0]), f"{op.name} takes a ring of barriers first")


def _check_arrive(op: Op) -> None:
    _check_barrier_operand(op)
    require(len(op.operands) in (2, 3), "mbar.arrive takes a ring, a stage and maybe a predicate")


def _check_load(op: Op) -> None:
    tensor, _, _, view, bars, _ = op.operands
    require(tensor.type.rank == 2, "tma.load reads a 2-D tensor")
    require(isinstance(view.type, TileType) and view.type.space == "smem",
            "tma.load writes a shared stage")
    require(_is_barriers(bars), "tma.load completes on a ring of barriers")
    box = Box.of(op)
    layout = view.type.layout
    eb = view.type.dtype.bytes
    require(box.inner * eb in SPANS and box.outer <= MAX_BOX,
            f"a box is {', '.join(map(str, SPANS))} bytes wide and at most {MAX_BOX} rows")
    require(isinstance(layout, SmemLayout)
            and layout == tma_layout(layout, eb, box.inner * eb)
            and (layout.rows, layout.slabs) == (box.outer, box.slabs),
            f"TMA fills a stage of {box.inner * eb}-byte swizzled slabs, {box.slabs} of "
            f"{box.outer} x {box.inner}, not {layout}")


def _check_producer(op: Op) -> None:
    require(not op.regions[0].args, "the producer region takes no arguments")


# -- CPU semantics -----------------------------------------------------------------------------

@dataclass
class BarrierState:
    """One mbarrier: arrivals and transaction bytes still expected in its current phase, the
    phases completed so far, and the writes that land when the current phase completes."""

    count: int
    arrived: int = 0
    tx: int = 0
    phases: int = 0
    landing: list[SharedWrite] = field(default_factory=list)

    def arrive(self, state: InterpState, op: Op, arrivals: int, tx: int = 0) -> None:
        """``arrivals`` arrivals, expecting ``tx`` more transaction bytes this phase."""
        self.arrived += arrivals
        self.tx += tx
        if self.arrived > self.count:
            raise state.error(op, f"{self.arrived} arrivals on a barrier expecting "
                                  f"{self.count}")
        self.maybe_complete()

    def maybe_complete(self) -> None:
        if self.arrived == self.count and self.tx == 0:
            for write in self.landing:
                write.buffer.storage[write.offsets] = write.values
            for buffer in {id(w.buffer): w.buffer for w in self.landing}.values():
                buffer.refresh()
            self.landing = []
            self.arrived = 0
            self.phases += 1


class Roles:
    """The consumer (the interpreter's own thread) and the producer region (a coroutine on a
    thread of its own); exactly one runs at a time, handing over where a wait cannot
    complete."""

    def __init__(self) -> None:
        self.turn = "consumer"
        self.lock = threading.Condition()
        self.producer_done = False
        self.producer_error: Optional[BaseException] = None
        self.aborted = False
        self.thread: Optional[threading.Thread] = None
        self.blocked: dict[str, str] = {}  # per role, the wait it last handed over at

    def start(self, run: Callable[[], None]) -> None:
        def body() -> None:
            with self.lock:
                self.lock.wait_for(lambda: self.turn == "producer" or self.aborted)
            if not self.aborted:
                try:
                    run()
                except BaseException as err:  # noqa: BLE001 - handed to the consumer
                    self.producer_error = err
            with self.lock:
                self.producer_done = True
                self.turn = "consumer"
                self.lock.notify_all()
        self.thread = threading.Thread(target=body, daemon=True, name="tilec-producer")
        self.thread.start()

    def hand_over(self, me: str) -> None:
        """Let the other role run until it hands back (or the producer finishes)."""
        other = "producer" if me == "consumer" else "consumer"
        with self.lock:
            self.turn = other
            self.lock.notify_all()
            self.lock.wait_for(lambda: self.turn == me or self.aborted)
        if self.aborted and me == "producer":
            raise _Aborted()
        if me == "consumer" and self.producer_error is not None:
            error, self.producer_error = self.producer_error, None
            raise error

    def finish(self, ok: bool, progress: Callable[[], int]) -> None:
        """At the end of the program: run the producer to its end, or stop it. A producer
        that hands back with nothing changed waits for ever: a deadlock, raised as the
        producer's wait describes it."""
        if self.thread is None:
            return
        try:
            while ok and not self.producer_done:
                before = progress()
                self.hand_over("consumer")
                if not self.producer_done and progress() == before:
                    from tilec.cpu.interpreter import InterpreterError
                    raise InterpreterError(f"deadlock: the producer region never finishes: "
                                           f"{self.blocked.get('producer', '')}")
        finally:
            with self.lock:
                self.aborted = True
                self.lock.notify_all()
            self.thread.join()


class _Aborted(BaseException):
    """Ends a producer coroutine whose program failed."""


@dataclass
class TmaBlock:
    """The family's state in one thread block."""

    barriers: dict[int, list[BarrierState]] = field(default_factory=dict)
    roles: Optional[Roles] = None
    producer_state: Any = None  # the interpreter state the producer region runs in
    progress: int = 0  # barrier operations so far: a hand-over that changes none is stuck


def _block(state: InterpState) -> TmaBlock:
    from tilec.cpu.executor import block_state
    return block_state(state).movement_state(FAMILY, TmaBlock)


def _barrier(state: InterpState, op: Op, bars: Any, stage: int) -> BarrierState:
    """Barrier [stage] of a ring; every op that takes one counts as progress."""
    block = _block(state)
    block.progress += 1
    ring = block.barriers.get(id(bars))
    if ring is None:
        raise state.error(op, "operand is not an mbar.alloc of this program")
    if not 0 <= stage < len(ring):
        raise state.error(op, f"barrier {stage} of a ring of {len(ring)}")
    return ring[stage]


def _execute_alloc(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    import numpy as np
    stages = op.result.type.shape[0]
    value = np.zeros(stages, dtype=np.int64)
    _block(state).barriers[id(value)] = [BarrierState(op.attrs["count"]) for _ in range(stages)]
    return [value]


def _execute_expect(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    _barrier(state, op, operands[0], operands[1]).arrive(state, op, 1, op.attrs["bytes"])
    return []


@lru_cache(maxsize=None)
def _box_grid(box: Box) -> tuple[np.ndarray, np.ndarray]:
    """(outer, inner) index of every element of a box, its slabs side by side."""
    import numpy as np
    return tuple(np.meshgrid(np.arange(box.outer), np.arange(box.inner * box.slabs),
                             indexing="ij"))


@lru_cache(maxsize=None)
def _storage_offsets(layout: SmemLayout, box: Box) -> np.ndarray:
    import numpy as np
    return np.vectorize(layout.offset)(*_box_grid(box))


def _execute_load(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    from tilec.cpu.executor import SharedWrite, block_state, read_global
    tensor: TensorRef = operands[0]
    box = Box.of(op)
    buffer, stage = block_state(state).shared(state, op, operands[3], want_stage=True)
    barrier = _barrier(state, op, operands[4], operands[5])
    eb = op.operands[3].type.dtype.bytes
    # Box element (outer r, inner i) is tile element [r, i] along the op's coords' dims.
    inner0, outer0 = operands[1 + box.coords[0]], operands[1 + box.coords[1]]
    outer, inner = _box_grid(box)
    index = [None, None]
    index[box.coords[0]], index[box.coords[1]] = inner0 + inner, outer0 + outer
    values = read_global(state, op, tensor, index, [True, True])
    # The box lands as the stage's layout stores it (storage row = outer, column = inner).
    layout: SmemLayout = op.operands[3].type.layout
    offsets = stage * buffer.stage_size + _storage_offsets(layout, box)
    barrier.landing.append(SharedWrite(buffer, offsets.ravel(), values.ravel()))
    barrier.tx -= box.bytes(eb)
    barrier.maybe_complete()
    return []


def _execute_wait(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    barrier = _barrier(state, op, operands[0], operands[1])
    parity = operands[2]
    block = _block(state)
    me = "producer" if state is block.producer_state else "consumer"
    while barrier.phases % 2 == parity:
        roles = block.roles
        stuck = (f"it waits for phase parity {parity} of "
                 f"{op.operands[0].hint or 'a barrier'}[{operands[1]}], which nothing left "
                 f"can complete ({barrier.arrived} of {barrier.count} arrivals, "
                 f"{barrier.tx} bytes outstanding)")
        if roles is None or (me == "consumer" and roles.producer_done):
            raise state.error(op, f"deadlock: {stuck}; no producer is left to run")
        before = block.progress
        roles.blocked[me] = f"{op.name} at {op.loc}: {stuck}"
        roles.hand_over(me)
        if barrier.phases % 2 == parity and block.progress == before \
                and not (me == "consumer" and roles.producer_done):
            other = "consumer" if me == "producer" else "producer"
            raise state.error(op, f"deadlock: {stuck}; and the {other} is stuck: "
                                  f"{roles.blocked.get(other, 'at its end')}")
    return []


def _execute_arrive(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    if len(operands) > 2 and not operands[2]:
        return []
    # One arrival per consumer warpgroup: the executor runs the warpgroups as one; in a
    # cluster, those of the other blocks of its M row and N column too (the CPU runs one
    # block, whose peers run the same program on the tiles they share).
    _barrier(state, op, operands[0], operands[1]).arrive(
        state, op, state.kernel.schedule.roles.tile_warpgroups * (1 + len(arrive_peers(op))))
    return []


def _execute_turn(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return []  # the CPU runs a block's one tile: its warpgroup holds the turn throughout


def _execute_cluster_sync(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return []  # the CPU runs one block of the cluster


def _fold_ring_base(operands: list, attrs: Any, dtype: Any) -> int:
    return 0  # one tile per block, as the CPU runs a program and the checkers fold it


def _execute_ring_base(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return [0]


def _execute_producer(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    from tilec.cpu.executor import share_block_state
    block = _block(state)
    if block.roles is not None:
        raise state.error(op, "a second producer region in one program")
    producer = state.fork()
    share_block_state(state, producer)
    block.producer_state = producer
    block.roles = Roles()

    def run() -> None:
        try:
            producer.run_block(op.regions[0], [])
        except _Aborted:
            pass

    block.roles.start(run)
    roles = block.roles
    state.at_program_end(lambda ok: roles.finish(ok, lambda: block.progress))
    return []


# -- the race checker's view -------------------------------------------------------------------
# The producer and the consumers run different programs, ordered by the barriers' phases:
# tilec/analysis/mbarriers.py checks that protocol; the generic trace walks only the ops every
# thread runs, so these hooks have nothing to record.

class TmaFamily(MovementFamily):
    name = "tma"
    ops = frozenset({ALLOC, EXPECT, LOAD, WAIT, ARRIVE, PRODUCER, RING_BASE, CLUSTER_SYNC,
                     TURN_WAIT, TURN_PASS, *stream_k.EMITTERS})
    pipeline = PipelineOps(LOAD, EXPECT, WAIT)
    stage_writers = frozenset({LOAD})
    words = CompletionWords(
        completer=WAIT,
        not_covered="its stage's full barrier has not completed the phase the load joined",
        read_hint="wait on the stage's full barrier (mbar.wait) before reading it",
        refill_hint="wait on the stage's empty barrier before refilling it",
        end_hint="wait for every load's barrier before the kernel ends")

    def emitters(self) -> Mapping[str, Emitter]:
        return {ALLOC: _alloc, EXPECT: _expect, LOAD: _load, WAIT: _wait, ARRIVE: _arrive,
                PRODUCER: _producer, RING_BASE: _ring_base, CLUSTER_SYNC: _cluster_sync,
                TURN_WAIT: _turn_wait, TURN_PASS: _turn_pass, **stream_k.EMITTERS}

    def pipelined_copy_attrs(self, copy: Op) -> dict[str, Any]:
        return dict(copy.attrs)

    def trace_op(self, op: Op, tracer: Tracer) -> None:
        return None

    def completes_on_issue(self, op: Op) -> bool:
        return False

    def observe(self, event: Event, checker: Completions) -> None:
        return None

    def describe(self, event: Event) -> Optional[str]:
        return None

    def op_defs(self) -> tuple[OpDef, ...]:
        return (
            OpDef(ALLOC, "a ring of mbarriers in shared memory, each expecting `count` "
                  "arrivals a phase; thread 0 initialises them", 0, 1,
                  attrs=("count", "role"), check=_check_alloc, evaluate=_execute_alloc),
            OpDef(EXPECT, "arrive on barrier [stage] and expect `bytes` more transaction bytes "
                  "this phase", 2, 0, attrs=("bytes",), check=_check_barrier_operand,
                  evaluate=_execute_expect),
            OpDef(LOAD, "one elected thread copies a tile into a shared stage with TMA, "
                  "completing its bytes on barrier [stage]; out-of-bounds elements are zeros; "
                  "`multicast = n`: each of n blocks of a cluster (`multicast_stride` ranks "
                  "apart, 1 if absent) loads 1/n of the rows into every one's stage",
                  6, 0, attrs=("tensor", "box", "slabs", "coords"), check=_check_load,
                  evaluate=_execute_load),
            OpDef(WAIT, "wait until barrier [stage] has completed the phase of this parity",
                  3, 0, check=_check_barrier_operand, evaluate=_execute_wait),
            OpDef(ARRIVE, "one arrival on barrier [stage] from each consumer warpgroup (where "
                  "the optional third operand, a predicate, holds); `cluster = m`, "
                  "`cluster_n = n`: on that barrier of each block of its m x n cluster's M "
                  "row and N column", None, 0,
                  check=_check_arrive, evaluate=_execute_arrive),
            OpDef(RING_BASE, "the ring iterations this role ran for the block's earlier tiles: "
                  "0 when a block computes one tile (as the CPU runs it); a persistent "
                  "kernel's tile loop carries it", 0, 1, pure=True, fold=_fold_ring_base,
                  evaluate=_execute_ring_base),
            OpDef(CLUSTER_SYNC, "every thread of every block of the thread-block cluster "
                  "meets (the CPU runs one block: nothing to wait for)", 0, 0,
                  evaluate=_execute_cluster_sync),
            OpDef(TURN_WAIT, "pingpong consumers: wait for this warpgroup's turn on the tensor "
                  "cores, until the other warpgroup's mainloop (its previous tile's) is done; "
                  "the CPU runs a block's one tile, whose turn it is", 0, 0,
                  evaluate=_execute_turn),
            OpDef(TURN_PASS, "pingpong consumers: this warpgroup's mainloop is done (its "
                  "products complete); the other warpgroup's turn (for the block's next tile)",
                  0, 0,
                  evaluate=_execute_turn),
            OpDef(PRODUCER, "a region the producer warpgroup runs (its elected thread), beside "
                  "the consumers; the producer warpgroup exits at its end", 0, 0, regions=1,
                  check=_check_producer, evaluate=_execute_producer),
            *stream_k.OP_DEFS,  # the units a stream-K kernel's persistent blocks walk
        )

    def visible_at_barrier(self, state: Any) -> list[SharedWrite]:
        return []  # TMA writes become visible through their mbarrier, not bar.sync

    def store_emitters(self) -> Mapping[str, Emitter]:
        return {"tma": store_tile, "rows": store_rows}

    def kernel_params(self, kernel: Kernel) -> tuple[AbiParam, ...]:
        return tuple(AbiParam(f"{name}_tensor_map", TENSOR_MAP, name, "tensor_map")
                     for name in _mapped_tensors(kernel))


FAMILY = TmaFamily()
