"""The schedule: the decisions passes make, as typed attributes of the kernel.

A pass that decides something (the block and warp tiles, the shared layouts, the pipeline
depth, the K split, the swizzles) records it in ``kernel.schedule``, a frozen
:class:`Schedule`; later passes and the backend read only that. The printer shows it at the
top of every IR dump (``--dump-ir tiling`` shows what tiling chose) and the verifier checks
it against the ops (:func:`check_schedule`).

A user pass reads and changes it like any frozen dataclass::

    tiling = kernel.schedule.tiling
    kernel.schedule = kernel.schedule.with_(tiling=dataclasses.replace(tiling, raster_group=4))

(on its clone of the kernel: passes never modify their input).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from tilec.ir.types import DType
from tilec.target.layout import WARP_SIZE, SmemLayout

WARPGROUP = 4 * WARP_SIZE  # the threads of one warpgroup (wgmma, setmaxnreg)


@dataclass(frozen=True)
class OperandPlan:
    """How one matmul operand reaches the fragments: the shared layout it is stored in and
    the width of its global-to-shared vectors."""

    role: str  # "A" or "B"
    tensor: str  # the parameter it is read from
    layout: SmemLayout
    vec: int  # elements per global->shared access
    # The dtype it is stored in (global and shared memory) when that is not the product's:
    # converted in registers after the fragment load (``b.to(f16)`` in the K loop).
    source: str = ""
    # Elements the global side can move at once, where narrower than ``vec``: the copy
    # loads through registers (Options.misaligned_copy) and stores ``vec`` to shared at once.
    # 0: the global side moves ``vec``.
    global_vec: int = 0

    @property
    def k_major(self) -> bool:
        return self.layout.transposed == (self.role == "B")

    def stored_bytes(self, product_bytes: int) -> int:
        """Bytes of one element as stored: the source dtype's, else the product's."""
        return DType.parse(self.source).bytes if self.source else product_bytes

    @property
    def byte_loaded(self) -> bool:
        """Stored in 8 bits and converted in registers (w8a16: frag.ldbytes reads it)."""
        return bool(self.source) and DType.parse(self.source).bytes == 1

    def __str__(self) -> str:
        converted = f", converted from {self.source}" if self.source else ""
        narrow = f", global vec = {self.global_vec}" if self.global_vec else ""
        return (f"{{tensor = {self.tensor}, layout = {self.layout}, vec = {self.vec}"
                f"{narrow}{converted}}}")


@dataclass(frozen=True)
class TilingPlan:
    """The block tile, its warp grid and warp tiles, the instruction family that computes
    them (``kind``: a product family name) and each operand's shared storage."""

    block: tuple[int, int, int]  # BM, BN, BK
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    instruction: tuple[int, int, int]
    threads: int
    dtype: str
    operands: tuple[OperandPlan, OperandPlan]
    raster_group: int
    kind: str = "mma"  # the product family

    def operand(self, role: str) -> OperandPlan:
        return self.operands[0] if role == "A" else self.operands[1]

    @property
    def elem_bytes(self) -> int:
        return DType.parse(self.dtype).bytes

    def __str__(self) -> str:
        return (f"{{kind = {self.kind}, block = {_dims(self.block)}, warps = {_dims(self.warps)}, "
                f"warp_tile = {_dims(self.warp_tile)}, instruction = {_dims(self.instruction)}, "
                f"threads = {self.threads}, dtype = {self.dtype}, "
                f"raster_group = {self.raster_group}}}")


@dataclass(frozen=True)
class PipelinePlan:
    """The global-to-shared copy pipeline: how many shared stages each operand cycles
    through."""

    stages: int

    def __str__(self) -> str:
        return f"{{stages = {self.stages}}}"


@dataclass(frozen=True)
class SplitPlan:
    """Blocks per output tile along K (split-K); the launcher owns their workspace."""

    splits: int

    def __str__(self) -> str:
        return f"{{splits = {self.splits}}}"


