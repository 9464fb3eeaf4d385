"""Tensor views: which parameter a tensor value reads, through ``tensor.transpose`` (dims
swapped) and ``tensor.batch`` (one matrix of a 3-D tensor), the two ops that move meaning
and no data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tilec.ir.core import Kernel, Value, defining_op


@dataclass(frozen=True)
class ViewSource:
    """The parameter ``name`` a tensor value views: ``transposed`` when its two (matrix) dims
    are swapped, ``batch`` the batch index (a program id) when it is one matrix of a 3-D
    parameter, else None."""

    name: str
    transposed: bool = False
    batch: Optional[Value] = None


def view_source(kernel: Kernel, value: Value) -> Optional[ViewSource]:
    """What ``value`` views, or None when it is neither a parameter nor a view of one."""
    op = defining_op(value)
    if op is not None and op.name == "tensor.transpose":
        inner = view_source(kernel, op.operands[0])
        return None if inner is None else ViewSource(inner.name, not inner.transposed,
                                                     inner.batch)
    if op is not None and op.name == "tensor.batch":
        inner = view_source(kernel, op.operands[0])
        return None if inner is None else ViewSource(inner.name, inner.transposed,
                                                     op.operands[1])
    for param, arg in zip(kernel.params, kernel.body.args):
        if arg is value:
            return ViewSource(param.name)
    return None


def matrix_dim(param_rank: int, dim: Optional[int]) -> Optional[int]:
    """A parameter's dim as a dim of the 2-D matrix a batch view reads (the batch dim, of a
    3-D parameter, is none of them)."""
    if dim is None or param_rank < 3:
        return dim
    return dim - 1 if dim >= 1 else None
