"""Emitters for the tf32 product kind: ``frag.ldtf32`` loads each warp's slice of an f32
operand as mma.m16n8k8 .tf32 fragments and rounds every register to tf32; the product is
``frag.mma`` (backend/compute.py), whose shape and types follow the kind.

Which instruction reads shared memory depends on the operand's storage orientation:

- k contiguous (A row-major, B given transposed): ``ldmatrix.x4`` (non-.trans). Its 16-byte
  rows are 4 f32 along k, and the 32-bit word a lane receives is exactly its tf32 fragment
  register (:func:`tilec.target.layout.ldmatrix_lane_coord` with 4-element rows).
- mn contiguous (row-major B, A given transposed): ldmatrix cannot transpose 32-bit
  elements, so one ``ld.shared.b32`` per fragment register, at
  :func:`tilec.target.layout.tf32_operand_coord`; the swizzle pass makes these conflict-free.

Then ``cvt.rna.tf32.f32`` on every register: round to nearest, ties away from zero, to 10
mantissa bits, as cuBLAS and CUTLASS do for f32 inputs with TF32 allowed (the mma would
otherwise ignore the low 13 bits, truncating).
"""
from __future__ import annotations

from typing import Callable

from tilec.ir.core import Op
from tilec.target.layout import (offset_relation, operand_k_major, tf32_operand_coord,
                          tf32_registers, tf32_word_addresses)

from .context import Context, SmemView
from .ldmatrix import ldmatrix_registers, operand_offset, relative_address


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
    warps_along = plan.warps[0] if role == "A" else plan.warps[1]
    return [a for w in range(warps_along)
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


EMITTERS = {"frag.ldtf32": _ldtf32}
