"""Every sample, through the DSL frontend, on the GPU against a float64 reference: f16,
bf16 and f32, stage counts 1 to 4, the shapes the compiler must handle (1x1x1, ragged, large).
Inputs are fresh random draws; outputs are poisoned with NaN before each run."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SHAPES = [(1, 1, 1), (127, 129, 65), (1000, 1003, 77), (4096, 4096, 4096)]
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5}  # f32: exact FFMA, no TF32
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def sample(name: str, dtype: str):
    """The sample with every f16 of its source read as ``dtype``."""
    path = SAMPLES / f"{name}.py"
    text = re.sub(r"\bf16\b", dtype, path.read_text())
    return load_file(path, text=text)


def rel_error(out, ref) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - ref) / max(float(torch.linalg.norm(ref)),
                                                            1e-30))


def operands(m, n, k, dtype, b_transposed=False):
    a = torch.randn(m, k, device="cuda").to(TORCH[dtype])
    b = torch.randn(n, k, device="cuda") if b_transposed else torch.randn(k, n, device="cuda")
    return a, b.to(TORCH[dtype])


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul(dtype, stages, shape):
    m, n, k = shape
    kernel = sample("matmul", dtype)["matmul"]
    a, b = operands(m, n, k, dtype)
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c, stages=stages)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_bt(dtype, stages, shape):
    m, n, k = shape
    kernel = sample("matmul_bt", dtype)["matmul_bt"]
    a, b = operands(m, n, k, dtype, b_transposed=True)
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c, stages=stages)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double().T) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_epilogue(dtype, stages, shape):
    m, n, k = shape
    kernel = sample("gemm_epilogue", dtype)["gemm"]
    a, b = operands(m, n, k, dtype)
    c = torch.randn(m, n, device="cuda").to(TORCH[dtype])
    bias = torch.randn(n, device="cuda")
    alpha, beta = 0.75, -0.5
    c_in = c.double()
    kernel(a, b, c, bias, alpha, beta, stages=stages)
    torch.cuda.synchronize()
    ref = torch.relu(alpha * (a.double() @ b.double()) + beta * c_in + bias.double())
    # The output is rounded to 16 bits: allow its rounding on top of the product's.
    assert rel_error(c, ref) < 2 * TOLERANCE[dtype]


@pytest.mark.parametrize("config", [dict(), dict(BK=32, stages=2), dict(BM=64, BN=64),
                                    dict(BM=64, BN=128, BK=8, stages=4, swizzle="off")],
                         ids=["default", "BK32", "64x64", "BK8-noswizzle"])
@pytest.mark.parametrize("shape", SHAPES + [(2048, 8, 4096), (8, 2048, 1000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_sgemm(shape, config):
    """f32 through FFMA: every product exact, so the error is f32 summation's alone."""
    m, n, k = shape
    kernel = load_file(SAMPLES / "sgemm.py")["sgemm"]
    a, b = operands(m, n, k, "f32")
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c, **config)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE["f32"]


def test_numpy_arguments_and_strided_views():
    """Host arrays are copied in and out; a transposed view is read through its strides."""
    import numpy as np
    kernel = sample("matmul", "f16")["matmul"]
    rng = np.random.default_rng()
    a = rng.standard_normal((300, 200)).astype(np.float16)
    b_storage = rng.standard_normal((260, 200)).astype(np.float16)
    b = b_storage.T  # [200, 260], column-major
    c = np.full((300, 260), np.nan, np.float32)
    kernel(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(c).any()
    assert np.linalg.norm(c - ref) / np.linalg.norm(ref) < 2e-3


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_gpu_views_read_through_strides(dtype):
    """Column-major A and B (transposed torch views) and a slice of a larger C."""
    m, n, k = 520, 392, 200
    kernel = sample("matmul", dtype)["matmul"]
    a = torch.randn(k, m, device="cuda").to(TORCH[dtype]).T
    b = torch.randn(n, k, device="cuda").to(TORCH[dtype]).T
    big = torch.full((m + 8, n + 24), float("nan"), device="cuda")
    c = big[4:4 + m, 8:8 + n]
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE[dtype]
    assert torch.isnan(big[:4]).all() and torch.isnan(big[:, :8]).all(), "wrote outside C"


@pytest.mark.parametrize("shape", [(0, 64, 32), (64, 0, 32)], ids=["M=0", "N=0"])
def test_empty_outputs_return_at_once(shape):
    m, n, k = shape
    kernel = sample("matmul", "f16")["matmul"]
    a, b = operands(m, n, k, "f16")
    c = torch.empty(m, n, device="cuda")
    assert kernel(a, b, c) is c


def test_k_zero_leaves_the_beta_scaled_epilogue():
    m, n, k = 130, 70, 0
    kernel = sample("gemm_epilogue", "f16")["gemm"]
    a, b = operands(m, n, k, "f16")
    c = torch.randn(m, n, device="cuda").to(torch.float16)
    bias = torch.randn(n, device="cuda")
    expected = torch.relu(-0.5 * c.double() + bias.double())
    kernel(a, b, c, bias, 2.0, -0.5)
    torch.cuda.synchronize()
    assert rel_error(c, expected) < 2e-3


@pytest.mark.parametrize("config", [dict(BM=128, BN=256, BK=8, stages=2),
                                    dict(BM=256, BN=128, BK=8, stages=3)],
                         ids=["A-idle", "B-idle"])
def test_more_threads_than_copy_vectors(config):
    """16 warps for a tile of 256 vectors: idle threads must not write shared memory (they
    once wrote zeros past the tile: wrong results, then an illegal address)."""
    kernel = load_file(SAMPLES / "sgemm.py")["sgemm"]
    a, b = operands(1024, 1024, 1024, "f32")
    c = torch.full((1024, 1024), float("nan"), device="cuda")
    kernel(a, b, c, **config)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE["f32"]


def round_tf32(x):
    """f32 rounded as cvt.rna.tf32.f32 rounds: to 10 mantissa bits, ties away from zero
    (finite inputs: half of the 13 dropped bits added to the magnitude bits, then cut)."""
    return ((x.float().view(torch.int32) + 0x1000) & -0x2000).view(torch.float32)


@pytest.mark.parametrize("b_transposed", [False, True], ids=["sgemm", "sgemm-B-given-as-BT"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tf32(b_transposed, stages, shape):
    """f32 on TF32 tensor cores (f32_math="tf32"): the product of tf32-rounded inputs,
    accumulated in f32. Against that reference the error is summation's alone (a wrong
    fragment register, or inputs truncated instead of rounded, would be far off); against
    the exact product it is TF32's (~3e-4)."""
    m, n, k = shape
    if b_transposed:
        kernel = sample("matmul_bt", "f32")["matmul_bt"]
    else:
        kernel = load_file(SAMPLES / "sgemm.py")["sgemm"]
    a, b = operands(m, n, k, "f32", b_transposed)
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c, stages=stages, f32_math="tf32")
    torch.cuda.synchronize()
    b_logical = b.T if b_transposed else b
    rounded = round_tf32(a).double() @ round_tf32(b_logical).double()
    assert rel_error(c, rounded) < TOLERANCE["f32"]
    assert rel_error(c, a.double() @ b_logical.double()) < 2e-3
