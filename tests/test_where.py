"""where(cond, a, b) (issue 13): elementwise selection by a comparison of tiles, scalars and
numbers (``<`` ``<=`` ``>`` ``>=`` ``==`` ``!=``), comparisons combined with and / or / not.

Each comparison is one ``tile.where``; and / or / not become nested selects. The CPU
interpreter selects as setp + selp do (IEEE comparisons: false with NaN, ``!=`` true), which
is numpy's ``where`` of numpy's comparisons; the lowered GEMM epilogue, run by the CPU
executor, matches float64; ptxas takes the PTX on every target; misuse is an error with a
caret, and a run-time `if` says to use where.
"""
from __future__ import annotations

import operator

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError, TileShapeError, TileTypeError
from tilec.families.catalogue import op_catalogue
from tilec.ir import print_kernel, verify
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_ptxas import PTXAS, assert_assembles

COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
               "==": operator.eq, "!=": operator.ne}
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 1e-40, -3.0],
                   dtype=np.float32)

ELEMENTWISE = '''
from tilec import bf16, f16, f32, tile

@tile
def select(X: {dtype}[N], Y: {dtype}[N], Z: {dtype}[N], BN=64):
    for n in grid(cdiv(N, BN)):
        x = X[n * BN : +BN]
        y = Y[n * BN : +BN]
        Z[n * BN : +BN] = {body}
'''


def elementwise(body: str, dtype: str = "f32"):
    return load_file("select.tile", text=ELEMENTWISE.format(body=body, dtype=dtype))["select"]


def pairs() -> tuple[np.ndarray, np.ndarray]:
    """Every pair of the special values (NaN, infinities, signed zeros, a subnormal)."""
    x, y = np.meshgrid(SPECIAL, SPECIAL)
    return x.ravel().copy(), y.ravel().copy()


def run_elementwise(body: str, x: np.ndarray, y: np.ndarray, dtype: str = "f32") -> np.ndarray:
    z = np.full_like(x, np.nan)
    run_kernel(elementwise(body, dtype).lower(), {"X": x, "Y": y, "Z": z})
    return z


@pytest.mark.parametrize("op", list(COMPARISONS))
def test_each_comparison_lowers_to_one_where_and_selects_as_numpy(op: str) -> None:
    text = print_kernel(elementwise(f"where(x {op} y, x, y)").lower())
    assert text.count("= tile.where ") == 1, text
    x, y = pairs()
    got = run_elementwise(f"where(x {op} y, x, y)", x, y)
    with np.errstate(invalid="ignore"):
        want = np.where(COMPARISONS[op](x, y), x, y)
    np.testing.assert_array_equal(got, want)  # NaN in the same places, signed zeros too
    assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("body, numpy_form", [
    ("where(x > 0 and y > 0, x, y)", lambda x, y: np.where((x > 0) & (y > 0), x, y)),
    ("where(x > 0 or y < 0, x, y)", lambda x, y: np.where((x > 0) | (y < 0), x, y)),
    ("where(not x > y, x, y)", lambda x, y: np.where(~(x > y), x, y)),
    ("where(not (x < 0 or y != y) and x <= 1, 2.0, -y)",
     lambda x, y: np.where(~((x < 0) | (y != y)) & (x <= 1), 2.0, -y)),
    ("where(x > 0, x, 0.01 * x)", lambda x, y: np.where(x > 0, x, np.float32(0.01) * x)),
    ("where(0.5 >= x, 1.0, 0.0)", lambda x, y: np.where(0.5 >= x, 1.0, 0.0)),
])
def test_combined_conditions_select_as_numpy(body, numpy_form) -> None:
    x, y = pairs()
    got = run_elementwise(body, x, y)
    with np.errstate(invalid="ignore"):
        want = numpy_form(x, y).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_constant_parts_of_a_condition_fold() -> None:
    text = print_kernel(elementwise("where(BN > 32 and x > y, x, y)").lower())
    assert text.count("tile.where") == 1, text
    text = print_kernel(elementwise("where(BN < 32 and x > y, x, y)").lower())
    assert "tile.where" not in text, text  # False and ...: y
    text = print_kernel(elementwise("where(x > y or BN == 64, x, y)").lower())
    assert "tile.where" not in text, text  # ... or True: x


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_sixteen_bit_tiles_keep_their_dtype(dtype: str) -> None:
    text = print_kernel(elementwise("where(x < y, x, 0.0)", dtype).lower())
    line = next(line for line in text.splitlines() if "tile.where" in line)
    assert line.endswith(f": tile<{dtype},[64]>") and '{compare = lt}' in line, line
    if dtype == "f16":
        x = np.array([1, -2, 3, np.nan], dtype=np.float16)
        y = np.array([2, -3, 3, 0], dtype=np.float16)
        z = np.full_like(x, 7)
        run_kernel(elementwise("where(x < y, x, 0.0)", dtype).lower(),
                   {"X": x, "Y": y, "Z": z})
        np.testing.assert_array_equal(z, np.array([1, 0, 0, 0], dtype=np.float16))


