"""Generated kernels on the GPU, from IR built directly (independent of the frontend),
against float64 references: every stage count, f16 and bf16, ragged shapes."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.ir import BF16, F16, F32
from tilec.kernel import run_on_gpu
from tilec.runtime.driver import has_gpu

from tests.test_interpreter import build_matmul, poisoned, random_operand

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
TOLERANCE = {F16: 2e-3, BF16: 1e-2}
SHAPES = [(1, 1, 1), (127, 129, 65), (1000, 1003, 77), (256, 256, 256)]


def gpu_array(x: np.ndarray, dtype) -> np.ndarray:
    """bf16 data travels as ml_dtypes.bfloat16 (the interpreter's tests hold raw bits)."""
    if dtype == BF16:
        import ml_dtypes
        return x.view(ml_dtypes.bfloat16)
    return x


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    assert not np.isnan(out).any(), "some outputs were never written"
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_matmul(dtype, stages, shape):
    m, n, k = shape
    rng = np.random.default_rng()
    kernel = build_matmul(dtype, F32, 128, 128, 32)
    (a, a64), (b, b64) = random_operand(rng, (m, k), dtype), random_operand(rng, (k, n), dtype)
    c = poisoned((m, n), F32)
    run_on_gpu(kernel, {"A": gpu_array(a, dtype), "B": gpu_array(b, dtype), "C": c},
               {"stages": stages})
    ref = a64 @ b64
    assert rel_error(c, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("epilogue", [False, True])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (256, 136, 64)])  # odd N: scalar stores
def test_variants(transpose_b, epilogue, shape):
    m, n, k = shape
    dtype = F16
    rng = np.random.default_rng()
    kernel = build_matmul(dtype, F16 if epilogue else F32, 128, 128, 32,
                          transpose_b=transpose_b, epilogue=epilogue)
    a, a64 = random_operand(rng, (m, k), dtype)
    b, b64 = random_operand(rng, (n, k) if transpose_b else (k, n), dtype)
    args = {"A": a, "B": b}
    prod = a64 @ (b64.T if transpose_b else b64)
    if epilogue:
        c, _ = random_operand(rng, (m, n), F16)
        bias = rng.standard_normal(n).astype(np.float32)
        alpha, beta = 0.5, -1.25
        ref = np.maximum(alpha * prod + beta * c.astype(np.float64) + bias, 0)
        args.update(C=c, bias=bias, alpha=alpha, beta=beta)
    else:
        c = poisoned((m, n), F32)
        ref = prod
        args["C"] = c
    run_on_gpu(kernel, args, {"stages": 3})
    assert rel_error(c.astype(np.float64), ref) < 2e-3