@dataclass(frozen=True)
class RolesPlan:
    """Warp specialization: a producer warpgroup, whose elected thread issues the copies, and
    the consumer warpgroups that compute; ``setmaxnreg`` moves registers from the first to
    the second. The consumers are the block's first ``consumer_threads`` threads (the tiling
    plan's warps, so the accumulator layout and the epilogue see the same thread ids), the
    producer warpgroup the last 128. ``ring``: shared stages the two hand over through
    full/empty mbarrier pairs."""

    consumer_warpgroups: int
    producer_registers: int
    consumer_registers: int
    ring: int
    blocks_per_sm: int = 1  # blocks resident on an SM (.minnctapersm)
    # One block per SM (times blocks_per_sm) loops over the output tiles: the producer runs
    # ahead into the next tile while the consumers store this one (backend.ptx lowers it).
    persistent: bool = False
    # Blocks per thread-block cluster along M: with 2, the pair shares B (each block loads
    # half of every B stage and multicasts it; each consumer warpgroup hands a stage back
    # to both blocks' empty barriers).
    cluster: int = 1
    # Blocks per cluster along N (cluster x cluster_n blocks, rank = m + cluster * n): the
    # blocks of one M row of the cluster share A as those of one N column share B, and a
    # block hands each stage back to the cluster + cluster_n - 1 blocks that fill it.
    cluster_n: int = 1
    # "cooperative": the consumer warpgroups share each tile. "pingpong": each owns a whole
    # tile and they take the block's tiles in turn (warpgroup w its tiles w, w + 2, ...), the
    # mainloops handed over in order (ws.turn_wait / ws.turn_pass), so one warpgroup's
    # epilogue runs under the other's products; the ring's stages go to the warpgroup whose
    # tile they hold.
    consumers: str = "cooperative"
    # A persistent kernel's tile index also runs over the batch axis of a batched grid (the
    # batch outermost, each batch's tiles in grouped order): each tile's producer and
    # consumers take their batch's matrices (tensor.batch views) from the tile's batch.
    batches: bool = False
    # Stream-K (tilec/families/stream_k.py): the block's work is units of (tile, K steps),
    # whole tiles for the first waves and an even share of the last waves' K steps; the K
    # loops run over a unit's steps (ws.k_begin / ws.k_end) and split tiles meet in a
    # workspace (ws.sk_fixup) before the epilogue.
    stream_k: bool = False
    # The rows of the tile each consumer warpgroup owns (Options.warpgroup_rows): 64, one
    # wgmma m64 per k step, or 128, two (the accumulator layout's warp tile is 32 rows, two
    # 16-row strips 64 apart).
    warpgroup_rows: int = 64

    producer_threads: ClassVar[int] = WARPGROUP

    @property
    def pingpong(self) -> bool:
        return self.consumers == "pingpong"

    @property
    def cluster_blocks(self) -> int:
        """The blocks of one thread-block cluster."""
        return self.cluster * self.cluster_n

    @property
    def tile_warpgroups(self) -> int:
        """The consumer warpgroups that compute one tile (and hand each stage back)."""
        return 1 if self.pingpong else self.consumer_warpgroups

    @property
    def tile_threads(self) -> int:
        """The threads that compute one tile: its epilogue's barriers count these."""
        return self.tile_warpgroups * WARPGROUP

    @property
    def consumer_threads(self) -> int:
        return self.consumer_warpgroups * WARPGROUP

    @property
    def threads(self) -> int:
        return self.consumer_threads + self.producer_threads

    def __str__(self) -> str:
        return (f"{{producer = warpgroup {self.consumer_warpgroups} (1 elected thread, "
                f"{self.producer_registers} registers), consumers = {self.consumer_warpgroups} "
                f"warpgroups ({self.consumer_registers} registers)"
                + (f" of {self.warpgroup_rows} rows" if self.warpgroup_rows != 64 else "")
                + f", ring = {self.ring}"
                + (f", {self.blocks_per_sm} blocks per SM" if self.blocks_per_sm > 1 else "")
                + (", persistent" if self.persistent else "")
                + (" over batches x tiles" if self.persistent and self.batches else "")
                + (f", cluster = {self.cluster} blocks along M sharing B" if self.cluster > 1
                   else "")
                + (f", cluster_n = {self.cluster_n} blocks along N sharing A"
                   if self.cluster_n > 1 else "")
                + (", pingpong: a tile a warpgroup, in turn" if self.pingpong else "")
                + (", stream-K: whole tiles, then the last wave's K steps shared evenly"
                   if self.stream_k else "") + "}")


