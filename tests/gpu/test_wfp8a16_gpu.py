"""Weight-only quantization with fp8 weights on the GPU: samples/wfp8a16.py (f16 activations,
f8e4m3 weights W[N, K] converted to f16 in registers by cvt.rn.f16x2.e4m3x2, per-channel f32
scales), e5m2 weights and bf16 activations, at ragged sizes and several configurations,
against float64 of the decoded weights (tilec.target.fp8's tables); and integer-valued
activations with unit scales on weights whose every sum is exact in f32, so C must equal
float64's result rounded once: the fp8 -> f16 (and -> bf16) conversion exact, bit for bit.
The measured errors are printed (pytest -s)."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu
from tilec.target import fp8

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SHAPES = [(1, 1, 1), (16, 8192, 8192), (127, 129, 65), (1000, 1003, 77), (333, 517, 4099),
          (2048, 2048, 2048)]
CONFIGS = [dict(), dict(stages=1), dict(stages=4), dict(swizzle="off"),
           dict(BM=64, BN=64, BK=32), dict(BM=128, BN=256, BK=64, warps=(2, 4)),
           dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 2)),
           dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 2), split_k=2)]
TORCH = {"f16": "float16", "bf16": "bfloat16"}
FP8_TORCH = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


def needs_fp8():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the fp8 conversion (cvt.rn.f16x2.e4m3x2) needs sm_89 or later")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")


def wfp8a16(weights: str = "f8e4m3", activations: str = "f16"):
    text = (SAMPLES / "wfp8a16.py").read_text(encoding="utf-8")
    text = text.replace("from tilec import f8e4m3,", "from tilec import bf16, f8e4m3, f8e5m2,")
    text = text.replace("W: f8e4m3[", f"W: {weights}[")
    for old in ("A: f16[", "C: f16[", ".to(f16)"):
        text = text.replace(old, old.replace("f16", activations))
    return load_file(SAMPLES / "wfp8a16.py", text=text)["wfp8a16"]


def weights_tensor(bits: np.ndarray, weights: str):
    """uint8 bits on the host -> a torch float8 tensor on the GPU, the same bits."""
    return torch.from_numpy(bits).cuda().view(getattr(torch, FP8_TORCH[weights]))


def operands(m: int, n: int, k: int, weights: str, activations: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).cuda().to(
        getattr(torch, TORCH[activations]))
    bits = fp8.encode(rng.standard_normal((n, k)) * 8, weights)
    bits[0, :] = fp8.encode(np.array([fp8.largest(weights)]), weights)[0]  # +-largest
    bits[0, 1::2] |= 0x80
    if n > 1:
        bits[-1, :] = rng.choice(np.array([0x00, 0x80, 0x01, 0x81], dtype=np.uint8), k)
    w_exact = fp8.decode(bits, weights).astype(np.float64)
    rms = np.sqrt(np.mean(w_exact ** 2, axis=1)) + 2.0 ** -20
    scale = ((rng.random(n) + 0.5) / (np.sqrt(k) * rms)).astype(np.float32)  # C about 1
    return a, weights_tensor(bits, weights), w_exact, torch.from_numpy(scale).cuda()


CASES = [(shape, config) for shape in SHAPES for config in CONFIGS
         if shape != (2048, 2048, 2048) or not config]


@pytest.mark.parametrize("weights", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("shape, config", CASES, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else ",".join(f"{k}={x}" for k, x in
                                                              v.items()) or "defaults")
def test_wfp8a16_matches_float64(shape, config, activations, weights):
    needs_fp8()
    m, n, k = shape
    a, w, scale, want, bound = problem(m, n, k, weights, activations)
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    wfp8a16(weights, activations)(a, w, scale, c, **config)
    torch.cuda.synchronize()
    got = c.float().cpu().numpy().astype(np.float64)
    error = np.abs(got - want)
    print(f"{weights} {activations} {shape} {config}: max error {error.max():.3g}, "
          f"max error / bound {np.max(error / bound):.3g}")
    assert np.all(error <= bound)


@functools.lru_cache(maxsize=4)
def problem(m: int, n: int, k: int, weights: str, activations: str):
    """The operands, the float64 reference and its error bound of one shape and dtype pair:
    the same for every config (the kernels only read the operands), so made once; encoding
    and decoding 8192x8192 weights took most of this file's time when each case did it."""
    a, w, w_exact, scale = operands(m, n, k, weights, activations)
    a64 = a.float().cpu().numpy().astype(np.float64)
    s64 = scale.cpu().numpy().astype(np.float64)
    want = (a64 @ w_exact.T) * s64
    # f32 accumulation of k products, then one rounding to the output's dtype.
    ulp = 2.0 ** -10 if activations == "f16" else 2.0 ** -7
    bound = ulp * np.abs(want) + 2.0 ** -22 * k * (np.abs(a64) @ np.abs(w_exact).T * s64) \
        + 1e-6
    return a, w, scale, want, bound


# fp8 weights whose products with {-1, 0, 1} sum exactly in f32 and fit f16 at k <= 64, with
# room to spare (19 and 17 significant bits, where f32 and the mma's alignment keep 24):
# e4m3 from 1/2 (ulp 2**-4) to 448 (|sum| < 2**15); e5m2 from 1/2 (ulp 2**-3) to 256.
EXACT_RANGE = {"f8e4m3": (0.5, 448.0), "f8e5m2": (0.5, 256.0)}


@pytest.mark.parametrize("weights", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(127, 129, 64), (1000, 1003, 48), (64, 64, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_conversion_is_exact(shape, activations, weights):
    """Activations in {-1, 0, 1}, unit scales, every weight value of a range: each sum is
    exact in f32, so the output is exactly float64's rounded once to the output dtype."""
    needs_fp8()
    m, n, k = shape
    rng = np.random.default_rng(7)
    table = fp8.decode_table(weights)
    low, high = EXACT_RANGE[weights]
    allowed = np.flatnonzero(np.isfinite(table) & (np.abs(table) >= low)
                             & (np.abs(table) <= high)).astype(np.uint8)
    bits = rng.choice(allowed, (n, k))
    dtype = getattr(torch, TORCH[activations])
    a = torch.from_numpy(rng.integers(-1, 2, (m, k)).astype(np.float32)).cuda().to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda").to(dtype)
    wfp8a16(weights, activations)(a, weights_tensor(bits, weights),
                                  torch.ones(n, device="cuda"), c)
    torch.cuda.synchronize()
    exact = a.float().cpu().numpy().astype(np.float64) @ fp8.decode(bits, weights).T.astype(
        np.float64)
    assert torch.equal(c.cpu(), torch.from_numpy(exact).to(dtype))
