"""Weight-only quantization on the GPU: samples/w8a16.py (f16 activations, i8 weights W[N, K]
converted to f16 in registers, per-channel f32 scales) and its bf16 variant, at ragged sizes
and several configurations, against float64 on the host; and integer-valued activations
with unit scales, where every sum is an exact integer in f32, so C must equal float64's
result rounded once to f16: the i8 -> f16 conversion (prmt + sub.f16x2) exact, bit for bit.
The measured errors are printed (pytest -s)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SHAPES = [(1, 1, 1), (16, 8192, 8192), (127, 129, 65), (1000, 1003, 77), (333, 517, 4099),
          (4096, 4096, 4096)]
CONFIGS = [dict(), dict(stages=1), dict(stages=4), dict(swizzle="off"),
           dict(BM=64, BN=64, BK=32), dict(BM=128, BN=256, BK=64, warps=(2, 4)),
           dict(BM=32, BN=128, BK=128, warps=(1, 4)),
           # the bench's skinny tile (tilec/benchmarking/w8a16.py), and split in K
           dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 2)),
           dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 2), split_k=2)]
TORCH = {"f16": "float16", "bf16": "bfloat16"}


def w8a16(activations: str = "f16"):
    text = (SAMPLES / "w8a16.py").read_text(encoding="utf-8")
    text = text.replace("from tilec import f16,", "from tilec import bf16, f16,")
    for old in ("A: f16[", "C: f16[", ".to(f16)"):
        text = text.replace(old, old.replace("f16", activations))
    return load_file(SAMPLES / "w8a16.py", text=text)["w8a16"]


def operands(m: int, n: int, k: int, activations: str, seed: int = 0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=generator).to(
        getattr(torch, TORCH[activations]))
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=generator)
    w[0, :] = -128
    w[-1, :] = 127
    scale = torch.rand(n, device="cuda", generator=generator) * 0.02 + 0.001
    return a, w, scale


def reference(a, w, scale) -> np.ndarray:
    return (a.float().cpu().numpy().astype(np.float64)
            @ w.float().cpu().numpy().astype(np.float64).T) * scale.cpu().numpy().astype(np.float64)


# Every configuration at every shape but 4096^3 (defaults only: its float64 reference is the
# slow part).
CASES = [(shape, config) for shape in SHAPES for config in CONFIGS
         if shape != (4096, 4096, 4096) or not config]


@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("shape, config", CASES, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else ",".join(f"{k}={x}" for k, x in
                                                              v.items()) or "defaults")
def test_w8a16_matches_float64(shape, config, activations):
    m, n, k = shape
    a, w, scale = operands(m, n, k, activations)
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    w8a16(activations)(a, w, scale, c, **config)
    torch.cuda.synchronize()
    assert_within_bound(c, a, w, scale, f"{activations} {shape} {config}")


def assert_within_bound(c, a, w, scale, what: str) -> None:
    """C against float64: f32 accumulation of k products, then one rounding to C's dtype
    (``w`` as the weights' values, [N, K])."""
    got = c.float().cpu().numpy().astype(np.float64)
    want = reference(a, w, scale)
    ulp = 2.0 ** -10 if c.dtype == torch.float16 else 2.0 ** -7
    weights = np.abs(w.float().cpu().numpy())
    bound = ulp * np.abs(want) + 2.0 ** -22 * a.shape[1] * (
        np.abs(a.float().cpu().numpy()) @ weights.T * scale.cpu().numpy()) + 1e-6
    error = np.abs(got - want)
    print(f"{what}: max error {error.max():.3g}, "
          f"max error / bound {np.max(error / bound):.3g}")
    assert np.all(error <= bound)


@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 1003, 77), (64, 64, 256)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_conversion_is_exact(shape, activations):
    """Activations in {-1, 0, 1}, unit scales: each sum is an integer below 2**24, exact in
    f32, so the output is exactly float64's rounded once to the output dtype."""
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(7)
    dtype = getattr(torch, TORCH[activations])
    a = torch.randint(-1, 2, (m, k), device="cuda", generator=generator).to(dtype)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=generator)
    w[0, :] = -128
    w[-1, :] = 127
    scale = torch.ones(n, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda").to(dtype)
    w8a16(activations)(a, w, scale, c)
    torch.cuda.synchronize()
    exact = torch.from_numpy(reference(a, w, scale)).to(dtype)
    assert torch.equal(c.cpu(), exact)
