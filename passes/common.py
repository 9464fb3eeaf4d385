"""Small helpers the passes share: finding the K loop, cloning index computations and
removing dead code."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Optional

from tilec.errors import TileConfigError, located
from tilec.families.catalogue import op_definitions
from tilec.ir.core import (Block, Builder, Kernel, Op, Value, clone_op, constant_value,
                           defining_op)
from tilec.ir.ops import OpDef


def find_main_loop(kernel: Kernel) -> tuple[Op, Op]:
    """The top-level ``scf.for`` that holds the program's ``tile.dot``, and that dot."""
    dots = [op for op in kernel.walk() if op.name == "tile.dot"]
    if not dots:
        first = next((op for op in kernel.walk() if op.loc is not None), None)
        raise located(TileConfigError, "the program has no tile product (`@`) to map to mma",
                      first.loc if first else None, kernel.source_lines)
    if len(dots) > 1:
        raise located(TileConfigError, "only one tile product per program is supported",
                      dots[1].loc, kernel.source_lines)
    dot = dots[0]
    for op in kernel.body.ops:
        if op.name == "scf.for" and dot in op.regions[0].ops:
            return op, dot
    raise located(TileConfigError, "the product must sit directly in a K loop "
                  "(`for k in range(...)`) at the top level of the grid body", dot.loc,
                  kernel.source_lines)


def clone_slice(values: list[Value], block: Block, builder: Builder,
                substitute: dict[Value, Value]) -> list[Value]:
    """Re-emit at the builder's cursor the ops of ``block`` that compute ``values``, with
    ``substitute`` applied (e.g. the loop index replaced by a later index)."""
    mapping = dict(substitute)

    def emit(value: Value) -> Value:
        if value in mapping:
            return mapping[value]
        op: Optional[Op] = defining_op(value)
        if op is None or op not in block.ops:
            return value  # defined outside the block: usable as it is
        for operand in op.operands:
            emit(operand)
        new = clone_op(op, mapping)
        builder.block.ops.append(new)
        return mapping[value]

    return [emit(v) for v in values]


def constant(builder: Builder, value: int, hint: str = "") -> Value:
    from tilec.ir.types import i32
    return builder.value("arith.constant", [], i32, hint or f"c{value}", value=value)


def tile_in_bounds(kernel: Kernel, offset: Value, extent: int, dim, spec,
                   cluster: int = 1, cluster_n: int = 1) -> bool:
    """Whether ``[offset, offset + extent)`` lies inside a tensor dim of size ``dim`` (a
    symbol or an int) for every launch the spec admits, so that dim needs no edge mask.

    Proven in two shapes: ``pid * extent`` with ``pid`` a grid axis of ``cdiv(dim, extent)``
    blocks, and a loop index stepping by ``extent`` from a multiple of it up to ``dim``
    (later iterations are guarded by the loop bound) -- each when ``dim % extent == 0``.
    In a thread-block cluster the launch rounds the paired axis (:func:`paired_axis`) up
    to whole clusters, so its last block may lie past ``dim``: that axis needs
    ``dim % (extent * cluster) == 0`` (a 640-row f32 C, 5 tiles of 128, had the sixth block
    store its zeros unmasked past M, into the next batch's matrix), and the crossed axis
    (:func:`crossed_axis`) ``dim % (extent * cluster_n) == 0``.
    """
    op = defining_op(offset)
    pid = grid = None
    if op is not None and op.name == "arith.mul":
        pid, scale = op.operands
        if constant_value(scale) != extent:
            pid, scale = scale, pid
        grid = defining_op(pid)
        if constant_value(scale) != extent or grid is None or grid.name != "tile.grid":
            return False
    rounding = 1
    if grid is not None and cluster * cluster_n > 1:
        axis = grid.results.index(pid)
        rounding = (cluster if axis == paired_axis(kernel, grid) else
                    cluster_n if axis == crossed_axis(kernel, grid) else 1)
    if not _divides(dim, extent * rounding, spec):
        return False
    if grid is not None:
        size = defining_op(grid.operands[grid.results.index(pid)])
        if size is None or size.name != "arith.cdiv":
            return False
        operand, per = size.operands
        return constant_value(per) == extent and (operand is _bound(kernel, dim) or
                                                   constant_value(operand) == dim)
    owner = offset.owner
    if isinstance(owner, Block):
        for loop in kernel.walk():
            if loop.name == "scf.for" and loop.regions[0] is owner and owner.args[0] is offset:
                lb, ub = loop.operands[:2]
                start = constant_value(lb)
                return (start is not None and start % extent == 0
                        and loop.attrs["step_const"] == extent
                        and (ub is _bound(kernel, dim) or constant_value(ub) == dim))
    return False


def _divides(dim, extent: int, spec) -> bool:
    """Whether ``extent`` divides the dim (an int, or a symbol the spec knows about)."""
    return dim % extent == 0 if isinstance(dim, int) else spec.divides(dim, extent)


def _bound(kernel: Kernel, dim) -> Optional[Value]:
    """The kernel's value of a symbolic dim (None for an int or an unknown symbol)."""
    return kernel.symbol_value(dim) if not isinstance(dim, int) and dim in kernel.symbols \
        else None


def batch_axis(kernel: Kernel, grid: Op) -> Optional[int]:
    """The grid axis whose program id is every batch view's index (tensor.batch), if one."""
    indices = {op.operands[1] for op in kernel.walk() if op.name == "tensor.batch"}
    if len(indices) != 1:
        return None
    index = indices.pop()
    return grid.results.index(index) if index in grid.results else None


def paired_axis(kernel: Kernel, grid: Op) -> int:
    """The grid axis a thread-block cluster pairs the tiles of: the first one but the batch
    axis (backend.abi.folded_axes' first). A grid with batch views indexed otherwise has no
    batch axis, and warp specialization refuses it a cluster."""
    batch = batch_axis(kernel, grid)
    return next(axis for axis in range(len(grid.results)) if axis != batch)


def crossed_axis(kernel: Kernel, grid: Op) -> Optional[int]:
    """The grid axis a cluster's blocks along N (``cluster_n``) take consecutive tiles of:
    the second one but the batch axis (backend.abi.folded_axes' second); None in a grid of
    one such axis."""
    batch = batch_axis(kernel, grid)
    axes = [axis for axis in range(len(grid.results)) if axis != batch]
    return axes[1] if len(axes) > 1 else None


def drop_dead(block: Block, ops: Optional[Mapping[str, OpDef]] = None) -> None:
    """Remove, in place, the pure ops (their definitions say so; ``ops`` defaults to every
    op's, :func:`~tilec.families.catalogue.op_definitions`) whose results nothing in
    ``block`` or its regions uses, until none is left: an op becomes dead once its last user
    is removed."""
    table = op_definitions() if ops is None else ops

    def dead(op: Op, used: set[Value]) -> bool:
        opdef = table.get(op.name)
        return (opdef is not None and opdef.pure and bool(op.results)
                and not any(r in used for r in op.results))

    while True:
        used = {v for region in _blocks(block) for op in region.ops for v in op.operands}
        removed = False
        for region in _blocks(block):
            keep = [op for op in region.ops if not dead(op, used)]
            removed |= len(keep) != len(region.ops)
            region.ops = keep
        if not removed:
            return


def _blocks(block: Block) -> Iterator[Block]:
    yield block
    for op in block.ops:
        for region in op.regions:
            yield from _blocks(region)
