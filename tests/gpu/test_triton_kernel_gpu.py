"""The bench's Triton contender (tilec/benchmarking/triton_kernel.py) on the GPU against float64:
its one kernel in both epilogues, the plain matmul (f16, bf16, f32 exact and TF32) and the
fused bias + GELU (f16), at ragged sizes (the masks at every edge) and in the bench's own and a
small configuration. Outputs are poisoned with NaN first. Skips without Triton. The measured
errors are printed (pytest -s)."""
from __future__ import annotations

import math

import pytest

from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tilec.benchmarking.triton_kernel import (TRITON_CONFIG, triton_matmul,  # noqa: E402
                                              triton_matmul_bias_gelu)

SHAPES = [(1, 1, 1), (127, 129, 65), (1000, 1003, 77), (333, 517, 4099)]
SMALL = (64, 64, 32, 2, 4)  # (BM, BN, BK, stages, warps): many blocks, many K steps
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
         "tf32": torch.float32}
# Relative Frobenius error against float64: the output's rounding (f16, bf16) or the
# products' (TF32's 10-bit mantissa); f32 with ieee=True is exact f32 arithmetic.
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5, "tf32": 2e-3}


def operands(m: int, n: int, k: int, dtype: str, seed: int = 0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=generator).to(TORCH[dtype])
    b = torch.randn((k, n), device="cuda", generator=generator).to(TORCH[dtype])
    return a, b


def rel_error(out, want) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - want)
                 / max(float(torch.linalg.norm(want)), 1e-30))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "tf32"])
@pytest.mark.parametrize("config", ["bench", "small"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_plain_matmul_matches_float64(shape, config, dtype):
    m, n, k = shape
    a, b = operands(m, n, k, dtype)
    c = torch.full((m, n), float("nan"), device="cuda").to(TORCH[dtype])
    triton_matmul(a, b, c, TRITON_CONFIG[dtype] if config == "bench" else SMALL,
                  ieee=dtype == "f32")
    torch.cuda.synchronize()
    error = rel_error(c, a.double() @ b.double())
    print(f"plain {dtype} {shape} {config}: {error:.3g}")
    assert error < TOLERANCE[dtype]


def gelu_float64(x):
    """gelu(x) = 0.5 x erfc(-x / sqrt 2) in float64 (no cancellation for negative x)."""
    return 0.5 * x * torch.special.erfc(x * (-1.0 / math.sqrt(2.0)))


@pytest.mark.parametrize("config", ["bench", "small"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bias_gelu_matches_float64(shape, config):
    m, n, k = shape
    a, b = operands(m, n, k, "f16", seed=1)
    bias = torch.randn(n, device="cuda").to(torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda").to(torch.float16)
    triton_matmul_bias_gelu(a, b, bias, c, TRITON_CONFIG["f16"] if config == "bench" else SMALL)
    torch.cuda.synchronize()
    want = gelu_float64(a.double() @ b.double() + bias.double())
    error = rel_error(c, want)
    print(f"bias+gelu f16 {shape} {config}: {error:.3g}")
    assert error < TOLERANCE["f16"]
    if m * n >= 1024:  # (one output could be near its product by chance)
        # The epilogue really ran: the plain product of the same operands is far from it.
        plain = torch.full((m, n), float("nan"), device="cuda").to(torch.float16)
        triton_matmul(a, b, plain, TRITON_CONFIG["f16"])
        torch.cuda.synchronize()
        assert rel_error(plain, want) > 10 * TOLERANCE["f16"]
