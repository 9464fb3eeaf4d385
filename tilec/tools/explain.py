"""``tilec explain``: what a compiled kernel does on the GPU, computed without one.

:func:`explain` gathers, from the IR after the last pass and the tiling plan:

- the tile hierarchy (block, warp grid and warp tile, the instruction, threads) and each
  operand's global-to-shared copy mapping;
- the pipeline schedule as the hazard checker runs it (:mod:`tilec.analysis.hazards`): the
  prologue's copies, then the K loop's waits, barriers, copies, commits, fragment loads and products
  with their stage indices written as functions of the iteration ``it``
  (:mod:`tilec.tools.explain_schedule`);
- the shared-memory plan, laid out as the backend lays it out (``backend/copies.py``,
  ``tilec/families/cp_async.py``);
- bank conflicts of every shared access the backend emits, enumerated instance by instance
  with :mod:`tilec.target.layout`, beside what an unswizzled layout would give;
- the register estimate, and ptxas's own report when ``ptxas`` is on PATH;
- given the sizes, which operands a launch would pack into aligned scratch
  (:mod:`tilec.launch.packing`), and how its blocks fall into waves on the SMs
  (:mod:`tilec.tools.explain_launch`).

What depends on the product family (:mod:`tilec.families.products`: ``mma`` for f16/bf16,
``simt`` for f32, ``tf32`` for f32 with ``f32_math="tf32"``) is asked of the family: the
instructions' names (its ``explain_text``), the per-k-step counts, the warp-tile and
instruction lines, and the fragment reads the bank-conflict rows enumerate (the same
:meth:`~tilec.families.product.ProductFamily.read_addresses` the swizzle pass scores).

:func:`render_explanation` turns the :class:`Explanation` into the text the CLI prints.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from tilec.compiler import Compiled
from tilec.analysis.hazards import HazardError, check_schedule, schedule_stages, trip_counts
from tilec.analysis.mbarriers import trip_counts as roles_trip_counts
from tilec.ir.core import Kernel, Op, Value, defining_op, require_grid
from tilec.families.product import LanePiece
from tilec.families.products import WGMMA_FAMILIES, family_named, family_of, wgmma_declined
from tilec.families.staged_store import STAGING_WRITES_TEXT
from tilec.families.tma import TURN_BARRIER
from tilec.families.tma_boxes import LOAD as TMA_LOAD, SLAB_BYTES, Box, staging_layout
from tilec.families.wgmma import registers_at_entry
from tilec.target.layout import (BANK_BYTES, WARP_SIZE, SmemLayout, Swizzle, conflict_degree,
                                 copy_map, copy_store_addresses, operand_k_major)
from tilec.target.smem import SharedLayout, place
from tilec.tools.explain_launch import launch_text
from tilec.tools.explain_schedule import BYTE_PAIR_READ, Schedule, schedule
from tilec.ir.schedule import OperandPlan, RolesPlan, TilingPlan
from tilec.ir.types import ACCUMULATOR_DTYPES, FP8_DTYPES, DType
from tilec.ir.views import view_source
from tilec.options import schedule_options_given
from tilec.passes.promote_accumulation import partial_registers
from tilec.passes.row_store import REASON_PREFIX as ROW_STORE_PREFIX
from tilec.passes.tma_store import NAME as TMA_STORE_PASS
from tilec.passes.tiling import REGISTER_OVERHEAD, registers_estimate

# The static shared memory a block gets without opting in (cuFuncSetAttribute).
STATIC_SMEM_LIMIT = 48 * 1024
PTXAS_TIMEOUT_S = 120


# ------------------------------------------------------------------------------- data

@dataclass(frozen=True)
class CopyMapping:
    """How the block's threads move one operand's tile from global to shared memory."""

    role: str
    tensor: str
    rows: int  # the tile as stored in shared memory: rows x cols, cols contiguous
    cols: int
    transposed: bool  # stored as the transpose of the logical tile (k-major B, or B.T)
    vec_elems: int
    vec_bytes: int
    per_thread: int  # accesses each thread makes per tile
    threads_per_row: int
    rows_per_pass: int  # rows all threads cover with one access each
    mode: str  # "async" (cp.async), "sync" (ld.global then st.shared) or "tma" (boxes)


@dataclass(frozen=True)
class Hierarchy:
    block: tuple[int, int, int]
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    instruction: tuple[int, int, int]
    threads: int
    dtype: str
    kind: str  # the product family's name (tilec.families.products.family_named)
    k_step: int  # k covered by one fragment load and one product
    k_steps: int  # k-steps per BK
    products_per_k_step: int  # product instructions per k-step: per warp (mma), per thread
    loads_per_k_step: tuple[int, int]  # fragment loads per k-step (same issuer), A and B
    copies: tuple[CopyMapping, ...]
    lanes: Optional[LanePiece] = None  # simt: what one lane computes
    split_k: int = 1  # blocks per output tile along K
    split_sum: str = "f32"  # the dtype of the partials the slices meet with (f32 or i32)
    producer_threads: int = 0  # warp specialization: the producer warpgroup beside the warps
    # Copies of the warp grid, each computing tiles of its own (pingpong consumers: 2).
    tile_groups: int = 1
    # Operands stored in another dtype than the product's, converted in registers: role ->
    # the stored dtype (tiling's OperandPlan.source).
    converted: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Buffer:
    """One shared buffer as the backend allocates it."""

    name: str
    role: str
    stages: int
    rows: int
    cols: int
    dtype: str
    elem_bytes: int
    stage_bytes: int
    offset: int
    alignment: int
    layout: str

    @property
    def total_bytes(self) -> int:
        return self.stage_bytes * self.stages


@dataclass(frozen=True)
class SharedMemory:
    buffers: tuple[Buffer, ...]
    total_bytes: int
    backend_bytes: int  # what the backend declared: equal to total_bytes unless out of step
    limit_bytes: int  # the arch's opt-in maximum per block
    arch: str

    @property
    def needs_opt_in(self) -> bool:
        return self.total_bytes > STATIC_SMEM_LIMIT


@dataclass(frozen=True)
class Conflicts:
    """Worst bank-conflict degree of one kind of shared access over all its instances
    (stages, warps, accesses or k-steps and pieces), under the buffer's layout and under the
    same buffer unswizzled. 1 = conflict-free; n = n times the minimum wavefronts."""

    role: str
    access: str  # "cp.async 16 B", "st.shared.b16", "ldmatrix.x4[.trans]", "ld.shared.v4",
    # "ld.shared.b32"
    layout: str
    instances: int
    worst: int
    at_worst: int  # instances that reach the worst degree
    linear: int
    pass_figure: Optional[int]  # the swizzle pass's own figure (the schedule), when it has one


@dataclass(frozen=True)
class Registers:
    estimate: int
    accumulators: int
    fragments: int
    overhead: int
    # Warp specialization: setmaxnreg's (producer, consumers) registers, and what a thread
    # of the block starts with (its share of the register file, as ptxas allocates at entry).
    rebalanced: Optional[tuple[int, int, int]] = None


@dataclass(frozen=True)
class PtxasReport:
    arch: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    static_smem_bytes: int  # tilec's buffers are dynamic, so ptxas sees none of them
    barriers: int
    log: str


@dataclass(frozen=True)
class Explanation:
    kernel: str
    source: str
    arch: str
    options: str
    hierarchy: Hierarchy
    schedule: Schedule
    shared: SharedMemory
    conflicts: tuple[Conflicts, ...]
    registers: Registers
    ptxas: Optional[PtxasReport]
    ptxas_note: str  # why there is no ptxas report, or ""
    hazard: str  # the hazard checker's error, "" when the schedule is sound
    checked_trip_counts: tuple[int, ...]
    # What a launch on row-major arrays of the given sizes packs (PackPlan.describe());
    # None when the sizes are not known.
    packing: Optional[tuple[str, ...]] = None
    # The operands it reads in place though their rows are off 128-byte lines, and why
    # (PackPlan.in_place).
    in_place: tuple[str, ...] = ()
    # How the consumers write C (schedule.epilogue: warp-specialized kernels, and mma.sync
    # ones asked for misaligned_store = rows), in words.
    epilogue: str = ""
    cluster: int = 1  # blocks per thread-block cluster along M
    cluster_n: int = 1  # and along N
    cluster_walk: str = ""  # how a cluster's blocks walk the tiles, in words
    cluster_shares: str = ""  # the operand tile a cluster's blocks share, in words
    consumers: str = ""  # pingpong consumers: how the warpgroups take turns, in words
    declined: str = ""  # why an sm_90a kernel is not on the wgmma path, in words
    unapplied: str = ""  # options of warp-specialized kernels given to one that is not
    swap: str = ""  # the swap_product pass's decision, in words
    batch: str = ""  # how a batched program's grid axis picks its matrices, in words
    tile_loop: str = ""  # how a persistent kernel's blocks walk the tiles, in words
    accumulation: str = ""  # how wgmma's fp8 products are summed (Options.fp8_accumulation)
    # Given the sizes: the launch's blocks, how many an SM holds and their waves, in words.
    launch: str = ""
    # Under peel=True, given the sizes: where the launch is cut in two, or why it is not.
    peel: str = ""


# ----------------------------------------------------------------------------- gather

def explain(compiled: Compiled, *, ptxas: bool = True,
            packing: Optional[Sequence[str]] = None, in_place: Sequence[str] = (),
            tile_axes: Optional[Sequence[int]] = None, peel: str = "") -> Explanation:
    """Everything :func:`render_explanation` prints about a compiled kernel. ``ptxas``:
    run ptxas for its register report when it is on PATH. ``packing``: the launch's operand
    packing in words (:meth:`tilec.launch.packing.PackPlan.describe`), when the sizes are
    known, and ``in_place`` the operands it reads in place though their rows are off
    128-byte lines (:attr:`~tilec.launch.packing.PackPlan.in_place`). ``tile_axes``: the
    program's grid at those sizes (the lowered kernel's
    :func:`tilec.launch.binding.grid_size`), for the launch's waves (of the whole tiles'
    part where ``peel``, the peeling in words, cuts the launch in two)."""
    kernel = compiled.kernel
    plan: TilingPlan = kernel.schedule.tiling
    options = compiled.options
    stages = schedule_stages(kernel)
    layout = place(kernel)
    buffers = _buffers(layout)
    hazard = ""
    try:
        check_schedule(kernel)
    except HazardError as err:
        hazard = err.render()
    report, note = None, "not run"
    if ptxas:
        report, note = run_ptxas(compiled.ptx, options.arch, compiled.rendered.entry)
    swizzle = options.swizzle if isinstance(options.swizzle, str) else str(options.swizzle)
    # Options only one family's backend reads (mma_order) are shown for that family alone.
    kind_options = "".join(f", {name.replace('_', ' ')} {getattr(options, name)}"
                           for name in family_of(plan).explain_text.options)
    hierarchy = _hierarchy(kernel, plan)
    registers = _registers(plan, kernel.schedule.roles, partial_registers(kernel))
    launch = ""
    if tile_axes is not None:
        launch = launch_text(compiled, list(tile_axes),
                             report.registers if report is not None else registers.estimate)
    return Explanation(
        kernel=compiled.name,
        source=kernel.source_file,
        arch=options.arch,
        options=(f"stages {stages}, swizzle {swizzle}, pipeline_fragments "
                 f"{'on' if options.pipeline_fragments else 'off'}{kind_options}, "
                 f"raster group {options.raster_group}"
                 # The PTX is LLVM's: say so, and at which level of its pipeline.
                 + (f", backend llvm (LLVM -O{options.llvm_opt})"
                    if options.backend == "llvm" else "")
                 # Passes switched off: what the rest of the report shows is without them.
                 + (f", passes off: {', '.join(options.disable)}" if options.disable
                    else "")),
        hierarchy=hierarchy,
        schedule=schedule(kernel, stages, bool(options.pipeline_fragments)),
        shared=SharedMemory(tuple(buffers), layout.total, compiled.rendered.smem_bytes,
                            options.smem_limit, options.arch),
        conflicts=tuple(_conflicts(kernel, plan, buffers)),
        registers=registers,
        ptxas=report,
        ptxas_note=note,
        hazard=hazard,
        checked_trip_counts=tuple(trip_counts(stages) if kernel.schedule.roles is None
                                  else roles_trip_counts(stages)),
        packing=None if packing is None else tuple(packing),
        in_place=tuple(in_place),
        peel=peel,
        epilogue=_epilogue_text(kernel.schedule.epilogue, kernel.schedule.tiling,
                                options.disable if kernel.schedule.roles else ()),
        cluster=(kernel.schedule.roles.cluster if kernel.schedule.roles is not None else 1),
        cluster_n=(kernel.schedule.roles.cluster_n if kernel.schedule.roles is not None
                   else 1),
        cluster_walk=_cluster_walk(kernel),
        cluster_shares=_cluster_shares(kernel),
        consumers=_consumers_text(kernel),
        declined=_wgmma_declined(plan, options),
        unapplied=_unapplied_options(kernel, options),
        swap=_swap_text(kernel),
        batch=_batch_text(kernel),
        tile_loop=_tile_loop_text(kernel),
        accumulation=_accumulation_text(kernel),
        launch=launch,
    )


def _swap_text(kernel: Kernel) -> str:
    """What passes/swap_product.py did with a product it was asked to swap: the swap, and
    that the block tile above is C.T's; or why it left the product as written."""
    swap = kernel.schedule.swap
    if swap is None:
        return ""
    if swap.swapped:
        return (f"{swap.why} (the block tile above is C.T's: BN x BM; "
                "--disable swap_product keeps the product as written)")
    return f"not swapped (the product as written): {swap.why}"


