"""The wgmma family (sm_90a): ``wgmma.mma_async`` m64nNk16 on f16/bf16 tiles with both
operands read by the tensor cores from shared memory through 64-bit matrix descriptors,
f32 accumulation in registers.

A consumer warpgroup (4 warps) owns 64 rows of the block tile and all of its BN columns;
BM / 64 warpgroups cover the block. With ``warpgroup_rows=128`` it owns 128 rows, in two m64
strips with accumulators of their own (BM / 128 warpgroups). Per stage of BK, one
``wgmma.mma`` op issues ``wgmma.fence``, one ``wgmma.mma_async`` per k16 step and strip,
``wgmma.commit_group`` and ``wgmma.wait_group 0`` (PTX ISA 9.7.15). Operands are fed by TMA
(the ``tma`` movement family) in one of its swizzles: slabs of 128-, 64- or 32-byte rows
whose 16-byte chunks are XOR-ed by the row within each 8-row atom, which are the
descriptors' SW128, SW64 and SW32 canonical layouts (PTX ISA 9.7.15.5.1.2). The widest span
the tile's rows take is the default; the swizzle pass chooses among them.

Here: the accumulator layout (:class:`WgmmaLayout`: per warp exactly mma.sync's m16n8 C
fragments along n, so the epilogue is the mma family's), the descriptor fields
(:func:`descriptor_fields`), the element addresses a descriptor implies
(:func:`descriptor_offsets`, which the CPU semantics read instead of the shared layout, so a
descriptor that disagrees with where TMA put the data gives a wrong result on the CPU too),
the emitter, the op definition and the explain text.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OpDef, require
from tilec.ir.schedule import WARPGROUP, OperandPlan, TilingPlan
from tilec.ir.types import BF16, F16, DType, TileType
from tilec.options import Options
from tilec.target.layout import DistributedLayout, SmemLayout, conflict_degree, operand_k_major

from .mma_sync import MmaLayout
from .product import ExplainShape, ExplainText, ProductFamily, instruction_tile_text
from .tma_boxes import spans_for, swizzle_mode, tma_layout

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.interpreter import InterpState

# numpy and the CPU model (tilec.cpu) are imported where they are used: the CPU semantics and
# the descriptor offsets' arrays they read. Compiling never runs these (the swizzle pass
# scores the reads on ints: read_address), and should not wait for numpy's import.

WGMMA_M, WGMMA_K = 64, 16  # m64nNk16 for 16-bit inputs, PTX ISA 9.7.15.5
WGMMA_K_BYTES = 32  # one instruction's k in bytes: k16 of 16-bit inputs, k32 of 8-bit ones
WGMMA_N_MAX, WGMMA_N_STEP = 256, 8
STRIP_ROWS = 16  # a warp's rows of one m64 instruction's accumulator
WARPS_PER_WARPGROUP = 4
# The rows a consumer warpgroup owns (Options.warpgroup_rows): one m64 instruction per k
# step, or two (128 rows, accumulators of their own, A's descriptors 64 rows apart).
WARPGROUP_ROWS = (64, 128)
ATOM_ROWS = 8  # rows of one swizzle atom (8 x the span bytes)
# Bits 62-63 of a descriptor, by swizzle span in bytes (PTX ISA 9.7.15.5.1.2: 0 would be
# the unswizzled interleave layout, which TMA does not write).
DESCRIPTOR_LAYOUTS = {128: 1, 64: 2, 32: 3}
# The narrowest span: the unit of a tile's rows in bytes (BK of K-major operands, BN of an
# N-major B), and one k step's bytes, which must not straddle two slabs.
MIN_SPAN_BYTES = min(DESCRIPTOR_LAYOUTS)
# Why 16-bit blocks of BK under 64 stay on mma.sync (the likely cause, not profiled: a stage
# of BK 32 holds two k16 steps, and three such stages do not cover TMA's latency). H200, f16,
# one call, TFLOP/s:
# 128x128x32 3 stages wgmma 328.7 against mma.sync 405.5 at 4096^3 (340.9 / 337.2 at 2048^3);
# 128x128x16 6 stages 368.6 against 342.9; 128x128x64 4 stages on wgmma 672.2.
SHALLOW_MEASURED = ("a stage of so few k16 steps ran slower on wgmma than on mma.sync "
                    "(128x128x32, 3 stages, 4096^3 f16 on an H200: 0.81x)")
MAX_CONSUMER_WARPGROUPS = 4
PRODUCER_REGISTERS = 40  # setmaxnreg.dec for the producer warpgroup (CUTLASS's choice)
REGISTER_FILE = 65536
MAX_SETMAXNREG = 240  # a consumer never needs more; setmaxnreg takes 24..256
# Registers a consumer needs beside its accumulators (ptxas 13.0: 154 for one m64n256, 218
# for 256x192 in 128-row warpgroups, and spills at 234 for 256x208 under setmaxnreg's 232).
CONSUMER_OVERHEAD = 26


def registers_at_entry(threads: int, blocks_per_sm: int = 1) -> int:
    """The registers a thread starts with, as ptxas allocates them for ``.maxntid threads``
    and ``.minnctapersm blocks_per_sm``: its share of the file, in units of 8."""
    return REGISTER_FILE // (threads * blocks_per_sm) // 8 * 8


@dataclass(frozen=True)
class WgmmaLayout(MmaLayout):
    """The accumulator of wgmma m64nN: warp ``w`` of the block holds rows ``16 w`` to
    ``16 w + 15`` (warpgroup ``w // 4`` owns 64), and lane ``l`` register ``i`` is element
    (``l / 4 + 8 ((i / 2) % 2)``, ``8 (i / 4) + 2 (l % 4) + i % 2``) of the warp's 16 rows:
    mma.sync's m16n8 C fragments one n8 tile after the other (PTX ISA 9.7.15.5.1.1, Figure
    "WGMMA .m64nNk16 register fragment layout for accumulator"), so ``warps`` is (BM / 16, 1)
    and ``warp_tile`` (16, BN).

    With 128-row warpgroups (``warp_tile`` (32, BN), ``warps`` (BM / 32, 1)) a warpgroup
    issues two m64 instructions, each into accumulators of its own: warp ``w`` holds rows
    ``128 (w / 4) + 16 (w % 4) + 64 s`` for strip s = 0, 1, its registers those of strip 0
    (one m64's BN / 2) then strip 1's, each in the m64 layout above."""

    kind = "wgmma"

    @property
    def strips(self) -> int:
        """The m64 instructions (16 rows of each warp) a warpgroup issues per k step."""
        return self.warp_tile[0] // STRIP_ROWS

    def warp_rows(self) -> tuple[int, int, int]:
        if self.strips == 1:
            return super().warp_rows()
        return WARPS_PER_WARPGROUP, WGMMA_M * self.strips, STRIP_ROWS

    def register_offsets(self) -> list[tuple[int, int]]:
        strip = MmaLayout.register_offsets(replace(self, warp_tile=(STRIP_ROWS,
                                                                    self.warp_tile[1])))
        return [(WGMMA_M * s + row, col) for s in range(self.strips) for row, col in strip]


# -- descriptors: PTX ISA 9.7.15.5.1.2 (matrix descriptor format) --------------------------

@dataclass(frozen=True)
class Descriptor:
    """The fields of one operand's descriptors, offsets in bytes from the stage start.

    ``start(mn0, k0)``: the byte offset of the core matrices at (mn0, k0); K-major operands
    advance 32 bytes per k16 step inside their span-wide rows (the next slab when a row is
    used up), MN-major ones 16 rows. LBO: unused by K-major swizzled layouts (16 bytes by
    convention); for MN-major, the distance between two slabs (a span of elements each)
    along mn. SBO: the distance between 8-row groups (8 rows of the span). ``row_bytes`` is
    the swizzle span."""

    k_major: bool
    lbo: int
    sbo: int
    slab_bytes: int
    row_bytes: int

    def start(self, mn0: int, k0: int, elem_bytes: int) -> int:
        contiguous, strided = (k0, mn0) if self.k_major else (mn0, k0)
        slab, within = divmod(contiguous * elem_bytes, self.row_bytes)
        return slab * self.slab_bytes + strided * self.row_bytes + within

    @property
    def layout_code(self) -> int:
        """The descriptor's bits 62-63: its swizzle span."""
        return DESCRIPTOR_LAYOUTS[self.row_bytes]


def descriptor_fields(layout: SmemLayout, role: str, elem_bytes: int) -> Descriptor:
    """Descriptor fields for an operand stored as ``layout`` (TMA's swizzle in slabs one
    span wide: :func:`tilec.families.tma_boxes.tma_layout`; or the same slabs unswizzled, for
    comparison)."""
    k_major = operand_k_major(role, layout)
    row_bytes = layout.slab * elem_bytes
    if row_bytes not in DESCRIPTOR_LAYOUTS:
        raise ValueError(f"wgmma's descriptors read slabs 32, 64 or 128 bytes wide, not "
                         f"{layout}")
    slab_bytes = layout.rows * row_bytes
    sbo = ATOM_ROWS * row_bytes
    return Descriptor(k_major, 16 if k_major else slab_bytes, sbo, slab_bytes, row_bytes)


def swizzle_bytes(byte_offset: np.ndarray | int, span: int) -> np.ndarray | int:
    """TMA's and wgmma's swizzle of ``span`` bytes on byte offsets from an atom-aligned base:
    the 16-byte chunk bits (4 up, log2(span / 16) of them) XOR the bits from 7 up (the
    hardware's view, independent of :class:`SmemLayout`)."""
    return byte_offset ^ ((byte_offset >> 3) & (span - 16))


def read_address(d: Descriptor, start: int, m: Any, k: Any, elem_bytes: int,
                 swizzled: bool) -> Any:
    """The byte offset (from the stage start) of element (m, k) of the piece a wgmma reads
    through descriptor ``d`` from ``start`` (:meth:`Descriptor.start`), m along mn and k
    along k: ints, or numpy arrays of them (:func:`descriptor_offsets`). The swizzle
    pass scores the reads on ints, without numpy's import."""
    if d.k_major:
        # Core matrices: 8 rows of 16 bytes; rows a span apart, 8-row groups SBO apart.
        address = start + (m // ATOM_ROWS) * d.sbo + (m % ATOM_ROWS) * d.row_bytes \
            + k * elem_bytes
    else:
        per_row = d.row_bytes // elem_bytes
        address = start + (m // per_row) * d.lbo + (k // ATOM_ROWS) * d.sbo \
            + (k % ATOM_ROWS) * d.row_bytes + (m % per_row) * elem_bytes
    # The descriptors say the span's swizzle (the emitter refuses anything else); an
    # unswizzled layout is read as the same slabs without it, for the swizzle pass's and
    # explain's comparison.
    return swizzle_bytes(address, d.row_bytes) if swizzled else address


def core_matrices(d: Descriptor, layout: SmemLayout, k0: int, extent: int,
                  elem_bytes: int) -> Iterator[list[int]]:
    """The 16-byte row addresses of each core matrix (8 rows) a wgmma reads through ``d`` at
    ``k0``, over ``extent`` elements along mn."""
    start, swizzled = d.start(0, k0, elem_bytes), bool(layout.swizzle.bits)
    per_row = 16 // elem_bytes
    k_extent = WGMMA_K_BYTES // elem_bytes
    if d.k_major:
        for m0 in range(0, extent, ATOM_ROWS):
            for kc in range(0, k_extent, per_row):
                yield [read_address(d, start, m0 + r, kc, elem_bytes, swizzled)
                       for r in range(ATOM_ROWS)]
    else:
        for mc in range(0, extent, per_row):
            for k in range(0, k_extent, ATOM_ROWS):
                yield [read_address(d, start, mc, k + r, elem_bytes, swizzled)
                       for r in range(ATOM_ROWS)]


def repeats_along_mn(d: Descriptor) -> bool:
    """Whether the core matrices along mn repeat the first ones' bank pattern: each piece
    starts SBO (K-major: 8 rows) or LBO (MN-major: a slab) after the one before, and
    :func:`swizzle_bytes` of a span XORs the 16-byte chunk bits with the bits of the row
    within 8 rows of the span, so offsets a multiple of 8 spans apart (a multiple of 128
    bytes: whole lines of the 32 banks) swizzle alike."""
    return (d.sbo if d.k_major else d.lbo) % (ATOM_ROWS * d.row_bytes) == 0


@lru_cache(maxsize=None)
def descriptor_offsets(layout: SmemLayout, role: str, mn0: int, k0: int, mn: int,
                       elem_bytes: int) -> np.ndarray:
    """Element offsets (from the stage start) of the ``mn x k`` operand piece at (mn0, k0) as
    one wgmma reads it through its descriptor (k: 32 bytes, 16 of f16, 32 of 8-bit elements),
    ``[mn, k]`` for A and ``[k, mn]`` for B:
    the canonical swizzled layout decoded from :func:`descriptor_fields` (start, LBO, SBO,
    span)."""
    import numpy as np
    d = descriptor_fields(layout, role, elem_bytes)
    m = np.arange(mn)[:, None]
    k = np.arange(WGMMA_K_BYTES // elem_bytes)[None, :]
    offsets = read_address(d, d.start(mn0, k0, elem_bytes), m, k, elem_bytes,
                           bool(layout.swizzle.bits)) // elem_bytes
    offsets = offsets if role == "A" else offsets.T
    offsets.flags.writeable = False
    return offsets


# -- the emitter ---------------------------------------------------------------------------
WGMMA_TYPES = {F16: "f16", BF16: "bf16"}


def warpgroup_index(ctx: Context) -> str:
    """This consumer thread's warpgroup index (tid / 128): computed once, and made
    warp-uniform where it is used (kept uniform from the kernel's entry on, it cost the
    fused 128x256 bf16 epilogue a spilled register)."""
    index = ctx.w.once(ctx.thread_key("warpgroup"), lambda: ctx.int_op("shr.u32", ctx.tid(), 7))
    return ctx.warp_uniform(index)


def operand_descriptor(ctx: Context, view: SmemView, role: str, k0: int, strip: int = 0) -> str:
    """The 64-bit descriptor of this warpgroup's piece of operand ``role`` at ``k0``: of A,
    its m64 ``strip`` (the second of a 128-row warpgroup's starts 64 rows on)."""
    layout, eb = view.buffer.layout, view.buffer.elem_bytes
    swizzle_mode(layout, eb)  # refuses a layout TMA does not write
    d = descriptor_fields(layout, role, eb)
    w = ctx.w

    # The stage's address in 16-byte units (14 bits), plus this warpgroup's rows of A (64,
    # or 128 in two strips): once per stage view, where it is computed (the stage changes
    # every iteration). Both descriptor layouts' starts are linear in whole 64-row strips.
    key = ("wgmma_desc", view.address, role)
    start = ctx.op_state.get(key)
    if start is None:
        address = view.address
        if role == "A":
            rows = WGMMA_M * warpgroup_strips(ctx)
            address = ctx.mad(warpgroup_index(ctx), d.start(rows, 0, eb), address)
        start = ctx.int_op("and.b32", ctx.int_op("shr.u32", address, 4), 0x3FFF)
        ctx.op_state[key] = start
    lo = ctx.int_op("add.s32", start, d.start(WGMMA_M * strip, k0, eb) >> 4)
    lo = ctx.int_op("or.b32", lo, (d.lbo >> 4) << 16)
    hi = (d.sbo >> 4) | (d.layout_code << 30)
    desc = w.reg("b64")
    w.emit(f"mov.b64 {desc}, {{{lo}, {hi}}};")
    return desc


def warpgroup_strips(ctx: Context) -> int:
    """The m64 instructions a warpgroup issues per k step: 2 with 128-row warpgroups."""
    return ctx.plan.warp_tile[0] // STRIP_ROWS


def strip_products(ctx: Context, view_a: SmemView, view_b: SmemView, acc: Sequence[str],
                   bk: int, k_step: int, instruction: Callable[[str, str, str, str], str],
                   fresh: bool = False) -> None:
    """One stage's products: per k step, one ``instruction(accumulators, desc_a, desc_b,
    scale_d)`` per m64 strip of the warpgroup's rows (each strip its own accumulators: the
    first len(acc) / strips registers, then the next), all in one fence / commit group so
    that ptxas keeps them in flight together. ``scale_d`` is the predicate register of
    ``D = A B + D`` (true), or for each strip's first instruction of a ``fresh`` product
    (``wgmma.mma {fresh}``: promoted accumulation) of ``D = A B`` (false)."""
    accumulate = ctx.w.once("wgmma_scale_d", lambda: predicate_register(ctx, True))
    start = (ctx.w.once("wgmma_scale_d_false", lambda: predicate_register(ctx, False))
             if fresh else None)
    strips = warpgroup_strips(ctx)
    per_strip = len(acc) // strips
    ctx.w.emit("wgmma.fence.sync.aligned;")
    for k0 in range(0, bk, k_step):
        desc_b = None  # the strips share B's; made after the first strip's A (as before)
        scale_d = start if fresh and k0 == 0 else accumulate
        for strip in range(strips):
            desc_a = operand_descriptor(ctx, view_a, "A", k0, strip)
            desc_b = desc_b or operand_descriptor(ctx, view_b, "B", k0)
            registers = ", ".join(acc[strip * per_strip:(strip + 1) * per_strip])
            ctx.w.emit(instruction(registers, desc_a, desc_b, scale_d))
    ctx.w.emit("wgmma.commit_group.sync.aligned;")


def _wgmma(ctx: Context, op: Op) -> None:
    """``wgmma.mma``: acc + A @ B over one stage of BK, one wgmma.mma_async per k16 step and
    m64 strip, the accumulators updated in place (PTX ISA 9.7.15.5.2)."""
    view_a: SmemView = ctx.get(op.operands[0])
    view_b: SmemView = ctx.get(op.operands[1])
    acc = ctx.get(op.operands[2])
    plan = ctx.plan
    bn, bk = plan.block[1], plan.block[2]
    dtype = WGMMA_TYPES[op.operands[0].type.dtype]
    trans_a = 0 if operand_k_major("A", view_a.buffer.layout) else 1
    trans_b = 0 if operand_k_major("B", view_b.buffer.layout) else 1
    w = ctx.w
    strip_products(ctx, view_a, view_b, acc, bk, WGMMA_K,
                   lambda registers, desc_a, desc_b, scale_d: (
                       f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{bn}k{WGMMA_K}.f32.{dtype}."
                       f"{dtype} {{{registers}}}, {desc_a}, {desc_b}, {scale_d}, 1, 1, "
                       f"{trans_a}, {trans_b};"),
                   fresh=op.attrs.get("fresh", False))
    # in_flight = 1: this stage's group may still run (it chains on the same accumulators);
    # the previous stage's group, and so its reads of shared memory, are complete.
    w.emit(f"wgmma.wait_group.sync.aligned {op.attrs.get('in_flight', 0)};")
    ctx.bind(op.result, list(acc))


def emit_wait(ctx: Context, op: Op) -> None:
    """``wgmma.wait``: every group but the newest ``in_flight`` has completed."""
    ctx.w.emit(f"wgmma.wait_group.sync.aligned {op.attrs['in_flight']};")


def predicate_register(ctx: Context, value: bool) -> str:
    reg = ctx.w.reg("pred")
    ctx.w.emit(f"setp.{'ne' if value else 'eq'}.u32 {reg}, 1, 0;")
    return reg


def warpgroup_tile_text(h: ExplainShape, k: str, operands: str) -> str:
    """explain's warp tile line of the wgmma families: a warpgroup's rows, and with
    128-row warpgroups the two strips each warp holds."""
    tm, tn = h.warp_tile
    if tm == STRIP_ROWS:
        return (f"{tm} x {tn} per warp: a warpgroup's 64 x {tn} from one wgmma.mma_async "
                f"m64n{tn}{k} per k-step, operands from shared memory{operands}")
    return (f"{tm} x {tn} per warp, two 16-row strips 64 rows apart: a warpgroup's 128 x {tn} "
            f"(warpgroup_rows=128) from two wgmma.mma_async m64n{tn}{k} per k-step, each "
            f"into {tn // 2} accumulators a thread of its own, A's descriptors 64 rows "
            f"apart, operands from shared memory{operands}")


# -- the op and its CPU semantics ------------------------------------------------------------

def _check_wgmma(op: Op) -> None:
    a, b, acc = (v.type for v in op.operands)
    require(all(isinstance(t, TileType) and t.space == "smem" for t in (a, b)),
            "wgmma reads both operands from shared memory")
    require(a.dtype == b.dtype, "wgmma operands share a dtype")
    require(acc == op.result.type, "wgmma returns the accumulator type")
    require(a.shape[1] == b.shape[0] and tuple(acc.shape) == (a.shape[0], b.shape[1]),
            "wgmma operand shapes do not chain")
    require(isinstance(acc.layout, WgmmaLayout), "the accumulator is in the wgmma layout")


def _execute_wgmma(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    """Per warpgroup and k16 step, A (64 x 16) and B (16 x BN) read where the descriptors
    point (:func:`descriptor_offsets`) and D = f32(C + A @ B), products summed in float64
    (exact for 16-bit inputs: one rounding per wgmma)."""
    import numpy as np

    from tilec.cpu.executor import block_state, checked_register_map
    block = block_state(state)
    (buffer_a, stage_a), (buffer_b, stage_b) = (
        block.shared(state, op, value, want_stage=True) for value in operands[:2])
    a_type, b_type, c_type = (v.type for v in op.operands)
    layout: WgmmaLayout = c_type.layout
    checked_register_map(state, op, layout, c_type.shape)
    eb = a_type.dtype.bytes
    bm, bk = a_type.shape
    bn = b_type.shape[1]
    a_storage = buffer_a.storage[stage_a * buffer_a.stage_size:][:buffer_a.stage_size]
    b_storage = buffer_b.storage[stage_b * buffer_b.stage_size:][:buffer_b.stage_size]
    acc = fresh_or_given(op, operands[2], np.float32)
    for k0 in range(0, bk, WGMMA_K):
        b = b_storage[descriptor_offsets(b_type.layout, "B", 0, k0, bn, eb)].astype(np.float64)
        for m0 in range(0, bm, WGMMA_M):
            a = a_storage[descriptor_offsets(a_type.layout, "A", m0, k0, WGMMA_M, eb)]
            rows = slice(m0, m0 + WGMMA_M)
            acc[rows] = (acc[rows] + a.astype(np.float64) @ b).astype(np.float32)
    return [acc]


def fresh_or_given(op: Op, acc: Any, dtype) -> Any:
    """The accumulator a ``wgmma.mma`` adds to: zero where the op is ``fresh`` (its strips'
    first instructions have scale-d false: promoted accumulation), else the operand."""
    import numpy as np
    given = np.array(acc, dtype=dtype)
    return np.zeros_like(given) if op.attrs.get("fresh") else given


def _check_wait(op: Op) -> None:
    require(op.attrs["in_flight"] in (0, 1), "wgmma.wait leaves 0 or 1 group in flight")


def _execute_wait(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    return []  # the CPU completes each wgmma.mma as it runs it


WGMMA_WAIT = OpDef("wgmma.wait", "wait until at most `in_flight` wgmma groups are still running "
                   "(their accumulators and shared-memory reads then complete)", 0, 0,
                   attrs=("in_flight",), check=_check_wait, evaluate=_execute_wait)
WGMMA_MMA = OpDef("wgmma.mma", "acc + a @ b over one shared stage (a @ b alone where `fresh`): a "
                  "warpgroup's wgmma.mma_async per k16 step, operands read through "
                  "shared-memory descriptors", 3, 1,
                  check=_check_wgmma, pure=True, evaluate=_execute_wgmma)


class Wgmma(ProductFamily):
    """wgmma.mma_async m64nNk16, operands in shared memory (sm_90a)."""

    name = "wgmma"
    dtypes = ("f16", "bf16")
    archs = ("sm_90a",)
    # The backends that emit it (Options.backend): the llvm backend has no wgmma emitters and
    # no warp-specialized TMA schedule, so under it the mma.sync families take the block.
    backends = ("ptx",)
    movement = "tma"
    fused_k_steps = True
    in_flight_wait = "wgmma.wait"
    producer_registers = PRODUCER_REGISTERS
    k_step = WGMMA_K
    granule = (16, WGMMA_N_STEP)
    granule_why = " (wgmma m64nNk16: 16 rows a warp, N a multiple of 8)"
    instruction = (WGMMA_M, 0, WGMMA_K)  # N is the block's: see make_instruction
    layout = WgmmaLayout
    load_op = None
    product_op = "wgmma.mma"
    read_name = "wgmma"
    explain_text = ExplainText("(none: wgmma reads shared memory)", "wgmma.mma_async",
                               "warpgroup", "-", "wgmma", "core matrices", ())
    emitters = {"wgmma.mma": _wgmma, "wgmma.wait": emit_wait}
    # BK's unit: the elements of MIN_SPAN_BYTES (TMA's narrowest swizzle span, and one k16
    # step), so that K-major rows are whole slabs. BN's: wgmma's n step where B is K-major
    # (BN counts its rows), a slab's elements where B is N-major (its rows are BN long).
    bk_unit = MIN_SPAN_BYTES // 2
    bn_unit = WGMMA_N_STEP
    n_major_bn_unit = MIN_SPAN_BYTES // 2
    # Blocks of a shallower BK go to mma.sync unless tma_swizzle asks for wgmma: measured
    # slower on wgmma (SHALLOW_MEASURED). The 8-bit families have no such floor: wgmma8 at BK
    # 64 ran fp8 2.8x and int8 1.05x mma.sync's 128x128x64, the register form w8a16 1.15-1.22x.
    preferred_min_bk: Optional[int] = 64

    def op_defs(self) -> tuple[OpDef, ...]:
        return (WGMMA_MMA, WGMMA_WAIT)

    def applies(self, block: tuple[int, int, int], options: Options,
                operands: Sequence[OperandPlan] = ()) -> bool:
        """Whether this family takes the block: the arch and a backend that emits it
        (:meth:`target_problem`), tiles wgmma and TMA's 128-byte
        swizzle take, operands TMA can read (a unit-stride dim, 16-byte aligned rows: the
        launch spec's vectors), warps and swizzle left to the compiler. Otherwise
        the mma family takes it (cp.async, or the pack kernel for misaligned operands)."""
        return self.declined(block, options, operands) is None

    def declined(self, block: tuple[int, int, int], options: Options,
                 operands: Sequence[OperandPlan] = ()) -> Optional[str]:
        """Why the family does not take the block (None when it does): what explain says
        when an sm_90a kernel multiplies with mma.sync."""
        problem = self.target_problem(options.arch, options.backend)
        if problem is not None:
            return problem
        problem = self.shaping_problem(block, options)
        if problem is not None:
            return problem
        converted = [op for op in operands if op.source]
        if converted:
            return (f"operand {converted[0].role} is converted from {converted[0].source} in "
                    "registers (wgmma reads its operands from shared memory as stored)")
        return (self.shallow_problem(block, options) or self.alignment_problem(operands)
                or self.n_major_problem(block, operands))

    def n_major_problem(self, block: tuple[int, int, int],
                        operands: Sequence[OperandPlan]) -> Optional[str]:
        """Why an N-major B's rows, BN long, are not whole slabs of TMA's narrowest swizzle
        span (None when they are, or B is K-major)."""
        bn = block[1]
        if bn % self.n_major_bn_unit == 0 or all(op.k_major for op in operands
                                                 if op.role == "B"):
            return None
        return (f"BN={bn} is not a multiple of {self.n_major_bn_unit} with B stored n "
                f"contiguous ({MIN_SPAN_BYTES} bytes, TMA's narrowest swizzle span, a row's "
                f"unit; a k-contiguous B takes any multiple of {WGMMA_N_STEP})")

    def shallow_problem(self, block: tuple[int, int, int], options: Options) -> Optional[str]:
        """Why a block wgmma could take is left to mma.sync as slower on wgmma (None when it
        is not): a BK under :attr:`preferred_min_bk` with TMA's span left to the compiler."""
        bk = block[2]
        if self.preferred_min_bk is None or bk >= self.preferred_min_bk or options.tma_swizzle:
            return None
        return (f"BK={bk} is under {self.preferred_min_bk}: {SHALLOW_MEASURED} "
                "(tma_swizzle=64 or 32 keeps such a block on wgmma)")

    def shaping_problem(self, block: tuple[int, int, int], options: Options) -> Optional[str]:
        """Why the block's tile or the options shaping its warps rule wgmma out (None when
        neither does)."""
        problem = self.block_problem(block, options)
        if problem is not None:
            return problem
        if options.warps is not None:
            return "an explicit warp grid (wgmma's warpgroups own 64 rows each)"
        if options.swizzle != "auto":
            return ("swizzle is fixed (wgmma reads TMA's swizzled layouts; tma_swizzle sets "
                    "their span)")
        return None

    def alignment_problem(self, operands: Sequence[OperandPlan]) -> Optional[str]:
        """Operands whose rows TMA cannot address (not 16-byte aligned as stored)."""
        unaligned = [op.role for op in operands
                     if op.vec * op.stored_bytes(DType.parse(self.dtypes[0]).bytes) != 16]
        if unaligned:
            return (f"operand{'s' if len(unaligned) > 1 else ''} {', '.join(unaligned)} "
                    "without 16-byte aligned rows (TMA cannot address them)")
        return None

    def target_problem(self, arch: Optional[str], backend: str) -> Optional[str]:
        """Why no block of any shape is taken for this target (Options.arch) and backend
        (Options.backend): the arch, or a backend that emits no wgmma."""
        if arch not in self.archs:
            return f"wgmma needs arch {' or '.join(self.archs)}, not {arch}"
        if backend not in self.backends:
            return (f"the {backend} backend emits no wgmma (it has no warp-specialized "
                    f"TMA schedule); backend={self.backends[0]!r} does")
        return None

    def block_problem(self, block: tuple[int, int, int], options: Options) -> Optional[str]:
        bm, bn, bk = block
        rows = options.warpgroup_rows
        if bm % WGMMA_M or not 1 <= bm // WGMMA_M <= MAX_CONSUMER_WARPGROUPS:
            return f"BM={bm} is not 64 to {64 * MAX_CONSUMER_WARPGROUPS} in steps of 64"
        if bm % rows:
            return (f"BM={bm} is not a multiple of the {rows} rows a consumer warpgroup owns "
                    "(warpgroup_rows)")
        if bn % self.bn_unit or bn > WGMMA_N_MAX:
            return (f"BN={bn} is not a multiple of {self.bn_unit} up to {WGMMA_N_MAX} "
                    "(wgmma's n)")
        if bk % self.bk_unit:
            return (f"BK={bk} is not a multiple of {self.bk_unit} ({MIN_SPAN_BYTES} bytes: "
                    "TMA's narrowest swizzle span, and one k step)")
        # ptxas compiles each wgmma within the registers a thread starts with (setmaxnreg
        # does not raise that cap for one instruction: C7602, "Insufficient registers (128)"
        # for m64n256 in a 512-thread block), and fits the whole warpgroup's accumulators in
        # what setmaxnreg.inc gives (256x192 in 128-row warpgroups: 192 accumulators, no
        # spill at 168 on entry; 256x208 spilled, C7512). Pingpong's block has two consumer
        # warpgroups whatever the tile.
        warpgroups = 2 if options.consumers == "pingpong" else bm // rows
        threads = WARPGROUP * (warpgroups + 1)
        blocks = options.blocks_per_sm
        at_entry = registers_at_entry(threads, blocks)
        one_instruction = bn * WGMMA_M // WARPGROUP + CONSUMER_OVERHEAD
        if one_instruction > at_entry:
            return (f"{bm}x{bn}'s m64n{bn} products need about {one_instruction} registers a "
                    f"consumer thread, more than the {at_entry} a {threads}-thread block "
                    "starts with" + (f" at {blocks} blocks per SM" if blocks > 1 else ""))
        needed = bn * rows // WARPGROUP + CONSUMER_OVERHEAD  # f32 accumulators + the rest
        given = self.consumer_registers(warpgroups, blocks)
        if needed > given:
            return (f"{bm}x{bn} in {rows}-row warpgroups needs about {needed} registers a "
                    f"consumer thread, more than setmaxnreg gives it ({given})")
        return None

    def make_instruction(self, block: tuple[int, int, int]) -> tuple[int, int, int]:
        return (WGMMA_M, block[1], self.k_step)

    def choose_warps(self, bm: int, bn: int, options: Options) -> tuple[int, int]:
        """A warpgroup's four warps over its rows: 16 rows a warp, or two 16-row strips
        (:class:`WgmmaLayout`) with 128-row warpgroups."""
        return (bm * WARPS_PER_WARPGROUP // options.warpgroup_rows, 1)

    def consumer_registers(self, consumer_warpgroups: int, blocks_per_sm: int = 1) -> int:
        """setmaxnreg.inc for the consumers, a multiple of 8 (PTX ISA 9.7.19.5): what the
        block was launched with (every thread's registers at entry) less the producer's
        after its setmaxnreg.dec, shared by the consumers. Not the whole file's share: with
        640 threads the block starts with 96 registers a thread (61440, not 65536), and an
        inc to 112 waited forever for registers the block never had (a GPU hang, H100)."""
        consumer_threads = WARPGROUP * consumer_warpgroups
        threads = consumer_threads + WARPGROUP
        held = registers_at_entry(threads, blocks_per_sm) * threads
        left = held - WARPGROUP * PRODUCER_REGISTERS
        return min(MAX_SETMAXNREG, left // consumer_threads // 8 * 8)

    def layout_candidates(self, op_plan: OperandPlan, elem_bytes: int) -> list[SmemLayout]:
        """TMA's layouts in each span the operand's rows take, widest first (on equal reads
        the swizzle pass keeps the first: fewer, wider boxes); padded slabs stay (the ring
        was sized, and its loads' bytes counted, for them)."""
        if op_plan.layout.padded:
            return [op_plan.layout]
        return [tma_layout(op_plan.layout, elem_bytes, span)
                for span in spans_for(op_plan.layout, elem_bytes)]

    def fragment_registers(self, warp_rows: int, warp_cols: int) -> int:
        return 0  # both operands stay in shared memory

    def read_addresses(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                       warp_index: int, k0: int, elem_bytes: int) -> Iterator[list[int]]:
        """The core matrices (8 rows of 16 bytes) one warpgroup's wgmma reads at ``k0``: eight
        16-byte row addresses each, the unit the tensor core fetches."""
        if warp_index:
            return iter(())
        extent = plan.block[0] if op_plan.role == "A" else plan.block[1]
        return core_matrices(descriptor_fields(layout, op_plan.role, elem_bytes), layout, k0,
                             extent, elem_bytes)

    def worst_read_degree(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                          elem_bytes: int) -> int:
        """The worst degree of :meth:`read_addresses`, from the first piece along mn of each
        k chunk: the next ones start SBO (K-major) or LBO (MN-major) bytes later, whole
        swizzle periods (:func:`repeats_along_mn`), so their rows hit the banks alike. An
        operand a subfamily reads otherwise (wgmma_rs's A, into registers) is scored whole."""
        d = None if self.converts(op_plan.role) else \
            descriptor_fields(layout, op_plan.role, elem_bytes)
        if d is None or not repeats_along_mn(d):
            return super().worst_read_degree(plan, op_plan, layout, elem_bytes)
        piece = ATOM_ROWS if d.k_major else 16 // elem_bytes
        return max(self.read_degree(op_plan.k_major, addresses)
                   for k0 in range(0, plan.block[2], self.k_step)
                   for addresses in core_matrices(d, layout, k0, piece, elem_bytes))

    def read_access(self, role: str, layout: SmemLayout) -> str:
        return "wgmma descriptor (" + ("K" if operand_k_major(role, layout) else "MN") \
            + "-major)"

    def read_degree(self, k_major: bool, addresses: Sequence[int]) -> int:
        return conflict_degree(addresses, 16)

    def loads_per_k_step(self, plan: TilingPlan) -> tuple[int, int]:
        return 0, 0

    def products_per_k_step(self, accumulator: DistributedLayout) -> int:
        """One wgmma a warpgroup per k step and m64 strip (two with 128-row warpgroups)."""
        return accumulator.warp_tile[0] // STRIP_ROWS

    def warp_tile_text(self, h: ExplainShape) -> str:
        return warpgroup_tile_text(h, "k16", "")

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        return instruction_tile_text(h)

    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        return (f"viz draws ldmatrix bank maps and mma.sync fragments; {kernel} uses "
                "wgmma, whose operands the tensor cores read from shared memory through "
                "descriptors; see `tilec explain` for the TMA swizzle and its conflicts")


FAMILY = Wgmma()
