"""The int8 family: ``ldmatrix`` + ``mma.sync.m16n8k32 .s32.s8.s8.s32`` on i8 tiles, exact i32
accumulation (sm_80, sm_86, sm_90).

Why a subclass of the mma family: an m16n8k32 fragment of 8-bit elements holds, byte for
byte, what an m16n8k16 fragment of 16-bit elements holds. A's register r is 4 bytes of row
``g + 8 (r % 2)`` at k ``4 t + 16 (r // 2)``; B's register r 4 bytes of column ``g`` at k
``4 t + 16 r`` (PTX ISA 9.7.14.5.x, "Matrix Fragments for mma.m16n8k32", ``.s8``), which
are the bytes of the f16 fragments' registers. So where k is contiguous in shared memory,
non-``.trans`` ``ldmatrix.x4`` (16-byte rows of 16 i8) loads both operands unchanged, with
the mma family's addressing, swizzles and register order; the accumulator layout is the
m16n8 one of f32 (four .s32 a tile).

Why k contiguous only: ``ldmatrix.trans`` transposes 16-bit units, never bytes, so a
row-major ``[K, N]`` B (or an A given transposed) cannot be read this way. This family
refuses such operands with a clear error (:meth:`Int8.operand_refusal`): give B as
``[N, K]`` and read ``B.T`` (``samples/int8_gemm.py``), the layout cuBLASLt's int8 GEMM
takes too.

On sm_90a the wgmma8 family (:mod:`.wgmma8`, wgmma m64nNk32 .s8) takes i8 blocks where it
applies (BK a multiple of 128, both operands K-major); this family takes the others.

The products are exact: the CPU semantics sum the i8 products in int64 and wrap to int32,
as mma.sync without ``.satfinite`` does (a 32-element k step cannot overflow by itself:
32 * 128 * 128 = 2**19).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tilec.backend.context import Context
from tilec.ir.core import Op
from tilec.ir.ops import OpDef
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.ir.types import I8, TileType
from tilec.target.layout import WARP_SIZE

from .mma_sync import (FRAG_LDMATRIX, FRAG_MMA, MMA_M, MMA_N, MmaFragments, MmaLayout, MmaSync,
                       ldmatrix_index, mma_products)
from .product import ExplainShape, ExplainText, not_drawn

if TYPE_CHECKING:
    import numpy as np

    from tilec.cpu.interpreter import InterpState
    from tilec.options import Options

# mma.sync.aligned.m16n8k32 with .s8 inputs: four 8-bit elements a 32-bit register.
INT8_K = 32
BYTES_PER_REGISTER = 4


@dataclass(frozen=True)
class Int8Layout(MmaLayout):
    """A tile distributed over warps as mma.m16n8k32 .s8 fragments: C as the mma family's
    (m16n8, four i32 a tile); A and B four i8 a register at :func:`int8_a_coord` and
    :func:`int8_b_coord`, in the mma family's register order."""

    kind = "int8"