@dataclass(frozen=True)
class EpiloguePlan:
    """How the consumers write their output tile: ``via = "tma"``, into a ``staging_bytes``
    shared tile (TMA's swizzled slabs, ``span`` bytes wide) that one thread stores with TMA,
    a box of ``box`` (inner, outer elements) per slab; or ``via = "direct"``, each thread
    storing its own registers to global memory, for the ``reason`` given; or ``via =
    "rows"``, staged as for TMA, then stored a row at a time by the consumers (C's rows not
    16-byte aligned: TMA cannot address them); or ``via = "block_rows"``, an mma.sync
    kernel's tile staged in padded rows and stored a row at a time by the whole block
    (passes/row_store.py)."""

    via: str
    staging_bytes: int = 0
    box: tuple[int, int] = (0, 0)
    slabs: int = 0
    reason: str = ""
    # The consumers' writes into the staging tile ("tma" and "rows"): "stmatrix" (x4, four
    # 8x8 matrices a write) or "pairs" (st.shared) (tilec.families.staged_store.staging_writes).
    writes: str = ""
    # "tma" only: 0, the whole tile staged at once; else the slabs go out in turn through
    # this many one-slab buffers (passes/tma_store.py: the whole tile did not fit).
    buffers: int = 0
    # The staging tile's swizzle span in bytes ("tma" and "rows"): a slab's row, a box's
    # inner extent. 128 where the tile's rows take it; "tma" also 64 or 32.
    span: int = 128
    # Slabs in turn with 128-row warpgroups: each slab goes out a strip (64 rows of each
    # warpgroup, a box each) at a time, strip 0's slabs first.
    strips: int = 1

    def __str__(self) -> str:
        written = f", writes = {self.writes}" if self.writes else ""
        if self.via == "tma":
            turns = f" ({self.buffers} one-slab buffers in turn)" if self.buffers else ""
            narrow = f", {self.span}-byte swizzle" if self.span != 128 else ""
            boxes = (f"{self.slabs} slabs in {self.strips} strips, a box of "
                     f"{self.box[0]}x{self.box[1]} a warpgroup's strip" if self.strips > 1
                     else f"{self.slabs} boxes of {self.box[0]}x{self.box[1]}")
            return (f"{{via = tma, staging = {self.staging_bytes} bytes{turns}{written}"
                    f"{narrow}, {boxes}}}")
        if self.via in ("rows", "block_rows"):
            return f"{{via = {self.via}, staging = {self.staging_bytes} bytes{written}}}"
        return f"{{via = direct, reason = {self.reason!r}}}"


@dataclass(frozen=True)
class OperandConflicts:
    """The swizzle pass's figures for one operand: the worst bank-conflict degree of each
    shared access (``copy`` stores and the family's fragment reads), under the chosen
    swizzle and under none (1 = conflict-free)."""

    role: str
    swizzle: str
    chosen: tuple[tuple[str, int], ...]
    linear: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        def text(pairs: tuple[tuple[str, int], ...]) -> str:
            return "{" + ", ".join(f"{k} = {v}" for k, v in pairs) + "}"
        return (f"{{swizzle = {self.swizzle}, conflicts = {text(self.chosen)}, "
                f"linear = {text(self.linear)}}}")


@dataclass(frozen=True)
class SwapPlan:
    """The swap_product pass's decision on a product it was asked to swap (one converting
    an 8-bit B in registers; under Options.swap_product "always", any): whether it computes
    the transpose (C.T = B.T @ A.T, B.T wgmma's A), and what that is or why not."""

    swapped: bool
    why: str
    formula: str = ""  # what the swapped kernel computes: "C.T = W @ A.T" or "C.T = B.T @ A.T"

    def __str__(self) -> str:
        return f"{{swapped = {str(self.swapped).lower()}, why = {self.why!r}}}"


@dataclass(frozen=True)
class Schedule:
    """Every decision made so far; None where the pass that makes it has not run."""

    tiling: Optional[TilingPlan] = None
    pipeline: Optional[PipelinePlan] = None
    split: Optional[SplitPlan] = None
    conflicts: tuple[OperandConflicts, ...] = ()
    roles: Optional[RolesPlan] = None
    epilogue: Optional[EpiloguePlan] = None
    swap: Optional[SwapPlan] = None

    def with_(self, **changes: Any) -> "Schedule":
        return dataclasses.replace(self, **changes)

    @property
    def stages(self) -> int:
        return self.pipeline.stages if self.pipeline is not None else 1

    @property
    def splits(self) -> int:
        return self.split.splits if self.split is not None else 1

    @property
    def threads(self) -> int:
        """Threads a block is launched with: the tiling's, and a producer warpgroup's when
        the warps are specialized."""
        if self.roles is not None:
            return self.roles.threads
        return self.tiling.threads if self.tiling is not None else 128

    def conflict_report(self) -> dict[str, dict[str, Any]]:
        """The swizzle pass's figures as plain data: role -> {"swizzle", "chosen", "linear"},
        the last two mapping each access to its worst conflict degree."""
        return {c.role: {"swizzle": c.swizzle, "chosen": dict(c.chosen), "linear": dict(c.linear)}
                for c in self.conflicts}

    def lines(self) -> list[str]:
        """The text form, one ``#name = {...}`` line per decision (the printer's header)."""
        out = []
        if self.swap is not None:
            out.append(f"#swap = {self.swap}")
        if self.tiling is not None:
            out.append(f"#tiling = {self.tiling}")
            out.extend(f"#tiling.{op.role} = {op}" for op in self.tiling.operands)
        if self.pipeline is not None:
            out.append(f"#pipeline = {self.pipeline}")
        if self.split is not None:
            out.append(f"#split = {self.split}")
        out.extend(f"#conflicts.{c.role} = {c}" for c in self.conflicts)
        if self.roles is not None:
            out.append(f"#roles = {self.roles}")
        if self.epilogue is not None:
            out.append(f"#epilogue = {self.epilogue}")
        return out