def _accumulation_text(kernel: Kernel) -> str:
    """How a wgmma8 kernel sums its fp8 products (passes/promote_accumulation.py), in words;
    "" for other kernels."""
    n = partial_registers(kernel)
    if n == 0:
        fp8 = any(op.name == "wgmma.mma" and op.operands[0].type.dtype in FP8_DTYPES
                  for op in kernel.walk())
        return ("fast: the fp8 products sum in the tensor cores' own accumulator for the whole "
                "K loop (as cuBLAS's use_fast_accum=True; --fp8-accumulation promoted adds "
                "each K step's sums into f32 instead)") if fp8 else ""
    return (f"promoted: each K step's wgmma group starts afresh (scale-d false) in a second "
            f"set of {n} f32 accumulators a thread, completes (wgmma.wait_group 0) and is "
            f"added into the main set ({n} add.f32 a thread a step), as cuBLAS's default")


def _cluster_shares(kernel: Kernel) -> str:
    """The tiles the blocks of a cluster share (passes/warp_specialize.py multicasts the
    operand whose tile does not move along the paired axis, and with cluster_n the other
    along the crossed one), in words; "" without one."""
    shared = []
    for op in kernel.walk():
        if op.name != TMA_LOAD or op.attrs.get("multicast", 1) == 1:
            continue
        # The load's stage view is of the ring buffer, whose allocation names the operand.
        role = op.operands[3].owner.operands[0].owner.attrs.get("role", "")
        along = ("the blocks of one N column" if op.attrs.get("multicast_stride", 1) == 1
                 else "the blocks of one M row")
        shared.append(f"{op.attrs['tensor']}'s tile"
                      + (f" (the product's {role})" if role else "")
                      + (f" among {along}" if kernel.schedule.roles.cluster_n > 1 else ""))
    return " and ".join(shared)


