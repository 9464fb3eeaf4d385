"""Swizzle layout: choose each shared buffer's XOR swizzle from computed bank conflicts.

Requires: tiling's plan (block, warp tiles, each operand's storage orientation and copy
vector width) and the shared buffers it made.

Produces: every ``smem.alloc`` and ``smem.stage`` of an operand typed with the chosen
:class:`~tilec.target.layout.SmemLayout`; ``kernel.schedule.conflicts`` holds, per operand, the
worst conflict degree of its copy stores and fragment reads (ldmatrix, 16-byte ``lds`` of
FFMA, tf32's ldmatrix or ``ld.shared.b32``) under the chosen swizzle and under no swizzle
(1 = conflict-free), the figures ``tilec explain`` prints.

``options.swizzle``: "auto" searches the candidates for the fewest conflicts (ties go to
fewer XOR bits); "off" keeps rows linear; a :class:`~tilec.target.layout.Swizzle` is used as given
after checking that it permutes whole rows of the tile.
"""
from __future__ import annotations

import dataclasses
import functools

from tilec.errors import TileConfigError, located
from tilec.ir.core import Kernel, clone_kernel
from tilec.target.layout import (BANK_BYTES, SIMT_K, WARP_SIZE, SimtLayout, SmemLayout, Swizzle,
                          broadcast_conflict_degree, conflict_degree, copy_map,
                          copy_store_addresses, ldmatrix_addresses, simt_load_addresses,
                          simt_loads, swizzle_candidates, tf32_registers,
                          tf32_word_addresses)
from tilec.options import Options

from tilec.ir.schedule import OperandConflicts, OperandPlan, TilingPlan

from .kinds import product_of

NAME = "swizzle"


def _ldmatrix_degree(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                     elem_bytes: int) -> int:
    mn_extent = plan.warp_tile[0] if op_plan.role == "A" else plan.warp_tile[1]
    warps_along = plan.warps[0] if op_plan.role == "A" else plan.warps[1]
    return max(conflict_degree(ldmatrix_addresses(layout, op_plan.role, op_plan.k_major,
                                                  w * mn_extent + mn0, k0, elem_bytes), 16)
               for w in range(warps_along) for mn0 in range(0, mn_extent, 16)
               for k0 in range(0, plan.block[2], product_of(plan).k_step))


def _simt_degree(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                 elem_bytes: int) -> int:
    fragment = SimtLayout(op_plan.role, plan.warps, plan.warp_tile)
    warps_along = plan.warps[0] if op_plan.role == "A" else plan.warps[1]
    return max(broadcast_conflict_degree(
        simt_load_addresses(layout, fragment, load, w, k0, elem_bytes), 16)
        for w in range(warps_along) for load in simt_loads(fragment, op_plan.k_major)
        for k0 in range(0, plan.block[2], SIMT_K))


def _tf32_degree(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                 elem_bytes: int) -> int:
    """tf32 fragments: ldmatrix where k is contiguous; else one ``ld.shared.b32`` per
    fragment register, its 32 lanes reading 4 k rows x 8 consecutive mn words (A: m, B: n),
    all distinct, so they compete for banks in one wavefront."""
    if op_plan.k_major:
        return _ldmatrix_degree(plan, op_plan, layout, elem_bytes)
    warps_along = plan.warps[0] if op_plan.role == "A" else plan.warps[1]
    return max(conflict_degree(tf32_word_addresses(layout, op_plan.role, plan.warp_tile, w,
                                                   reg, k0, elem_bytes), BANK_BYTES)
               for w in range(warps_along)
               for reg in range(tf32_registers(op_plan.role, plan.warp_tile))
               for k0 in range(0, plan.block[2], product_of(plan).k_step))


# Per product kind: the instruction that reads fragments (the key of its figure in the
# report) and the worst conflict degree of its reads of one operand.
READS = {"mma": ("ldmatrix", _ldmatrix_degree), "simt": ("lds", _simt_degree),
         "tf32": ("ldtf32", _tf32_degree)}
