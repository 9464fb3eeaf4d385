"""Whether the grid covers what the program stores, and the K loop what it reads: the
checks that catch programs that compile but leave outputs unwritten or read wrong data.

A store ``C[m * BM : +BM, n * BN : +BN] = ...`` in ``grid(cdiv(M, BM), cdiv(N, BN))`` covers
``C`` when along each dim the slices follow each other without gaps (the extent is at least
the step, BM here) and the grid axis runs far enough: ``cdiv(M, BM) * BM >= M``. Offsets are
read as ``step * grid_index + 0``; other offsets are the program's business and not checked.
At compile time a grid size must provably reach the dim (the same symbol divided by at most
the step, or constants); :func:`check_launch` checks the known sizes again at launch.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Union

from tilec.errors import TileConfigError, located
from tilec.ir.core import Kernel, Op, Value, constant_value, defining_op, find_grid
from tilec.ir.types import TensorType
from tilec.ir.views import view_source

Dim = Union[int, str]  # a tensor dim: a constant or a shape symbol


@dataclass(frozen=True)
class Coverage:
    """One stored dim that a grid axis tiles: the store's offset is ``step * index``."""

    tensor: str
    dim: int
    size: Dim  # the tensor's dim
    axis: int  # the grid axis whose index the offset steps
    step: int
    extent: int  # the stored slice's width along the dim
    op: Op


def _constant(value: Value) -> Optional[int]:
    """An integer constant's value (floats and predicates are not offsets)."""
    constant = constant_value(value)
    return constant if type(constant) is int else None


def _scaled_index(value: Value, indices: list[Value]) -> Optional[tuple[int, int]]:
    """(axis, step) where ``value`` is ``index * step`` or ``step * index`` (or the index)."""
    if value in indices:
        return indices.index(value), 1
    op = defining_op(value)
    if op is None or op.name != "arith.mul":
        return None
    for index, factor in (op.operands, reversed(op.operands)):
        step = _constant(factor)
        if index in indices and step is not None:
            return indices.index(index), step
    return None


@functools.lru_cache(maxsize=256)  # per kernel: every launch checks it
def coverage(kernel: Kernel) -> tuple[Coverage, ...]:
    """Every (store, dim) whose offset steps a grid axis."""
    grid = find_grid(kernel)
    if grid is None:
        return ()
    found = []
    for op in kernel.walk():
        if op.name != "tile.store":
            continue
        source = view_source(kernel, op.operands[0])  # the parameter stored, and the view
        if source is None:
            continue
        name, transposed = source.name, source.transposed
        ttype = next(p.type for p in kernel.params if p.name == name)
        assert isinstance(ttype, TensorType)
        batched = source.batch is not None
        if batched and source.batch in grid.results:  # a batch view: one batch per index
            found.append(Coverage(name, 0, ttype.shape[0], grid.results.index(source.batch),
                                  1, 1, op))
        rank = ttype.rank - batched
        shape = op.operands[-1].type.shape
        for view_dim in range(rank):
            scaled = _scaled_index(op.operands[1 + view_dim], list(grid.results))
            if scaled is None:
                continue
            dim = (rank - 1 - view_dim if transposed else view_dim) + batched
            extent = shape[view_dim] if len(shape) == rank else 1
            found.append(Coverage(name, dim, ttype.shape[dim], scaled[0], scaled[1], extent, op))
    return tuple(found)


def _describe(c: Coverage) -> str:
    size = f"{c.size}" if isinstance(c.size, str) else f"size {c.size}"
    return f"'{c.tensor}' dim {c.dim} ({size})"


def _reaches(kernel: Kernel, grid_size: Value, c: Coverage) -> bool:
    """Whether ``grid_size * step >= size`` for every value of the shape symbols."""
    count = _constant(grid_size)
    if isinstance(c.size, int):
        return count is not None and count * c.step >= c.size
    if grid_size is kernel.symbol_value(c.size):
        return c.step >= 1
    op = defining_op(grid_size)
    if op is None or op.name != "arith.cdiv":
        return False
    dividend, divisor = op.operands
    divisor_value = _constant(divisor)
    return (dividend is kernel.symbol_value(c.size) and divisor_value is not None
            and 0 < divisor_value <= c.step)


