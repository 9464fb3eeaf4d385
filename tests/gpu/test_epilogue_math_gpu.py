"""The math functions in a GEMM epilogue on the GPU against float64, per function.

``C = fn(alpha * A @ B + X)``, f16 A and B, f32 X and C, at the ragged size 1000x1003x77.
A and B hold small integers and alpha is a power of two, so the accumulator and the
pre-activation ``x`` are exact in f32: what is measured is the function alone. A second test
puts a sweep of inputs (tiny, huge, negative, near 0 and 1, inf, nan) in X with A = B = 0,
and prints each function's max abs / rel error.

Tolerances (relative, plus ``ATOL`` for results below 1e-30, which .ftz may flush to 0):
PTX's .approx forms are used (backend/compute.py). The PTX ISA states max errors for them
(ex2.approx.f32 about 2^-22 relative, lg2.approx.f32 about 2^-22 absolute, rsqrt.approx.f32
about 2^-23 relative, tanh.approx.f32 about 2^-11 relative); those figures were not looked up
again when this test was written, so the bounds below carry a margin and the printed errors
are the measurement:

- exp: ex2's error plus the rounding of x log2(e) (relative error about |x| 2^-24), so
  2e-6 relative for |x| <= 11 (the matmul test) and 2e-5 for the sweep (|x| up to 88).
- log, log2: lg2's absolute error: |err| <= 1e-6 |ref| + 1e-6.
- sqrt: sqrt.rn is correctly rounded: 1 ulp (eps). rsqrt: 1e-6. abs: exact.
- tanh: 2^-11 relative: 1e-3 relative plus 1e-6 absolute (tiny x).
- sigmoid, silu: ex2 + add + rcp.approx, plus the exp argument's rounding: 4e-6 (matmul),
  4e-5 (sweep, |x| up to 88).
- gelu_tanh: as sigmoid, but its exponent -2 log2(e) u grows as x^3 and its rounding is
  magnified by up to ~125 for |x| <= 11: 5e-5 relative.
- gelu (erf form): Numerical Recipes' erfcc (1.2e-7 fractional) with its exponent
  P(t) - x^2 / 2 rounded to f32: the CPU model of the same steps measured 1.7e-5 relative at
  worst (x = -11.4; 1.2e-6 for |x| <= 3); ex2.approx and rcp.approx add a few ulp: 4e-5.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tilec.ir.ops import MATH_FUNCTIONS
from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

EPS = 2.0 ** -23
ATOL = 1e-30
# (relative, absolute) for the matmul test (|x| <= 11); the sweep uses SWEEP_TOLERANCE.
TOLERANCE = {
    "exp": (2e-6, ATOL), "exp2": (1e-6, ATOL), "log": (1e-6, 1e-6), "log2": (1e-6, 1e-6),
    "sqrt": (EPS, ATOL), "rsqrt": (1e-6, ATOL), "abs": (0.0, 0.0), "tanh": (1e-3, 1e-6),
    "sigmoid": (4e-6, ATOL), "silu": (4e-6, ATOL), "gelu_tanh": (5e-5, ATOL),
    "gelu": (4e-5, ATOL),
}
SWEEP_TOLERANCE = {**TOLERANCE, "exp": (2e-5, ATOL), "sigmoid": (4e-5, ATOL),
                   "silu": (4e-5, ATOL)}

# lg2.approx.ftz and rsqrt.approx.ftz read a subnormal input as +-0 (log(1e-40) = -inf on
# the GPU); elsewhere a subnormal input changes nothing measurable or is kept (sqrt.rn, abs,
# the mul and add before an ex2), and subnormal results are within ATOL.
FLUSHES_ITS_INPUT = ("log", "log2", "rsqrt")

SOURCE = '''
from tilec import f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], X: f32[M, N], C: f32[M, N], alpha: f32,
         BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = {name}(alpha * acc + X[m * BM : +BM, n * BN : +BN])
'''


def kernel(name: str):
    (function,) = load_file(f"epilogue_{name}.tile", text=SOURCE.format(name=name)).values()
    return function


def reference(name: str, x: np.ndarray) -> np.ndarray:
    """The function in float64, by its definition (gelu_tanh as x sigmoid(2u), which is
    0.5 x (1 + tanh(u)) without the cancellation)."""
    from tilec.cpu.reference import ELEMENTWISE
    with np.errstate(all="ignore"):
        return ELEMENTWISE[f"tile.{name}"](x.astype(np.float64))


def errors(name: str, x: np.ndarray, got: np.ndarray, tolerance: tuple[float, float]
           ) -> tuple[float, float, np.ndarray]:
    """(max abs error, max rel error over results >= 1e-30, the elements out of tolerance)."""
    want = reference(name, x)
    rtol, atol = tolerance
    with np.errstate(all="ignore"):
        rounded = want.astype(np.float32)
        diff = np.abs(got.astype(np.float64) - want)
        same = ((np.isnan(got) & np.isnan(want)) | (np.isinf(rounded) & (got == rounded)))
        finite = np.isfinite(want) & np.isfinite(got)
        abs_err = float(diff[finite].max(initial=0.0))
        big = finite & (np.abs(want) >= ATOL)
        rel_err = float((diff[big] / np.abs(want[big])).max(initial=0.0))
        bad = ~(same | (diff <= rtol * np.abs(want) + atol))
    return abs_err, rel_err, bad


def run(name: str, a, b, x, alpha: float) -> np.ndarray:
    m, n = x.shape
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(name)(a, b, x, c, alpha)
    torch.cuda.synchronize()
    return c.cpu().numpy()


@pytest.mark.parametrize("name", list(MATH_FUNCTIONS))
def test_matmul_epilogue_against_float64(name: str) -> None:
    m, n, k = 1000, 1003, 77
    gen = torch.Generator(device="cuda").manual_seed(13)
    a = torch.randint(-2, 3, (m, k), device="cuda", generator=gen).to(torch.float16)
    b = torch.randint(-2, 3, (k, n), device="cuda", generator=gen).to(torch.float16)
    x_in = torch.randint(-64, 65, (m, n), device="cuda", generator=gen).float() / 64
    alpha = 1.0 / 32  # |acc| <= 308: alpha * acc + X is exact in f32
    got = run(name, a, b, x_in, alpha)
    x = (alpha * (a.double() @ b.double()) + x_in.double()).cpu().numpy()
    assert np.array_equal(x.astype(np.float32), x), "the pre-activation is not exact in f32"
    abs_err, rel_err, bad = errors(name, x, got, TOLERANCE[name])
    print(f"{name}: matmul epilogue, |x| <= {np.abs(x).max():.3g}: max abs error "
          f"{abs_err:.3g}, max rel error {rel_err:.3g}")
    where = np.argwhere(bad)[:5]
    assert not bad.any(), [(float(x[i, j]), float(got[i, j])) for i, j in where]


def sweep() -> np.ndarray:
    values = np.concatenate([
        np.geomspace(1e-30, 1e30, 300), -np.geomspace(1e-30, 1e30, 300),
        np.linspace(-88, 88, 1761), np.linspace(-1e-3, 1e-3, 201),
        1 + np.linspace(-1e-3, 1e-3, 201),
        [0.0, -0.0, 1.0, -1.0, 88.7, 89.0, -87.0, -103.0, 1e-40, -1e-40, math.inf, -math.inf,
         math.nan],
    ]).astype(np.float32)
    cols = 131
    padded = np.resize(values, (math.ceil(values.size / cols) * cols,))
    return padded.reshape(-1, cols)


@pytest.mark.parametrize("name", list(MATH_FUNCTIONS))
def test_sweep_of_inputs_max_error(name: str) -> None:
    x = sweep()
    m, n = x.shape
    a = torch.zeros((m, 8), device="cuda", dtype=torch.float16)
    b = torch.zeros((8, n), device="cuda", dtype=torch.float16)
    got = run(name, a, b, torch.from_numpy(x).cuda(), 1.0)
    if name in FLUSHES_ITS_INPUT:  # subnormal inputs count as +-0 there
        x = np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(0, x), x)
    abs_err, rel_err, bad = errors(name, x, got, SWEEP_TOLERANCE[name])
    print(f"{name}: sweep of {x.size} inputs: max abs error {abs_err:.3g}, "
          f"max rel error {rel_err:.3g} (results >= {ATOL:g})")
    where = np.argwhere(bad)[:5]
    assert not bad.any(), [(float(x[i, j]), float(got[i, j])) for i, j in where]