# Per product kind, the byte units the candidate swizzles permute (default: 16-byte
# chunks). tf32's 32-bit reads put 8 consecutive words of 4 rows in one wavefront; XOR-ing
# 32-byte units by the row moves each row's 8 words to banks of their own (see
# tilec.target.layout.swizzle_candidates).
SWIZZLE_UNITS = {"tf32": (16, 32)}


@functools.lru_cache(maxsize=512)
def operand_conflicts(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                      elem_bytes: int) -> dict[str, int]:
    """Worst conflict degree of the copy stores and the fragment loads of one operand."""
    cmap = copy_map(layout.rows, layout.cols, op_plan.vec, plan.threads)
    stores = max(conflict_degree(copy_store_addresses(layout, cmap, warp, i, elem_bytes),
                                 op_plan.vec * elem_bytes)
                 for warp in range(plan.threads // WARP_SIZE) for i in range(cmap.per_thread))
    name, degree = READS[plan.kind]
    return {"copy": stores, name: degree(plan, op_plan, layout, elem_bytes)}


def choose(plan: TilingPlan, op_plan: OperandPlan, elem_bytes: int,
           requested: str | Swizzle) -> tuple[Swizzle, dict]:
    base = op_plan.layout
    chunk_base = {1: 4, 2: 3, 4: 2}[elem_bytes]  # log2(elements per 16 bytes)
    if isinstance(requested, Swizzle) and requested.bits and requested.base < chunk_base:
        raise ValueError(f"{requested} permutes {(1 << requested.base) * elem_bytes}-byte "
                         f"chunks; 16-byte copies and ldmatrix rows need base >= {chunk_base}")
    if requested == "off":
        candidates = [Swizzle(0)]
    elif isinstance(requested, Swizzle):
        candidates = [requested]
    else:
        candidates = swizzle_candidates(elem_bytes, SWIZZLE_UNITS.get(plan.kind, (16,)))
    scored = []
    for swizzle in sorted(candidates, key=lambda c: c.bits):
        if swizzle.period > base.size and swizzle.bits:
            continue  # would fold rows of different stages together
        degrees = operand_conflicts(plan, op_plan, base.with_swizzle(swizzle), elem_bytes)
        reads = degrees[READS[plan.kind][0]]
        scored.append(((reads, degrees["copy"], swizzle.bits), swizzle, degrees))
        if reads == degrees["copy"] == 1:
            break  # conflict-free, and no later candidate has fewer XOR bits
    if not scored:
        raise ValueError(f"{requested} does not fit a {base.rows}x{base.cols} tile")
    _, best, degrees = min(scored, key=lambda entry: entry[0])
    return best, degrees


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    plan: TilingPlan = kernel.schedule.tiling
    report = []
    new_operands = []
    for op_plan in plan.operands:
        elem_bytes = plan.elem_bytes
        try:
            swizzle, degrees = choose(plan, op_plan, elem_bytes, options.swizzle)
        except ValueError as err:
            raise located(TileConfigError, f"swizzle for operand {op_plan.role}: {err}", None,
                          kernel.source_lines) from None
        linear = operand_conflicts(plan, op_plan, op_plan.layout, elem_bytes)
        layout = op_plan.layout.with_swizzle(swizzle)
        report.append(OperandConflicts(op_plan.role, str(swizzle), tuple(degrees.items()),
                                       tuple(linear.items())))
        new_operands.append(OperandPlan(op_plan.role, op_plan.tensor, layout, op_plan.vec))
        for op in kernel.walk():
            if op.name == "smem.alloc" and op.attrs["role"] == op_plan.role:
                op.result.type = op.result.type.with_(layout=layout)
                buffer = op.result
        for op in kernel.walk():
            if op.name == "smem.stage" and op.operands[0] is buffer:
                op.result.type = op.result.type.with_(layout=layout)
    kernel.schedule = kernel.schedule.with_(
        tiling=dataclasses.replace(plan, operands=tuple(new_operands)), conflicts=tuple(report))
    return kernel
