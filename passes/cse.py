"""Common subexpressions: a pure op that repeats an earlier one is replaced by the earlier
op's results.

Why it matters: an epilogue is lowered one thread's elements at a time, so ``sqrt(abs(x))``
written four times becomes four ``sqrt.rn.f32`` per element; a 32x128 tile on one warp
made 512 of them a thread, and ptxas took 14-19 s over the four archs to assemble the
result. The frontend emits each call afresh (and each use of a compile-time constant as a
new ``arith.constant``), so two spellings of one expression are two op chains.

Requires: nothing (it runs first, on the frontend's tile IR, and is correct on any IR:
it reads each op's definition, not its name).

Produces: no two ops with the same name, attributes, result types and operands where the
first dominates the second (the same block, or a block the first's block encloses), unless
the op has effects, has regions, or reads memory that an op with effects may have written
in between. An op reads memory when an operand is a tensor or a shared-memory tile; a
store, a barrier or any other impure op between two such reads keeps them apart, and so
does a loop whose body holds one (its later iterations run after it). Ops are never
moved, so every op keeps its source location; the dropped duplicates' locations are lost.

Before / after::

    %11 = tile.abs %x                     %11 = tile.abs %x
    %12 = tile.sqrt %11                   %12 = tile.sqrt %11
    %13 = tile.abs %x                     %15 = tile.mul %12, %12
    %14 = tile.sqrt %13
    %15 = tile.mul %12, %14
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from tilec.families.catalogue import op_definitions
from tilec.ir.core import Block, Kernel, Op, Value, clone_kernel
from tilec.ir.ops import OpDef
from tilec.ir.types import TensorType, TileType
from tilec.options import Options

NAME = "cse"

# Impure ops whose only effect is control flow (the launch's program ids, a loop's yield).
_STRUCTURE = frozenset({"scf.yield", "tile.grid"})


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    _Eliminator(op_definitions()).block(kernel.body, {})
    return kernel


class _Eliminator:
    def __init__(self, ops: Mapping[str, OpDef]):
        self.ops = ops
        self.replaced: dict[Value, Value] = {}
        # Bumped by every op with effects: a memory read's key holds the count it saw, so
        # reads on either side of a store never meet.
        self.writes = 0

    def block(self, block: Block, outer: dict[Hashable, Op]) -> None:
        available = dict(outer)  # an inner block sees the enclosing blocks' ops
        kept: list[Op] = []
        for op in block.ops:
            op.operands = [self.replaced.get(v, v) for v in op.operands]
            if any(self._writes(inner) for inner in op.walk()):
                self.writes += 1  # a loop's effects also precede its later iterations' reads
            for region in op.regions:
                self.block(region, available)
            if not self._pure(op):
                kept.append(op)
                continue
            key = self._key(op)
            earlier = available.get(key) if key is not None else None
            if earlier is None:
                if key is not None:
                    available[key] = op
                kept.append(op)
                continue
            self.replaced.update(zip(op.results, earlier.results))
        block.ops = kept

    def _pure(self, op: Op) -> bool:
        opdef = self.ops.get(op.name)
        return opdef is not None and opdef.pure and not op.regions

    def _writes(self, op: Op) -> bool:
        """Whether the op itself may have effects: a loop's are its body's, and its yield
        only hands values on."""
        return not (self._pure(op) or op.regions or op.name in _STRUCTURE)

    def _key(self, op: Op) -> Hashable | None:
        if not op.results:
            return None
        attrs = _frozen(op.attrs)
        if attrs is None:
            return None  # an attribute we cannot compare by value: never merged
        reads = any(isinstance(v.type, TensorType)
                    or (isinstance(v.type, TileType) and v.type.space == "smem")
                    for v in op.operands)
        # A named constant merges only with its own name's: the IR keeps saying BN where the
        # program said BN, though BM has the same value.
        name = op.result.hint if op.name == "arith.constant" else None
        return (op.name, tuple(id(v) for v in op.operands), attrs,
                tuple(r.type for r in op.results), self.writes if reads else None, name)


def _frozen(value: Any) -> Hashable | None:
    """``value`` as a hashable that compares as it does; None where it has no such form."""
    if isinstance(value, (list, tuple)):
        items = [_frozen(v) for v in value]
        return None if any(i is None for i in items) else (type(value).__name__, *items)
    if isinstance(value, dict):
        items = [(k, _frozen(v)) for k, v in sorted(value.items())]
        return None if any(v is None for _, v in items) else ("dict", *items)
    if isinstance(value, float):
        return ("float", repr(value))  # 0.0 and -0.0 differ; NaN equals NaN
    try:
        hash(value)
    except TypeError:
        return None
    return (type(value).__name__, value)