def _cluster_walk(kernel: Kernel) -> str:
    """How the blocks of a cluster take their tiles (backend/grid.py, backend.ptx's tile
    loop), in words; "" without a cluster."""
    from tilec.backend.grid import cluster_group
    roles = kernel.schedule.roles
    if roles is None or roles.cluster_blocks == 1:
        return ""
    grid = require_grid(kernel)
    group = grid.attrs.get("raster_group") or 1
    pairs = cluster_group(group, roles.cluster)
    cm, cn = roles.cluster, roles.cluster_n
    if cn == 1:
        text = f"block r of cluster p takes M tile {cm}p + r of the cluster's N column"
    else:
        rm = "r" if cm == 1 else f"r % {cm}"
        rn = "r" if cm == 1 else f"r / {cm}"
        text = (f"block r of the cluster at (P, Q) takes M tile {cm}P + {rm} and N tile "
                f"{cn}Q + {rn}")
    text += (f"; clusters in grouped order, {pairs} a group ({group} rows of tiles, the "
             "raster group)")
    if roles.persistent:
        text += (f"; persistent: the {roles.cluster_blocks} blocks walk the same clusters' "
                 "tiles and ring iterations")
    if grid.attrs.get("batch_axis") is not None:
        text += (f"; a batch's M tiles go {cm} a cluster within it (its B tile "
                 f"is one batch's): a count not a multiple of {cm} leaves the last "
                 "cluster's last blocks past M in every batch, each loading its share of B "
                 "for its peers and storing nothing")
    return text


def _tile_loop_text(kernel: Kernel) -> str:
    """A persistent kernel's tile loop (backend/tile_order.py) in words; "" for others."""
    from tilec.backend import tile_order
    used = tile_order.divisors_used(kernel)
    if not used:
        return ""
    divisors = ", ".join(tile_order.param_name(divisor, "*") for divisor in used)
    roles = kernel.schedule.roles
    turns = "; pingpong: each warpgroup takes every other one" if roles.pingpong else ""
    # Stream-K's blocks share K steps, so its grid is every SM's even with fewer tiles.
    cap = "every SM's" if roles.stream_k else "at most one a tile"
    return (f"the blocks ({roles.blocks_per_sm} per SM, {cap}) walk the tiles "
            "%ctaid.x, + %nctaid.x, "
            f"... in grouped order{turns}; a tile's ids come from multiply-highs by magic "
            f"numbers the launch computes ({divisors}), not from runtime divisions")


def _batch_text(kernel: Kernel) -> str:
    """A batched program (tensor.batch views) in words: which grid axis picks the matrices
    of which tensors, and how each address or TMA coordinate takes the batch."""
    views = [op for op in kernel.walk() if op.name == "tensor.batch"]
    if not views:
        return ""
    grid = require_grid(kernel)
    index = views[0].operands[1]
    axis = grid.results.index(index) if index in grid.results else None
    names = [source.name for source in (view_source(kernel, op.operands[0]) for op in views)
             if source is not None]
    tma = any(op.name == "tma.load" or op.attrs.get("via") == "tma" for op in kernel.walk())
    launched = (" (launched on CUDA's y; each batch's tiles folded on x in grouped order)"
                if grid.attrs.get("batch_axis") == axis else "")
    roles = kernel.schedule.roles
    if roles is not None and roles.persistent and roles.batches:
        # The persistent tile loop (backend.ptx._tile_loop) numbers batches x tiles.
        launched = (" (persistent: a block per SM walks the tile index t over batches x "
                    "tiles, batch t / (tiles a batch), then that batch's tiles in grouped "
                    "order)")
    return (f"grid axis {axis} ({index.hint or 'b'}) picks matrix b of "
            f"{', '.join(dict.fromkeys(names))}{launched}: each base address moves by b x its "
            "batch stride (a batch stride of 0 shares one matrix among all batches)"
            + ("; their TMA boxes go through 3-D tensor maps at batch coordinate b "
               "(0 for a stride-0 batch), so ragged rows clip at each batch's own M"
               if tma else ""))


