"""8-bit floats as raw bits: the exact value of each of the 256 bit patterns of NVIDIA's
e4m3 and e5m2, the one definition the runtime (fp8 arrays passed as uint8 bits), the CPU
interpreter and the checks share. It imports no GPU library.

- ``f8e4m3`` is the "fn" variant of the OCP FP8 spec, as NVIDIA's ``.e4m3`` (PTX ISA,
  "Floating point data types"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no
  infinities; 0x7f and 0xff are NaN; the largest finite value is 448 (0x7e).
- ``f8e5m2``: IEEE-like, 1 sign, 5 exponent bits (bias 15), 2 mantissa bits; exponent 31 is
  infinity (mantissa 0) or NaN; the largest finite value is 57344 (0x7b).

Every value of either format is exact in float32 (and float64), so decoding is a table
lookup. :func:`encode` rounds to nearest even (what ``cvt.rn.satfinite`` does, saturating to
the largest finite value), used to make test inputs.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

# name -> (exponent bits, mantissa bits, bias, has infinities)
FORMATS = {"f8e4m3": (4, 3, 7, False), "f8e5m2": (5, 2, 15, True)}
# The same formats' names in ml_dtypes and torch (arrays of these are taken as they are).
ML_DTYPES_NAMES = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
TORCH_NAMES = {"f8e4m3": "torch.float8_e4m3fn", "f8e5m2": "torch.float8_e5m2"}


@lru_cache(maxsize=None)
def decode_table(name: str) -> np.ndarray:
    """float32 value of each bit pattern 0..255 (read-only)."""
    exponent_bits, mantissa_bits, bias, infinities = FORMATS[name]
    values = np.empty(256, dtype=np.float64)
    top = (1 << exponent_bits) - 1
    for bits in range(256):
        sign = -1.0 if bits & 0x80 else 1.0
        exponent = (bits >> mantissa_bits) & top
        mantissa = bits & ((1 << mantissa_bits) - 1)
        if exponent == top and infinities:
            value = np.inf if mantissa == 0 else np.nan
        elif exponent == top and not infinities and mantissa == (1 << mantissa_bits) - 1:
            value = np.nan  # e4m3fn: S.1111.111 is the only NaN
        elif exponent == 0:
            value = mantissa / (1 << mantissa_bits) * 2.0 ** (1 - bias)
        else:
            value = (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)
        values[bits] = sign * value
    table = values.astype(np.float32)
    table.flags.writeable = False
    return table


def decode(bits: np.ndarray, name: str) -> np.ndarray:
    """Widen raw fp8 bits (uint8, or an ml_dtypes float8 array) to float32, exactly."""
    array = np.asarray(bits)
    if array.dtype != np.uint8:
        array = array.view(np.uint8)
    return decode_table(name)[array]


def largest(name: str) -> float:
    table = decode_table(name)
    return float(np.max(table[np.isfinite(table)]))


def encode(values: np.ndarray, name: str) -> np.ndarray:
    """Round values to the nearest fp8 value (ties to the even bit pattern), saturating to
    the largest finite one; NaN to the NaN pattern. Returns uint8 bits."""
    table = decode_table(name)
    finite = np.flatnonzero(np.isfinite(table) & (np.arange(256) < 0x80))  # +0 .. +max
    magnitudes = table[finite].astype(np.float64)  # increasing with the bit pattern
    values = np.asarray(values, dtype=np.float64)
    size = np.minimum(np.abs(values), magnitudes[-1])
    upper = np.clip(np.searchsorted(magnitudes, size), 1, len(magnitudes) - 1)
    low, high = magnitudes[upper - 1], magnitudes[upper]
    take_high = (size - low > high - size) | ((size - low == high - size) & (upper % 2 == 0))
    index = np.where(take_high, upper, upper - 1)
    index = np.where(size <= magnitudes[0], 0, index)
    bits = finite[index].astype(np.uint8) | np.where(np.signbit(values), 0x80, 0).astype(np.uint8)
    nan_bits = 0x7F
    return np.where(np.isnan(values), np.uint8(nan_bits), bits).astype(np.uint8)
