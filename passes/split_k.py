"""Split-K: several blocks share one output tile, each summing a slice of the K loop.

Why: a product with few output tiles and a long K (16x8192x8192 is 128 tiles of 16x64 on a
132-SM GPU) leaves SMs idle or each with too few loads in flight to reach the memory
bandwidth. Slicing K multiplies the blocks; the slices' sums meet in a small global
workspace.

Requires: tiling's output (``kernel.schedule.tiling``), a 1- or 2-D ``tile.grid`` at the top
level and the main K loop after it, whose accumulator the epilogue then reads.

Produces, for ``options.split_k = S > 1``:

- the grid's last axis is the slice: ``tile.grid`` gains an operand ``S`` and a result
  ``%slice``, and the attribute ``split_k = S`` (the launcher maps it to a CUDA grid axis);
- the K loop runs over slice ``%slice`` of its steps: ``ceil(steps / S)`` whole steps each,
  so slices start on multiples of the step and the edge masks tiling chose stay valid; the
  last slices may be empty (their sum is zero);
- ``split.reduce %acc, %slice {splits = S}`` right after the loop: each block stores its
  partial sum (f32, or i32 for int8 products: ``SPLIT_SUM_DTYPES``); the last block of the
  tile to finish adds all S partials in slice order (the result does not depend on which
  block finished last; i32 sums are exact in any order) and goes on to the epilogue, so a
  non-linear epilogue sees the whole sum; the others end there;
- ``kernel.schedule.split``: ``SplitPlan(S)``; the launcher allocates the workspace for it.

With S = 1 the kernel is returned as it is.

Before::

    %m, %n = tile.grid %0, %1
    %acc.1 = scf.for %lo, %K, %BK, %acc ...
    C[...] = %acc.1
After::

    %S = arith.constant {value = 4}
    %m, %n, %slice = tile.grid %0, %1, %S {split_k = 4}
    ... %lo.s = lo + slice * per_slice; %hi.s = min(%lo.s + per_slice, %K)
    %acc.1 = scf.for %lo.s, %hi.s, %BK, %acc ...
    %acc.sum = split.reduce %acc.1, %slice {splits = 4}
    C[...] = %acc.sum
"""
from __future__ import annotations

from tilec.errors import TileConfigError, located
from tilec.ir.schedule import SplitPlan
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_kernel, replace_uses
from tilec.ir.ops import SPLIT_SUM_DTYPES
from tilec.ir.types import i32
from tilec.options import Options

from .common import constant, find_main_loop

NAME = "split_k"


def run(kernel: Kernel, options: Options) -> Kernel:
    splits = options.split_k
    if splits == 1:
        return kernel
    kernel = clone_kernel(kernel)
    loop, dot = find_main_loop(kernel)
    ops = kernel.body.ops
    grids = [op for op in ops if op.name == "tile.grid"]
    if len(grids) != 1 or ops.index(grids[0]) > ops.index(loop):
        raise located(TileConfigError, "split_k needs the K loop inside a tile.grid",
                      dot.loc, kernel.source_lines)
    grid = grids[0]
    if len(grid.operands) > 2:
        raise located(TileConfigError, f"split_k adds a grid axis; a {len(grid.operands)}-D "
                      "grid has none left", grid.loc, kernel.source_lines)
    acc_index = _accumulator_index(kernel, loop, dot)
    if dot.operands[2].type.dtype.short not in SPLIT_SUM_DTYPES:
        # The slices meet in a workspace of 4-byte words (backend/split.py).
        raise located(TileConfigError, f"split_k sums f32 or i32 partial tiles; this product "
                      f"accumulates in {dot.operands[2].type.dtype}", dot.loc,
                      kernel.source_lines, "use split_k=1 (the default)")

    with_slice = Builder(Block(), grid.loc)
    count = constant(with_slice, splits, "splits")
    ops[ops.index(grid):ops.index(grid)] = with_slice.block.ops
    grid.operands.append(count)
    grid.results.append(Value(i32, "slice", grid))
    grid.attrs["split_k"] = splits
    slice_id = grid.results[-1]

    # This slice's bounds: whole steps, ceil(steps / S) of them per slice.
    lower, upper, step = loop.operands[:3]
    b = Builder(Block(), loop.loc)
    span = b.value("arith.sub", [upper, lower], i32, "k_span")
    steps = b.value("arith.cdiv", [span, step], i32, "k_steps")
    per_slice = b.value("arith.cdiv", [steps, count], i32, "steps_per_slice")
    width = b.value("arith.mul", [per_slice, step], i32, "slice_width")
    start = b.value("arith.add", [lower, b.value("arith.mul", [slice_id, width], i32)], i32,
                    "k_begin")
    end = b.value("arith.min", [b.value("arith.add", [start, width], i32), upper], i32,
                  "k_end")
    ops[ops.index(loop):ops.index(loop)] = b.block.ops
    loop.operands[0], loop.operands[1] = start, end

    partial = loop.results[acc_index]
    reduce_b = Builder(Block(), dot.loc)
    total = reduce_b.value("split.reduce", [partial, slice_id], partial.type, "acc_sum",
                           splits=splits)
    after = ops.index(loop) + 1
    rest = Block()
    rest.ops = ops[after:]
    replace_uses(rest, partial, total)
    kernel.body.ops = ops[:after] + reduce_b.block.ops + rest.ops
    kernel.schedule = kernel.schedule.with_(split=SplitPlan(splits))
    return kernel


def _accumulator_index(kernel: Kernel, loop: Op, dot: Op) -> int:
    """Which loop result carries the product's accumulator."""
    body = loop.regions[0]
    acc = dot.operands[2]
    if acc not in body.args[1:]:
        raise located(TileConfigError, "split_k needs the product to accumulate into a "
                      "loop-carried tile (`acc += a @ b`)", dot.loc, kernel.source_lines)
    return body.args.index(acc) - 1

