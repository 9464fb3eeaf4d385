"""The mma family: ``ldmatrix`` + ``mma.sync.m16n8k16`` on f16/bf16 tiles, f32 accumulation.

Each warp loads its slice of A and B from (swizzled) shared memory with ``ldmatrix.x4``
(``.trans`` where mn is the contiguous storage dim), one 16 x 16 piece a load, and
multiplies them with one ``mma.sync`` per m16 x n8 tile of its warp tile.

Here: the fragment layout (:class:`MmaLayout`, :func:`mma_a_coord` and its siblings), the
ldmatrix lane addressing (:func:`ldmatrix_lane_coord`, :func:`ldmatrix_addresses`), the
emitters of ``frag.ldmatrix`` and ``frag.mma`` (the tf32 family reuses both), the explain
text and viz's answer (it draws this family).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Optional, Sequence

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OPERAND_CONVERSIONS, OpDef, check_fragment_result, require
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.ir.types import BF16, F16, F8E4M3, F8E5M2, I8, DType, TileType
from tilec.target.layout import (WARP_SIZE, DistributedLayout, SmemLayout, conflict_degree,
                                 offset_relation, operand_extent, operand_k_major,
                                 operand_storage_coord, warps_along)

from . import byte_operands
from .fragments_common import operand_offset, relative_address
from .product import (ExplainShape, ExplainText, ProductFamily, check_fragment_load,
                      check_product, instruction_tile_text, not_drawn)

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.interpreter import InterpState

# The CPU semantics import numpy and the CPU model (tilec.cpu) where they run: compiling
# never runs them, and a cold `tilec compile` should not wait for numpy's import.

# mma.sync.aligned.m16n8k16: PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16".
MMA_M, MMA_N, MMA_K = 16, 8, 16


@dataclass(frozen=True)
class MmaLayout(DistributedLayout):
    """A tile distributed over warps as mma.m16n8k16 fragments.

    ``operand`` is A, B or C; ``warps`` the warp grid (along M, along N) and ``warp_tile`` the
    (rows, cols) of the C tile each warp owns. A fragments are shared by the warps of one
    warp row, B fragments by those of one warp column. C registers run over the warp's
    (m16, n8) tiles, m fastest, four per tile (PTX ISA 9.7.14.5.8).
    """

    operand: str
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    lane_grid = (8, 4)  # g = lane / 4 picks the row, t = lane % 4 the column pair
    lane_step = (1, 2)
    kind = "mma"

    def register_offsets(self) -> list[tuple[int, int]]:
        offsets = []
        tiles_m = self.warp_tile[0] // MMA_M
        for reg in range(self.regs_per_thread):
            tile, r = divmod(reg, 4)
            tn, tm = divmod(tile, tiles_m)
            offsets.append((tm * MMA_M + 8 * (r // 2), tn * MMA_N + r % 2))
        return offsets


# -- mma.m16n8k16 fragments. g = lane / 4 (the "group"), t = lane % 4 (thread in group). ---

def mma_a_coord(lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row m, col k) of A element ``half`` (0/1) of 32-bit register ``reg`` (0..3)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg % 2), 2 * t + half + 8 * (reg // 2)


def mma_b_coord(lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row k, col n) of B element ``half`` of register ``reg`` (0..1)."""
    g, t = divmod(lane, 4)
    return 2 * t + half + 8 * reg, g


def mma_c_coord(lane: int, reg: int) -> tuple[int, int]:
    """(row m, col n) of accumulator register ``reg`` (0..3)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg // 2), 2 * t + reg % 2


# (rows, cols, registers, elements per register) of one instruction's fragments with
# f16/bf16 inputs: what viz's fragment picture inverts.
FRAGMENT_SHAPES = {"A": (MMA_M, MMA_K, 4, 2), "B": (MMA_K, MMA_N, 2, 2),
                   "C": (MMA_M, MMA_N, 4, 1)}


def fragment_coord(role: str, lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row, col) of element ``half`` of register ``reg`` of ``lane`` in operand ``role``'s
    fragment of one instruction (C: ``half`` is 0)."""
    if role == "A":
        return mma_a_coord(lane, reg, half)
    if role == "B":
        return mma_b_coord(lane, reg, half)
    return mma_c_coord(lane, reg)


# -- ldmatrix: PTX ISA 9.7.14.5.15 -----------------------------------------------------------
# ldmatrix.x4: lanes 8j..8j+7 give the row addresses of 8x8 matrix j, and matrix j fills
# destination register j. Per operand, which (mn block, k block) of the 16x16 piece each
# matrix holds, so that register j is the mma's fragment register j:
LDMATRIX_ORDER = {
    "A": ((0, 0), (1, 0), (0, 1), (1, 1)),  # a0..a3 of one m16 x k16 tile
    "B": ((0, 0), (0, 1), (1, 0), (1, 1)),  # b0, b1 of n-tile 0, then of n-tile 1
}
LDMATRIX_PIECE = 16  # the mn extent of one ldmatrix.x4


