"""8-bit operands of a 16-bit product (w8a16): ``frag.ldbytes``, the fragment load of an i8
shared tile converted in registers to the mma family's f16/bf16 fragment.

Why not ldmatrix: ldmatrix hands lane ``l`` the 32-bit word ``l % 4`` of a 16-byte row, which
for i8 is k ``4 (l % 4) .. + 3``; the m16n8k16 B fragment of lane ``l`` holds
``B[k = 2 (l % 4) + {0, 1} (+ 8), n = l / 4]`` (PTX ISA 9.7.14.5.8, "Matrix Fragments for
mma.m16n8k16 with floating point type", ``.f16``/``.bf16`` B, :func:`.mma_sync.mma_b_coord`),
which are other lanes' bytes. With B stored ``[N, K]`` (k contiguous, an ``nn.Linear``
weight) each B register's two elements are two adjacent bytes of the shared tile, so each
register is one ``ld.shared.u16`` (half the bytes of the f16 tile, read once). ``frag.cvt``
then turns the byte pair into f16x2/bf16x2 (:data:`.mma_sync.CONVERT_PTX`).

Only B, only k contiguous: the tiling pass refuses an i8 A converted in the loop (weight-only
quantization converts the weights) and an i8 B stored ``[K, N]`` (its pair would be two
rows), each with a caret at the ``.to``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OpDef, require
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.target.layout import (WARP_SIZE, SmemLayout, offset_relation, operand_extent,
                                 operand_k_major, operand_storage_coord, warps_along)

from .fragments_common import operand_offset, relative_address
from .product import check_fragment_load

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.interpreter import InterpState

LOAD_OP = "frag.ldbytes"
PAIR_BYTES = 2  # one 32-bit B register: two 8-bit elements, one ld.shared.u16
N8 = 8  # the n extent of one m16n8k16 B fragment
REGISTERS_PER_N8 = 2  # b0 (k 0..7), b1 (k 8..15)


def pair_coord(lane: int, reg: int) -> tuple[int, int]:
    """(k, n) of the first of the two B elements (k, k + 1) of m16n8k16 register ``reg``
    (0, 1) of ``lane``: :func:`.mma_sync.mma_b_coord` at half 0."""
    g, t = divmod(lane, 4)
    return 2 * t + 8 * reg, g


def _pair_offsets(layout: SmemLayout, warps: tuple[int, int], warp_tile: tuple[int, int],
                  tn: int, reg: int, k0: int) -> list[int]:
    """Element offsets (from the stage start) of the first byte of register ``reg`` of n8
    tile ``tn`` at ``k0``, for every lane of every warp along n."""
    extent = operand_extent("B", warp_tile)
    coords = []
    for w in range(warps_along("B", warps)):
        for lane in range(WARP_SIZE):
            k, n = pair_coord(lane, reg)
            coords.append(operand_storage_coord(True, w * extent + tn * N8 + n, k0 + k))
    return layout.offsets(coords)


def byte_reads(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout, warp_index: int,
               k0: int) -> Iterator[list[int]]:
    """Lane byte addresses of each ld.shared.u16 of one warp's B slice at ``k0`` (the swizzle
    pass scores them, two bytes a lane)."""
    extent = operand_extent("B", plan.warp_tile)
    for tn in range(extent // N8):
        for reg in range(REGISTERS_PER_N8):
            yield [layout.offset(*operand_storage_coord(
                True, warp_index * extent + tn * N8 + n, k0 + k))
                for k, n in (pair_coord(lane, reg) for lane in range(WARP_SIZE))]


def pair_relations(plan: TilingPlan, layout: SmemLayout, k0: int):
    """(tn, reg, how the lanes' pair offsets relate to those of (0, 0) at k 0) for each B
    register in the mma family's order (2 tn + reg): what both backends' emitters address
    their loads by (a reference offset, an XOR and an immediate where they can)."""
    reference = _pair_offsets(layout, plan.warps, plan.warp_tile, 0, 0, 0)
    for tn in range(operand_extent("B", plan.warp_tile) // N8):
        for reg in range(REGISTERS_PER_N8):
            yield tn, reg, offset_relation(reference, _pair_offsets(
                layout, plan.warps, plan.warp_tile, tn, reg, k0))


# -- PTX ------------------------------------------------------------------------------------

def _lane_offset(ctx: Context, view: SmemView, tn: int, reg: int, k0: int) -> str:
    """This lane's byte offset of its pair for (tn, reg, k0), emitted once per kernel."""
    def compute() -> str:
        lane, _ = ctx.lane_warp()
        g = ctx.int_op("shr.u32", lane, 2)
        k = ctx.int_op("shl.b32", ctx.int_op("and.b32", lane, 3), 1)
        return operand_offset(ctx, view, "B", ctx.plan.warps, ctx.plan.warp_tile, g, tn * N8,
                              ctx.int_op("add.s32", k, k0 + 8 * reg))
    return ctx.w.once(("ldbytes", id(view.buffer), tn, reg, k0), compute)


def _ldbytes(ctx: Context, op: Op) -> None:
    """One ld.shared.u16 per B register, in the mma family's register order (2 tn + reg);
    addresses follow one reference offset by an XOR and an immediate where they can."""
    view: SmemView = ctx.get(op.operands[0])
    k0 = op.attrs["k0"]
    state: dict = {}
    regs = []
    for tn, reg, relation in pair_relations(ctx.plan, view.buffer.layout, k0):
        address = relative_address(
            ctx, view, relation, state, lambda: _lane_offset(ctx, view, 0, 0, 0),
            lambda tn=tn, reg=reg: _lane_offset(ctx, view, tn, reg, k0))
        out = ctx.w.reg("b32")
        ctx.w.emit(f"ld.shared.u16 {out}, [{address}];")
        regs.append(out)
    ctx.bind(op.result, regs)


# -- IR op and its CPU semantics ------------------------------------------------------------
# frag.ldbytes: lane l of the warp (wm, wn) gets in register 2 tn + r the bytes at
# (n = wn * warp cols + 8 tn + l / 4, k = k0 + 2 (l % 4) + 8 r + {0, 1}) of the shared tile
# (stored [n, k], swizzle applied), as halves 0 and 1: the m16n8k16 B fragment, in i8.

@lru_cache(maxsize=None)
def _index(layout: SmemLayout, warps: tuple[int, int], warp_tile: tuple[int, int],
           k0: int) -> tuple[np.ndarray, bool]:
    """Storage offset of every element [warps, 32, regs, 2] and whether every pair is
    2-byte aligned (ld.shared.u16 requires it)."""
    import numpy as np
    tiles = operand_extent("B", warp_tile) // N8
    first = np.array([_pair_offsets(layout, warps, warp_tile, tn, reg, k0)
                      for tn in range(tiles) for reg in range(REGISTERS_PER_N8)],
                     dtype=np.int64).reshape(-1, warps_along("B", warps), WARP_SIZE)
    first = first.transpose(1, 2, 0)  # [warps along n, 32, regs]
    count = warps[0] * warps[1]
    first = first[np.arange(count) % warps[1]]  # B is shared along a warp column
    index = first[..., None] + np.arange(PAIR_BYTES)
    index.flags.writeable = False
    return index, not np.any(first % PAIR_BYTES)


def _execute(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    import numpy as np

    from tilec.cpu.executor import Fragment, read_fragment_lanes
    rtype = op.result.type
    smem: SmemLayout = op.operands[0].type.layout
    if getattr(rtype.layout, "kind", None) != "mma":  # the m16n8k16 fragments frag.cvt feeds
        raise state.error(op, f"frag.ldbytes loads into mma fragments, not {rtype.layout}")
    if not operand_k_major("B", smem):
        raise state.error(op, f"8-bit operand B is not stored k-contiguous ({smem}): "
                              "frag.ldbytes reads the two bytes of a register as one u16")
    lanes = read_fragment_lanes(
        state, op, operands[0], type(rtype.layout),
        lambda layout, fragment, k0: _index(layout, fragment.warps, fragment.warp_tile, k0),
        "a frag.ldbytes pair is not 2-byte aligned")
    warp, lane, reg, half, row, col = _tile_map(rtype.layout)
    tile = np.zeros(rtype.shape, dtype=lanes.dtype)
    tile[row, col] = lanes[warp, lane, reg, half]
    result = tile.view(Fragment)
    result.lanes = lanes
    return [result]


@lru_cache(maxsize=None)
def _tile_map(fragment) -> tuple:
    """(warp column, lane, register, byte of the pair) and the (k, n) each holds in the B
    fragment tile: computed once per layout, as the int8 family's _tile_map is, since the
    executor runs frag.ldbytes at every k-step of every block."""
    import numpy as np
    entries = []
    for wn in range(fragment.warps[1]):
        for tn in range(fragment.warp_tile[1] // N8):
            for lane in range(WARP_SIZE):
                for reg in range(REGISTERS_PER_N8):
                    k, n = pair_coord(lane, reg)
                    for half in range(PAIR_BYTES):
                        entries.append((wn, lane, REGISTERS_PER_N8 * tn + reg, half, k + half,
                                        wn * fragment.warp_tile[1] + tn * N8 + n))
    return tuple(np.array(column, dtype=np.int64) for column in zip(*entries))


def _check(op: Op) -> None:
    check_fragment_load(op)
    require(op.attrs["operand"] == "B", "frag.ldbytes loads operand B")
    require(op.operands[0].type.dtype.bytes == 1 and op.result.type.dtype.bytes == 1,
            "frag.ldbytes loads an 8-bit tile as stored")


FRAG_LDBYTES = OpDef(LOAD_OP, "a warp-tile slice of an 8-bit B operand as m16n8k16 (16-bit) "
                     "fragments, two bytes a register, for frag.cvt to convert", 1, 1,
                     attrs=("operand", "k0"), check=_check, pure=True, evaluate=_execute)
EMITTERS = {LOAD_OP: _ldbytes}
