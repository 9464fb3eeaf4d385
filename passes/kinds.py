"""Product kinds: how the warps of a block compute ``acc + a @ b`` on their fragments.

One table row per instruction family, read by tiling (warp grids, register estimates,
checks), swizzle (which shared-memory reads to make conflict-free), fragments (which ops
load and multiply) and explain. A new family (wgmma) is a new row plus its emitters, not a
second pipeline.

- ``mma``: ``ldmatrix`` + ``mma.sync.m16n8k16`` on f16/bf16 tiles (f32 accumulation).
- ``simt``: 16-byte ``ld.shared`` + ``fma.rn.f32`` on f32 tiles: exact f32 products, one
  rounding per multiply-add, as cuBLAS SGEMM with TF32 off (``Options.f32_math = "ffma"``).
- ``tf32``: f32 tiles on tensor cores (``Options.f32_math = "tf32"``): ``frag.ldtf32``
  (ldmatrix where k is contiguous in shared memory, else ``ld.shared.b32``; each register
  then rounded with ``cvt.rna.tf32.f32``) + ``mma.sync.m16n8k8 .tf32``, f32 accumulation,
  as cuBLAS with TF32 allowed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from tilec.target.layout import (MMA_K, MMA_M, MMA_N, SIMT_K, SIMT_LANES, SIMT_VEC, TF32_K,
                          WARP_SIZE, MmaLayout, SimtLayout, Tf32Layout)


@dataclass(frozen=True)
class ProductKind:
    name: str
    dtypes: tuple[str, ...]  # input dtypes the instruction multiplies
    k_step: int  # k covered by one fragment load and one product op
    granule: tuple[int, int]  # a warp tile's rows and cols are multiples of these
    layout: type  # the DistributedLayout of fragments and accumulator
    load_op: str
    product_op: str
    instruction: tuple[int, int, int]  # m, n, k of one instruction (per warp or per thread)
    fragment_registers: Callable[[int, int], int]  # (warp rows, warp cols) -> A + B regs
    f32_math: Optional[str] = None  # the Options.f32_math that selects the row (None: any)

    def registers(self, warp_tile: tuple[int, int], overhead: int) -> int:
        """Registers a thread needs: accumulators, double-buffered fragments, overhead."""
        tm, tn = warp_tile
        return tm * tn // WARP_SIZE + 2 * self.fragment_registers(tm, tn) + overhead


KINDS = {
    "mma": ProductKind(
        "mma", ("f16", "bf16"), MMA_K, (MMA_M, 2 * MMA_N), MmaLayout, "frag.ldmatrix",
        "frag.mma", (MMA_M, MMA_N, MMA_K),
        # A: 4 registers per m16 piece; B: 2 per n8 tile (two 16-bit elements each).
        lambda tm, tn: tm // MMA_M * 4 + tn // MMA_N * 2),
    "simt": ProductKind(
        "simt", ("f32",), SIMT_K, (SIMT_LANES[0] * SIMT_VEC, SIMT_LANES[1] * SIMT_VEC),
        SimtLayout, "frag.lds", "frag.fma", (1, 1, 1),
        # A: SIMT_K values per row the lane owns; B: SIMT_K per column.
        lambda tm, tn: (tm // SIMT_LANES[0] + tn // SIMT_LANES[1]) * SIMT_K,
        f32_math="ffma"),
    "tf32": ProductKind(
        "tf32", ("f32",), TF32_K, (MMA_M, 2 * MMA_N), Tf32Layout, "frag.ldtf32", "frag.mma",
        (MMA_M, MMA_N, TF32_K),
        # A: 4 registers per m16 piece; B: 2 per n8 tile (one f32 each), per k8 step.
        lambda tm, tn: tm // MMA_M * 4 + tn // MMA_N * 2, f32_math="tf32"),
}

# Each op once (the mma and tf32 kinds share frag.mma).
LOAD_OPS = tuple(dict.fromkeys(kind.load_op for kind in KINDS.values()))
PRODUCT_OPS = tuple(dict.fromkeys(kind.product_op for kind in KINDS.values()))


def product_of(plan) -> ProductKind:
    """The product kind a tiling plan (:class:`tilec.ir.schedule.TilingPlan`) computes with."""
    return KINDS[plan.kind]


def kind_for(dtype: str, f32_math: str = "ffma") -> ProductKind:
    """The product kind for operand tiles of ``dtype`` (``f32_math``: Options.f32_math, which
    picks among the f32 rows); KeyError names the dtypes taken."""
    for kind in KINDS.values():
        if dtype in kind.dtypes and kind.f32_math in (None, f32_math):
            return kind
    taken = ", ".join(dict.fromkeys(d for kind in KINDS.values() for d in kind.dtypes))
    raise KeyError(f"tiles of {dtype} cannot be multiplied (the backend takes {taken})")