def ldmatrix_lane_coord(operand: str, k_major: bool, lane: int,
                        row_elems: int = 8) -> tuple[int, int]:
    """(mn, k) within an operand piece (16 mn x two 16-byte rows of k, or the transpose)
    whose row address lane ``lane`` supplies; ``row_elems`` elements make one 16-byte
    ldmatrix row (8 of f16, 4 of f32).

    ``k_major``: the shared tile stores k contiguously (A row-major, or B given as B.T);
    then plain ldmatrix gives the fragment: 16x16 of f16, or 16 x 8 of f32, whose 32-bit
    words are exactly the tf32 mma's fragment registers. Otherwise mn is contiguous and
    ``.trans`` does (16-bit elements only).
    """
    mn_block, k_block = LDMATRIX_ORDER[operand][lane // 8]
    r = lane % 8
    if k_major:
        return mn_block * 8 + r, k_block * row_elems
    return mn_block * row_elems, k_block * 8 + r


def ldmatrix_addresses(layout: SmemLayout, operand: str, k_major: bool, mn0: int, k0: int,
                       elem_bytes: int) -> list[int]:
    """Byte addresses the 32 lanes give one ldmatrix.x4 at operand position (mn0, k0)."""
    coords = [operand_storage_coord(k_major, mn0 + mn, k0 + k)
              for mn, k in _ldmatrix_lane_coords(operand, k_major, 16 // elem_bytes)]
    return [offset * elem_bytes for offset in layout.offsets(coords)]


@lru_cache(maxsize=None)
def _ldmatrix_lane_coords(operand: str, k_major: bool, row_elems: int
                          ) -> tuple[tuple[int, int], ...]:
    """:func:`ldmatrix_lane_coord` of the 32 lanes, once per kind of piece (the swizzle pass
    asks for hundreds of pieces)."""
    return tuple(ldmatrix_lane_coord(operand, k_major, lane, row_elems)
                 for lane in range(WARP_SIZE))


def ldmatrix_reads(plan: TilingPlan, role: str, layout: SmemLayout, warp_index: int, k0: int,
                   elem_bytes: int, classes: Optional[set[int]] = None
                   ) -> Iterator[list[int]]:
    """Lane byte addresses of the ldmatrix.x4 of every piece of one warp's slice at ``k0``.
    ``classes``: a set kept over calls; a piece whose anchor's bank class
    (:meth:`SmemLayout.bank_class`) is in it is skipped, its conflicts those of one already
    yielded (the swizzle pass's worst degree: a 128-row tile's pieces are a few classes)."""
    k_major = operand_k_major(role, layout)
    extent = operand_extent(role, plan.warp_tile)
    for mn0 in range(0, extent, LDMATRIX_PIECE):
        mn = warp_index * extent + mn0
        if classes is not None:
            anchor = layout.bank_class(*operand_storage_coord(k_major, mn, k0), elem_bytes)
            if anchor in classes:
                continue
            if anchor is not None:
                classes.add(anchor)
        yield ldmatrix_addresses(layout, role, k_major, mn, k0, elem_bytes)


def _order_mask(role: str, index: int) -> int:
    """Bit j holds component ``index`` of matrix j in LDMATRIX_ORDER, so a lane can look up
    its matrix's block with one shift."""
    return sum(block[index] << j for j, block in enumerate(LDMATRIX_ORDER[role]))


def _ldmatrix_lane_offsets(ctx: Context, view: SmemView, role: str, mn0: int, k0: int) -> str:
    """Byte offset (from the stage start) of the row this lane points ldmatrix at, for the
    16x16 piece at (mn0 + this warp's base, k0). Emitted once per distinct piece."""
    plan = ctx.plan
    layout = view.buffer.layout
    k_major = operand_k_major(role, layout)

    # A matrix is 8 rows of one 16-byte row each: blocks step 8 along the row dim and one
    # row's elements (8 of f16, 4 of f32) along the contiguous dim (ldmatrix_lane_coord).
    row_elems = 16 // view.buffer.elem_bytes
    steps = (8, row_elems) if k_major else (row_elems, 8)

    def compute() -> str:
        lane, _ = ctx.lane_warp()
        matrix = ctx.int_op("shr.u32", lane, 3)
        r = ctx.int_op("and.b32", lane, 7)
        blocks = []
        for index in (0, 1):
            bit = ctx.int_op("shr.u32", _order_mask(role, index), matrix)
            blocks.append(ctx.int_op("shl.b32", ctx.int_op("and.b32", bit, 1),
                                     steps[index].bit_length() - 1))
        mn, k = blocks
        if k_major:
            mn = ctx.int_op("add.s32", mn, r)
        else:
            k = ctx.int_op("add.s32", k, r)
        return operand_offset(ctx, view, role, plan.warps, plan.warp_tile, mn, mn0,
                              ctx.int_op("add.s32", k, k0))

    key = ("ldmatrix", id(view.buffer), role, mn0, k0)
    return ctx.w.once(key, compute)


def _piece_offsets(plan: TilingPlan, role: str, layout: SmemLayout, mn0: int, k0: int,
                   elem_bytes: int) -> list[int]:
    """Byte offsets every lane of every warp along the operand gives one ldmatrix piece."""
    k_major = operand_k_major(role, layout)
    extent = operand_extent(role, plan.warp_tile)
    return [a for w in range(warps_along(role, plan.warps))
            for a in ldmatrix_addresses(layout, role, k_major, w * extent + mn0, k0,
                                        elem_bytes)]


def ldmatrix_pieces(plan: TilingPlan, role: str, layout: SmemLayout, k0: int,
                    eb: int) -> list[tuple[int, Optional[tuple[int, int]]]]:
    """The ldmatrix.x4 pieces of this warp's slice of operand ``role`` at ``k0``, as both
    backends issue them: (mn0, relation), where relation is (xor, add) onto the lane offset
    of piece (0, 0) when the layout allows (offset_relation), else None (its own offset)."""
    reference = _piece_offsets(plan, role, layout, 0, 0, eb)
    return [(mn0, offset_relation(reference, _piece_offsets(plan, role, layout, mn0, k0, eb)))
            for mn0 in range(0, operand_extent(role, plan.warp_tile), LDMATRIX_PIECE)]


def ldmatrix_registers(ctx: Context, view: SmemView, role: str, k0: int) -> list[str]:
    """ldmatrix.x4 of every piece of this warp's slice of operand ``role`` at ``k0``: the
    fragment registers, 4 a piece, in the mma's order (LDMATRIX_ORDER). A piece is 16 mn x
    32 bytes of k: k16 of f16, or k8 of f32 (the tf32 fragment, non-.trans only). One lane
    offset per operand is computed at entry; the other pieces follow it by a small XOR and
    an immediate."""
    layout = view.buffer.layout
    eb = view.buffer.elem_bytes
    trans = "" if operand_k_major(role, layout) else ".trans"
    state: dict = {}
    regs: list[str] = []
    for mn0, relation in ldmatrix_pieces(ctx.plan, role, layout, k0, eb):
        address = relative_address(
            ctx, view, relation, state,
            lambda: _ldmatrix_lane_offsets(ctx, view, role, 0, 0),
            lambda mn0=mn0: _ldmatrix_lane_offsets(ctx, view, role, mn0, k0))
        out = ctx.w.regs("b32", 4)
        ctx.w.emit(f"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{{', '.join(out)}}}, "
                   f"[{address}];")
        regs.extend(out)
    return regs


def _ldmatrix(ctx: Context, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    ctx.bind(op.result, ldmatrix_registers(ctx, view, op.attrs["operand"], op.attrs["k0"]))


# -- mma.sync.aligned.{shape}.row.col: PTX ISA 9.7.14.5.14 -----------------------------------
# The type suffix per input dtype; the shape is the plan's instruction.
MMA_TYPES = {F16: "f32.f16.f16.f32", BF16: "f32.bf16.bf16.f32"}


def mma_issue_order(tiles_m: int, tiles_n: int, mma_order: str, a_per_tile: int = 4,
                    b_per_tile: int = 2) -> list[tuple[slice, slice, int]]:
    """The warp's mma instructions in issue order, as both backends issue them: per m16 x n8
    tile, the slices of A's and B's fragment registers it reads and its first accumulator
    element (four a tile). "n" walks m fastest (consecutive mmas share B fragments), "m"
    walks n fastest (they share A); registers are the same either way."""
    order = [(tn, tm) for tn in range(tiles_n) for tm in range(tiles_m)]
    if mma_order == "m":
        order = [(tn, tm) for tm in range(tiles_m) for tn in range(tiles_n)]
    issued = []
    for tn, tm in order:
        # B was loaded two n8 tiles per ldmatrix.x4: registers of tile 2p, then of 2p+1.
        b_start = (tn // 2) * 2 * b_per_tile + (tn % 2) * b_per_tile
        issued.append((slice(tm * a_per_tile, (tm + 1) * a_per_tile),
                       slice(b_start, b_start + b_per_tile), (tn * tiles_m + tm) * 4))
    return issued


def mma_products(ctx: Context, op: Op, types: dict[DType, str],
                 accumulator_class: str = "f32") -> None:
    """``frag.mma``: one mma.sync per m16 x n8 tile of the warp tile, ``types`` giving the
    instruction's type suffix per input dtype (``accumulator_class``: the register class of
    the accumulator, b32 for .s32)."""
    a_regs, b_regs, acc = (ctx.get(v) for v in op.operands)
    plan = ctx.plan
    tiles_m = plan.warp_tile[0] // MMA_M
    tiles_n = plan.warp_tile[1] // MMA_N
    suffix = types[op.operands[0].type.dtype]
    shape = "m{}n{}k{}".format(*plan.instruction)
    # Accumulate in place when nothing else reads the old accumulator: the loop then carries
    # the same registers from iteration to iteration, with no copies for ptxas to remove.
    in_place = ctx.uses(op.operands[2]) == 1 and len(set(acc)) == len(acc)
    out = list(acc)
    for a_slice, b_slice, first in mma_issue_order(tiles_m, tiles_n, ctx.options.mma_order):
        a, b = a_regs[a_slice], b_regs[b_slice]
        c = acc[first:first + 4]
        d = c if in_place else ctx.w.regs(accumulator_class, 4)
        ctx.w.emit(f"mma.sync.aligned.{shape}.row.col.{suffix} {{{', '.join(d)}}}, "
                   f"{{{', '.join(a)}}}, {{{', '.join(b)}}}, {{{', '.join(c)}}};")
        out[first:first + 4] = d
    ctx.bind(op.result, out)


def _mma(ctx: Context, op: Op) -> None:
    mma_products(ctx, op, MMA_TYPES)


# -- frag.cvt: an operand converted in its registers, (stored, product) -> the instructions
# turning register {r} (two 16-bit elements) into {d}, {x} and {y} scratch (PTX ISA 9.7.9.21
# cvt: cvt.rn.f16x2.f32 / .bf16x2.f32 d, a, b put a in the upper half, b in the lower; sm_80+).
# Each element is widened exactly to f32, then rounded once to the product's dtype. A new
# source whose elements are 16 bits wide is one entry here and one in tilec/ir/ops.py's
# OPERAND_CONVERSIONS; 8-bit ones also need their own fragment load (ldmatrix moves 16-bit
# elements): frag.ldbytes (byte_operands.py) puts a register's two bytes in its low half.
# {p} and {q} are b32 scratch.
CONVERT_PTX: dict[tuple[DType, DType], tuple[str, ...]] = {
    # bf16 -> f32 is the bf16 bits in the upper half of an f32.
    (BF16, F16): ("shl.b32 {x}, {r}, 16;", "and.b32 {y}, {r}, 0xFFFF0000;",
                  "cvt.rn.f16x2.f32 {d}, {y}, {x};"),
    (F16, BF16): ("mov.b32 {{{lo}, {hi}}}, {r};", "cvt.f32.f16 {x}, {lo};",
                  "cvt.f32.f16 {y}, {hi};", "cvt.rn.bf16x2.f32 {d}, {y}, {x};"),
    # i8 -> f16, the magic-number trick, exact: flipping the sign bit makes byte b = s + 128
    # (0..255); prmt puts 0x64 above each (selector 0x4140: bytes 0, 4, 1, 4 of {p}:0x64646464),
    # the f16 0x6400 | b = 1024 + b exactly (10 mantissa bits); subtracting 1152 (0x6480)
    # leaves s, exactly. 3 instructions a register (plus a constant), where cvt.rn.f16.s8
    # would take two cvts, a mov and a pack.
    (I8, F16): ("xor.b32 {p}, {r}, 0x8080;", "mov.b32 {q}, 0x64646464;",
                "prmt.b32 {p}, {p}, {q}, 0x4140;", "mov.b32 {q}, 0x64806480;",
                "sub.rn.f16x2 {d}, {p}, {q};"),
    # i8 -> bf16: bf16 has 8 significant bits, so 1024 + b does not fit (b needs 8 of them
    # above the implicit one). The same trick in f32: 0x4B000000 | b is 2**23 + b, minus
    # 2**23 + 128 is s, exactly; then cvt.rn.bf16x2.f32, exact (|s| <= 128).
    (I8, BF16): ("xor.b32 {p}, {r}, 0x8080;", "mov.b32 {q}, 0x4B000000;",
                 "prmt.b32 {x}, {p}, {q}, 0x7540;", "prmt.b32 {y}, {p}, {q}, 0x7541;",
                 "sub.rn.f32 {x}, {x}, 0f4B000080;", "sub.rn.f32 {y}, {y}, 0f4B000080;",
                 "cvt.rn.bf16x2.f32 {d}, {y}, {x};"),
}
# fp8 -> f16: cvt.rn.f16x2.e4m3x2 / .e5m2x2 d, a (PTX ISA 9.7.9.21, PTX 7.8, sm_89+; a is a
# .b16 pair, its upper byte to d's upper half), exact: every e4m3 and e5m2 value (NaN and,
# for e5m2, infinities included) is an f16. The tiling pass refuses fp8 weights before
# sm_89 (tilec.families.fp8.FP8_ARCHS), so this is what every fp8 target uses.
# fp8 -> bf16: that f16 pair widened to f32 and rounded once to bf16 (the (F16, BF16) route
# above), exact: e4m3's 3 and e5m2's 2 mantissa bits fit bf16's 7, and their exponents
# (2**-9 .. 448, 2**-16 .. 57344) bf16's range.
for _fp8, _name in ((F8E4M3, "e4m3x2"), (F8E5M2, "e5m2x2")):
    CONVERT_PTX[_fp8, F16] = ("mov.b32 {{{lo}, {hi}}}, {r};",
                              f"cvt.rn.f16x2.{_name} {{d}}, {{lo}};")
    CONVERT_PTX[_fp8, BF16] = ("mov.b32 {{{lo}, {hi}}}, {r};",
                               f"cvt.rn.f16x2.{_name} {{p}}, {{lo}};",
                               "mov.b32 {{{lo}, {hi}}}, {p};", "cvt.f32.f16 {x}, {lo};",
                               "cvt.f32.f16 {y}, {hi};", "cvt.rn.bf16x2.f32 {d}, {y}, {x};")


def convert_registers(ctx: Context, registers: Sequence[str], source: DType, target: DType,
                      out: Optional[Sequence[str]] = None) -> list[str]:
    """Each 32-bit register's pair of ``source`` elements (8-bit: the low two bytes)
    converted to a ``target`` pair (:data:`CONVERT_PTX`), into ``out`` where given (registers
    the caller keeps), else into fresh registers; returns them."""
    lines = CONVERT_PTX[source, target]
    results = []
    for i, r in enumerate(registers):
        d = out[i] if out is not None else ctx.w.reg("b32")
        x, y = ctx.w.reg("f32"), ctx.w.reg("f32")
        halves = {"lo": ctx.w.reg("b16"), "hi": ctx.w.reg("b16")} if any(
            "{lo}" in line for line in lines) else {}
        if any("{p}" in line for line in lines):
            halves.update(p=ctx.w.reg("b32"), q=ctx.w.reg("b32"))
        for line in lines:
            ctx.w.emit(line.format(d=d, r=r, x=x, y=y, **halves))
        results.append(d)
    return results


def _cvt(ctx: Context, op: Op) -> None:
    ctx.bind(op.result, convert_registers(ctx, ctx.get(op.operands[0]),
                                          op.operands[0].type.dtype, op.result.type.dtype))


# -- the family --------------------------------------------------------------------------------

# -- IR ops and their CPU semantics ----------------------------------------------------------
# What the executor (tilec/cpu/executor.py) does for these ops, from the layout functions
# above, never from the emitters:
#
# - frag.ldmatrix: for each warp and lane, the row address the lane gives
#   (ldmatrix_lane_coord, operand_storage_coord, SmemLayout.offset), then the instruction's
#   distribution (PTX ISA 9.7.14.5.15): lane l gets in register j elements 2 (l % 4) + {0, 1}
#   of row l // 4 of matrix j (the 8 rows lanes 8j..8j+7 point at), or with .trans (when k is
#   not the contiguous storage dim) element l // 4 of rows 2 (l % 4) + {0, 1}. One x4 per
#   16-wide piece of the warp tile, registers in the order the emitter issues them.
# - frag.mma: per warp, the fragments are unpacked with the family's MmaFragments (mma_a_coord
#   / mma_b_coord / mma_c_coord here) in the emitter's register order (A: registers
#   4 tm .. 4 tm + 3 per m16 piece; B: 2 tn, 2 tn + 1 per n8 tile; C: 4 (tn * tiles_m + tm) + r)
#   and D = f32(C + A @ B) with the products summed in float64: 16-bit products are exact, so
#   this is one rounding per mma (per k step). mma.sync's internal accumulation is not
#   specified bit for bit; this is at least as accurate.

# ldmatrix moves 8x8 matrices of 16-bit elements: one row is 16 bytes, 8 elements.
LDMATRIX_ROW = 8


@lru_cache(maxsize=None)
def ldmatrix_index(layout: SmemLayout, role: str, warps: tuple[int, int],
                   warp_tile: tuple[int, int], k0: int,
                   elem_bytes: int = 2) -> tuple[np.ndarray, bool]:
    """Storage offset (within a stage) of every element ``[warps, 32, regs, halves]`` the
    warps' ldmatrix.x4 instructions deliver for one k step (k16 of 16-bit elements, two
    halves a register; k8 of 32-bit ones, one), and whether every row address is 16-byte
    aligned, as ldmatrix requires. ldmatrix moves 32-bit words: lane ``l`` gets word
    ``l % 4`` of row ``l // 4`` whatever the elements are."""
    import numpy as np
    k_major = operand_k_major(role, layout)
    row_elems = 16 // elem_bytes  # one 16-byte row
    halves = 4 // elem_bytes  # elements per 32-bit word
    extent = warp_tile[0] if role == "A" else warp_tile[1]
    pieces = range(0, extent, 2 * LDMATRIX_ROW)
    count = warps[0] * warps[1]
    addresses = np.empty((count, len(pieces), WARP_SIZE), dtype=np.int64)
    for w in range(count):
        # A is shared along a warp row, B along a warp column.
        warp_index = w // warps[1] if role == "A" else w % warps[1]
        for p, mn0 in enumerate(pieces):
            for lane in range(WARP_SIZE):
                mn, k = ldmatrix_lane_coord(role, k_major, lane, row_elems)
                row, col = operand_storage_coord(k_major, warp_index * extent + mn0 + mn,
                                                 k0 + k)
                addresses[w, p, lane] = layout.offset(row, col)
    lane = np.arange(WARP_SIZE)[:, None, None]
    matrix = np.arange(4)[None, :, None]
    half = np.arange(halves)[None, None, :]
    if k_major:
        supplier, within = 8 * matrix + lane // 4, halves * (lane % 4) + half
    else:  # .trans, of 16-bit elements
        supplier, within = 8 * matrix + 2 * (lane % 4) + half, lane // 4
    index = addresses[:, :, supplier] + within  # [warps, pieces, 32, 4, halves]
    # Register 4 p + j holds matrix j of piece p: the emitter's order.
    index = index.transpose(0, 2, 1, 3, 4).reshape(count, WARP_SIZE, 4 * len(pieces), halves)
    index.flags.writeable = False
    return index, not np.any(addresses % row_elems)


@dataclass(frozen=True)
class MmaFragments:
    """One mma instruction's fragments as the CPU unpacks them: its k, the elements a 32-bit
    register holds, and the (m, k) of A and (k, n) of B of each (lane, reg, half); C is
    always :func:`mma_c_coord`'s."""

    k: int
    halves: int
    a_coord: Callable[[int, int, int], tuple[int, int]]
    b_coord: Callable[[int, int, int], tuple[int, int]]
    # Integer inputs (int8): summed exactly in int64 and wrapped to the i32 accumulator, as
    # the integer mma does without .satfinite; else floats, summed in float64, one f32
    # rounding.
    integer: bool = False


# m16n8k16, PTX ISA 9.7.14.5.8
MMA_FRAGMENTS = MmaFragments(MMA_K, 2, mma_a_coord, mma_b_coord)


@lru_cache(maxsize=None)
def _fragment_positions(fragments: MmaFragments) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat position in the 16 x k A, k x 8 B and 16x8 C tiles of one mma of each (lane,
    reg, half) or (lane, reg), in C order."""
    import numpy as np
    mma_k, halves = fragments.k, fragments.halves
    a = [m * mma_k + k for lane in range(WARP_SIZE) for r in range(4) for h in range(halves)
         for m, k in [fragments.a_coord(lane, r, h)]]
    b = [k * MMA_N + n for lane in range(WARP_SIZE) for r in range(2) for h in range(halves)
         for k, n in [fragments.b_coord(lane, r, h)]]
    c = [m * MMA_N + n for lane in range(WARP_SIZE) for r in range(4)
         for m, n in [mma_c_coord(lane, r)]]
    return np.array(a), np.array(b), np.array(c)


@lru_cache(maxsize=None)
def _fragment_tile_map(role: str, warps: tuple[int, int], warp_tile: tuple[int, int]
                       ) -> tuple[np.ndarray, ...]:
    """(warp, lane, reg, half) and the (row, col) they hold in the logical fragment tile, for
    the first warp of each warp row (A) or warp column (B)."""
    import numpy as np
    entries = []
    if role == "A":
        for wm in range(warps[0]):
            for tm in range(warp_tile[0] // MMA_M):
                for lane in range(WARP_SIZE):
                    for r in range(4):
                        for h in range(2):
                            m, k = mma_a_coord(lane, r, h)
                            entries.append((wm * warps[1], lane, 4 * tm + r, h,
                                            wm * warp_tile[0] + tm * MMA_M + m, k))
    else:
        for wn in range(warps[1]):
            for tn in range(warp_tile[1] // MMA_N):
                for lane in range(WARP_SIZE):
                    for r in range(2):
                        for h in range(2):
                            k, n = mma_b_coord(lane, r, h)
                            entries.append((wn, lane, 2 * tn + r, h, k,
                                            wn * warp_tile[1] + tn * MMA_N + n))
    return tuple(np.array(column, dtype=np.int64) for column in zip(*entries))


def _execute_ldmatrix(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    import numpy as np

    from tilec.cpu.executor import Fragment, read_fragment_lanes
    rtype: TileType = op.result.type
    lanes = read_fragment_lanes(
        state, op, operands[0], MmaLayout,
        lambda smem, mma, k0: ldmatrix_index(smem, mma.operand, mma.warps, mma.warp_tile, k0),
        "an ldmatrix row address is not 16-byte aligned")
    mma = rtype.layout
    warp, lane, reg, half, row, col = _fragment_tile_map(mma.operand, mma.warps, mma.warp_tile)
    tile = np.full(rtype.shape, np.nan, dtype=lanes.dtype)
    if row.max() >= rtype.shape[0] or col.max() >= rtype.shape[1]:
        raise state.error(op, f"{mma} does not fit a {list(rtype.shape)} tile")
    tile[row, col] = lanes[warp, lane, reg, half]
    fragment = tile.view(Fragment)
    fragment.lanes = lanes
    return [fragment]


def _lanes(state: InterpState, op: Op, value: Any, which: str) -> np.ndarray:
    from tilec.cpu.executor import Fragment
    if not isinstance(value, Fragment) or value.lanes is None:
        raise state.error(op, f"operand {which} is not a fragment made by a fragment load")
    return value.lanes


def execute_mma(fragments: MmaFragments, state: InterpState, op: Op,
                operands: list[Any]) -> list[Any]:
    """``frag.mma`` on fragments laid out as ``fragments`` says (the mma and tf32 families'
    semantics of the op they share)."""
    import numpy as np

    from tilec.cpu.executor import checked_register_map
    a_type, b_type, c_type = (v.type for v in op.operands)
    a_lanes = _lanes(state, op, operands[0], "A")
    b_lanes = _lanes(state, op, operands[1], "B")
    acc = operands[2]
    c_layout: MmaLayout = c_type.layout
    rows, cols = checked_register_map(state, op, c_layout, c_type.shape)
    for t in (a_type, b_type):
        if (t.layout.warps, t.layout.warp_tile, t.layout.kind) != (
                c_layout.warps, c_layout.warp_tile, c_layout.kind):
            raise state.error(op, f"fragment layout {t.layout} does not match the "
                                  f"accumulator's {c_layout}")
    mma_k, halves = fragments.k, fragments.halves
    tiles_m = c_layout.warp_tile[0] // MMA_M
    tiles_n = c_layout.warp_tile[1] // MMA_N
    warps = a_lanes.shape[0]
    if a_lanes.size != warps * WARP_SIZE * 4 * tiles_m * halves \
            or b_lanes.size != warps * WARP_SIZE * 2 * tiles_n * halves:
        raise state.error(op, "fragments hold the wrong number of registers for the warp tile")
    a_pos, b_pos, c_pos = _fragment_positions(fragments)
    # Per warp and m16 piece the 16 x k A tile, per n8 tile the k x 8 B tile; positions a
    # fragment does not fill stay NaN.
    # Positions a fragment does not fill: NaN for floats, 0 for integers (no NaN to show).
    work, empty = (np.int64, 0) if fragments.integer else (np.float64, np.nan)
    a = np.full((warps, tiles_m, MMA_M * mma_k), empty, dtype=work)
    a[..., a_pos] = a_lanes.reshape(warps, WARP_SIZE, tiles_m, 4, halves).transpose(
        0, 2, 1, 3, 4).reshape(warps, tiles_m, -1)
    b = np.full((warps, tiles_n, mma_k * MMA_N), empty, dtype=work)
    b[..., b_pos] = b_lanes.reshape(warps, WARP_SIZE, tiles_n, 2, halves).transpose(
        0, 2, 1, 3, 4).reshape(warps, tiles_n, -1)
    # Accumulator registers 4 (tn * tiles_m + tm) + r of each lane.
    registers = acc[rows, cols].reshape(warps, WARP_SIZE, tiles_n, tiles_m, 4)
    c = np.empty((warps, tiles_m, tiles_n, MMA_M * MMA_N), dtype=work)
    c[..., c_pos] = registers.transpose(0, 3, 2, 1, 4).reshape(warps, tiles_m, tiles_n, -1)
    product = (a.reshape(warps, tiles_m, 1, MMA_M, mma_k)
               @ b.reshape(warps, 1, tiles_n, mma_k, MMA_N))
    d = c + product.reshape(warps, tiles_m, tiles_n, -1)
    if fragments.integer:
        d = ((d + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    else:
        d = d.astype(np.float32)
    d_registers = d[..., c_pos].reshape(warps, tiles_m, tiles_n, WARP_SIZE, 4).transpose(
        0, 3, 2, 1, 4).reshape(warps, WARP_SIZE, -1)
    result = np.empty(c_type.shape, dtype=d.dtype)
    result[rows, cols] = d_registers
    return [result]


def _execute_cvt(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    """frag.cvt: each element rounded once to the result's dtype (exactly what widening to
    f32 and cvt.rn do), in the logical tile and in the lanes the product reads."""
    import numpy as np

    from tilec.cpu.executor import Fragment
    from tilec.cpu.interpreter import round_to_dtype
    dtype = op.result.type.dtype
    source = operands[0]
    if not isinstance(source, Fragment) or source.lanes is None:
        raise state.error(op, "frag.cvt converts a fragment made by a fragment load")
    tile = np.asarray(round_to_dtype(dtype, np.asarray(source, dtype=np.float32)))
    fragment = tile.view(Fragment)
    fragment.lanes = round_to_dtype(dtype, np.asarray(source.lanes, dtype=np.float32))
    return [fragment]


def _check_cvt(op: Op) -> None:
    source, rtype = op.operands[0].type, op.result.type
    require((source.dtype, rtype.dtype) in OPERAND_CONVERSIONS,
            f"frag.cvt cannot convert {source.dtype} to {rtype.dtype}")
    require(rtype.dtype == op.attrs["dtype"], "dtype attribute differs from type")
    require(isinstance(source, TileType) and source.layout == rtype.layout
            and source.shape == rtype.shape, "frag.cvt keeps the fragment's layout and shape")
    check_fragment_result(op)


FRAG_CVT = OpDef("frag.cvt", "a fragment's elements converted in registers to another "
                 "16-bit dtype (an operand stored in another dtype than the product's)", 1, 1,
                 attrs=("dtype",), check=_check_cvt, pure=True, evaluate=_execute_cvt)
FRAG_LDMATRIX = OpDef("frag.ldmatrix", "a warp-tile slice of an mma operand from shared memory",
                      1, 1, attrs=("operand", "k0"), check=check_fragment_load, pure=True,
                      evaluate=_execute_ldmatrix)
# Shared with the tf32 family: each gives it the semantics of its own fragments.
FRAG_MMA = OpDef("frag.mma", "acc + a @ b over each warp's fragments with mma.sync", 3, 1,
                 check=check_product, pure=True)


class MmaSync(ProductFamily):
    """ldmatrix + mma.sync.m16n8k16 on f16/bf16 tiles."""

    name = "mma"
    dtypes = ("f16", "bf16")
    k_step = MMA_K
    granule = (MMA_M, 2 * MMA_N)
    granule_why = " (m16n8k16 instructions, B loaded two n8 tiles at a time)"
    instruction = (MMA_M, MMA_N, MMA_K)
    layout = MmaLayout
    load_op = "frag.ldmatrix"
    product_op = "frag.mma"
    read_name = "ldmatrix"
    explain_text = ExplainText("ldmatrix.x4", "mma.sync", "warp", "ldmatrix", "mma", "pieces",
                               ("mma_order",))
    emitters = {"frag.ldmatrix": _ldmatrix, "frag.mma": _mma, "frag.cvt": _cvt,
                **byte_operands.EMITTERS}
    byte_load_op = byte_operands.LOAD_OP
    fragments: ClassVar[MmaFragments] = MMA_FRAGMENTS  # how frag.mma unpacks them on the CPU

    def op_defs(self) -> tuple[OpDef, ...]:
        return (FRAG_LDMATRIX, replace(FRAG_MMA, evaluate=self.execute_product), FRAG_CVT,
                byte_operands.FRAG_LDBYTES)

    def execute_product(self, state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
        """frag.mma's CPU semantics on this family's fragments."""
        return execute_mma(self.fragments, state, op, operands)

    def fragment_registers(self, warp_rows: int, warp_cols: int) -> int:
        # A: 4 registers per m16 piece; B: 2 per n8 tile (two 16-bit elements each).
        return warp_rows // MMA_M * 4 + warp_cols // MMA_N * 2

    def read_addresses(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                       warp_index: int, k0: int, elem_bytes: int) -> Iterator[list[int]]:
        if self.byte_loaded(op_plan):
            return byte_operands.byte_reads(plan, op_plan, layout, warp_index, k0)
        return ldmatrix_reads(plan, op_plan.role, layout, warp_index, k0, elem_bytes)

    def worst_read_degree(self, plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                          elem_bytes: int) -> int:
        if self.byte_loaded(op_plan):  # ld.shared.u16, two bytes a lane
            return max(conflict_degree(addresses, byte_operands.PAIR_BYTES)
                       for addresses in self.operand_reads(plan, op_plan, layout, elem_bytes))
        if not self.reads_by_ldmatrix(op_plan, layout):
            return super().worst_read_degree(plan, op_plan, layout, elem_bytes)
        # operand_reads' pieces, each bank class scored once.
        classes: set[int] = set()
        return max(self.read_degree(op_plan.k_major, addresses)
                   for warp_index in range(warps_along(op_plan.role, plan.warps))
                   for k0 in range(0, plan.block[2], self.k_step)
                   for addresses in ldmatrix_reads(plan, op_plan.role, layout, warp_index, k0,
                                                   elem_bytes, classes))

    def reads_by_ldmatrix(self, op_plan: OperandPlan, layout: SmemLayout) -> bool:
        """Whether :meth:`read_addresses` of the operand stored as ``layout`` are
        :func:`ldmatrix_reads`' pieces, which :meth:`worst_read_degree` scores a bank class
        at a time (the byte loads have their own reads)."""
        return True

    def byte_loaded(self, op_plan: OperandPlan) -> bool:
        """Whether the operand is stored in 8 bits and read by frag.ldbytes."""
        return op_plan.byte_loaded

    def read_access(self, role: str, layout: SmemLayout) -> str:
        return "ldmatrix.x4" + ("" if operand_k_major(role, layout) else ".trans")

    def read_degree(self, k_major: bool, addresses: Sequence[int]) -> int:
        return conflict_degree(addresses, 16)

    def loads_per_k_step(self, plan: TilingPlan) -> tuple[int, int]:
        """ldmatrix.x4 per warp per k16 step: one per 16 rows of A, one per 16 columns of B."""
        tm, tn = plan.warp_tile
        return tm // LDMATRIX_PIECE, tn // LDMATRIX_PIECE

    def products_per_k_step(self, accumulator: DistributedLayout) -> int:
        """mma.sync per warp per k-step: one per m16 x n8 tile of the warp tile."""
        tm, tn = accumulator.warp_tile
        return (tm // MMA_M) * (tn // MMA_N)

    def warp_tile_text(self, h: ExplainShape) -> str:
        (tm, tn), (im, in_, _) = h.warp_tile, h.instruction
        a, b = h.loads_per_k_step
        text = self.explain_text
        loads = f"{a + b} {text.load} (A {a}, B {b})"
        if "B" in h.converted and DType.parse(h.converted["B"]).bytes == 1:
            # frag.ldbytes: one ld.shared.u16 per B register, two registers per n8 tile
            loads = (f"{a} {text.load} (A) and {tn // in_ * byte_operands.REGISTERS_PER_N8} "
                     "ld.shared.u16 (B)")
        return (f"{tm} x {tn}: {tm // im} x {tn // in_} mma tiles, {h.products_per_k_step} "
                f"{text.product} and {loads} per k-step")

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        return instruction_tile_text(h)

    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        byte_loaded = [op_plan.source for op_plan in plan.operands if self.byte_loaded(op_plan)]
        if byte_loaded:
            # Its ldmatrix bank maps would misdraw the byte pairs frag.ldbytes reads.
            weights = "int8" if byte_loaded[0] == "i8" else byte_loaded[0]
            return not_drawn(plan, kernel, f"{weights} weights read two bytes a register",
                             "ldmatrix of A, ld.shared.u16 of B (frag.ldbytes), "
                             "mma.sync m16n8k16")
        return None  # viz draws this family's ldmatrix bank maps and fragments


FAMILY = MmaSync()