def _wgmma_declined(plan: TilingPlan, options) -> str:
    """On sm_90a, why the kernel multiplies with an older family (the rule the tiling pass
    applied); empty elsewhere and on the wgmma path."""
    reason = wgmma_declined(plan, options)
    if reason:
        return f"the {plan.kind} family multiplies: {reason}"
    if options.arch in WGMMA_FAMILIES[0].archs and \
            not any(plan.dtype in family.dtypes for family in WGMMA_FAMILIES):
        return f"the {plan.kind} family multiplies: wgmma here takes f16/bf16 or 8-bit operands"
    return ""


def _unapplied_options(kernel: Kernel, options) -> str:
    """The SCHEDULE_OPTIONS given to a kernel without the warp-specialized schedule, in
    words: they were accepted and changed nothing."""
    given = schedule_options_given(options) if kernel.schedule.roles is None else []
    if not given:
        return ""
    return (f"{', '.join(f'{name}={getattr(options, name)!r}' for name in given)}: "
            f"{'they shape' if len(given) > 1 else 'it shapes'} sm_90a's warp-specialized "
            "kernels (wgmma fed by TMA); this one copies with cp.async")


def _epilogue_text(plan, tiling, disabled: tuple[str, ...] = ()) -> str:
    """The epilogue's stores (``disabled``: the passes switched off in a kernel whose
    epilogue the tma_store pass would plan)."""
    if plan is None:
        # The pass that plans it switched off: each thread's own stores, said so.
        return (f"each thread stores its registers (st.global): the {TMA_STORE_PASS} pass "
                "is off") if TMA_STORE_PASS in disabled else ""
    if plan.via == "tma" and plan.buffers:
        rows = tiling.block[0] if tiling is not None else plan.box[1]
        units = (f"{plan.slabs} slabs of each of the {plan.strips} 64-row strips of the "
                 f"128-row warpgroups in turn, each stored by TMA ({plan.box[0]}x"
                 f"{plan.box[1]} a warpgroup" if plan.strips > 1 else
                 f"{plan.slabs} slabs in turn, each stored by TMA ({plan.box[0]}x{plan.box[1]}")
        return (f"registers -> {plan.buffers} one-slab staging buffers sC in shared memory "
                f"({STAGING_WRITES_TEXT[plan.writes]}; TMA's {plan.span}-byte swizzle), the "
                f"{units}, one thread) while the next is written into the other buffer: the "
                f"whole {rows}x{plan.box[0] * plan.slabs} tile's staging does not fit beside "
                "the ring")
    if plan.via == "tma":
        return (f"registers -> staging tile sC in shared memory "
                f"({STAGING_WRITES_TEXT[plan.writes]}; TMA's {plan.span}-byte "
                f"swizzle) -> {plan.slabs} TMA stores of {plan.box[0]}x{plan.box[1]} "
                "(cp.async.bulk.tensor, one thread; TMA clips the tile at the edges)")
    if plan.via == "rows":
        return (f"registers -> staging tile sC in shared memory "
                f"({STAGING_WRITES_TEXT[plan.writes]}; 128-byte swizzle) "
                "-> the consumers store it a row at a time (st.global.b16, 64 contiguous bytes "
                "a warp instruction; C's rows are not 16-byte aligned, so not TMA)")
    if plan.via == "block_rows":
        return ("registers -> staging tile sC in shared memory (st.shared, padded rows) -> "
                "the block stores it a row at a time (st.global.b16, 64 contiguous bytes a "
                "warp instruction; C's rows are not 16-byte aligned)")
    if plan.via == "direct" and plan.reason.startswith(ROW_STORE_PREFIX):
        why = plan.reason[len(ROW_STORE_PREFIX):]
        return f"each thread stores its registers (st.global): not by rows, as {why}"
    return f"each thread stores its registers (st.global): not through TMA, as {plan.reason}"


def _copy_ops(kernel: Kernel) -> dict[str, Op]:
    """One copy op per operand role (they all share attributes): cp.async's copies, or the
    TMA family's box loads."""
    copies: dict[str, Op] = {}
    for op in kernel.walk():
        if op.name == "copy.global_to_shared":
            rank = op.operands[0].type.rank
            copies.setdefault(_role(op.operands[1 + rank]), op)
        elif op.name == TMA_LOAD:
            copies.setdefault(_role(op.operands[3]), op)
    return copies


def _role(view: Value) -> str:
    stage = defining_op(view)
    alloc = defining_op(stage.operands[0]) if stage is not None else None
    return alloc.attrs["role"] if alloc is not None else "?"