def int8_a_coord(lane: int, reg: int, byte: int) -> tuple[int, int]:
    """(row m, col k) of byte ``byte`` (0..3) of A register ``reg`` (0..3)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg % 2), 4 * t + byte + 16 * (reg // 2)


def int8_b_coord(lane: int, reg: int, byte: int) -> tuple[int, int]:
    """(row k, col n) of byte ``byte`` of B register ``reg`` (0..1)."""
    g, t = divmod(lane, 4)
    return 4 * t + byte + 16 * reg, g


# m16n8k32 .s8: what frag.mma unpacks on the CPU; integer, so summed exactly.
INT8_FRAGMENTS = MmaFragments(INT8_K, BYTES_PER_REGISTER, int8_a_coord, int8_b_coord,
                              integer=True)

# mma.sync.aligned.m16n8k32.row.col: PTX ISA 9.7.14.5.14; no .satfinite, so the i32 sums wrap.
MMA_TYPES = {I8: "s32.s8.s8.s32"}


def _mma(ctx: Context, op: Op) -> None:
    mma_products(ctx, op, MMA_TYPES, accumulator_class="b32")


# -- IR ops and their CPU semantics ----------------------------------------------------------
# frag.ldmatrix on i8 tiles: what non-.trans ldmatrix.x4 delivers (mma_sync.ldmatrix_index
# with 1-byte elements: lane l gets bytes 4 (l % 4) .. 4 (l % 4) + 3 of row l // 4 of each
# matrix), the same instruction as for f16 seen byte by byte. frag.mma: the mma family's
# semantics on INT8_FRAGMENTS, in integers.

@lru_cache(maxsize=None)
def _tile_map(fragment: Int8Layout) -> tuple[np.ndarray, ...]:
    """(warp, lane, reg, byte) and the (row, col) they hold in the logical fragment tile, for
    the first warp of each warp row (A) or warp column (B)."""
    import numpy as np
    role = fragment.operand
    warps = fragment.warps
    entries = []
    if role == "A":
        for wm in range(warps[0]):
            for tm in range(fragment.warp_tile[0] // MMA_M):
                for lane in range(WARP_SIZE):
                    for r in range(4):
                        for q in range(BYTES_PER_REGISTER):
                            m, k = int8_a_coord(lane, r, q)
                            entries.append((wm * warps[1], lane, 4 * tm + r, q,
                                            wm * fragment.warp_tile[0] + tm * MMA_M + m, k))
    else:
        for wn in range(warps[1]):
            for tn in range(fragment.warp_tile[1] // MMA_N):
                for lane in range(WARP_SIZE):
                    for r in range(2):
                        for q in range(BYTES_PER_REGISTER):
                            k, n = int8_b_coord(lane, r, q)
                            entries.append((wn, lane, 2 * tn + r, q, k,
                                            wn * fragment.warp_tile[1] + tn * MMA_N + n))
    return tuple(np.array(column, dtype=np.int64) for column in zip(*entries))


def execute_8bit_ldmatrix(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    """frag.ldmatrix of 8-bit elements (i8; fp8, whose shared tiles hold decoded values)."""
    import numpy as np

    from tilec.cpu.executor import Fragment, read_fragment_lanes
    rtype: TileType = op.result.type
    lanes = read_fragment_lanes(
        state, op, operands[0], Int8Layout,
        lambda smem, layout, k0: _k_major_index(state, op, smem, layout, k0),
        "an ldmatrix row address is not 16-byte aligned")
    warp, lane, reg, byte, row, col = _tile_map(rtype.layout)
    if row.max() >= rtype.shape[0] or col.max() >= rtype.shape[1]:
        raise state.error(op, f"{rtype.layout} does not fit a {list(rtype.shape)} tile")
    tile = np.zeros(rtype.shape, dtype=lanes.dtype)
    tile[row, col] = lanes[warp, lane, reg, byte]
    fragment = tile.view(Fragment)
    fragment.lanes = lanes
    return [fragment]


def _k_major_index(state: InterpState, op: Op, smem: Any, layout: Int8Layout,
                   k0: int) -> tuple[np.ndarray, bool]:
    """ldmatrix's element offsets for 1-byte elements; only where k is contiguous, since
    .trans moves 16-bit units (the tiling pass refuses the other orientation)."""
    from tilec.target.layout import operand_k_major
    if not operand_k_major(layout.operand, smem):
        raise state.error(op, f"8-bit operand {layout.operand} is not stored k-contiguous "
                              f"({smem}): ldmatrix.trans cannot transpose bytes")
    return ldmatrix_index(smem, layout.operand, layout.warps, layout.warp_tile, k0, 1)


class Int8(MmaSync):
    """ldmatrix + mma.sync.m16n8k32 .s8 on i8 tiles (k contiguous), i32 accumulation."""

    name = "int8"
    dtypes = ("i8",)
    k_step = INT8_K
    granule_why = " (m16n8k32 int8 instructions, B loaded two n8 tiles at a time)"
    instruction = (MMA_M, MMA_N, INT8_K)
    layout = Int8Layout
    read_name = "ldmatrix"
    explain_text = ExplainText("ldmatrix.x4", "mma.sync", "warp", "ldmatrix", "mma", "pieces",
                               ("mma_order",))
    emitters = {"frag.ldmatrix": MmaSync.emitters["frag.ldmatrix"], "frag.mma": _mma}
    fragments = INT8_FRAGMENTS
    byte_load_op = None  # 8-bit products read 8-bit fragments as stored

    def op_defs(self) -> tuple[OpDef, ...]:
        return (replace(FRAG_LDMATRIX, evaluate=execute_8bit_ldmatrix),
                replace(FRAG_MMA, evaluate=self.execute_product))

    def operand_refusal(self, operands: Sequence[OperandPlan], options: "Options"
                        ) -> Optional[tuple[str, str]]:
        return k_major_refusal(operands, self.dtypes[0])

    # fragment_registers: the mma family's count (4 per m16 piece of A, 2 per n8 tile of B),
    # four i8 a register per k32 step.

    def read_access(self, role: str, layout: Any) -> str:
        return "ldmatrix.x4"

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        return ("instruction tile", "m{}n{}k{} .s8".format(*h.instruction)
                + f" (i8 inputs, exact i32 accumulation), {h.k_steps} k-steps per BK")

    def viz_refusal(self, plan: TilingPlan, kernel: str) -> Optional[str]:
        return not_drawn(plan, kernel, "int8 tensor cores",
                         "ldmatrix + mma.sync m16n8k32 .s8")


def k_major_refusal(operands: Sequence[OperandPlan], dtype: str) -> Optional[tuple[str, str]]:
    """Why 8-bit operands stored mn contiguous cannot be read (see the module docstring)."""
    for op_plan in operands:
        if not op_plan.k_major:
            stored = "[K, N]" if op_plan.role == "B" else "[K, M] (read as A.T)"
            return (f"{dtype} operand {op_plan.role} ('{op_plan.tensor}') is stored {stored}, "
                    "mn contiguous: 8-bit mma.sync fragments are read with k contiguous "
                    "(ldmatrix.trans moves 16-bit units and cannot transpose bytes)",
                    "store B as [N, K] and read B.T[k : +BK, n : +BN], A as [M, K] "
                    "(samples/int8_gemm.py)")
    return None


FAMILY = Int8()
