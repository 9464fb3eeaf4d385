"""Swizzle layout: choose each shared buffer's XOR swizzle from computed bank conflicts.

Requires: tiling's plan (block, warp tiles, each operand's storage orientation and copy
vector width) and the shared buffers it made.

Produces: every ``smem.alloc`` and ``smem.stage`` of an operand typed with the chosen
:class:`~tilec.target.layout.SmemLayout`; ``kernel.schedule.conflicts`` holds, per operand, the
worst conflict degree of its copy stores and fragment reads (ldmatrix, 16-byte ``lds`` of
FFMA, tf32's ldmatrix or ``ld.shared.b32``: the reads the plan's product family enumerates,
:meth:`tilec.families.product.ProductFamily.read_addresses`) under the chosen swizzle and
under no swizzle (1 = conflict-free), the figures ``tilec explain`` prints.

``options.swizzle``: "auto" searches the candidates for the fewest conflicts (ties go to
fewer XOR bits); "off" keeps rows linear; a :class:`~tilec.target.layout.Swizzle` is used as given
after checking that it permutes whole rows of the tile.

Families whose operands TMA writes (wgmma's) take one of TMA's layouts: a slab per swizzle
span (128, 64 or 32 bytes) the tile's rows take, the one whose reads conflict least, the
widest on a tie; the ``tma.load`` ops filling it then move one slab a box
(:func:`~tilec.families.tma_boxes.restage_loads`). ``options.tma_swizzle`` fixes the span.
"""
from __future__ import annotations

import dataclasses
import functools

from tilec.errors import TileConfigError, located
from tilec.families.products import family_of
from tilec.families.tma_boxes import operand_tma_layout, restage_loads
from tilec.ir.core import Kernel, clone_kernel
from tilec.ir.schedule import OperandConflicts, OperandPlan, TilingPlan
from tilec.options import Options
from tilec.target.layout import (WARP_SIZE, SmemLayout, Swizzle, conflict_degree, copy_map,
                                 copy_store_addresses, swizzle_candidates)

NAME = "swizzle"


def operand_conflicts(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                      elem_bytes: int) -> dict[str, int]:
    """Worst conflict degree of the copy stores and the fragment loads of one operand (the
    loads as the plan's product family enumerates them, keyed by its ``read_name``)."""
    return {"copy": copy_conflicts(plan, op_plan, layout, elem_bytes),
            family_of(plan).read_name: read_conflicts(plan, op_plan, layout, elem_bytes)}


