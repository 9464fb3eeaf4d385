"""Row-store epilogue for the mma.sync kernels (``options.misaligned_store = "rows"``): where
C's 16-bit rows are not 16-byte aligned (C of 1000x1003: 2-byte aligned rows), the
accumulator layout's direct stores write 2-byte pieces scattered over 8 rows per warp
instruction, and at a shallow K those partial sectors set the kernel's time (1000x1003x77 on
an H100: 11.4 us, 7.5 with C's stores off). This pass routes the store through a staging
tile in shared memory instead: every thread writes its registers there, the block meets,
and each warp stores whole rows, 64 contiguous bytes a warp instruction
(:mod:`tilec.families.row_store`). The warp-specialized kernels have their own row store
(passes/tma_store.py, ``via = rows``).

Requires: tiling and fragments (the stored value in the accumulator layout); runs after
tma_store, on kernels without warp specialization (``schedule.roles`` None).

Produces, when the option asks and the store allows: the ``tile.store`` marked
``via = block_rows`` with ``pitch`` (bytes per staged row: the tile's row and a 16-byte pad,
so the staging writes are conflict-free), placed after the kernel's other shared buffers
(:func:`tilec.target.smem.place`); ``schedule.epilogue`` says ``block_rows`` and the
staging bytes, or ``direct`` and why not. The CPU semantics are the store's own: the same
elements reach C, rows past M and columns past N skipped.

Before / after::

    tile.store %C, %5, %6, %c {masked = [true, true]}
    tile.store %C, %5, %6, %c {masked = [true, true], via = block_rows, pitch = 272}
"""
from __future__ import annotations

from typing import Optional

from tilec.families.row_store import VIA, layout_problem, staging_pitch
from tilec.ir.core import Kernel, Op, clone_kernel
from tilec.ir.schedule import EpiloguePlan
from tilec.ir.types import TileType
from tilec.ir.views import view_source
from tilec.options import Options
from tilec.target.layout import DistributedLayout
from tilec.target.smem import place, total_with_staging

NAME = "row_store"
OPTION = "rows"  # the misaligned_store value that asks for it
# What the reasons start with, so explain tells them from the TMA store's.
REASON_PREFIX = "row store: "


def _problem(kernel: Kernel, store: Op, options: Options) -> Optional[str]:
    """Why the store keeps its direct form (None when it can go by rows)."""
    value = store.operands[-1]
    vtype: TileType = value.type
    layout = vtype.layout
    if not isinstance(layout, DistributedLayout) or layout.operand != "C":
        return "the stored tile is not in the accumulator layout"
    if vtype.dtype.bytes != 2:
        return f"C is {vtype.dtype}: rows are staged for 16-bit tiles"
    if options.split_k != 1:
        return "split-K's slices meet in C first"
    source = view_source(kernel, store.operands[0])
    if source is None or source.transposed or source.batch is not None:
        return "C is not a 2-D tensor parameter (a view, a batch or a vector)"
    param = next(p for p in kernel.params if p.name == source.name)
    if param.type.rank != 2:
        return f"'{param.name}' is not a matrix"
    spec = options.spec.tensor(param.name, 2, 2)
    if spec.contiguous_dim != 1:
        return f"'{param.name}' does not have unit-stride rows (the launch spec)"
    if spec.vec_elems * 2 >= 16:
        return (f"'{param.name}' has 16-byte aligned rows: the direct stores write whole "
                "sectors")
    problem = layout_problem(layout, vtype.shape[1])
    if problem is not None:
        return problem
    return None


def run(kernel: Kernel, options: Options) -> Kernel:
    if options.misaligned_store != OPTION or kernel.schedule.roles is not None:
        return kernel
    kernel = clone_kernel(kernel)
    stores = [op for op in kernel.body.ops if op.name == "tile.store"]
    problem = None if len(stores) == 1 else f"{len(stores)} stores in the kernel's body"
    if problem is None:
        problem = _problem(kernel, stores[0], options)
    if problem is None:
        rows, cols = stores[0].operands[-1].type.shape
        pitch = staging_pitch(cols, 2)
        staging = rows * pitch
        needed = total_with_staging(place(kernel), staging)
        if needed > options.smem_limit:
            problem = (f"its {staging}-byte staging tile does not fit beside the other "
                       f"{needed - staging} bytes ({options.arch} gives {options.smem_limit})")
    if problem is not None:
        kernel.schedule = kernel.schedule.with_(
            epilogue=EpiloguePlan("direct", reason=REASON_PREFIX + problem))
        return kernel
    stores[0].attrs.update(via=VIA, pitch=pitch)
    kernel.schedule = kernel.schedule.with_(epilogue=EpiloguePlan(VIA, staging))
    return kernel
