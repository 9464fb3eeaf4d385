"""Issue 12, class 1: a Python number next to an f16 or bf16 tile takes the tile's dtype. The
backend keeps every scalar in an f32 register, so splatting the number over a 16-bit tile must
round it to b16 first; before, the f32 register went straight into the 16-bit arithmetic and
ptxas rejected the PTX (f16: 'Arguments mismatch for instruction cvt'; bf16: 'Incompatible
elements of vector expression')."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.test_ptxas import assert_assembles
from tilec.kernel import load_file
from tilec.runtime import from_bf16_bits, to_bf16_bits

PTXAS = shutil.which("ptxas")

# Epilogues on the 16-bit tile ``c = acc.to(dtype)`` and their numpy meaning on float64.
EPILOGUES = {
    "c * 2": lambda c: c * 2,
    "2 * c": lambda c: 2 * c,
    "c + 1.0": lambda c: c + 1.0,
    "c - 0.5": lambda c: c - 0.5,
    "c / 2": lambda c: c / 2,
    "max(c, 0.5)": lambda c: np.maximum(c, 0.5),
    "min(0.25, c)": lambda c: np.minimum(0.25, c),
    "max(c * 2 + 1.0, 0.5) / 2": lambda c: np.maximum(c * 2 + 1.0, 0.5) / 2,
}


def _function(dtype: str, epilogue: str):
    text = f"""from __future__ import annotations
from tilec import f16, bf16, f32, tile


@tile
def lit(A: {dtype}[M, K], B: {dtype}[K, N], C: {dtype}[M, N], BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        c = acc.to({dtype})
        C[m * BM : +BM, n * BN : +BN] = {epilogue}
"""
    (function,) = load_file(f"lit_{dtype}.py", text=text).values()
    return function


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_ptxas_accepts_a_number_with_a_16bit_tile(tmp_path, dtype, epilogue):
    function = _function(dtype, epilogue)
    assert_assembles(lambda arch: function.ptx(arch=arch, M=100, N=70, K=48), tmp_path)


ROUND = {"f16": lambda x: x.astype(np.float16).astype(np.float64),
         "bf16": lambda x: from_bf16_bits(to_bf16_bits(x.astype(np.float32))).astype(np.float64)}
# How the interpreter takes and gives tensors of each dtype.
STORE = {"f16": lambda x: x.astype(np.float16),
         "bf16": lambda x: to_bf16_bits(x.astype(np.float32))}
LOAD = {"f16": lambda x: x.astype(np.float64),
        "bf16": lambda x: from_bf16_bits(x).astype(np.float64)}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("epilogue", ["c * 2", "max(c * 2 + 1.0, 0.5) / 2"])
def test_the_number_takes_the_tiles_dtype_in_the_interpreter(dtype, epilogue):
    rng = np.random.default_rng(0)
    rnd = ROUND[dtype]
    a, b = rnd(rng.standard_normal((40, 24))), rnd(rng.standard_normal((24, 36)))
    c = STORE[dtype](np.zeros((40, 36)))
    out = _function(dtype, epilogue)(STORE[dtype](a), STORE[dtype](b), c, device="cpu")
    expected = EPILOGUES[epilogue](rnd(a @ b))
    np.testing.assert_allclose(LOAD[dtype](out), expected, rtol=2e-2, atol=2e-2)
