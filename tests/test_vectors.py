"""Vectors of any float dtype in an epilogue (issue 13): an f16 or bf16 bias along the
columns, an f16 scale along the rows (``[:, None]``), converted to f32 where they meet the
f32 accumulator. The fragments pass loads each as one frag.load of its own dtype and a
conversion; the lowered kernel, run by the CPU executor, matches float64; ptxas takes the
PTX on every target."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_ptxas import assert_assembles

SOURCE = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f32[M, N], bias: {bias}[N], scale: {scale}[M],
         BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc * scale[m * BM : +BM][:, None] + bias[n * BN : +BN]
'''
VECTORS = [("f16", "f16"), ("bf16", "f32"), ("f32", "bf16")]


def function(bias: str, scale: str):
    return load_file("vectors.py", text=SOURCE.format(bias=bias, scale=scale))["gemm"]


def to_dtype(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(the array the kernel takes, its exact values)."""
    if dtype == "f16":
        v = values.astype(np.float16)
        return v, v.astype(np.float64)
    if dtype == "bf16":
        bits = values.astype(np.float32).view(np.uint32)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    v = values.astype(np.float32)
    return v, v.astype(np.float64)


@pytest.mark.parametrize("bias, scale", VECTORS)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_lowered_kernel_broadcasts_vectors_of_any_float_dtype(bias, scale, arch):
    consts = dict(BM=128, BN=128, BK=64) if arch == "sm_90a" else {}
    kernel = run_pipeline(function(bias, scale).lower(**consts),
                          Options(arch=arch, stages=2)).kernel
    loads = [op for op in kernel.walk() if op.name == "frag.load"]
    assert sorted(str(op.result.type.dtype) for op in loads) == sorted([bias, scale])
    rng = np.random.default_rng(4)
    M, N, K = 150, 140, 70
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias_arg, bias_exact = to_dtype(rng.standard_normal(N), bias)
    scale_arg, scale_exact = to_dtype(rng.standard_normal(M), scale)
    c = np.full((M, N), np.nan, dtype=np.float32)
    run_kernel(kernel, {"A": a, "B": b, "C": c, "bias": bias_arg, "scale": scale_arg},
               ops=op_catalogue())
    want = (a.astype(np.float64) @ b.astype(np.float64)) * scale_exact[:, None] + bias_exact
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("bias, scale", VECTORS)
def test_ptxas_takes_every_vector_dtype(bias, scale, tmp_path):
    kernel = function(bias, scale)
    assert_assembles(lambda arch: kernel.ptx(arch=arch), tmp_path)
    assert_assembles(lambda arch: kernel.ptx(arch=arch, BM=128, BN=128, BK=64),
                     tmp_path, archs=("sm_90a",))
