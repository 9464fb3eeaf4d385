"""Scalar index arithmetic at compile time, as both race checkers evaluate it: each integer
(or predicate) op by its definition's fold in the op catalogue."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from tilec.ir.arith import INT_BITS
from tilec.ir.core import Op
from tilec.ir.ops import OpDef
from tilec.ir.types import PRED, ScalarType


def folds_to_scalar(op: Op, catalogue: Mapping[str, OpDef]) -> bool:
    """Whether ``op`` is a one-result scalar op with a fold."""
    opdef = catalogue.get(op.name)
    return (opdef is not None and opdef.fold is not None and len(op.results) == 1
            and isinstance(op.result.type, ScalarType))


def fold(op: Op, operands: list[Optional[int]], catalogue: Mapping[str, OpDef]
         ) -> Optional[int]:
    """An integer (or predicate) op's value by its definition's fold; None when unknown at
    compile time. A product with a zero is zero even when the other factor is known only at
    launch (slice 0 times a width). PTX's div/rem truncate, which is the fold's floor
    division for the non-negative indices the passes compute."""
    dtype = op.result.type.dtype
    if dtype not in INT_BITS and dtype != PRED:
        return None
    if op.name == "arith.mul" and 0 in operands:
        return 0
    if None in operands:
        return None
    try:
        return catalogue[op.name].fold(operands, op.attrs, dtype)
    except ZeroDivisionError:
        return None