def problem(kernel: Kernel) -> Optional[TileConfigError]:
    """The error for a program whose grid provably or possibly leaves part of a stored tensor
    unwritten (naming the tensor and the dim, at the store), or that never touches a tensor
    parameter; None for a program that covers what it stores. Returned, not raised, so that
    the fragments pass can report its own errors about the program's shape first."""
    grid = find_grid(kernel)
    batch_problem = _batch_axis_problem(kernel, grid)
    if batch_problem is not None:
        return batch_problem
    for c in coverage(kernel):
        assert grid is not None
        if c.extent < c.step:
            return located(TileConfigError, f"the stores to {_describe(c)} leave gaps: each "
                           f"writes {c.extent} elements but they start {c.step} apart",
                           c.op.loc, kernel.source_lines)
        if not _reaches(kernel, grid.operands[c.axis], c):
            return located(TileConfigError, f"grid axis {c.axis} may not cover "
                           f"{_describe(c)}: the stores step {c.step} elements per grid "
                           "index, and the axis's size is not shown to reach the dim",
                           c.op.loc, kernel.source_lines,
                           f"count grid axis {c.axis} as cdiv({c.size}, {c.step})")
    used = {v for op in kernel.walk() for v in op.operands}
    for param, arg in zip(kernel.params, kernel.body.args):
        if isinstance(param.type, TensorType) and arg not in used and not param.branch_only:
            # Most likely an output whose store was forgotten: launching leaves it as it was.
            return located(TileConfigError, f"tensor '{param.name}' is never read or stored",
                           param.loc, kernel.source_lines,
                           "store its tiles, or remove the parameter")
    return None


def _batch_axis_problem(kernel: Kernel, grid: Optional[Op]) -> Optional[TileConfigError]:
    """A batch view reads batch ``b`` of its tensor for every program id ``b``: the grid
    axis must count exactly the tensor's batches (its dim 0), else a program reads past
    the tensor (or leaves batches out)."""
    for op in kernel.walk():
        if op.name != "tensor.batch" or grid is None:
            continue
        tensor, index = op.operands
        source = view_source(kernel, tensor)
        batches = tensor.type.shape[0]
        size = grid.operands[grid.results.index(index)] if index in grid.results else None
        exact = size is not None and (
            size is kernel.symbol_value(batches) if isinstance(batches, str)
            else _constant(size) == batches)
        if not exact:
            what = f"'{source.name}'" if source is not None else "the tensor"
            return located(TileConfigError, f"the grid axis of the batch index must be the "
                           f"batch count of {what} ({batches})", op.loc,
                           kernel.source_lines, f"for b, m, n in grid({batches}, ...)")
    return None


def check_launch(kernel: Kernel, sizes: list[int], symbols: dict[str, int]) -> None:
    """The same with the sizes known: ValueError naming the tensor and dim."""
    for c in coverage(kernel):
        size = c.size if isinstance(c.size, int) else symbols.get(c.size)
        if size is not None and c.axis < len(sizes) and sizes[c.axis] * c.step < size:
            raise ValueError(f"the grid leaves part of {_describe(c)} unwritten: "
                             f"axis {c.axis} has {sizes[c.axis]} blocks of {c.step} elements, "
                             f"{size} needed")


def check_k_loop(kernel: Kernel, loop: Op, loads: list[Op]) -> None:
    """The product's operands must be read in slices as wide as the K loop's step: narrower
    slices skip part of K, wider ones add part of it twice."""
    step = loop.attrs.get("step_const")
    index = loop.regions[0].args[0]
    if not isinstance(step, int):
        return
    for load, k_dim, role in zip(loads, (1, 0), "AB"):
        if load.operands[1 + k_dim] is index and load.result.type.shape[k_dim] != step:
            width = load.result.type.shape[k_dim]
            what = "skip part of K" if width < step else "read part of K twice"
            raise located(TileConfigError, f"the K loop steps by {step} but operand {role} "
                          f"of `@` is read {width} wide along K: the slices {what}",
                          load.loc, kernel.source_lines,
                          "step the loop by the slices' width")