@functools.lru_cache(maxsize=512)
def copy_conflicts(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                   elem_bytes: int) -> int:
    """Worst conflict degree of the copy stores of one operand."""
    cmap = copy_map(layout.rows, layout.cols, op_plan.vec, plan.threads)
    return max(conflict_degree(copy_store_addresses(layout, cmap, warp, i, elem_bytes),
                               op_plan.vec * elem_bytes)
               for warp in range(plan.threads // WARP_SIZE) for i in range(cmap.per_thread))


@functools.lru_cache(maxsize=512)
def read_conflicts(plan: TilingPlan, op_plan: OperandPlan, layout: SmemLayout,
                   elem_bytes: int) -> int:
    """Worst conflict degree of the fragment loads of one operand."""
    return family_of(plan).worst_read_degree(plan, op_plan, layout, elem_bytes)


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
        candidates = swizzle_candidates(elem_bytes, family_of(plan).swizzle_units)
    best = None  # ((reads, copy, bits), swizzle) of the best candidate so far
    for swizzle in sorted(candidates, key=lambda c: c.bits):
        if swizzle.period > base.size and swizzle.bits:
            continue  # would fold rows of different stages together
        layout = base.with_swizzle(swizzle)
        reads = read_conflicts(plan, op_plan, layout, elem_bytes)
        if best is not None and (reads, 1) >= best[0][:2]:
            # Fewest read conflicts first, then copy conflicts (1 at best), then XOR bits
            # (never fewer than the earlier candidates'): this one cannot win, so its copy
            # stores need no scoring.
            continue
        score = (reads, copy_conflicts(plan, op_plan, layout, elem_bytes), swizzle.bits)
        if best is None or score < best[0]:
            best = (score, swizzle)
        if score[:2] == (1, 1):
            break  # conflict-free, and no later candidate has fewer XOR bits
    if best is None:
        raise ValueError(f"{requested} does not fit a {base.rows}x{base.cols} tile")
    swizzle = best[1]
    return swizzle, operand_conflicts(plan, op_plan, base.with_swizzle(swizzle), elem_bytes)


def _fixed_layout(plan: TilingPlan, op_plan: OperandPlan, candidates: list[SmemLayout],
                  elem_bytes: int, options: Options) -> tuple[SmemLayout, dict, dict]:
    """For families that read shared operands in a few layouts only (wgmma's descriptors,
    written by TMA in its swizzle modes): the candidate whose reads conflict least, with the
    figures of the family's reads under it and under the same slabs unswizzled. The copy
    engine writes whole swizzled rows, so "copy" counts 1."""
    family = family_of(plan)

    def degrees(layout: SmemLayout) -> dict[str, int]:
        return {"copy": 1, family.read_name: read_conflicts(plan, op_plan, layout, elem_bytes)}

    if options.swizzle == "off" or isinstance(options.swizzle, Swizzle):
        raise ValueError(f"operand {op_plan.role}: {family.name} reads shared memory in "
                         f"TMA's swizzle only (swizzle='auto'; tma_swizzle sets its span)")
    if options.tma_swizzle:
        # The span asked for, or the error naming the spans that fit.
        candidates = [operand_tma_layout(op_plan.role, op_plan.layout, elem_bytes,
                                         options.tma_swizzle)]
    best = candidates[0]
    for layout in candidates[1:]:
        if degrees(best)[family.read_name] == 1:
            break  # conflict-free: the narrower spans after it can only tie
        if degrees(layout)[family.read_name] < degrees(best)[family.read_name]:
            best = layout
    return best, degrees(best), degrees(best.with_swizzle(Swizzle()))


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    plan: TilingPlan = kernel.schedule.tiling
    report = []
    new_operands = []
    family = family_of(plan)
    for op_plan in plan.operands:
        # An operand converted in registers is stored in its own dtype (w8a16: i8).
        elem_bytes = op_plan.stored_bytes(plan.elem_bytes)
        fixed = family.layout_candidates(op_plan, elem_bytes)
        if fixed is not None:
            try:
                layout, degrees, linear = _fixed_layout(plan, op_plan, fixed, elem_bytes,
                                                        options)
            except ValueError as err:
                raise located(TileConfigError, str(err), None, kernel.source_lines) from None
        else:
            try:
                swizzle, degrees = choose(plan, op_plan, elem_bytes, options.swizzle)
            except ValueError as err:
                raise located(TileConfigError, f"swizzle for operand {op_plan.role}: {err}",
                              None, kernel.source_lines) from None
            linear = operand_conflicts(plan, op_plan, op_plan.layout, elem_bytes)
            layout = op_plan.layout.with_swizzle(swizzle)
        swizzle = layout.swizzle
        report.append(OperandConflicts(op_plan.role, str(swizzle), tuple(degrees.items()),
                                       tuple(linear.items())))
        new_operands.append(dataclasses.replace(op_plan, layout=layout))
        for op in kernel.walk():
            if op.name == "smem.alloc" and op.attrs["role"] == op_plan.role:
                op.result.type = op.result.type.with_(layout=layout)
                buffer = op.result
        for op in kernel.walk():
            if op.name == "smem.stage" and op.operands[0] is buffer:
                op.result.type = op.result.type.with_(layout=layout)
        if fixed is not None:
            restage_loads(kernel, buffer, layout)  # TMA's boxes are one slab of the span
    kernel.schedule = kernel.schedule.with_(
        tiling=dataclasses.replace(plan, operands=tuple(new_operands)), conflicts=tuple(report))
    return kernel
