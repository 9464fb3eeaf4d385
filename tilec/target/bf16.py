"""bf16 as raw bits: rounding float32 to bf16 and widening it back, the one definition the
runtime (bf16 arrays passed as uint16), the CPU interpreter and the checks share. It imports
no GPU library, so compiling never loads the CUDA driver's bindings."""
from __future__ import annotations

import numpy as np


def to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bf16, round-to-nearest-even, returning the raw uint16 bits.

    Other float dtypes are converted to float32 first. NaNs stay NaN (quiet, sign kept).
    """
    single = np.asarray(values, dtype=np.float32)
    # uint64 arithmetic: the rounding carry must not wrap around for the largest bit patterns.
    bits = single.view(np.uint32).astype(np.uint64)
    # Adding 0x7FFF plus the lowest kept bit rounds ties to even; a carry into the exponent is
    # the correct rounding up (to the next binade, or to infinity past the largest bf16).
    lowest_kept = (bits >> 16) & 1
    rounded = (bits + 0x7FFF + lowest_kept) >> 16
    quiet_nan = (bits >> 16) | 0x0040
    return np.where(np.isnan(single), quiet_nan, rounded).astype(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """Widen raw bf16 bits (uint16, or ml_dtypes.bfloat16) to float32, exactly."""
    array = np.asarray(bits)
    if array.dtype.name == "bfloat16":
        array = array.view(np.uint16)
    if array.dtype != np.uint16:
        raise TypeError(f"from_bf16_bits takes uint16 bf16 bits, got {array.dtype}")
    return (array.astype(np.uint32) << np.uint32(16)).view(np.float32)
