"""What the scalar arithmetic ops compute, in plain Python: the one definition that constant
folding (frontend), the CPU interpreter and reference, the launch's grid evaluation and the
hazard checker all use.

Two levels:

- :data:`EXACT`: each binary op (by its ``arith.<name>`` suffix) on unbounded Python numbers.
  ``floordiv`` and ``mod`` are Python's ``//`` and ``%`` (rounding toward minus infinity),
  ``cdiv`` is ceiling division, ``div`` is true division; a zero divisor raises
  ZeroDivisionError. The frontend folds DSL constants with these.
- :func:`fold_binary` / :func:`fold_constant` / ... : the ``fold`` of an op's definition
  (:class:`tilec.ir.ops.OpDef`): the value of the op on integer run-time values, wrapped to
  the result's width as the hardware's two's-complement registers do. Float scalars are not
  folded here: their rounding to f16/bf16/f32 is the interpreter's (numpy's) business.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Callable

from tilec.ir.types import I8, I32, I64, DType

# (operand values, attributes, result dtype) -> result value
FoldFn = Callable[[Sequence[Any], Mapping[str, Any], DType], Any]

INT_BITS: dict[DType, int] = {I8: 8, I32: 32, I64: 64}


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of b-sized tiles that cover a (for b > 0)."""
    return -(-a // b)


EXACT: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
    "floordiv": operator.floordiv, "cdiv": cdiv, "mod": operator.mod,
    "min": min, "max": max,
}
# Integer-only ops: each divides by its second operand.
INTEGER_ONLY = frozenset({"floordiv", "cdiv", "mod"})


def wrap(dtype: DType, value: int) -> int:
    """``value`` in a ``dtype`` register: two's-complement wraparound."""
    bits = INT_BITS.get(dtype)
    if bits is None:
        raise TypeError(f"{dtype} is not an integer type: only integers are folded")
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def fold_binary(name: str) -> FoldFn:
    """The fold of ``arith.<name>`` on integers: the exact result, wrapped."""
    exact = EXACT[name]

    def fold(operands: Sequence[Any], attrs: Mapping[str, Any], dtype: DType) -> int:
        a, b = operands
        return wrap(dtype, exact(a, b))

    fold.__name__ = f"fold_{name}"
    fold.__qualname__ = fold.__name__
    return fold


def fold_constant(operands: Sequence[Any], attrs: Mapping[str, Any], dtype: DType) -> Any:
    """``arith.constant``: its value (integers wrapped; other scalars as written)."""
    value = attrs["value"]
    return wrap(dtype, value) if dtype in INT_BITS else value


def fold_less(operands: Sequence[Any], attrs: Mapping[str, Any], dtype: DType) -> bool:
    """``arith.lt``: signed comparison."""
    a, b = operands
    return bool(a < b)


def fold_wrap_inc(operands: Sequence[Any], attrs: Mapping[str, Any], dtype: DType) -> int:
    """``arith.wrap_inc``: the next index of a circular buffer of ``modulus`` entries."""
    return wrap(dtype, (operands[0] + 1) % attrs["modulus"])


def fold_select(operands: Sequence[Any], attrs: Mapping[str, Any], dtype: DType) -> int:
    """``arith.select``: the second operand where the predicate (the first) holds, else the
    third."""
    chosen = operands[1] if operands[0] else operands[2]
    return wrap(dtype, chosen)