GEMM = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f32[N], lo: f32,
         BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        x = acc + bias[n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = {body}
'''
GEMM_BODY = "where(x > lo and x < 2.0, x, where(x != x, 0.0, 0.125 * x)).to(f16)"


def gemm(body: str = GEMM_BODY):
    return load_file("gemm_where.py", text=GEMM.format(body=body))["gemm"]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_lowered_epilogue_matches_float64(arch: str) -> None:
    consts = dict(BM=128, BN=128, BK=64) if arch == "sm_90a" else {}
    kernel = run_pipeline(gemm().lower(**consts), Options(arch=arch, stages=2)).kernel
    wheres = [op for op in kernel.walk() if op.name == "tile.where"]
    assert len(wheres) == 3 and all(op.result.type.layout is not None for op in wheres)
    rng = np.random.default_rng(7)
    M, N, K = 150, 140, 70
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (K, N)).astype(np.float16)
    bias = (rng.integers(-64, 64, N) / 16 + 1 / 32).astype(np.float32)  # no ties at lo, 2
    c = np.full((M, N), np.nan, dtype=np.float16)
    lo = -1.0
    run_kernel(kernel, {"A": a, "B": b, "C": c, "bias": bias, "lo": np.float32(lo)},
               ops=op_catalogue())
    x = a.astype(np.float64) @ b.astype(np.float64) + bias
    want = np.where((x > lo) & (x < 2.0), x, 0.125 * x)
    np.testing.assert_allclose(c, want.astype(np.float16), rtol=1e-3, atol=0)
    assert (np.where((x > lo) & (x < 2.0), 0, 1)).sum() > 1000  # both sides are taken


def test_ptxas_takes_where_on_every_target(tmp_path) -> None:
    if PTXAS is None:
        pytest.skip("ptxas is not on PATH")
    function = gemm()
    ptx = function.ptx(arch="sm_80")
    for instruction in ("setp.gt.f32", "setp.lt.f32", "setp.neu.f32", "selp.f32"):
        assert instruction in ptx, instruction
    assert_assembles(lambda arch: function.ptx(arch=arch, M=1000, N=1003, K=77), tmp_path)
    assert_assembles(lambda arch: function.ptx(arch=arch, BM=128, BN=128, BK=64), tmp_path,
                     archs=("sm_90a",))


def test_the_ptx_names_the_source_line_of_where() -> None:
    """Provenance: the .loc before each select is the where(...) call's line and column."""
    ptx = gemm().ptx(arch="sm_80")
    column = GEMM.format(body=GEMM_BODY).splitlines()[11].index("where(x != x") + 1
    lines = ptx.splitlines()
    selp = next(i for i, line in enumerate(lines) if "selp.f32" in line
                and lines[i - 1].strip().startswith("setp.neu"))
    loc = next(line.strip() for line in reversed(lines[:selp]) if ".loc" in line)
    assert loc == f".loc 1 12 {column}", loc


def error_of(body: str) -> TileError:
    with pytest.raises(TileError) as info:
        gemm(body).lower()
    return info.value


@pytest.mark.parametrize("body, kind, message, fragment", [
    ("where(x, x, 0.0).to(f16)", TileTypeError,
     "where() takes a comparison as its condition, not an f32 tile", "x, x"),
    ("where(x > 0, A, 0.0).to(f16)", TileTypeError,
     "where() selects tiles, numbers or f32 scalars, not the tensor 'A'", "A, 0.0"),
    ("where(x > M, x, 0.0).to(f16)", TileTypeError,
     "where() compares tiles, numbers or f32 scalars, not an i32 scalar", "M, x"),
    ("where(x > 0, x, A[0 : +32, 0 : +16].to(f32)).to(f16)", TileShapeError,
     "where()'s tiles do not broadcast to one shape", "where"),
    ("where(x.to(f16) > x.to(bf16), x, x).to(f16)", TileTypeError,
     "dtypes differ: f16 and bf16", "> x"),
    ("where(lo > 0, lo, 1.0)", TileTypeError,
     "where() selects between tiles: here the condition and both values are scalars", "where"),
    ("where(x > 0, x)", TileError, "where() is missing its 'b' argument", "where"),
    ("x < 0", TileTypeError, "`<` takes compile-time constants", "< 0"),
])
def test_misuse_is_an_error_naming_the_place(body, kind, message, fragment) -> None:
    err = error_of(body)
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    assert message in err.message, str(err)
    rendered = str(err)
    assert "gemm_where.py:12:" in rendered, rendered
    source_line, caret = rendered.split("\n")[1:3]
    assert caret.strip() == "^"
    assert source_line[caret.index("^"):].startswith(fragment), rendered


def test_a_run_time_if_points_at_where() -> None:
    source = GEMM.format(body="x.to(f16)").replace(
        "        C[m * BM", "        if x > lo:\n            x = 2.0 * x\n        C[m * BM")
    with pytest.raises(TileError) as info:
        load_file("gemm_where.py", text=source)["gemm"].lower()
    rendered = str(info.value)
    assert "`if` cannot branch on an f32 tile [32,32], known only when the kernel runs" in rendered
    assert "where(x > 0, a, b)" in rendered
    source_line, caret = rendered.split("\n")[1:3]
    assert source_line[caret.index("^"):].startswith("> lo"), rendered


@pytest.mark.parametrize("expression, message, hint", [
    ("x if x > 0 else 0.0", "conditional expressions", "where(c, a, b)"),
    ("where((x > 0) & (x < 1), x, 0.0)", "bitwise operators", "and / or / not"),
])
def test_python_spellings_of_selection_point_at_where(expression, message, hint) -> None:
    with pytest.raises(TileError) as info:
        gemm(f"({expression}).to(f16)").lower()
    assert message in str(info.value) and hint in str(info.value), str(info.value)


def test_where_verifies_its_operands() -> None:
    kernel = elementwise("where(x > y, x, y)").lower()
    verify(kernel)
    op = next(op for op in kernel.walk() if op.name == "tile.where")
    op.attrs["compare"] = "lgt"
    with pytest.raises(Exception, match="unknown comparison"):
        verify(kernel)


INTEGER_WHERE = '''from __future__ import annotations
from tilec import f32, i8, i32, tile

@tile
def gemm(A: i8[M, K], B: i8[N, K], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], i32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = where({cond}, {a}, 0.0).to(f32)
'''


@pytest.mark.parametrize("cond, a, fragment", [("acc > 0", "acc.to(f32)", "acc > 0"),
                                               ("acc.to(f32) > 0", "acc", "acc, 0.0")])
def test_an_integer_tile_in_where_asks_for_a_conversion(cond, a, fragment) -> None:
    """where() takes float tiles, as every tile operation does: an i32 accumulator is an
    error at the operand (it once reached the IR check as an internal compiler error)."""
    function = load_file("w.py", text=INTEGER_WHERE.format(cond=cond, a=a))["gemm"]
    with pytest.raises(TileTypeError) as info:
        function.lower()
    text = str(info.value)
    assert "arithmetic on tiles is float arithmetic" in text, text
    assert "x.to(f32)" in text and fragment in text, text
