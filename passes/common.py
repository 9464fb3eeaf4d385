"""Small helpers the passes share: finding the K loop and cloning index computations."""
from __future__ import annotations

from typing import Optional

from tilec.errors import TileConfigError, located
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_op, defining_op


def find_main_loop(kernel: Kernel) -> tuple[Op, Op]:
    """The top-level ``scf.for`` that holds the program's ``tile.dot``, and that dot."""
    dots = [op for op in kernel.walk() if op.name == "tile.dot"]
    if not dots:
        raise located(TileConfigError, "the program has no tile product (`@`) to map to mma",
                      None, kernel.source_lines)
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
