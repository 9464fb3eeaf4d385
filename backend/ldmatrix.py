"""The ldmatrix emitter: each warp's slice of an mma operand, from a (swizzled) shared tile.

Lane addresses come from :mod:`tilec.target.layout`; one lane offset per operand is computed at
entry, the other pieces follow it by a small XOR and an immediate.
"""
from __future__ import annotations

from typing import Callable

from tilec.ir.core import Op
from tilec.target.layout import (LDMATRIX_ORDER, WARP_SIZE, ldmatrix_lane_coord, offset_relation,
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


def operand_offset(ctx: Context, view: SmemView, role: str, warps: tuple[int, int],
                   warp_tile: tuple[int, int], lane_mn: str, mn_rel: int,
                   k: str | int) -> str:
    """Byte offset from the stage start of operand element (mn, k), where mn is this warp's
    first row (A) or column (B) plus ``lane_mn + mn_rel``: the warp's place, the storage
    orientation and the swizzle, shared by every fragment load. ``k`` may be an immediate."""
    layout = view.buffer.layout
    _, warp = ctx.lane_warp()
    if role == "A":
        warp_index, extent = ctx.int_op("div.u32", warp, warps[1]), warp_tile[0]
    else:
        warp_index, extent = ctx.int_op("rem.u32", warp, warps[1]), warp_tile[1]
    mn = ctx.mad(warp_index, extent, ctx.int_op("add.s32", lane_mn, mn_rel))
    row, col = operand_storage_coord(operand_k_major(role, layout), mn, k)
    if isinstance(row, int):  # PTX's mad takes no immediate multiplicand
        linear = ctx.int_op("add.s32", col, row * layout.cols)
    else:
        linear = ctx.mad(row, layout.cols, col)
    return ctx.int_op("mul.lo.s32", ctx.swizzle(linear, layout.swizzle),
                      view.buffer.elem_bytes)


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
            mn, k = ldmatrix_lane_coord(role, k_major, lane, 16 // elem_bytes)
            row, col = operand_storage_coord(k_major, w * extent + mn0 + mn, k0 + k)
            offsets.append(layout.offset(row, col) * elem_bytes)
    return offsets


def relative_address(ctx: Context, view: SmemView, relation: tuple[int, int] | None,
                     state: dict, reference_offset: Callable[[], str],
                     own_offset: Callable[[], str]) -> str:
    """The shared address operand of one fragment load of ``view``.

    One lane offset per operand (``reference_offset``, computed at entry) serves every load
    whose lanes' offsets are the reference's XOR a small constant (the swizzle permuting
    chunks within a line) plus an immediate (``relation``, from
    :func:`~tilec.target.layout.offset_relation`), so few registers stay live across the loop;
    other loads get their own lane offset. ``state`` carries the view's base between the
    loads of one op."""
    if relation is None:
        return ctx.int_op("add.s32", view.address, own_offset()) + "+0"
    if "base" not in state:
        state["base"] = ctx.int_op("add.s32", view.address, reference_offset())
    flip, immediate = relation
    address = ctx.int_op("xor.b32", state["base"], flip) if flip else state["base"]
    return f"{address}+{immediate}"


def _ldmatrix(ctx: Context, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    ctx.bind(op.result, ldmatrix_registers(ctx, view, op.attrs["operand"], op.attrs["k0"]))


def ldmatrix_registers(ctx: Context, view: SmemView, role: str, k0: int) -> list[str]:
    """ldmatrix.x4 of every piece of this warp's slice of operand ``role`` at ``k0``: the
    fragment registers, 4 a piece, in the mma's order (LDMATRIX_ORDER). A piece is 16 mn x
    32 bytes of k: k16 of f16, or k8 of f32 (the tf32 fragment, non-.trans only)."""
    layout = view.buffer.layout
    eb = view.buffer.elem_bytes
    trans = "" if operand_k_major(role, layout) else ".trans"
    reference = piece_offsets(ctx.plan, role, layout, 0, 0, eb)
    state: dict = {}
    regs: list[str] = []
    for mn0 in ldmatrix_pieces(ctx.plan, role):
        relation = offset_relation(reference, piece_offsets(ctx.plan, role, layout, mn0, k0, eb))
        address = relative_address(
            ctx, view, relation, state,
            lambda: _ldmatrix_lane_offsets(ctx, view, role, 0, 0),
            lambda mn0=mn0: _ldmatrix_lane_offsets(ctx, view, role, mn0, k0))
        out = ctx.w.regs("b32", 4)
        ctx.w.emit(f"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{{', '.join(out)}}}, "
                   f"[{address}];")
        regs.extend(out)
    return regs


EMITTERS = {"frag.ldmatrix": _ldmatrix}
