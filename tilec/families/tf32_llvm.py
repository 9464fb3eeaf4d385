"""The tf32 family's LLVM emitters (``frag.ldtf32``, ``frag.mma`` on f32 tiles): the
fragment reads of :mod:`tilec.families.tf32` (ldmatrix where k is contiguous, one 32-bit
shared load per register otherwise, from the same lane offsets), each word rounded by
``llvm.nvvm.f2tf32.rna`` (cvt.rna.tf32.f32), and ``llvm.nvvm.mma.m16n8k8.row.col.tf32``.
"""
from __future__ import annotations

from tilec.backend.llvm.builder import Val
from tilec.backend.llvm.context import LlvmContext, SmemView
from tilec.ir.core import Op
from tilec.target.layout import offset_relation, operand_k_major

from .mma_sync_llvm import ldmatrix_values, mma_values
from .tf32 import _all_lanes, _word_lane_offset, tf32_registers


def _word_values(ctx: LlvmContext, view: SmemView, role: str, k0: int) -> list[Val]:
    reference = _all_lanes(ctx, view, role, 0, 0)
    state: dict = {}
    out: list[Val] = []
    for reg in range(tf32_registers(role, ctx.plan.warp_tile)):
        relation = offset_relation(reference, _all_lanes(ctx, view, role, reg, k0))
        address = ctx.relative_address(
            view, relation, state, lambda: _word_lane_offset(ctx, view, role, 0, 0),
            lambda reg=reg: _word_lane_offset(ctx, view, role, reg, k0))
        out.append(ctx.b.load("i32", ctx.smem_pointer(address), 4))
    return out


# Per storage orientation (k contiguous or not): how the fragment words are read.
LOADERS = {True: ldmatrix_values, False: _word_values}


def _ldtf32(ctx: LlvmContext, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    role, k0 = op.attrs["operand"], op.attrs["k0"]
    words = LOADERS[operand_k_major(role, view.buffer.layout)](ctx, view, role, k0)
    ctx.bind(op.result, [ctx.b.call("llvm.nvvm.f2tf32.rna", "i32",
                                    [ctx.b.cast("bitcast", w, "float")]) for w in words])


def _mma(ctx: LlvmContext, op: Op) -> None:
    mma_values(ctx, op, "llvm.nvvm.mma.m16n8k8.row.col.tf32", "i32", 4, 2)


EMITTERS = {"frag.ldtf32": _ldtf32, "frag.mma": _mma}
