"""The tf32 family: f32 tiles on tensor cores (``Options.f32_math = "tf32"``), as cuBLAS with
TF32 allowed: ``frag.ldtf32`` + ``mma.sync.m16n8k8 .tf32``, f32 accumulation.

``frag.ldtf32`` loads each warp's slice of an f32 operand as mma.m16n8k8 .tf32 fragments and
rounds every register to tf32; which instruction reads shared memory depends on the
operand's storage orientation:

- k contiguous (A row-major, B given transposed): ``ldmatrix.x4`` (non-.trans). Its 16-byte
  rows are 4 f32 along k, and the 32-bit word a lane receives is exactly its tf32 fragment
  register (:func:`~tilec.families.mma_sync.ldmatrix_lane_coord` with 4-element rows).
- mn contiguous (row-major B, A given transposed): ldmatrix cannot transpose 32-bit
  elements, so one ``ld.shared.b32`` per fragment register, at :func:`tf32_operand_coord`;
  the swizzle pass makes these conflict-free (32-byte swizzle units).

Then ``cvt.rna.tf32.f32`` on every register: round to nearest, ties away from zero, to 10
mantissa bits, as cuBLAS and CUTLASS do for f32 inputs with TF32 allowed (the mma would
otherwise ignore the low 13 bits, truncating). The product is ``frag.mma``, the mma
family's emitter with the tf32 type suffix and the plan's m16n8k8 shape, and the mma
family's CPU semantics on this family's fragments (:data:`TF32_FRAGMENTS`). Here too: the
definition of ``frag.ldtf32`` with its CPU semantics (:func:`round_tf32` is the interpreter's).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OpDef
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.ir.types import F32, TileType
from tilec.target.layout import (BANK_BYTES, WARP_SIZE, SmemLayout, conflict_degree,
                                 offset_relation, operand_extent, operand_k_major,
                                 operand_storage_coord, warps_along)

from .fragments_common import operand_offset, relative_address
from .mma_sync import (FRAG_MMA, LDMATRIX_PIECE, MMA_M, MMA_N, MmaFragments, MmaLayout, MmaSync,
                       ldmatrix_index, ldmatrix_reads, ldmatrix_registers, mma_products)
from .product import ExplainShape, ExplainText, check_operand_load, not_drawn

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.interpreter import InterpState

# The CPU semantics import numpy and the CPU model (tilec.cpu) where they run: compiling
# never runs them, and a cold `tilec compile` should not wait for numpy's import.


def round_tf32(values: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 on every element: the interpreter's rounding, which rounds f32
    products as this family does (it lives there; imported on first use, see above)."""
    from tilec.cpu.interpreter import round_tf32 as interpreter_round_tf32
    return interpreter_round_tf32(values)

# mma.sync.aligned.m16n8k8 with .tf32 inputs: PTX ISA "Matrix Fragments for mma.m16n8k8"; one
# 32-bit element a register, so k 8 (32 bytes of f32, as k16 is 32 bytes of f16).
TF32_K = 8


@dataclass(frozen=True)
class Tf32Layout(MmaLayout):
    """A tile distributed over warps as mma.m16n8k8 .tf32 fragments: C exactly as
    :class:`~tilec.families.mma_sync.MmaLayout`'s (the m16n8 accumulator fragment is the
    same); A and B hold one f32 (rounded to tf32) per register, at :func:`tf32_a_coord` and
    :func:`tf32_b_coord`, four registers per m16 piece of A and two per n8 tile of B, in the
    mma family's order."""

    kind = "tf32"


# mma.m16n8k8 .tf32 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8"): one f32 per
# 32-bit register; g = lane / 4, t = lane % 4 as for m16n8k16.

