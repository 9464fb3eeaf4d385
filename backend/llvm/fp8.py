"""The 8-bit floats as LLVM IR: NVVM's pair conversions (cvt's e4m3x2 / e5m2x2 forms, PTX
7.8, sm_89+), the one spelling both the operand loads (tilec.families.byte_operands_llvm)
and the epilogue's conversions (backend/llvm/emit.py) use. An fp8 element is an ``i8``.
"""
from __future__ import annotations

from tilec.ir.types import F8E4M3, F8E5M2, DType

from .builder import Builder, Val, const

# An i16 of two fp8 bytes -> <2 x half>, exactly (cvt.rn.f16x2.e4m3x2).
TO_HALF_PAIR = {F8E4M3: "llvm.nvvm.e4m3x2.to.f16x2.rn", F8E5M2: "llvm.nvvm.e5m2x2.to.f16x2.rn"}
# Two floats -> an i16 of two fp8 bytes, the first in the high one, each rounded to nearest
# even, out-of-range values and infinities to the largest finite value
# (cvt.rn.satfinite.e4m3x2.f32).
FROM_FLOAT_PAIR = {F8E4M3: "llvm.nvvm.ff.to.e4m3x2.rn", F8E5M2: "llvm.nvvm.ff.to.e5m2x2.rn"}


def half_pair(b: Builder, pair: Val, dtype: DType) -> Val:
    """Two fp8 values (an i16, the first in the low byte) widened to <2 x half>."""
    return b.call(TO_HALF_PAIR[dtype], "<2 x half>", [pair])


def to_float(b: Builder, value: Val, dtype: DType) -> Val:
    """One fp8 element (an i8) as a float, exactly."""
    halves = half_pair(b, b.cast("zext", value, "i16"), dtype)
    half = b.assign("half", f"extractelement {halves}, i32 0")
    return b.cast("fpext", half, "float")


def from_float(b: Builder, value: Val, dtype: DType) -> Val:
    """A float rounded to one fp8 element (an i8): the low byte of the pair with zero."""
    pair = b.call(FROM_FLOAT_PAIR[dtype], "i16", [const(0.0, "float"), value])
    return b.cast("trunc", pair, "i8")
