"""What the converting pack kernel (backend/pack.py's convert_ptx) must write, for the CPU
model's runs (tests/test_pack_kernel_cpu.py) and the GPU's (tests/gpu/test_packing_gpu.py):
each source byte's exact value in the destination's bits (int8 by numpy, f8e4m3 and f8e5m2 by
tilec.target.fp8's decode table), zeros past a row's end and in the rows past the source's,
and NaN exactly where the source has one (its payload not compared)."""
from __future__ import annotations

import numpy as np

from tilec.target.fp8 import decode_table


def converted_bits(source_bytes: np.ndarray, source: str, dest: str) -> np.ndarray:
    """The exact destination bits of each byte (NaN as 0x7FFF; the kernel's NaNs are only
    compared as NaNs): int8 values, or tilec.target.fp8's decode table, narrowed exactly."""
    if source == "i8":
        values = source_bytes.view(np.int8).astype(np.float32)
    else:
        values = decode_table(source)[source_bytes]
    if dest == "f16":
        wide = values.astype(np.float16)
        assert np.array_equal(wide.astype(np.float32), values, equal_nan=True)  # exact
        out = wide.view(np.uint16).copy()
    else:
        f32 = values.astype(np.float32).view(np.uint32)
        assert not (f32[~np.isnan(values)] & 0xFFFF).any()  # exact in bf16
        out = (f32 >> 16).astype(np.uint16)
    out[np.isnan(values)] = 0x7FFF
    return out


def is_nan(bits: np.ndarray, dest: str) -> np.ndarray:
    exponent, mantissa = (0x7C00, 0x03FF) if dest == "f16" else (0x7F80, 0x007F)
    return (bits & exponent == exponent) & (bits & mantissa != 0)


def assert_converted(out: np.ndarray, source_bytes: np.ndarray, packed, source: str,
                     dest: str) -> None:
    rows, cols = source_bytes.shape
    want = np.zeros((packed.rows, packed.row_stride), np.uint16)
    want[:rows, :cols] = converted_bits(source_bytes, source, dest)
    nan = is_nan(want, dest)
    assert np.array_equal(is_nan(out, dest), nan)  # NaN exactly where the source has one
    np.testing.assert_array_equal(np.where(nan, 0, out), np.where(nan, 0, want))


def every_byte(shape, seed: int) -> np.ndarray:
    """Bytes holding each of the 256 values at least once, in a shuffled order."""
    size = int(np.prod(shape))
    assert size >= 256, f"{shape} holds fewer than 256 bytes"
    rng = np.random.default_rng(seed)
    values = np.concatenate([np.arange(256), rng.integers(0, 256, size - 256)])
    return rng.permutation(values)[:size].astype(np.uint8).reshape(shape)
