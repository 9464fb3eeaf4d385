"""Emitters for the FFMA product kind: 16-byte shared loads of each lane's operand elements
(``frag.lds``) and exact f32 multiply-adds (``frag.fma``).

Register order and lane addressing come from :class:`tilec.target.layout.SimtLayout` and
:func:`tilec.target.layout.simt_loads`; the executor reads the same functions, so the backend and
the CPU model cannot drift apart.
"""
from __future__ import annotations

from tilec.ir.core import Op
from tilec.target.layout import (SIMT_LANES, SIMT_VEC, SimtLayout, offset_relation,
                          operand_k_major, simt_load_addresses, simt_loads)

from .context import Context, SmemView
from .ldmatrix import operand_offset, relative_address


def _lane_offset(ctx: Context, view: SmemView, fragment: SimtLayout, mn_rel: int,
                 k: int) -> str:
    """Byte offset (from the stage start) of this lane's element (first mn + mn_rel, k)."""
    role = fragment.operand

    def compute() -> str:
        lane, _ = ctx.lane_warp()
        lane_cols = SIMT_LANES[1]
        if role == "A":
            lane_index = ctx.int_op("shr.u32", lane, lane_cols.bit_length() - 1)
        else:
            lane_index = ctx.int_op("and.b32", lane, lane_cols - 1)
        first = ctx.int_op("shl.b32", lane_index, SIMT_VEC.bit_length() - 1)
        return operand_offset(ctx, view, role, fragment.warps, fragment.warp_tile, first,
                              mn_rel, k)

    return ctx.w.once(("lds", id(view.buffer), role, mn_rel, k), compute)


def _all_lanes(view: SmemView, fragment: SimtLayout, load, k0: int) -> list[int]:
    """The byte offsets every lane of every warp along the operand reads in one load."""
    warps_along = fragment.warps[0] if fragment.operand == "A" else fragment.warps[1]
    return [a for w in range(warps_along)
            for a in simt_load_addresses(view.buffer.layout, fragment, load, w, k0,
                                         view.buffer.elem_bytes)]


def _lds(ctx: Context, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    fragment: SimtLayout = op.result.type.layout
    k0 = op.attrs["k0"]
    loads = simt_loads(fragment, operand_k_major(fragment.operand, view.buffer.layout))
    reference = _all_lanes(view, fragment, loads[0], 0)
    regs: list[str] = [""] * fragment.regs_per_thread
    state: dict = {}
    for load in loads:
        relation = offset_relation(reference, _all_lanes(view, fragment, load, k0))
        address = relative_address(
            ctx, view, relation, state,
            lambda: _lane_offset(ctx, view, fragment, loads[0].mn, loads[0].k),
            lambda load=load: _lane_offset(ctx, view, fragment, load.mn, k0 + load.k))
        out = ctx.w.regs("f32", len(load.registers))
        ctx.w.emit(f"ld.shared.v4.f32 {{{', '.join(out)}}}, [{address}];")
        for index, reg in zip(load.registers, out):
            regs[index] = reg
    ctx.bind(op.result, regs)


def _fma(ctx: Context, op: Op) -> None:
    a_regs, b_regs, acc = (ctx.get(v) for v in op.operands)
    layout: SimtLayout = op.result.type.layout
    rows, cols = len(layout.lane_rows), len(layout.lane_cols)
    steps = len(a_regs) // rows
    # Accumulate in place when nothing else reads the old accumulator (as frag.mma does).
    in_place = ctx.uses(op.operands[2]) == 1 and len(set(acc)) == len(acc)
    out = list(acc) if in_place else ctx.w.regs("f32", len(acc))
    current = list(acc)
    # k outermost: the 8 x 8 products of one k are independent, so each accumulator's
    # chain of dependent FMAs is interleaved with 63 others.
    for k in range(steps):
        for i in range(rows):
            for j in range(cols):
                index = i * cols + j
                ctx.w.emit(f"fma.rn.f32 {out[index]}, {a_regs[i * steps + k]}, "
                           f"{b_regs[k * cols + j]}, {current[index]};")
                current[index] = out[index]
    ctx.bind(op.result, out)


EMITTERS = {"frag.lds": _lds, "frag.fma": _fma}
