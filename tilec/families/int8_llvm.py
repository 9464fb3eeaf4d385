"""The int8 family's LLVM emitters: the mma family's ldmatrix reads (:mod:`.mma_sync_llvm`,
the same lane offsets; an 8-bit fragment is, byte for byte, the 16-bit one, see
:mod:`tilec.families.int8`) and ``llvm.nvvm.mma.m16n8k32.row.col.s8``
(mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32: i32 accumulators, four i8 a register
passed as i32).
"""
from __future__ import annotations

from tilec.backend.llvm.context import LlvmContext
from tilec.ir.core import Op
from tilec.ir.types import I8

from .mma_sync_llvm import EMITTERS as MMA_EMITTERS
from .mma_sync_llvm import mma_values

# Operand dtype -> the intrinsic's type suffix (no .satfinite: the i32 sums wrap, as the PTX
# emitter's mma does).
MMA_INTRINSICS = {I8: "s8"}


def _mma(ctx: LlvmContext, op: Op) -> None:
    suffix = MMA_INTRINSICS[op.operands[0].type.dtype]
    mma_values(ctx, op, f"llvm.nvvm.mma.m16n8k32.row.col.{suffix}", "i32", 4, 2,
               accumulator="i32")


EMITTERS = {"frag.ldmatrix": MMA_EMITTERS["frag.ldmatrix"], "frag.mma": _mma}
