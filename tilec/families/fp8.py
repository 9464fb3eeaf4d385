"""The fp8 family: ``ldmatrix`` + ``mma.sync.m16n8k32 .f32.e4m3.e4m3.f32`` (or ``.e5m2``) on
8-bit float tiles, f32 accumulation; sm_89 and later, so of tilec's targets sm_90 and sm_90a
(PTX ISA 8.4, which the kernel's header then names).

An m16n8k32 fragment of e4m3 or e5m2 is laid out as the ``.s8`` one (PTX ISA, "Matrix
Fragments for mma.m16n8k32": the 8-bit types share the table), so this family is the int8
family with float products: the same k-contiguous operands and ldmatrix reads
(:mod:`.int8`), the mma family's f32 accumulator. On sm_80 and sm_86 the tiling pass stops
at the ``@`` naming the target (:meth:`Fp8.operand_refusal`).

On sm_90a the wgmma8 family (:mod:`.wgmma8`, wgmma m64nNk32 .e4m3) takes fp8 blocks where
it applies (BK a multiple of 128, both operands K-major, TMA-readable); this family takes
the others.

CPU semantics: shared tiles hold the exact values of the fp8 bits (tilec.target.fp8), the
fragment load is the int8 family's, and the product is the mma family's float one on the
8-bit fragments: products summed in float64, one f32 rounding per k32 instruction.
mma.sync's internal accumulation of fp8 products is not specified bit for bit; this is at
least as accurate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from tilec.backend.context import Context
from tilec.ir.core import Op
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.ir.types import F8E4M3, F8E5M2

from .int8 import (BYTES_PER_REGISTER, INT8_K, Int8, Int8Layout, int8_a_coord, int8_b_coord,
                   k_major_refusal)
from .mma_sync import MmaFragments, MmaSync, mma_products
from .product import ExplainShape, not_drawn

if TYPE_CHECKING:
    from tilec.options import Options

# The targets whose mma.sync takes e4m3 and e5m2 (sm_89 and later).
FP8_ARCHS = ("sm_90", "sm_90a")


@dataclass(frozen=True)
class Fp8Layout(Int8Layout):
    """mma.m16n8k32 fragments of 8-bit floats: the int8 layout, f32 accumulators."""

    kind = "fp8"


# m16n8k32 .e4m3 / .e5m2: the .s8 fragment table, float products.
FP8_FRAGMENTS = MmaFragments(INT8_K, BYTES_PER_REGISTER, int8_a_coord, int8_b_coord)

# mma.sync.aligned.m16n8k32.row.col: PTX ISA 9.7.14.5.14 (.e4m3/.e5m2: PTX ISA 8.4, sm_89).
MMA_TYPES = {F8E4M3: "f32.e4m3.e4m3.f32", F8E5M2: "f32.e5m2.e5m2.f32"}


def _mma(ctx: Context, op: Op) -> None:
    mma_products(ctx, op, MMA_TYPES)


class Fp8(Int8):
    """ldmatrix + mma.sync.m16n8k32 .e4m3/.e5m2 (k contiguous), f32 accumulation."""

    name = "fp8"
    dtypes = ("f8e4m3", "f8e5m2")
    granule_why = " (m16n8k32 fp8 instructions, B loaded two n8 tiles at a time)"
    layout = Fp8Layout
    emitters = {"frag.ldmatrix": MmaSync.emitters["frag.ldmatrix"], "frag.mma": _mma}
    fragments = FP8_FRAGMENTS
    ptx_version = "8.4"
    # mma.sync .e4m3 on sm_90 takes more registers than .s8: ptxas spills 64x64 warp tiles
    # (80 bytes at 128x128x64 with 2x2 warps, 120 at BK=128, 255 registers) where int8's
    # fit; 64x32 ones take 184 (BK=64) to 202 (BK=128) registers and do not spill. So the
    # tiling pass's warp choice stops at 64x32 (2x4 warps for samples/fp8_gemm.py's 128x128).
    auto_warp_tile_limit = 64 * 32

    def operand_refusal(self, operands: Sequence[OperandPlan], options: "Options"
                        ) -> Optional[tuple[str, str]]:
        if options.arch not in FP8_ARCHS:
            return (f"8-bit float products need sm_89 or later (mma.sync m16n8k32 .e4m3 / "
                    f".e5m2); the target is {options.arch}",
                    f"compile for {' or '.join(FP8_ARCHS)}")
        return k_major_refusal(operands, "8-bit float")

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        return ("instruction tile", "m{}n{}k{} .e4m3/.e5m2".format(*h.instruction)
                + f" (fp8 inputs, f32 accumulation), {h.k_steps} k-steps per BK")

    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        return not_drawn(plan, kernel, "fp8 tensor cores",
                         "ldmatrix + mma.sync m16n8k32 .e4m3/.e5m2")


FAMILY = Fp8()
