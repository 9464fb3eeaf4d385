"""The elementwise math functions of tiles (exp, exp2, log, log2, sqrt, rsqrt, abs, tanh,
sigmoid, silu, gelu_tanh, gelu): the frontend lowers them to ``tile.<name>``, the verifier accepts
them, the CPU interpreter's f32 results match float64 numpy within a stated tolerance, ptxas
accepts a kernel using them for every target, and misuse is an error that names the place.

The CPU tolerance: numpy's f32 functions are within a few ulp of the exact result; sigmoid,
silu and gelu_tanh are compositions of 3-8 f32 roundings. gelu_tanh's argument 2u grows as
x^3, so its error is magnified by the function's condition number, which reaches a few
hundred for x around -10 (where the result is below 1e-30 anyway); it gets a looser bound.
gelu (the erf form) evaluates Numerical Recipes' erfcc (tilec/target/erfc.py, fractional error
1.2e-7 in exact arithmetic) as the GPU does; its exponent P(t) - x^2 / 2 is rounded to f32,
an absolute error of about x^2 2^-24 in it, which is relative in the result: measured 10 ulp
for |x| <= 3, 35 ulp for |x| <= 6, 81 ulp for |x| <= 10 and 144 ulp (1.7e-5) at x = -11.4,
the last x whose gelu is above 1e-30.
Results below 1e-30 in magnitude count as matched by ``ATOL``: there f32 is subnormal or the
float64 reference (whose 1 + tanh(u) cancels) is itself no better than that.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.cpu.reference import ELEMENTWISE as REFERENCE
from tilec.errors import TileError, TileNameError, TileTypeError
from tilec.ir import print_kernel, verify
from tilec.ir.ops import MATH_FUNCTIONS
from tilec.kernel import load_file

FUNCTIONS = list(MATH_FUNCTIONS)
EPS32 = float(np.finfo(np.float32).eps)  # 2^-23
RTOL = {name: 8 * EPS32 for name in FUNCTIONS}
RTOL["gelu_tanh"] = 128 * EPS32  # measured 50 ulp: the condition number (module docstring)
RTOL["gelu"] = 192 * EPS32  # measured 144 ulp at x = -11.4 (module docstring)
ATOL = 1e-30

# A sweep of f32 inputs: large, tiny, negative, around 0 and 1, and the special values.
SWEEP = np.concatenate([
    np.geomspace(1e-30, 1e30, 200), -np.geomspace(1e-30, 1e30, 200),
    np.linspace(-12, 12, 241), [0.0, -0.0, 1.0, -1.0, 88.0, 89.0, -103.0, 1e-40,
                                np.inf, -np.inf, np.nan],
]).astype(np.float32)


def elementwise_kernel(name: str, dtype: str = "f32"):
    source = f'''
from tilec import {dtype}, tile

@tile
def apply(X: {dtype}[N], Y: {dtype}[N], BN=64):
    for n in grid(cdiv(N, BN)):
        Y[n * BN : +BN] = {name}(X[n * BN : +BN])
'''
    (function,) = load_file("test.tile", text=source).values()
    return function


GEMM = '''
from tilec import f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f32[N], alpha: f32,
         BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        x = alpha * acc + bias[n * BN : +BN]
        out = {body}
        C[m * BM : +BM, n * BN : +BN] = out.to(f16)
'''


def gemm_with(body: str):
    (function,) = load_file("gemm.tile", text=GEMM.format(body=body)).values()
    return function


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_lowers_to_its_op_and_verifies(name: str) -> None:
    kernel = elementwise_kernel(name).lower()
    verify(kernel)
    text = print_kernel(kernel)
    assert f"= tile.{name} " in text and "tile<f32,[64]>" in text, text


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_sixteen_bit_tiles_keep_their_dtype(dtype: str) -> None:
    text = print_kernel(elementwise_kernel("silu", dtype).lower())
    silu = next(line for line in text.splitlines() if "tile.silu" in line)
    assert silu.endswith(f": tile<{dtype},[64]>"), silu


@pytest.mark.parametrize("name", FUNCTIONS)
def test_cpu_interpreter_matches_float64(name: str) -> None:
    x = SWEEP.copy()
    y = np.full_like(x, np.nan)
    kernel = elementwise_kernel(name).lower()
    run_kernel(kernel, {"X": x, "Y": y})
    with np.errstate(all="ignore"):
        want = REFERENCE[f"tile.{name}"](x.astype(np.float64))
    # |got - want| <= rtol |want| + atol, NaN where the reference is NaN, and the infinity
    # the float64 result rounds to in f32.
    with np.errstate(all="ignore"):
        diff = np.abs(y.astype(np.float64) - want)
        rounded = want.astype(np.float32)  # beyond f32's range: the same infinity
        ok = ((diff <= RTOL[name] * np.abs(want) + ATOL)
              | (np.isnan(y) & np.isnan(want)) | (np.isinf(rounded) & (y == rounded)))
    bad = np.flatnonzero(~ok)
    assert not bad.size, [(float(x[i]), float(y[i]), float(want[i])) for i in bad[:8]]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_constant_folds(name: str) -> None:
    text = print_kernel(gemm_with(f"x * {name}(2.0)").lower())
    assert f"tile.{name}" not in text
    value = MATH_FUNCTIONS[name][1](2.0)
    assert repr(np.float32(value).item())[:6] in text or f"{value:.6}"[:6] in text, text


def test_a_constant_outside_the_domain_is_an_error() -> None:
    with pytest.raises(TileError) as info:
        gemm_with("x * log(-1.0)").lower()
    assert "log(-1.0) has no f32 value" in info.value.message
    assert "gemm.tile:" in str(info.value)


def test_epilogue_of_every_function_compiles_and_assembles(tmp_path) -> None:
    from tests.test_ptxas import PTXAS, assert_assembles
    if PTXAS is None:
        pytest.skip("ptxas is not on PATH")
    body = " + ".join(f"{name}(x)" for name in FUNCTIONS)
    function = gemm_with(body)
    ptx = function.ptx(arch="sm_80")
    for instruction in ("ex2.approx.ftz.f32", "lg2.approx.ftz.f32", "sqrt.rn.f32",
                        "rsqrt.approx.ftz.f32", "abs.f32", "tanh.approx.f32",
                        "rcp.approx.ftz.f32"):
        assert instruction in ptx, instruction
    assert_assembles(lambda arch: function.ptx(arch=arch), tmp_path)


def test_the_sample_shape_silu_epilogue_assembles_ragged(tmp_path) -> None:
    from tests.test_ptxas import PTXAS, assert_assembles
    if PTXAS is None:
        pytest.skip("ptxas is not on PATH")
    function = gemm_with("gelu_tanh(silu(x)) * sigmoid(x)")
    assert_assembles(lambda arch: function.ptx(arch=arch, M=1000, N=1003, K=77), tmp_path)


def test_the_gelu_tanh_reference_is_its_definition() -> None:
    """The float64 reference computes x sigmoid(2u), which equals 0.5 x (1 + tanh(u)) and
    does not cancel for x << 0; where the definition does not cancel, the two agree."""
    x = np.linspace(-3, 12, 301)
    definition = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(REFERENCE["tile.gelu_tanh"](x), definition, rtol=1e-12,
                               atol=1e-300)
    assert MATH_FUNCTIONS["gelu_tanh"][1](-2.5) == pytest.approx(
        float(REFERENCE["tile.gelu_tanh"](np.array(-2.5))), rel=1e-12)


def error_of(body: str) -> TileError:
    with pytest.raises(TileError) as info:
        gemm_with(body).lower()
    return info.value


@pytest.mark.parametrize("body, kind, message, fragment", [
    ("exp(x, x)", TileError, "exp() takes at most 1 arguments", "x)"),
    ("tanh()", TileError, "tanh() is missing its 'x' argument", "tanh"),
    ("sigmoid(y=x)", TileError, "sigmoid() has no parameter 'y'", "y=x"),
    ("silu(alpha)", TileTypeError, "silu() takes a tile, not an f32 scalar", "silu"),
    ("log(A)", TileTypeError, "log() takes a tile, not", "log"),
    ("erf2(x)", TileNameError, "unknown function 'erf2'", "erf2"),
])
def test_misuse_is_an_error_naming_the_place(body: str, kind: type, message: str,
                                             fragment: str) -> None:
    err = error_of(body)
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    assert message in err.message, str(err)
    rendered = str(err)
    assert "gemm.tile:12:" in rendered, rendered
    source_line, caret = rendered.split("\n")[1:3]
    assert caret.strip() == "^"
    assert source_line[caret.index("^"):].startswith(fragment), rendered


def test_a_user_name_cannot_hide_a_math_function() -> None:
    source = GEMM.format(body="x").replace("x = alpha", "exp = alpha").replace(
        "out = x", "out = exp")
    with pytest.raises(TileError) as info:
        load_file("gemm.tile", text=source)["gemm"].lower()
    assert "exp" in str(info.value)


def test_the_reference_flushes_what_the_gpu_math_cannot_return(tmp_path) -> None:
    """PTX's .ftz math cannot return a magnitude below f32's smallest normal: gelu(x) is -0.0
    on the GPU (and in the interpreter) once x << 0, where float64 holds a tiny negative
    number. The reference flushes the same, so a where() deciding on gelu(acc) < 0 agrees
    with every kernel (fuzzer seed 56, program 4210, failed its check by 0.18 before)."""
    values = REFERENCE["tile.gelu"](np.array([-15.0, -40.0, 3.0]))
    assert values[0] == 0 and np.signbit(values[0]) and values[1] == 0
    assert values[2] == pytest.approx(2.99595, rel=1e-5)  # untouched
    assert REFERENCE["tile.exp"](np.array([-200.0]))[0] == 0.0
    assert REFERENCE["tile.add"](np.array([1e-40]), np.array([0.0]))[0] == 1e-40  # exact ops
    program = tmp_path / "gelu_sign.py"
    program.write_text('''from __future__ import annotations

from tilec import bf16, f16, f32, tile


@tile
def f(A: f16[M, K], B: f16[K, N], C: bf16[M, N], BM=64, BN=16, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        c = C[m * BM : +BM, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = where(gelu(acc) < 0, c, 1.5).to(bf16)
''')
    from tilec.cli import main
    assert main(["run", str(program), "--shape", "M=17,N=27,K=88", "--stages", "3"]) == 0