def _dims(values: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def check_schedule(kernel: Any) -> list[str]:
    """What in ``kernel.schedule`` contradicts itself or the ops (empty when consistent):
    the warp grid covers the block, the thread count is the warps', each operand's shared
    buffer has the planned layout and the pipeline's stage count, the grid carries the
    split."""
    schedule: Schedule = kernel.schedule
    problems: list[str] = []
    tiling = schedule.tiling
    if tiling is not None:
        (bm, bn, _), (wm, wn), (tm, tn) = tiling.block, tiling.warps, tiling.warp_tile
        if (wm * tm, wn * tn) != (bm, bn):
            problems.append(f"{wm}x{wn} warps of {tm}x{tn} do not cover the {bm}x{bn} block")
        if tiling.threads != wm * wn * WARP_SIZE:
            problems.append(f"{tiling.threads} threads for {wm}x{wn} warps")
        if [op.role for op in tiling.operands] != ["A", "B"]:
            problems.append("the tiling plans operands A and B, in that order")
    roles = schedule.roles
    if roles is not None and tiling is not None and roles.tile_threads != tiling.threads:
        problems.append(f"{roles.tile_warpgroups} consumer warpgroups a tile for the tiling's "
                        f"{tiling.threads} threads")
    if roles is not None and roles.consumers not in ("cooperative", "pingpong"):
        problems.append(f"consumers {roles.consumers!r} (cooperative or pingpong)")
    if roles is not None and roles.pingpong and (roles.consumer_warpgroups != 2
                                                 or not roles.persistent):
        problems.append(f"pingpong consumers are two warpgroups of a persistent block, not "
                        f"{roles.consumer_warpgroups}" + ("" if roles.persistent
                                                         else " of a block a tile"))
    if roles is not None and roles.stream_k and (not roles.persistent or roles.pingpong
                                                 or roles.cluster_blocks > 1):
        problems.append("stream-K units are walked by a persistent block of cooperative "
                        "consumers, without a cluster")
    if (roles is not None and tiling is not None and roles.warpgroup_rows != 64
            and (tiling.warp_tile[0] * (WARPGROUP // WARP_SIZE) != roles.warpgroup_rows
                 or roles.tile_warpgroups * roles.warpgroup_rows != tiling.block[0])):
        problems.append(f"consumer warpgroups of {roles.warpgroup_rows} rows for a warp tile "
                        f"of {tiling.warp_tile[0]} rows and a {tiling.block[0]}-row block")
    if roles is not None and roles.ring != schedule.stages:
        problems.append(f"a ring of {roles.ring} stages, the pipeline {schedule.stages}")
    for op in kernel.walk():
        if op.name == "smem.alloc" and tiling is not None:
            role = op.attrs.get("role")
            rtype = op.result.type
            if role in ("A", "B") and rtype.layout != tiling.operand(role).layout:
                problems.append(f"the shared buffer of {role} is {rtype.layout}, the tiling "
                                f"plans {tiling.operand(role).layout}")
            if schedule.pipeline is not None and rtype.shape[0] != schedule.stages:
                problems.append(f"the shared buffer of {role} has {rtype.shape[0]} stages, the "
                                f"pipeline {schedule.stages}")
        if op.name == "tile.grid":
            if op.attrs.get("split_k", 1) != schedule.splits:
                problems.append(f"the grid splits K {op.attrs.get('split_k', 1)} ways, the "
                                f"schedule {schedule.splits}")
    return problems