def _hierarchy(kernel: Kernel, plan: TilingPlan) -> Hierarchy:
    copies = _copy_ops(kernel)
    mappings = []
    for op_plan in plan.operands:
        elem_bytes = op_plan.stored_bytes(plan.elem_bytes)
        layout = op_plan.layout
        cmap = copy_map(layout.rows, layout.cols, op_plan.vec, plan.threads)
        per_row = layout.cols // op_plan.vec
        op = copies.get(op_plan.role)
        if op is not None and op.name == TMA_LOAD:
            # One elected thread, one box a slab (a swizzle span wide) of the stored tile.
            box = Box.of(op)
            mappings.append(CopyMapping(
                op_plan.role, op_plan.tensor, layout.rows, layout.cols, layout.transposed,
                box.inner, box.inner * elem_bytes, box.slabs, 1, box.outer, "tma"))
            continue
        mode = op.attrs["mode"] if op is not None else "sync"
        mappings.append(CopyMapping(
            op_plan.role, op_plan.tensor, layout.rows, layout.cols, layout.transposed,
            op_plan.vec, op_plan.vec * elem_bytes, cmap.per_thread, per_row,
            max(1, plan.threads // per_row), mode))
    family = family_of(plan)
    accumulator = family.layout("C", plan.warps, plan.warp_tile)
    return Hierarchy(
        plan.block, plan.warps, plan.warp_tile, plan.instruction, plan.threads, plan.dtype,
        kind=family.name, k_step=family.k_step, k_steps=plan.block[2] // family.k_step,
        products_per_k_step=family.products_per_k_step(accumulator),
        loads_per_k_step=family.loads_per_k_step(plan), copies=tuple(mappings),
        lanes=family.lane_piece(accumulator), split_k=kernel.schedule.splits,
        split_sum=_split_sum(kernel),
        producer_threads=(kernel.schedule.roles.producer_threads
                          if kernel.schedule.roles is not None else 0),
        tile_groups=(2 if kernel.schedule.roles is not None and kernel.schedule.roles.pingpong
                     else 1),
        converted={op.role: op.source for op in plan.operands if op.source})


def _consumers_text(kernel: Kernel) -> str:
    """Pingpong consumers, or a stream-K schedule, in words ("" for plain cooperative
    ones)."""
    roles = kernel.schedule.roles
    if roles is not None and roles.stream_k:
        from tilec.families.stream_k import SHARED_WAVES
        shared = ("the partial last wave" if SHARED_WAVES == 1
                  else f"the last {SHARED_WAVES} waves (the partial one and whole ones)")
        return ("cooperative, stream-K: the persistent blocks take whole tiles round the grid, "
                f"then share {shared}'s (tile, K step) iterations evenly, a contiguous range a "
                "block (ws.k_begin / ws.k_end bound the K loops per unit); a tile split over "
                "blocks meets in a workspace after the products' final wait (ws.sk_fixup): "
                "a later part is stored (st.global.v4, fence, red.release.gpu on the block's "
                "flag) and skips the epilogue, the owner of step 0 adds the parts in block "
                "order (ld.acquire.gpu on each flag, set back to 0) before the epilogue")
    if roles is None or not roles.pingpong:
        return ""
    bm, bn, _ = kernel.schedule.tiling.block
    return (f"pingpong: {roles.consumer_warpgroups} warpgroups each compute whole {bm}x{bn} "
            "tiles, taking the block's tiles in turn (warpgroup w: its tiles w, w + 2, ...); "
            "each waits for its turn before its mainloop and passes it on once the mainloop's "
            "products are complete (ws.turn_wait / ws.turn_pass: bar.sync / bar.arrive on named "
            f"barriers {TURN_BARRIER} + w, both warpgroups counted), so one's epilogue runs "
            "under the other's products; a stage goes back from the one warpgroup whose tile "
            "it holds"
            ", and each stages its own tile for the store")


def _split_sum(kernel: Kernel) -> str:
    """The dtype split-K's slices meet with (the accumulator's); f32 without split-K."""
    meeting = next((op for op in kernel.walk() if op.name == "split.reduce"), None)
    return meeting.result.type.dtype.short if meeting is not None else "f32"


def _buffers(layout: SharedLayout) -> list[Buffer]:
    """The shared buffers in the order, offsets and alignment the backend gives them."""
    buffers = []
    for op, placed in layout.buffers.items():
        if placed.kind == "barriers":  # a ring of 8-byte mbarriers, after the buffers
            buffers.append(Buffer(op.result.hint or "mbar", "barriers", placed.stages, 1, 1,
                                  "b64", placed.stage_bytes, placed.stage_bytes, placed.offset,
                                  placed.align,
                                  f"mbarrier, {op.attrs['count']} arrival(s) a phase"))
        elif placed.kind == "staging":  # the store's staging tile, after everything else
            value = op.operands[-1].type
            rows, cols = value.shape
            store = "TMA store" if op.attrs["via"] == "tma" else "row stores"
            staged = "staging"
            if "staging_buffers" in op.attrs:  # one slab a buffer, the slabs in turn
                cols, staged = op.attrs["box"][0], "staging, a slab a buffer"
            if op.attrs["via"] == "block_rows":  # passes/row_store.py: padded rows
                layout_text = f"rows of {op.attrs['pitch']} B"
                store = "the block's row stores"
            else:  # TMA's swizzled slabs, a box's inner extent (a span) wide
                span = op.attrs["box"][0] * value.dtype.bytes
                layout_text = staging_layout(rows, cols, value.dtype.bytes, span)
            buffers.append(Buffer("sC", "staging", placed.stages, rows, cols, value.dtype.short,
                                  value.dtype.bytes, placed.stage_bytes, placed.offset,
                                  placed.align, f"{layout_text} ({store} {staged})"))
        else:
            rtype = op.result.type
            buffers.append(Buffer(op.result.hint or "smem", op.attrs["role"], placed.stages,
                                  rtype.shape[1], rtype.shape[2], rtype.dtype.short,
                                  rtype.dtype.bytes, placed.stage_bytes, placed.offset,
                                  placed.align, str(rtype.layout)))
    return buffers


def _registers(plan: TilingPlan, roles: Optional[RolesPlan] = None,
               partials: int = 0) -> Registers:
    """The tiling plan's estimate, split as ProductFamily.registers adds it up, with the
    partial sums of promoted accumulation counted among the accumulators."""
    tm, tn = plan.warp_tile
    accumulators = tm * tn // WARP_SIZE + partials
    fragments = 2 * family_of(plan).fragment_registers(tm, tn)
    rebalanced = None
    if roles is not None:
        rebalanced = (roles.producer_registers, roles.consumer_registers,
                      registers_at_entry(roles.threads, roles.blocks_per_sm))
    return Registers(registers_estimate(plan) + partials, accumulators, fragments,
                     REGISTER_OVERHEAD, rebalanced)


# ----------------------------------------------------------------------- bank conflicts

def copy_store_instances(layout: SmemLayout, op_plan: OperandPlan, plan: TilingPlan,
                         buffer: Buffer, mode: str) -> Iterator[tuple[list[int | None], int]]:
    """(lane byte addresses, bytes per lane) of every warp store a copy of this operand makes:
    per stage, warp and access; a synchronous copy stores each element on its own
    (``st.shared.b16``), as ``tilec/families/cp_async.py`` does, except a widened misaligned
    one (``global_vec``), which stores its vector at once."""
    elem_bytes = buffer.elem_bytes
    cmap = copy_map(layout.rows, layout.cols, op_plan.vec, plan.threads)
    for stage in range(buffer.stages):
        base = buffer.offset + stage * buffer.stage_bytes
        for warp in range(plan.threads // WARP_SIZE):
            for i in range(cmap.per_thread):
                lanes = copy_store_addresses(layout, cmap, warp, i, elem_bytes)
                if mode == "async" or op_plan.global_vec:
                    yield [None if a is None else base + a for a in lanes], \
                        op_plan.vec * elem_bytes
                    continue
                for element in range(op_plan.vec):
                    yield [None if a is None else base + a + element * elem_bytes
                           for a in lanes], elem_bytes


def _warp_k_steps(op_plan: OperandPlan, plan: TilingPlan,
                  buffer: Buffer) -> Iterator[tuple[int, int, int]]:
    """(stage base byte, the warp's index along the operand's M or N, k0) for every stage,
    warp and k-step of the block: where each fragment read of an operand happens."""
    for stage in range(buffer.stages):
        base = buffer.offset + stage * buffer.stage_bytes
        for warp in range(plan.warps[0] * plan.warps[1]):
            warp_m, warp_n = divmod(warp, plan.warps[1])
            index = warp_m if op_plan.role == "A" else warp_n
            for k0 in range(0, plan.block[2], family_of(plan).k_step):
                yield base, index, k0


def read_instances(layout: SmemLayout, op_plan: OperandPlan, plan: TilingPlan,
                   buffer: Buffer) -> Iterator[list[int]]:
    """Lane byte addresses of every fragment read of this operand, per stage, warp and
    k-step: the reads the plan's family issues (ldmatrix.x4 pieces, FFMA's 16-byte
    ``ld.shared.v4``, tf32's ldmatrix or ``ld.shared.b32``), as the swizzle pass scores them
    (:func:`tilec.passes.swizzle.operand_conflicts`)."""
    family = family_of(plan)
    for base, index, k0 in _warp_k_steps(op_plan, plan, buffer):
        for addresses in family.read_addresses(plan, op_plan, layout, index, k0,
                                               buffer.elem_bytes):
            yield [base + a for a in addresses]


def _degree(addresses: list[int | None], width: int) -> int:
    # conflict_degree counts the 4-byte words a lane touches as [a/4, (a+width)/4), which is
    # empty for a 2-byte access at a word boundary; a sub-word access is its word's access.
    if width < BANK_BYTES:
        addresses = [None if a is None else a - a % BANK_BYTES for a in addresses]
        width = BANK_BYTES
    return conflict_degree(addresses, width)


def _conflicts(kernel: Kernel, plan: TilingPlan, buffers: list[Buffer]) -> list[Conflicts]:
    copies = _copy_ops(kernel)
    figures = kernel.schedule.conflict_report()
    rows = []
    for op_plan in plan.operands:
        buffer = next((b for b in buffers if b.role == op_plan.role), None)
        if buffer is None:
            continue
        layout = op_plan.layout
        linear = layout.with_swizzle(Swizzle(0))
        copy = copies.get(op_plan.role)
        figure = figures.get(op_plan.role, {}).get("chosen", {})
        if copy is None or copy.name != TMA_LOAD:
            # TMA's copy engine writes whole swizzled rows: no per-thread stores to count.
            mode = copy.attrs["mode"] if copy is not None else "sync"
            elem_bytes = buffer.elem_bytes
            store = (f"cp.async {op_plan.vec * elem_bytes} B" if mode == "async"
                     else f"st.shared {op_plan.vec * elem_bytes} B" if op_plan.global_vec
                     else f"st.shared.b{8 * elem_bytes}")
            chosen = [_degree(a, w)
                      for a, w in copy_store_instances(layout, op_plan, plan, buffer, mode)]
            plain = [_degree(a, w)
                     for a, w in copy_store_instances(linear, op_plan, plan, buffer, mode)]
            rows.append(_conflict_row(op_plan.role, store, layout, chosen, plain,
                                      figure.get("copy")))
        family = family_of(plan)
        k_major = operand_k_major(op_plan.role, layout)
        degree = family.read_degree
        access = family.read_access(op_plan.role, layout)
        if op_plan.byte_loaded:
            # w8a16: frag.ldbytes, one ld.shared.u16 per register (families/byte_operands.py)
            access = BYTE_PAIR_READ
            degree = lambda _, addresses: conflict_degree(addresses, 2)  # noqa: E731
        chosen = [degree(k_major, a) for a in read_instances(layout, op_plan, plan, buffer)]
        plain = [degree(k_major, a) for a in read_instances(linear, op_plan, plan, buffer)]
        rows.append(_conflict_row(op_plan.role, access, layout, chosen, plain,
                                  figure.get(family.read_name)))
    return rows


def _conflict_row(role: str, access: str, layout: SmemLayout, chosen: list[int],
                  plain: list[int], figure: Optional[int]) -> Conflicts:
    worst = max(chosen, default=1)
    return Conflicts(role, access, str(layout), len(chosen), worst, chosen.count(worst),
                     max(plain, default=1), figure)


# ------------------------------------------------------------------------------ ptxas

def run_ptxas(ptx: str, arch: str, entry: str) -> tuple[Optional[PtxasReport], str]:
    """ptxas's resource report for the PTX (``ptxas -arch=ARCH -v``), or None and why not."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        return None, "ptxas is not on PATH"
    with tempfile.TemporaryDirectory(prefix="tilec-explain-") as tmp:
        source = Path(tmp) / f"{entry}.ptx"
        source.write_text(ptx, encoding="utf-8")
        try:
            done = subprocess.run([ptxas, f"-arch={arch}", "-v", str(source), "-o",
                                   str(Path(tmp) / f"{entry}.cubin")], capture_output=True,
                                  text=True, timeout=PTXAS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"ptxas took longer than {PTXAS_TIMEOUT_S} s"
    log = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        return None, f"ptxas failed (exit {done.returncode}): {log.splitlines()[:3]}"
    report = parse_ptxas(log, arch)
    if report is None:
        return None, "ptxas printed no resource report"
    return report, ""


def parse_ptxas(log: str, arch: str) -> Optional[PtxasReport]:
    """The numbers of a ``ptxas -v`` log for a module with one entry."""
    registers = re.search(r"Used (\d+) registers", log)
    if registers is None:
        return None

    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    return PtxasReport(arch, int(registers.group(1)), number(r"(\d+) bytes spill stores"),
                       number(r"(\d+) bytes spill loads"), number(r"(\d+) bytes stack frame"),
                       number(r"(\d+) bytes smem"), number(r"used (\d+) barriers"), log)


# ----------------------------------------------------------------------------- render

def _table(header: Sequence[str], rows: Sequence[Sequence[object]],
           indent: str = "  ") -> list[str]:
    cells = [list(header)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in cells]


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:g} KiB"

# How frag.cvt turns such a byte pair into a 16-bit pair, by stored dtype
# (tilec/families/mma_sync.py's CONVERT_PTX).
BYTE_CONVERSIONS = {
    "i8": ("prmt into 0x6400 | byte (f16) or 0x4B000000 | byte (f32, then bf16) and one "
           "subtraction"),
    **{fp8: (f"cvt.rn.f16x2.{fp8[2:]}x2 (sm_89+; for bf16 then cvt.f32.f16 and "
             "cvt.rn.bf16x2.f32)") for fp8 in ("f8e4m3", "f8e5m2")},
}

# Measured beside the 128-byte layouts (benchmarks/NOTES.md, session 23): what explain says
# where an operand's rows take a narrower TMA swizzle span.
NARROW_SPAN_RATE = ("read without bank conflicts, but such tiles ran at about 0.8x (64-byte) "
                    "and 0.5x (32-byte) the rate of 128-byte slabs (f16, H200); rows of whole "
                    "128 bytes avoid it, and so do padded 128-byte slabs (tma_swizzle=128) "
                    "where the ring has room for them")
PADDED_SPAN_RATE = ("TMA loads the last box whole (the next tile's columns, or zeros past the "
                    "tensor): 1.0-1.2x the rate of 64-byte slabs, 1.3-1.7x that of 32-byte "
                    "ones (f16, H200)")
COPY_INSTRUCTIONS = {"async": "cp.async", "sync": "ld.global + st.shared",
                     "tma": "TMA box (cp.async.bulk.tensor, {span}B swizzle), one elected "
                            "thread"}


def _vector(c: CopyMapping, dtype: str) -> str:
    if c.mode == "tma":
        return f"box {c.vec_elems} x {c.rows_per_pass} ({c.vec_bytes} B rows)"
    return f"{c.vec_elems} x {dtype} = {c.vec_bytes} B"


def render_explanation(e: Explanation) -> str:
    family = family_named(e.hierarchy.kind)
    lines = [f"{e.kernel} ({e.source}) for {e.arch}: {e.options}", "",
             *_hierarchy_lines(e.hierarchy, family), *_copy_lines(e.hierarchy, family),
             *_note_lines(e), "", *_schedule_lines(e), "", *_shared_memory_lines(e.shared), "",
             *_conflict_lines(e, family), "", *_register_lines(e), "", *_hazard_lines(e)]
    return "\n".join(lines) + "\n"


def _hierarchy_lines(h: Hierarchy, family) -> list[str]:
    """The block, its warps, a warp's tile and the instruction; split-K's partials."""
    bm, bn, bk = h.block
    wm, wn = h.warps
    label, instruction = family.instruction_text(h)
    groups = (f", {h.tile_groups} warpgroups of them, each on tiles of its own"
              if h.tile_groups > 1 else "")
    lines = [
        "Tile hierarchy",
        f"  block tile        {bm} x {bn} x {bk} (BM x BN x BK), {h.dtype} inputs, "
        f"{ACCUMULATOR_DTYPES[DType.parse(h.dtype)]} accumulator",
        f"  warp grid         {wm} x {wn} = {wm * wn} warps, {h.threads} threads"
        + (f" (consumers{groups}), + a producer warpgroup of {h.producer_threads} threads "
           "(one elected thread issues the TMA loads): "
           f"{h.threads * h.tile_groups + h.producer_threads} threads"
           if h.producer_threads else ""),
        f"  warp tile         {family.warp_tile_text(h)}",
        f"  {label:<16}  {instruction}",
    ]
    if h.split_k > 1:
        lines.append(f"  split-K           {h.split_k} blocks per output tile, each over "
                     f"ceil(K steps / {h.split_k}) steps of K; the last to finish adds the "
                     f"{h.split_k} {h.split_sum} partials ({_kib(h.split_k * bm * bn * 4)} of "
                     "workspace per tile) and runs the epilogue"
                     + ("; integer sums are exact, the same in any order" if
                        h.split_sum == "i32" else ""))
    return lines


def _copy_lines(h: Hierarchy, family) -> list[str]:
    """The copies' table, TMA's narrow or padded spans, and the operands converted in
    registers."""
    lines = ["  copies, global -> shared, each BK step:"]
    lines += _table(
        ["operand", "tensor", "stored", "vector", "accesses/thread", "threads/row",
         "rows/pass", "instruction"],
        [[c.role, c.tensor, f"{c.rows}x{c.cols}" + (" (transposed)" if c.transposed else ""),
          _vector(c, h.converted.get(c.role, h.dtype)), c.per_thread, c.threads_per_row,
          c.rows_per_pass, COPY_INSTRUCTIONS[c.mode].format(span=c.vec_bytes)]
         for c in h.copies], indent="    ")
    # Operands wgmma reads through descriptors (the register form's A is read by the threads).
    narrow = [c for c in h.copies if c.mode == "tma" and c.vec_bytes < SLAB_BYTES
              and not family.converts(c.role)]
    if narrow:
        spans = ", ".join(f"{c.role} in {c.vec_bytes}-byte slabs (rows of {c.cols} "
                          f"elements)" for c in narrow)
        lines.append(f"  tma spans         {spans}: {NARROW_SPAN_RATE}")
    padded = [c for c in h.copies if c.mode == "tma" and c.cols % c.vec_elems]
    if padded:
        spans = ", ".join(f"{c.role} in {c.vec_bytes}-byte slabs, the last padded (rows of "
                          f"{c.cols} elements, {c.per_thread * c.vec_elems} loaded)"
                          for c in padded)
        lines.append(f"  tma spans         {spans}: {PADDED_SPAN_RATE}")
    for role, source in h.converted.items():
        if family.converts(role) and family.fused_k_steps:  # wgmma's register form
            lines.append(f"  converted         operand {role}: stored {source}, loaded by "
                         f"each consumer thread into its wgmma A fragment ({BYTE_PAIR_READ}) "
                         f"and converted to {h.dtype} ({BYTE_CONVERSIONS[source]}, exact)")
            continue
        if DType.parse(source).bytes == 1:  # w8a16 (families/byte_operands.py)
            how = (f"{BYTE_PAIR_READ} (frag.ldbytes: a register's two bytes; frag.cvt: "
                   f"{BYTE_CONVERSIONS[source]}, exact)")
        else:
            how = f"{family.explain_text.load} (frag.cvt: cvt.rn per pair of elements)"
        lines.append(f"  converted         operand {role}: stored {source}, each fragment "
                     f"converted to {h.dtype} in registers after its {how}")
    return lines


# The explanation's one-line notes, in the order printed: the field and its label; "" for
# none (where the field's own lines are made by _note_lines).
NOTES = (("batch", "batches"), ("tile_loop", "tile loop"), ("accumulation", "accumulation"),
         ("swap", "swapped product"), ("declined", "not wgmma"), ("unapplied", "not applied"),
         ("cluster", ""), ("consumers", "consumers"), ("epilogue", "epilogue"),
         ("packing", ""), ("peel", "peeled"), ("launch", "launch"))


def _note_lines(e: Explanation) -> list[str]:
    """The notes that apply to this kernel (NOTES), each under its label."""
    lines = []
    for name, label in NOTES:
        if name == "cluster" and e.cluster * e.cluster_n > 1:
            shape = (f"{e.cluster} blocks along M" if e.cluster_n == 1 else
                     f"{e.cluster}x{e.cluster_n} blocks ({e.cluster} along M, {e.cluster_n} "
                     "along N)")
            lines.append(f"  cluster           {shape} (launched with "
                         f"cuLaunchKernelEx): they share each stage of {e.cluster_shares}, "
                         "which TMA multicasts")
            lines.append(f"  cluster tiles     {e.cluster_walk}")
        elif name == "packing" and e.packing is not None:
            lines.append("  packed at launch, for row-major arrays of these sizes: "
                         + "; ".join((*(e.packing or ("none",)), *e.in_place)))
        elif label and getattr(e, name):
            lines.append(f"  {label:<17} {getattr(e, name)}")
    return lines


def _schedule_lines(e: Explanation) -> list[str]:
    """The pipeline's buffers and its ops before, in and after the K loop."""
    s = e.schedule
    fragments = ", next iteration's first fragments loaded early" if s.carried else ""
    lines = [f"Pipeline schedule: {s.stages} stage{'s' if s.stages > 1 else ''}"
             f"{fragments}; it = K-loop iteration, k = "
             f"{'the slice start + ' if e.hierarchy.split_k > 1 else ''}it * BK"]
    lines += _table(["buffer", "shape", "stage bytes", "total bytes", "layout", "align"],
                    [[b.name, f"{b.stages}x{b.rows}x{b.cols} {b.dtype}", b.stage_bytes,
                      b.total_bytes, b.layout, f"{b.alignment} B"]
                     for b in e.shared.buffers])
    lines.append("")
    labels = {"prologue": "before the loop", "loop": "each iteration", "after": "after the loop"}
    table_rows = []
    previous = None
    for row in s.rows:
        table_rows.append([labels[row.phase] if row.phase != previous else "", row.op,
                           row.target, row.detail])
        previous = row.phase
    lines += _table(["when", "op", "stage", "what"], table_rows)
    if s.carried:
        lines.append(f"  loop-carried fragments: {', '.join(s.carried)}")
    return lines


def _shared_memory_lines(m: SharedMemory) -> list[str]:
    """The buffers' offsets and the total against the target's limit."""
    lines = ["Shared memory (dynamic, one block)"]
    lines += _table(["buffer", "offset", "bytes", "align"],
                    [[b.name, b.offset, f"{b.total_bytes} ({b.stages} x {b.stage_bytes})",
                      f"{b.alignment} B"] for b in m.buffers])
    verdict = "fits" if m.total_bytes <= m.limit_bytes else "DOES NOT FIT"
    lines.append(f"  total {m.total_bytes} B ({_kib(m.total_bytes)}) of {m.limit_bytes} B "
                 f"({_kib(m.limit_bytes)}) allowed per block on {m.arch}: {verdict}")
    if m.needs_opt_in:
        lines.append(f"  above the {_kib(STATIC_SMEM_LIMIT)} default: the launcher opts in "
                     "(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)")
    if m.backend_bytes != m.total_bytes:
        lines.append(f"  note: the backend declared {m.backend_bytes} B")
    return lines


def _conflict_lines(e: Explanation, family) -> list[str]:
    """Each shared-memory access's worst bank conflicts."""
    lines = ["Bank conflicts: worst wavefronts per warp access over the minimum "
             "(1 = conflict-free),", "  over every instance (stages x warps x accesses, or "
             f"stages x warps x k-steps x {family.explain_text.read_pieces})"]
    lines += _table(["operand", "access", "layout", "instances", "worst", "linear layout"],
                    [[c.role, c.access, c.layout, c.instances,
                      f"{c.worst} ({c.at_worst} of {c.instances})" if c.worst > 1 else c.worst,
                      c.linear] for c in e.conflicts])
    for c in e.conflicts:
        if c.pass_figure is not None and c.pass_figure != c.worst:
            lines.append(f"  note: the swizzle pass computed {c.pass_figure} for {c.role} "
                         f"{c.access}")
    return lines


def _register_lines(e: Explanation) -> list[str]:
    """The estimate, setmaxnreg's split, and ptxas's figures where it ran."""
    r = e.registers
    lines = ["Registers per thread",
             f"  estimate  {r.estimate}: {r.accumulators} accumulators + {r.fragments} "
             f"fragments (double-buffered) + {r.overhead} addresses and indices"]
    if r.rebalanced is not None:
        producer, consumers, entry = r.rebalanced
        lines.append(f"  setmaxnreg  the block starts with {entry} a thread; the producer "
                     f"warpgroup gives up to {producer}, the consumers take {consumers}")
    if e.ptxas is not None:
        p = e.ptxas
        lines.append(f"  ptxas     {p.registers} registers, {p.spill_stores} B spill stores, "
                     f"{p.spill_loads} B spill loads, {p.stack_bytes} B stack, "
                     f"{p.static_smem_bytes} B static shared, {p.barriers} barrier(s) "
                     f"(-arch={p.arch})")
    else:
        lines.append(f"  ptxas     {e.ptxas_note}")
    return lines


def _hazard_lines(e: Explanation) -> list[str]:
    if e.hazard:
        return ["Hazard check: FAILED", *("  " + line for line in e.hazard.splitlines())]
    counts = ", ".join(str(n) for n in e.checked_trip_counts)
    return [f"Hazard check: no shared-memory race in runs of {counts} K-loop iterations"]