def tf32_a_coord(lane: int, reg: int) -> tuple[int, int]:
    """(row m, col k) of A register ``reg`` (0..3) of an m16 x k8 piece: (g, t),
    (g + 8, t), (g, t + 4), (g + 8, t + 4)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg % 2), t + 4 * (reg // 2)


def tf32_b_coord(lane: int, reg: int) -> tuple[int, int]:
    """(row k, col n) of B register ``reg`` (0..1) of a k8 x n8 tile: (t, g), (t + 4, g)."""
    g, t = divmod(lane, 4)
    return t + 4 * reg, g


def tf32_operand_coord(role: str, lane: int, reg: int) -> tuple[int, int]:
    """(mn, k) of fragment register ``reg`` of ``lane``: register ``4 p + r`` of A is
    register r of m16 piece p, register ``2 p + r`` of B register r of n8 tile p."""
    if role == "A":
        piece, r = divmod(reg, 4)
        m, k = tf32_a_coord(lane, r)
        return piece * MMA_M + m, k
    piece, r = divmod(reg, 2)
    k, n = tf32_b_coord(lane, r)
    return piece * MMA_N + n, k


def tf32_registers(role: str, warp_tile: tuple[int, int]) -> int:
    """Fragment registers one k8 step of operand ``role`` takes per lane."""
    return warp_tile[0] // MMA_M * 4 if role == "A" else warp_tile[1] // MMA_N * 2


def tf32_word_addresses(layout: SmemLayout, role: str, warp_tile: tuple[int, int],
                        warp_index: int, reg: int, k0: int, elem_bytes: int) -> list[int]:
    """Byte addresses the 32 lanes read in the ``ld.shared.b32`` of fragment register
    ``reg`` (warp ``warp_index`` along the operand's mn dim, k step at ``k0``): how operands
    whose mn dim is contiguous in shared memory are loaded (ldmatrix cannot transpose
    32-bit elements)."""
    extent = operand_extent(role, warp_tile)
    k_major = operand_k_major(role, layout)
    result = []
    for lane in range(WARP_SIZE):
        mn, k = tf32_operand_coord(role, lane, reg)
        row, col = operand_storage_coord(k_major, warp_index * extent + mn, k0 + k)
        result.append(layout.offset(row, col) * elem_bytes)
    return result


def _word_lane_offset(ctx: Context, view: SmemView, role: str, reg: int, k: int) -> str:
    """Byte offset (from the stage start) of this lane's element of fragment register
    ``reg`` at k step ``k``: the lane's (g, t) part plus the register's (lane 0's) part."""
    plan = ctx.plan

    def compute() -> str:
        lane, _ = ctx.lane_warp()
        g = ctx.int_op("shr.u32", lane, 2)
        t = ctx.int_op("and.b32", lane, 3)
        mn_rel, k_rel = tf32_operand_coord(role, 0, reg)
        return operand_offset(ctx, view, role, plan.warps, plan.warp_tile, g, mn_rel,
                              ctx.int_op("add.s32", t, k + k_rel))

    return ctx.w.once(("ldtf32", id(view.buffer), role, reg, k), compute)


def _all_lanes(ctx: Context, view: SmemView, role: str, reg: int, k0: int) -> list[int]:
    """Byte offsets every lane of every warp along the operand reads for one register."""
    plan = ctx.plan
    return [a for w in range(warps_along(role, plan.warps))
            for a in tf32_word_addresses(view.buffer.layout, role, plan.warp_tile, w, reg, k0,
                                         view.buffer.elem_bytes)]


def _word_registers(ctx: Context, view: SmemView, role: str, k0: int) -> list[str]:
    """One ``ld.shared.b32`` per fragment register (PTX ISA 9.7.9.8, ld), addressed from one
    lane offset by XOR + immediate where the swizzle allows (relative_address)."""
    reference = _all_lanes(ctx, view, role, 0, 0)
    state: dict = {}
    regs: list[str] = []
    for reg in range(tf32_registers(role, ctx.plan.warp_tile)):
        relation = offset_relation(reference, _all_lanes(ctx, view, role, reg, k0))
        address = relative_address(
            ctx, view, relation, state, lambda: _word_lane_offset(ctx, view, role, 0, 0),
            lambda reg=reg: _word_lane_offset(ctx, view, role, reg, k0))
        out = ctx.w.reg("b32")
        ctx.w.emit(f"ld.shared.b32 {out}, [{address}];")
        regs.append(out)
    return regs


# Per storage orientation (k contiguous or not): how the fragment registers are read.
LOADERS: dict[bool, Callable[[Context, SmemView, str, int], list[str]]] = {
    True: ldmatrix_registers, False: _word_registers}


def _ldtf32(ctx: Context, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    role, k0 = op.attrs["operand"], op.attrs["k0"]
    regs = LOADERS[operand_k_major(role, view.buffer.layout)](ctx, view, role, k0)
    # PTX ISA 9.7.9.21 (cvt): .rna rounds to nearest, ties away from zero; in place, as the
    # f32 value is not needed again.
    for reg in regs:
        ctx.w.emit(f"cvt.rna.tf32.f32 {reg}, {reg};")
    ctx.bind(op.result, regs)


# mma.sync.aligned.m16n8k8.row.col with .tf32 inputs: registers already rounded by ldtf32.
MMA_TYPES = {F32: "f32.tf32.tf32.f32"}


def _mma(ctx: Context, op: Op) -> None:
    mma_products(ctx, op, MMA_TYPES)


# -- IR ops and their CPU semantics ----------------------------------------------------------
# What the executor does for frag.ldtf32, from the layout functions above alone, never from
# the emitters (frag.mma: the mma family's semantics on TF32_FRAGMENTS):
#
# - frag.ldtf32 where k is contiguous in shared memory: what ldmatrix.x4 delivers
#   (ldmatrix_index with 32-bit elements: lane l gets word l % 4 of row l // 4 of each
#   matrix). Otherwise one 32-bit read per fragment register at tf32_word_addresses.
#   Misaligned ldmatrix rows and reads past the stage are errors.
# - Then every register is rounded as cvt.rna.tf32.f32 rounds (round_tf32), so a product of
#   these fragments is the product of tf32 inputs, accumulated in f32.
#
# The value is a tilec.cpu.executor.Fragment whose lanes are [warps, 32, regs] (one f32 per
# register); its logical tile shows the first warp of each warp row (A) or column (B), read
# off with tf32_operand_coord.

@lru_cache(maxsize=None)
def _word_index(smem: SmemLayout, fragment: Tf32Layout, k0: int,
                elem_bytes: int) -> np.ndarray:
    """Storage offset (within a stage) of every register ``[warps, 32, regs]`` the 32-bit
    reads of one k step load."""
    import numpy as np
    role = fragment.operand
    warps = fragment.warps[0] * fragment.warps[1]
    regs = tf32_registers(role, fragment.warp_tile)
    index = np.empty((warps, WARP_SIZE, regs), dtype=np.int64)
    for w in range(warps):
        along = w // fragment.warps[1] if role == "A" else w % fragment.warps[1]
        for reg in range(regs):
            addresses = tf32_word_addresses(smem, role, fragment.warp_tile, along, reg, k0,
                                            elem_bytes)
            index[w, :, reg] = np.array(addresses) // elem_bytes
    index.flags.writeable = False
    return index


def _ldtf32_index(smem: SmemLayout, fragment: Tf32Layout, k0: int,
           elem_bytes: int) -> tuple[np.ndarray, bool]:
    """Every register's storage offset ``[warps, 32, regs]``, and whether ldmatrix's rows
    are aligned (always true for 32-bit reads)."""
    if operand_k_major(fragment.operand, smem):
        index, aligned = ldmatrix_index(smem, fragment.operand, fragment.warps,
                                         fragment.warp_tile, k0, elem_bytes)
        return index[..., 0], aligned
    return _word_index(smem, fragment, k0, elem_bytes), True


@lru_cache(maxsize=None)
def _tile_map(fragment: Tf32Layout) -> tuple[np.ndarray, ...]:
    """(warp, lane, reg) and the (row, col) they hold in the logical fragment tile, for the
    first warp of each warp row (A) or warp column (B)."""
    import numpy as np
    role = fragment.operand
    extent = fragment.warp_tile[0] if role == "A" else fragment.warp_tile[1]
    entries = []
    for along in range(fragment.warps[0] if role == "A" else fragment.warps[1]):
        warp = along * fragment.warps[1] if role == "A" else along
        for lane in range(WARP_SIZE):
            for reg in range(tf32_registers(role, fragment.warp_tile)):
                mn, k = tf32_operand_coord(role, lane, reg)
                mn += along * extent
                entries.append((warp, lane, reg, *((mn, k) if role == "A" else (k, mn))))
    return tuple(np.array(column, dtype=np.int64) for column in zip(*entries))


def _execute_ldtf32(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    import numpy as np

    from tilec.cpu.executor import Fragment, read_fragment_lanes, smem_itemsize
    rtype: TileType = op.result.type
    lanes = round_tf32(read_fragment_lanes(
        state, op, operands[0], Tf32Layout,
        lambda smem, fragment, k0: _ldtf32_index(smem, fragment, k0, smem_itemsize(op)),
        "an ldmatrix row address is not 16-byte aligned"))
    fragment = rtype.layout
    warp, lane, reg, row, col = _tile_map(fragment)
    if row.max() >= rtype.shape[0] or col.max() >= rtype.shape[1]:
        raise state.error(op, f"{fragment} does not fit a {list(rtype.shape)} tile")
    tile = np.full(rtype.shape, np.nan, dtype=np.float32)
    tile[row, col] = lanes[warp, lane, reg]
    value = tile.view(Fragment)
    value.lanes = lanes
    return [value]


FRAG_LDTF32 = OpDef("frag.ldtf32", "a warp-tile slice of an f32 mma operand from shared memory "
                    "as m16n8k8 .tf32 fragments, each register rounded to tf32 (cvt.rna)", 1, 1,
                    attrs=("operand", "k0"), check=check_operand_load, pure=True,
                    evaluate=_execute_ldtf32)
# m16n8k8 .tf32: one f32 a register, at tf32_a_coord / tf32_b_coord.
TF32_FRAGMENTS = MmaFragments(TF32_K, 1, lambda lane, r, h: tf32_a_coord(lane, r),
                              lambda lane, r, h: tf32_b_coord(lane, r))


class Tf32(MmaSync):
    """ldmatrix or ld.shared.b32 + cvt.rna.tf32.f32 + mma.sync.m16n8k8 .tf32 on f32 tiles;
    the accumulator and the product's order are the mma family's."""

    name = "tf32"
    dtypes = ("f32",)
    f32_math = "tf32"
    k_step = TF32_K
    granule_why = " (m16n8k8 tf32 instructions, B loaded two n8 tiles at a time)"
    instruction = (MMA_M, MMA_N, TF32_K)
    layout = Tf32Layout
    load_op = "frag.ldtf32"
    byte_load_op = None  # f32 operands: nothing 8-bit to convert
    read_name = "ldtf32"
    # 32-bit reads put 8 consecutive words of 4 rows in one wavefront; XOR-ing 32-byte units
    # by the row moves each row's 8 words to banks of their own.
    swizzle_units = (16, 32)
    explain_text = ExplainText("fragment loads", "mma.sync", "warp", "ldtf32", "mma", "reads",
                               ("f32_math", "mma_order"))
    emitters = {"frag.ldtf32": _ldtf32, "frag.mma": _mma}
    fragments = TF32_FRAGMENTS

    def op_defs(self) -> tuple[OpDef, ...]:
        return FRAG_LDTF32, replace(FRAG_MMA, evaluate=self.execute_product)

    # fragment_registers: the mma family's count (4 per m16 piece of A, 2 per n8 tile of B),
    # one f32 a register per k8 step.

    def read_addresses(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                       warp_index: int, k0: int, elem_bytes: int) -> Iterator[list[int]]:
        """ldmatrix where k is contiguous; else one ``ld.shared.b32`` per fragment register,
        its 32 lanes reading 4 k rows x 8 consecutive mn words (A: m, B: n), all distinct, so
        they compete for banks in one wavefront."""
        role = op_plan.role
        if operand_k_major(role, layout):
            yield from ldmatrix_reads(plan, role, layout, warp_index, k0, elem_bytes)
            return
        for reg in range(tf32_registers(role, plan.warp_tile)):
            yield tf32_word_addresses(layout, role, plan.warp_tile, warp_index, reg, k0,
                                      elem_bytes)

    def read_access(self, role: str, layout: SmemLayout) -> str:
        return "ldmatrix.x4" if operand_k_major(role, layout) else "ld.shared.b32"

    def reads_by_ldmatrix(self, op_plan: OperandPlan, layout: SmemLayout) -> bool:
        return operand_k_major(op_plan.role, layout)  # else ld.shared.b32 words

    def read_degree(self, k_major: bool, addresses: Sequence[int]) -> int:
        return conflict_degree(addresses, 16 if k_major else BANK_BYTES)

    def loads_per_k_step(self, plan: TilingPlan) -> tuple[int, int]:
        """Fragment loads per warp per k8 step, A and B: one ldmatrix.x4 per 16-wide piece
        where k is contiguous, else one ld.shared.b32 per fragment register."""
        a, b = (operand_extent(op.role, plan.warp_tile) // LDMATRIX_PIECE if op.k_major
                else tf32_registers(op.role, plan.warp_tile)
                for op in (plan.operand("A"), plan.operand("B")))
        return a, b

    def warp_tile_text(self, h: ExplainShape) -> str:
        (tm, tn), (im, in_, _) = h.warp_tile, h.instruction
        readers = [("ldmatrix.x4" if c.transposed == (c.role == "B") else "ld.shared.b32")
                   for c in h.copies]
        a, b = h.loads_per_k_step
        return (f"{tm} x {tn}: {tm // im} x {tn // in_} mma tiles, {h.products_per_k_step} "
                f"mma.sync and {a + b} fragment loads (A {a} {readers[0]}, B {b} "
                f"{readers[1]}) per k-step, each register then rounded by cvt.rna.tf32.f32")

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        return ("instruction tile", "m{}n{}k{} .tf32".format(*h.instruction)
                + f" (f32 inputs rounded to tf32, f32 accumulation), {h.k_steps} k-steps "
                "per BK")

    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        return not_drawn(plan, kernel, "TF32 tensor cores",
                         "ldmatrix or ld.shared.b32 + mma.sync m16n8k8 .tf32")


FAMILY = Tf32()
