"""The ldmatrix emitter: each warp's slice of an mma operand, from a (swizzled) shared tile.

Lane addresses come from :mod:`tilec.layout`; one lane offset per operand is computed at
entry, the other pieces follow it by a small XOR and an immediate.
"""
from __future__ import annotations

from tilec.ir.core import Op
from tilec.layout import (LDMATRIX_ORDER, WARP_SIZE, ldmatrix_lane_coord, offset_relation,
                          operand_k_major, operand_storage_coord)

from .context import Context, SmemView


# -- shared -> registers: PTX ISA 9.7.14.5.15 (ldmatrix) ---------------------------------
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

    def compute() -> str:
        lane, warp = ctx.lane_warp()
        matrix = ctx.int_op("shr.u32", lane, 3)
        r = ctx.int_op("and.b32", lane, 7)
        blocks = []
        for index in (0, 1):
            bit = ctx.int_op("shr.u32", _order_mask(role, index), matrix)
            blocks.append(ctx.int_op("shl.b32", ctx.int_op("and.b32", bit, 1), 3))
        mn, k = blocks
        if k_major:
            mn = ctx.int_op("add.s32", mn, r)
        else:
            k = ctx.int_op("add.s32", k, r)
        if role == "A":
            warp_index = ctx.int_op("div.u32", warp, plan.warps[1])
            extent = plan.warp_tile[0]
        else:
            warp_index = ctx.int_op("rem.u32", warp, plan.warps[1])
            extent = plan.warp_tile[1]
        mn = ctx.mad(warp_index, extent, ctx.int_op("add.s32", mn, mn0))
        k = ctx.int_op("add.s32", k, k0)
        row, col = operand_storage_coord(k_major, mn, k)
        linear = ctx.mad(row, layout.cols, col)
        return ctx.int_op("mul.lo.s32", ctx.swizzle(linear, layout.swizzle),
                          view.buffer.elem_bytes)

    key = ("ldmatrix", id(view.buffer), role, mn0, k0)
    return ctx.w.once(key, compute)


def ldmatrix_pieces(plan, role: str) -> list[int]:
    """The mn offsets (within a warp tile) of the 16-wide pieces one warp loads."""
    extent = plan.warp_tile[0] if role == "A" else plan.warp_tile[1]
    return list(range(0, extent, 16))


def piece_offsets(plan, role: str, layout, mn0: int, k0: int, elem_bytes: int) -> list[int]:
    """Byte offsets every lane of every warp position gives one ldmatrix piece."""
    k_major = operand_k_major(role, layout)
    warps_along = plan.warps[0] if role == "A" else plan.warps[1]
    extent = plan.warp_tile[0] if role == "A" else plan.warp_tile[1]
    offsets = []
    for w in range(warps_along):
        for lane in range(WARP_SIZE):
            mn, k = ldmatrix_lane_coord(role, k_major, lane)
            row, col = operand_storage_coord(k_major, w * extent + mn0 + mn, k0 + k)
            offsets.append(layout.offset(row, col) * elem_bytes)
    return offsets


def _ldmatrix(ctx: Context, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    role, k0 = op.attrs["operand"], op.attrs["k0"]
    layout = view.buffer.layout
    eb = view.buffer.elem_bytes
    trans = "" if operand_k_major(role, layout) else ".trans"
    reference = piece_offsets(ctx.plan, role, layout, 0, 0, eb)
    base = None
    regs: list[str] = []
    for mn0 in ldmatrix_pieces(ctx.plan, role):
        # One lane offset per operand; other pieces are a small XOR (the swizzle permutes
        # chunks within a line) and an immediate add away, so few registers stay live
        # across the loop.
        relation = offset_relation(reference, piece_offsets(ctx.plan, role, layout, mn0, k0, eb))
        if relation is None:
            address = ctx.int_op("add.s32", view.address,
                                 _ldmatrix_lane_offsets(ctx, view, role, mn0, k0))
            immediate = 0
        else:
            if base is None:
                base = ctx.int_op("add.s32", view.address,
                                  _ldmatrix_lane_offsets(ctx, view, role, 0, 0))
            flip, immediate = relation
            address = ctx.int_op("xor.b32", base, flip) if flip else base
        out = ctx.w.regs("b32", 4)
        ctx.w.emit(f"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{{', '.join(out)}}}, "
                   f"[{address}+{immediate}];")
        regs.extend(out)
    ctx.bind(op.result, regs)


EMITTERS = {"frag.ldmatrix": _ldmatrix}
