"""The fp8 family's LLVM emitters: the int8 family's ldmatrix reads (the 8-bit fragment
table is shared) and ``llvm.nvvm.mma.m16n8k32.row.col.f32.{e4m3,e5m2}.{..}.f32``
(mma.sync.aligned.m16n8k32 .e4m3/.e5m2 with f32 accumulators). LLVM selects these for
sm_89 and later with PTX ISA 8.4 (``+ptx84``), the version the family names
(:attr:`tilec.families.fp8.Fp8.ptx_version`), which the llvm backend passes to the target.
"""
from __future__ import annotations

from tilec.backend.llvm.context import LlvmContext
from tilec.ir.core import Op
from tilec.ir.types import F8E4M3, F8E5M2

from .int8_llvm import EMITTERS as INT8_EMITTERS
from .mma_sync_llvm import mma_values

# Operand dtype -> the intrinsic's type suffix.
MMA_INTRINSICS = {F8E4M3: "f32.e4m3.e4m3.f32", F8E5M2: "f32.e5m2.e5m2.f32"}


def _mma(ctx: LlvmContext, op: Op) -> None:
    suffix = MMA_INTRINSICS[op.operands[0].type.dtype]
    mma_values(ctx, op, f"llvm.nvvm.mma.m16n8k32.row.col.{suffix}", "i32", 4, 2)


EMITTERS = {"frag.ldmatrix": INT8_EMITTERS["frag.ldmatrix"], "frag.mma": _mma}
