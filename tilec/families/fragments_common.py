"""Address arithmetic every family's fragment loads share in PTX: where an operand element
lies from a stage's start (the warp's place, the storage orientation, the swizzle), and how
one load's address follows another's by a small XOR and an immediate.
"""
from __future__ import annotations

from typing import Callable

from tilec.backend.context import Context, SmemView
from tilec.target.layout import operand_k_major, operand_storage_coord


def operand_offset(ctx: Context, view: SmemView, role: str, warps: tuple[int, int],
                   warp_tile: tuple[int, int], lane_mn: str, mn_rel: int,
                   k: str | int) -> str:
    """Byte offset from the stage start of operand element (mn, k), where mn is this warp's
    first row (A) or column (B) plus ``lane_mn + mn_rel``: the warp's place, the storage
    orientation and the swizzle, shared by every fragment load. ``k`` may be an immediate."""
    layout = view.buffer.layout
    _, warp = ctx.lane_warp()
    if role == "A":
        warp_index, extent = ctx.div_const(warp, warps[1], nonnegative=True), warp_tile[0]
    else:
        warp_index, extent = ctx.mod_const(warp, warps[1], nonnegative=True), warp_tile[1]
    mn = ctx.mad(warp_index, extent, ctx.int_op("add.s32", lane_mn, mn_rel))
    row, col = operand_storage_coord(operand_k_major(role, layout), mn, k)
    if isinstance(row, int):  # PTX's mad takes no immediate multiplicand
        linear = ctx.int_op("add.s32", col, row * layout.cols)
    else:
        linear = ctx.mad(row, layout.cols, col)
    return ctx.int_op("mul.lo.s32", ctx.swizzle(linear, layout.swizzle),
                      view.buffer.elem_bytes)


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
