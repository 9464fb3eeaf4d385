"""``x ** n`` with a constant integer n (issue 13): numbers fold, tiles and scalars become
products by repeated squaring (each multiply rounding as ``*`` does), a negative n the
reciprocal, n = 0 a tile of ones; anything else is an error at the operator. The CPU
interpreter's results against float64, the multiplies counted, and ptxas on the PTX."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.kernel import load_file

from .test_ptxas import assert_assembles

HEADER = "from __future__ import annotations\nfrom tilec import f16, f32, tile\n\n@tile\n"


def program(expression: str, c: str = "f32") -> str:
    return HEADER + f"""def powers(X: f32[M, N], C: {c}[M, N], s: f32, BM=32, BN=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        x = X[m * BM : +BM, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = {expression}
"""


def kernel_for(expression: str, c: str = "f32"):
    return load_file("powers.py", text=program(expression, c))["powers"]


def run(expression: str, x: np.ndarray, s: float = 1.5, c: str = "f32") -> np.ndarray:
    out = np.full(x.shape, np.nan, dtype=np.float16 if c == "f16" else np.float32)
    run_kernel(kernel_for(expression, c).lower(), {"X": x, "C": out, "s": s},
               ops=op_catalogue())
    return out


X = np.random.default_rng(0).uniform(-2, 2, (40, 50)).astype(np.float32)
X[0, :4] = (0.0, -0.0, np.inf, np.nan)


@pytest.mark.parametrize("expression, want", [
    ("x ** 1", lambda x, s: x),
    ("x ** 2", lambda x, s: x * x),
    ("x ** 3", lambda x, s: x ** 3),
    ("x ** 7", lambda x, s: x ** 7),
    ("x ** -1", lambda x, s: 1 / x),
    ("x ** -2", lambda x, s: x ** -2.0),
    ("x ** 0", lambda x, s: np.ones_like(x)),
    ("x * s ** 2", lambda x, s: x * s * s),
    ("x + 2 ** 3", lambda x, s: x + 8),
    ("x * 2 ** -2", lambda x, s: x * 0.25),
])
def test_powers_match_float64(expression, want):
    x = X.astype(np.float64)
    with np.errstate(all="ignore"):
        expected = want(x, 1.5)
        got = run(expression, X).astype(np.float64)
    same_nan = np.isnan(expected) == np.isnan(got)
    assert same_nan.all(), expression
    finite = np.isfinite(expected)
    infinite = ~finite & ~np.isnan(expected)
    assert np.array_equal(got[infinite], expected[infinite])
    # Each multiply rounds once (at most 2 log2 |n| of them, and the reciprocal).
    np.testing.assert_allclose(got[finite], expected[finite], rtol=8 * 2.0 ** -24, atol=1e-30)


def test_a_16_bit_tile_rounds_after_each_multiply():
    """x ** 3 on an f16 tile is (x * x) * x, each product rounded to f16, as numpy's f16
    arrays compute it."""
    text = HEADER + """def powers(X: f16[M, N], C: f16[M, N], BM=32, BN=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        x = X[m * BM : +BM, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = x ** 3
"""
    x = np.random.default_rng(1).uniform(-3, 3, (40, 50)).astype(np.float16)
    out = np.zeros_like(x)
    run_kernel(load_file("p.py", text=text)["powers"].lower(), {"X": x, "C": out},
               ops=op_catalogue())
    assert np.array_equal(out, (x * x) * x)


@pytest.mark.parametrize("n, multiplies", [(2, 1), (3, 2), (4, 2), (8, 3), (15, 6), (64, 6)])
def test_repeated_squaring_takes_few_multiplies(n, multiplies):
    kernel = kernel_for(f"x ** {n}").lower()
    assert sum(op.name == "tile.mul" for op in kernel.walk()) == multiplies


def test_ptxas_takes_a_kernel_with_powers(tmp_path):
    text = HEADER + """def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], s: f32,
         BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        x = acc * 2 ** -4
        C[m * BM : +BM, n * BN : +BN] = (x ** 3 - x ** -2 + s ** 2 * x ** 0).to(f16)
"""
    kernel = load_file("gemm.py", text=text)["gemm"]
    assert_assembles(lambda arch: kernel.ptx(arch=arch), tmp_path)


@pytest.mark.parametrize("expression, message", [
    ("x ** 1.5", "constant integer exponent"),
    ("x ** s", "constant integer exponent"),
    ("x ** 65", "from -64 to 64"),
    ("x ** x", "constant integer exponent"),
    ("x + 0 ** -1", "0 raised to a negative power"),
])
def test_other_exponents_are_errors_at_the_operator(expression, message):
    with pytest.raises(TileError, match=message) as caught:
        kernel_for(expression).lower()
    text = str(caught.value)
    assert "powers.py:8:" in text and "^" in text
