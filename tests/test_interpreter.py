"""The CPU interpreter against float64 numpy references, on kernels built with the Builder."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

from tilec.cpu.interpreter import InterpreterError, run_kernel
from tilec.ir import (BF16, F16, F32, I32, Block, Builder, DType, IRError, Kernel, OpDef,
                      Param, ScalarType, TensorType, TileType, Value, find_grid, register_op,
                      require_grid, verify)

I32_SCALAR = ScalarType(I32)
BF16_NAN_BITS = 0x7FC0


# ----------------------------------------------------------------------------------------
# kernel building

def new_kernel(name: str, params: list[Param], symbols: list[str]) -> tuple[Kernel, Builder]:
    body = Block()
    for param in params:
        body.add_arg(param.type, param.name)
    for symbol in symbols:
        body.add_arg(I32_SCALAR, symbol)
    return Kernel(name, params, symbols, {}, body), Builder(body)


def const(b: Builder, value: int) -> Value:
    return b.value("arith.constant", [], I32_SCALAR, value=value)


def build_matmul(in_dtype: DType, out_dtype: DType, bm: int, bn: int, bk: int, *,
                 transpose_b: bool = False, epilogue: bool = False) -> Kernel:
    """C = A @ B tiled BM x BN over a grid, looping over K by BK. ``transpose_b``: B is given
    as [N,K] and read through ``tensor.transpose``. ``epilogue``: C = relu(alpha * A @ B +
    beta * C + bias[None, :]) with f32 bias and scalars."""
    b_shape = ("N", "K") if transpose_b else ("K", "N")
    params = [Param("A", TensorType(in_dtype, ("M", "K"))),
              Param("B", TensorType(in_dtype, b_shape)),
              Param("C", TensorType(out_dtype, ("M", "N")))]
    if epilogue:
        params += [Param("bias", TensorType(F32, ("N",))), Param("alpha", ScalarType(F32)),
                   Param("beta", ScalarType(F32))]
    kernel, b = new_kernel("matmul", params, ["M", "N", "K"])
    arg = {p.name: kernel.param_value(p.name) for p in params}
    M, N, K = (kernel.symbol_value(s) for s in ("M", "N", "K"))

    grid_m = b.value("arith.cdiv", [M, const(b, bm)], I32_SCALAR)
    grid_n = b.value("arith.cdiv", [N, const(b, bn)], I32_SCALAR)
    grid = b.op("tile.grid", [grid_m, grid_n], [I32_SCALAR, I32_SCALAR],
                hints=["pid_m", "pid_n"])
    pid_m, pid_n = grid.results
    row = b.value("arith.mul", [pid_m, const(b, bm)], I32_SCALAR, "row")
    col = b.value("arith.mul", [pid_n, const(b, bn)], I32_SCALAR, "col")
    b_tensor = arg["B"]
    if transpose_b:
        b_tensor = b.value("tensor.transpose", [b_tensor], TensorType(in_dtype, ("K", "N")))

    acc_type = TileType(F32, (bm, bn))
    acc0 = b.value("tile.full", [], acc_type, "acc0", shape=[bm, bn], value=0.0)
    loop_body = Block()
    k = loop_body.add_arg(I32_SCALAR, "k")
    acc = loop_body.add_arg(acc_type, "acc")
    loop = b.op("scf.for", [const(b, 0), K, const(b, bk), acc0], [acc_type],
                {"step_const": bk}, [loop_body], hints=["acc_out"])
    with b.at(loop_body):
        a_tile = b.value("tile.load", [arg["A"], row, k], TileType(in_dtype, (bm, bk)),
                         shape=[bm, bk])
        b_tile = b.value("tile.load", [b_tensor, k, col], TileType(in_dtype, (bk, bn)),
                         shape=[bk, bn])
        b.op("scf.yield", [b.value("tile.dot", [a_tile, b_tile, acc], acc_type)])
    result = loop.result

    if epilogue:
        alpha = b.value("tile.splat", [arg["alpha"]], acc_type, shape=[bm, bn])
        beta = b.value("tile.splat", [arg["beta"]], acc_type, shape=[bm, bn])
        c_old = b.value("tile.load", [arg["C"], row, col], TileType(out_dtype, (bm, bn)),
                        shape=[bm, bn])
        if out_dtype != F32:
            c_old = b.value("tile.cast", [c_old], acc_type, dtype=F32)
        bias = b.value("tile.load", [arg["bias"], col], TileType(F32, (bn,)), shape=[bn])
        bias_rows = b.value("tile.broadcast", [bias], acc_type)
        result = b.value("tile.mul", [alpha, result], acc_type)
        result = b.value("tile.add", [result, b.value("tile.mul", [beta, c_old], acc_type)],
                         acc_type)
        result = b.value("tile.add", [result, bias_rows], acc_type)
        result = b.value("tile.relu", [result], acc_type)
    if out_dtype != F32:
        result = b.value("tile.cast", [result], TileType(out_dtype, (bm, bn)), dtype=out_dtype)
    b.op("tile.store", [arg["C"], row, col, result])
    verify(kernel)
    return kernel


# ----------------------------------------------------------------------------------------
# data and references (independent of the module under test)

def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def random_operand(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType
                   ) -> tuple[np.ndarray, np.ndarray]:
    """An argument array of ``dtype`` and its exact float64 values."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == BF16:
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # any bf16 values will do
        return bits, bf16_values(bits)
    array = x.astype(np.float16 if dtype == F16 else np.float32)
    return array, array.astype(np.float64)


def poisoned(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    if dtype == BF16:
        return np.full(shape, BF16_NAN_BITS, np.uint16)
    return np.full(shape, np.nan, np.float16 if dtype == F16 else np.float32)


def values_of(array: np.ndarray, dtype: DType) -> np.ndarray:
    return bf16_values(array) if dtype == BF16 else array.astype(np.float64)


def round_reference(x: float, bits: int) -> float:
    """``x`` rounded to ``bits`` significant bits, nearest even (normal range only): Python's
    round() on a power-of-two-scaled float is exact and ties to even."""
    if x == 0 or not math.isfinite(x):
        return x
    _, exponent = math.frexp(x)
    return round(math.ldexp(x, bits - exponent)) * 2.0 ** (exponent - bits)


def assert_close(out: np.ndarray, ref: np.ndarray, tol: float) -> None:
    assert np.all(np.isfinite(out)), "some outputs were not written (still NaN)"
    if ref.size == 0 or not np.any(ref):
        np.testing.assert_array_equal(out, ref)
        return
    error = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert error < tol, f"relative Frobenius error {error:.3g} >= {tol}"


def tolerance(*dtypes: DType) -> float:
    return 1e-2 if BF16 in dtypes else 2e-3


# ----------------------------------------------------------------------------------------
# matmul

SHAPES = [(1, 1, 1), (7, 9, 5), (127, 129, 65), (64, 64, 32)]
DTYPE_PAIRS = [(F16, F32), (F16, F16), (BF16, F32), (BF16, BF16), (F32, F32)]


@pytest.mark.parametrize("in_dtype,out_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matmul(in_dtype: DType, out_dtype: DType, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(m * 1000 + n + k)
    kernel = build_matmul(in_dtype, out_dtype, 32, 32, 16)
    a, a64 = random_operand(rng, (m, k), in_dtype)
    b, b64 = random_operand(rng, (k, n), in_dtype)
    c = poisoned((m, n), out_dtype)
    run_kernel(kernel, {"A": a, "B": b, "C": c})
    assert_close(values_of(c, out_dtype), a64 @ b64, tolerance(in_dtype, out_dtype))


@pytest.mark.parametrize("m,n,k", [(0, 5, 3), (4, 0, 3), (4, 5, 0), (0, 0, 0)])
def test_matmul_empty_dims(m: int, n: int, k: int) -> None:
    kernel = build_matmul(F16, F32, 16, 16, 16)
    a = np.ones((m, k), np.float16)
    b = np.ones((k, n), np.float16)
    c = poisoned((m, n), F32)
    run_kernel(kernel, [a, b, c])
    # K = 0: every program runs no K step and stores its zero accumulator.
    np.testing.assert_array_equal(c, np.zeros((m, n), np.float32))


def test_matmul_tile_sizes_that_fit_exactly_and_not() -> None:
    rng = np.random.default_rng(7)
    a, a64 = random_operand(rng, (48, 40), F16)
    b, b64 = random_operand(rng, (40, 24), F16)
    for tiles in [(16, 8, 8), (64, 64, 64), (32, 16, 24)]:
        c = poisoned((48, 24), F32)
        run_kernel(build_matmul(F16, F32, *tiles), {"A": a, "B": b, "C": c})
        assert_close(c.astype(np.float64), a64 @ b64, 2e-3)


@pytest.mark.parametrize("in_dtype,out_dtype", [(F16, F16), (F16, F32), (BF16, BF16)])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 9, 5), (127, 129, 65)])
def test_epilogue(in_dtype: DType, out_dtype: DType, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(m + n + k)
    kernel = build_matmul(in_dtype, out_dtype, 32, 32, 16, epilogue=True)
    a, a64 = random_operand(rng, (m, k), in_dtype)
    b, b64 = random_operand(rng, (k, n), in_dtype)
    c, c64 = random_operand(rng, (m, n), out_dtype)
    bias = rng.standard_normal(n).astype(np.float32)
    alpha, beta = 0.75, -1.5
    ref = np.maximum(alpha * (a64 @ b64) + beta * c64 + bias.astype(np.float64)[None, :], 0)
    run_kernel(kernel, {"A": a, "B": b, "C": c, "bias": bias, "alpha": alpha, "beta": beta})
    out = values_of(c, out_dtype)
    assert np.all(out >= 0)
    assert_close(out, ref, tolerance(in_dtype, out_dtype))


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 9, 5), (127, 129, 65)])
def test_transposed_b(dtype: DType, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(3)
    kernel = build_matmul(dtype, F32, 32, 32, 16, transpose_b=True)
    a, a64 = random_operand(rng, (m, k), dtype)
    b_nk, b64 = random_operand(rng, (n, k), dtype)
    c = poisoned((m, n), F32)
    run_kernel(kernel, {"A": a, "B": b_nk, "C": c})
    assert_close(c.astype(np.float64), a64 @ b64.T, tolerance(dtype))


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_strided_views(dtype: DType) -> None:
    m, n, k = 37, 45, 29
    rng = np.random.default_rng(11)
    big_a, big_a64 = random_operand(rng, (m + 6, k + 9), dtype)
    b_nk, b_nk64 = random_operand(rng, (n, k), dtype)  # C-contiguous; its .T is [K,N]
    a, a64 = big_a[3:3 + m, 5:5 + k], big_a64[3:3 + m, 5:5 + k]
    sentinel = np.uint16(0xC0E0) if dtype == BF16 else np.float16(-7.0)  # -7 either way
    big_c = np.full((m + 2, 2 * n + 1), sentinel)
    c = big_c[1:m + 1, 1::2]
    c[...] = poisoned(c.shape, dtype)
    run_kernel(build_matmul(dtype, dtype, 16, 16, 16), {"A": a, "B": b_nk.T, "C": c})
    assert_close(values_of(c, dtype), a64 @ b_nk64.T, tolerance(dtype))
    untouched = np.ones(big_c.shape, bool)
    untouched[1:m + 1, 1::2] = False
    assert np.all(big_c[untouched] == sentinel)

    # A transposed view as the output: C is the [N,M] buffer's .T.
    c_nm = poisoned((n, m), dtype)
    run_kernel(build_matmul(dtype, dtype, 16, 16, 16), {"A": a, "B": b_nk.T, "C": c_nm.T})
    assert_close(values_of(c_nm.T, dtype), a64 @ b_nk64.T, tolerance(dtype))


def test_bf16_as_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(5)
    a = rng.standard_normal((33, 20)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((20, 17)).astype(ml_dtypes.bfloat16)
    big_c = np.full((33, 40), np.nan, ml_dtypes.bfloat16)
    c = big_c[:, 3:37:2]
    run_kernel(build_matmul(BF16, BF16, 16, 16, 16), {"A": a, "B": b, "C": c})
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert_close(c.astype(np.float64), ref, 1e-2)


def build_vector_add(with_grid: bool) -> Kernel:
    """Y += X by tiles of 8, over a 1-D grid or (without tile.grid) as program 0 alone."""
    params = [Param("X", TensorType(F32, ("L",))), Param("Y", TensorType(F32, ("L",)))]
    kernel, b = new_kernel("vector_add", params, ["L"])
    x, y = kernel.param_value("X"), kernel.param_value("Y")
    if with_grid:
        size = b.value("arith.cdiv", [kernel.symbol_value("L"), const(b, 8)], I32_SCALAR)
        pid = b.op("tile.grid", [size], [I32_SCALAR]).result
    else:
        pid = const(b, 0)
    offset = b.value("arith.mul", [pid, const(b, 8)], I32_SCALAR)
    tile = TileType(F32, (8,))
    total = b.value("tile.add", [b.value("tile.load", [x, offset], tile, shape=[8]),
                                 b.value("tile.load", [y, offset], tile, shape=[8])], tile)
    b.op("tile.store", [y, offset, total])
    verify(kernel)
    return kernel


def test_one_d_grid_and_kernel_without_grid() -> None:
    xs = np.arange(21, dtype=np.float32)
    ys = np.ones(21, np.float32)
    run_kernel(build_vector_add(with_grid=True), {"X": xs, "Y": ys})
    np.testing.assert_array_equal(ys, xs + 1)
    ys = np.zeros(21, np.float32)
    run_kernel(build_vector_add(with_grid=False), [xs, ys])
    np.testing.assert_array_equal(ys, np.where(np.arange(21) < 8, xs, 0))


def test_the_grid_query_finds_the_top_level_grid_or_says_there_is_none() -> None:
    gridded, single = build_vector_add(with_grid=True), build_vector_add(with_grid=False)
    grid = find_grid(gridded)
    assert grid is not None and grid.name == "tile.grid" and len(grid.results) == 1
    assert require_grid(gridded) is grid
    assert find_grid(single) is None
    with pytest.raises(IRError, match="kernel 'vector_add' has no top-level tile.grid"):
        require_grid(single)


# ----------------------------------------------------------------------------------------
# GPU semantics of single ops

def build_copy(tile_shape: tuple[int, int]) -> Kernel:
    """Y[si:, sj:] = load(X, li, lj) with tile shape ``tile_shape``."""
    params = [Param("X", TensorType(F32, ("R", "S"))), Param("Y", TensorType(F32, ("P", "Q"))),
              *(Param(name, I32_SCALAR) for name in ("li", "lj", "si", "sj"))]
    kernel, b = new_kernel("copy", params, ["R", "S", "P", "Q"])
    value = kernel.param_value
    tile = b.value("tile.load", [value("X"), value("li"), value("lj")],
                   TileType(F32, tile_shape), shape=list(tile_shape))
    b.op("tile.store", [value("Y"), value("si"), value("sj"), tile])
    verify(kernel)
    return kernel


@pytest.mark.parametrize("load_at", [(0, 0), (-1, -2), (2, 1), (-10, 0), (5, 5), (-3, -3)])
@pytest.mark.parametrize("store_at", [(0, 0), (-1, 2), (3, -2), (10, 10), (-4, -4)])
def test_load_fills_zero_and_store_skips_out_of_bounds(
        load_at: tuple[int, int], store_at: tuple[int, int]) -> None:
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    y = np.full((5, 4), -1.0, np.float32)
    run_kernel(build_copy((4, 4)), {"X": x, "Y": y, "li": load_at[0], "lj": load_at[1],
                                    "si": store_at[0], "sj": store_at[1]})
    expected = np.full((5, 4), -1.0, np.float32)
    for i in range(4):
        for j in range(4):
            li, lj = load_at[0] + i, load_at[1] + j
            loaded = x[li, lj] if 0 <= li < 3 and 0 <= lj < 4 else 0.0
            si, sj = store_at[0] + i, store_at[1] + j
            if 0 <= si < 5 and 0 <= sj < 4:
                expected[si, sj] = loaded
    np.testing.assert_array_equal(y, expected)


def build_elementwise(dtype: DType, names: list[str], cast_to: DType | None = None) -> Kernel:
    """OUT[i, :] = op_i(X, Y) for each op name (unary ops ignore Y), each optionally cast."""
    n = 64
    out_dtype = cast_to or dtype
    params = [Param("X", TensorType(dtype, (n,))), Param("Y", TensorType(dtype, (n,))),
              Param("OUT", TensorType(out_dtype, (len(names), n)))]
    kernel, b = new_kernel("elementwise", params, [])
    tile = TileType(dtype, (n,))
    x = b.value("tile.load", [kernel.param_value("X"), const(b, 0)], tile, shape=[n])
    y = b.value("tile.load", [kernel.param_value("Y"), const(b, 0)], tile, shape=[n])
    for row, name in enumerate(names):
        operands = [x] if name in ("tile.neg", "tile.relu", "tile.cast") else [x, y]
        attrs = {"dtype": out_dtype} if name == "tile.cast" else {}
        rtype = TileType(out_dtype, (n,)) if name == "tile.cast" else tile
        result = b.op(name, operands, [rtype], attrs).result
        if cast_to is not None and name != "tile.cast":
            result = b.value("tile.cast", [result], TileType(cast_to, (n,)), dtype=cast_to)
        as_row = b.value("tile.reshape", [result], TileType(out_dtype, (1, n)))
        b.op("tile.store", [kernel.param_value("OUT"), const(b, row), const(b, 0), as_row])
    verify(kernel)
    return kernel


ELEMENTWISE: dict[str, Callable[[float, float], float]] = {
    "tile.add": lambda a, b: a + b, "tile.sub": lambda a, b: a - b,
    "tile.mul": lambda a, b: a * b, "tile.div": lambda a, b: a / b,
    "tile.max": max, "tile.min": min, "tile.neg": lambda a, b: -a,
    "tile.relu": lambda a, b: max(a, 0.0),
}


@pytest.mark.parametrize("dtype,bits", [(F16, 11), (BF16, 8)])
def test_elementwise_is_correctly_rounded_to_the_tile_dtype(dtype: DType, bits: int) -> None:
    rng = np.random.default_rng(1)
    x, x64 = random_operand(rng, (64,), dtype)
    y, y64 = random_operand(rng, (64,), dtype)
    out = poisoned((len(ELEMENTWISE), 64), dtype)
    run_kernel(build_elementwise(dtype, list(ELEMENTWISE)), {"X": x, "Y": y, "OUT": out})
    # Every exact result (in float64, itself within half an f64 ulp) rounded once.
    for row, fn in enumerate(ELEMENTWISE.values()):
        expected = [round_reference(fn(a, b), bits) for a, b in zip(x64, y64)]
        np.testing.assert_array_equal(values_of(out[row], dtype), expected)


def test_nan_propagates_through_max_min_relu() -> None:
    x = np.array([np.nan, 1.0, -2.0, np.nan] * 16, np.float32)
    y = np.array([1.0, np.nan, 5.0, np.nan] * 16, np.float32)
    names = ["tile.max", "tile.min", "tile.relu"]
    out = np.zeros((3, 64), np.float32)
    run_kernel(build_elementwise(F32, names), {"X": x, "Y": y, "OUT": out})
    np.testing.assert_array_equal(out[0], np.maximum(x, y))
    np.testing.assert_array_equal(out[1], np.minimum(x, y))
    np.testing.assert_array_equal(out[2], np.maximum(x, 0))
    assert np.isnan(out[2][0])


def test_cast_rounds_to_nearest_even() -> None:
    one_ulp16, one_ulp_bf = 2.0 ** -10, 2.0 ** -7
    x = np.zeros(64, np.float32)
    x[:6] = [1 + one_ulp16 / 2, 1 + 3 * one_ulp16 / 2, 1 + one_ulp16 / 2 + 2 ** -20,
             70000.0, -0.0, 65519.0]
    x[6:12] = [1 + one_ulp_bf / 2, 1 + 3 * one_ulp_bf / 2, 3.4e38, -0.0, np.inf,
               np.uint32(0x7F800001).view(np.float32)]
    y = np.zeros(64, np.float32)
    out16 = poisoned((1, 64), F16)
    run_kernel(build_elementwise(F32, ["tile.cast"], F16), {"X": x, "Y": y, "OUT": out16})
    np.testing.assert_array_equal(out16[0, :6], [1.0, 1 + 2 * one_ulp16, 1 + one_ulp16,
                                                 np.inf, -0.0, 65504.0])
    assert np.signbit(out16[0, 4])
    out_bf = poisoned((1, 64), BF16)
    run_kernel(build_elementwise(F32, ["tile.cast"], BF16), {"X": x, "Y": y, "OUT": out_bf})
    got = bf16_values(out_bf[0, 6:12])
    np.testing.assert_array_equal(got[:5], [1.0, 1 + 2 * one_ulp_bf, np.inf, -0.0, np.inf])
    assert np.signbit(got[3]) and np.isnan(got[5])


def test_bf16_scalars_and_constants_are_rounded_once() -> None:
    """1 + 2**-8 + 2**-30 is just above a bf16 tie: rounding it to f32 first would land on the
    tie and then round to even (1.0); one rounding gives 1 + 2**-7."""
    value = 1 + 2 ** -8 + 2 ** -30
    params = [Param("s", ScalarType(BF16)), Param("OUT", TensorType(BF16, (2,)))]
    kernel, b = new_kernel("bf16_scalar", params, [])
    tile = TileType(BF16, (1,))
    from_param = b.value("tile.splat", [kernel.param_value("s")], tile, shape=[1])
    from_const = b.value("tile.full", [], tile, shape=[1], value=value)
    b.op("tile.store", [kernel.param_value("OUT"), const(b, 0), from_param])
    b.op("tile.store", [kernel.param_value("OUT"), const(b, 1), from_const])
    verify(kernel)
    out = poisoned((2,), BF16)
    run_kernel(kernel, {"s": value, "OUT": out})
    np.testing.assert_array_equal(bf16_values(out), [1 + 2 ** -7] * 2)


def build_scalar_ops(ops: list[str], dtype: DType = I32) -> Kernel:
    """OUT[i] = f32(op_i(a, b)) through splat and cast."""
    scalar = ScalarType(dtype)
    params = [Param("a", scalar), Param("b", scalar),
              Param("OUT", TensorType(F32, (len(ops),)))]
    kernel, b = new_kernel("scalars", params, [])
    for i, name in enumerate(ops):
        value = b.value(name, [kernel.param_value("a"), kernel.param_value("b")], scalar)
        tile = b.value("tile.splat", [value], TileType(dtype, (1,)), shape=[1])
        if dtype != F32:
            tile = b.value("tile.cast", [tile], TileType(F32, (1,)), dtype=F32)
        b.op("tile.store", [kernel.param_value("OUT"), const(b, i), tile])
    verify(kernel)
    return kernel


INT_OPS = {"arith.add": lambda a, b: a + b, "arith.sub": lambda a, b: a - b,
           "arith.mul": lambda a, b: a * b, "arith.floordiv": lambda a, b: a // b,
           "arith.cdiv": lambda a, b: -(-a // b), "arith.mod": lambda a, b: a % b,
           "arith.min": min, "arith.max": max}


@pytest.mark.parametrize("a,b", [(7, 2), (8, 2), (0, 5), (1, 1), (129, 32), (-7, 2)])
def test_integer_scalar_ops(a: int, b: int) -> None:
    out = np.full(len(INT_OPS), np.nan, np.float32)
    run_kernel(build_scalar_ops(list(INT_OPS)), {"a": a, "b": b, "OUT": out})
    np.testing.assert_array_equal(out, [fn(a, b) for fn in INT_OPS.values()])


def test_integer_scalars_wrap_like_i32_and_division_by_zero_fails() -> None:
    out = np.zeros(2, np.float32)
    run_kernel(build_scalar_ops(["arith.add", "arith.mul"]),
               {"a": 2 ** 30, "b": 2 ** 30, "OUT": out})
    np.testing.assert_array_equal(out, [-2 ** 31, 0])  # 2**31 and 2**60 wrapped
    with pytest.raises(InterpreterError, match="arith.cdiv.*division by zero"):
        run_kernel(build_scalar_ops(["arith.cdiv"]), {"a": 1, "b": 0, "OUT": out[:1]})


def test_float_scalar_ops_round_to_f32() -> None:
    ops = ["arith.add", "arith.mul", "arith.div", "arith.max"]
    out = np.zeros(len(ops), np.float32)
    a, b = 1.0, 3.0
    run_kernel(build_scalar_ops(ops, F32), {"a": a, "b": b, "OUT": out})
    expected = [np.float32(4.0), np.float32(3.0), np.float32(1 / 3), np.float32(3.0)]
    np.testing.assert_array_equal(out, expected)


# ----------------------------------------------------------------------------------------
# the dispatch table

def _double(state: Any, op: Any, operands: list[Any]) -> list[Any]:
    return [operands[0] * 2]


def test_a_registered_op_runs_its_evaluate() -> None:
    opdef = OpDef("testinterp.double", "2 * a", 1, 1, pure=True, evaluate=_double)
    register_op(opdef)
    register_op(opdef)  # the same definition again: fine
    with pytest.raises(ValueError, match="already defined"):
        register_op(OpDef("testinterp.double", "2 * a", 1, 1,
                          evaluate=lambda state, op, operands: []))
    with pytest.raises(ValueError, match="already defined"):
        register_op(OpDef("frag.mma", "not the built-in one", 3, 1))

    params = [Param("X", TensorType(F32, (4,)))]
    kernel, b = new_kernel("double", params, [])
    x = kernel.param_value("X")
    tile = b.value("tile.load", [x, const(b, 0)], TileType(F32, (4,)), shape=[4])
    b.op("tile.store", [x, const(b, 0), b.value("testinterp.double", [tile], tile.type)])
    verify(kernel)
    xs = np.arange(4, dtype=np.float32)
    run_kernel(kernel, [xs])
    np.testing.assert_array_equal(xs, [0, 2, 4, 6])


def _wrong_shape(state: Any, op: Any, operands: list[Any]) -> list[Any]:
    return [np.zeros(3, np.float32)]


def test_op_without_semantics_and_bad_semantics_are_reported() -> None:
    register_op(OpDef("testinterp.unknown", "no semantics", 1, 1))
    register_op(OpDef("testinterp.wrong_shape", "returns the wrong shape", 1, 1,
                      evaluate=_wrong_shape))
    cases = [("testinterp.unknown", "no semantics: its op definition has no evaluate"),
             ("testinterp.wrong_shape", r"semantics produced float32\[3\] for a tile<f32,\[4\]>")]
    for name, message in cases:
        kernel, b = new_kernel("bad", [Param("X", TensorType(F32, (4,)))], [])
        tile = b.value("tile.load", [kernel.param_value("X"), const(b, 0)],
                       TileType(F32, (4,)), shape=[4])
        b.value(name, [tile], tile.type)
        verify(kernel)
        with pytest.raises(InterpreterError, match=f"{name}: {message}"):
            run_kernel(kernel, [np.zeros(4, np.float32)])


# ----------------------------------------------------------------------------------------
# argument errors

def matmul_args(m: int = 4, n: int = 7, k: int = 5) -> dict[str, Any]:
    return {"A": np.zeros((m, k), np.float16), "B": np.zeros((k, n), np.float16),
            "C": np.zeros((m, n), np.float32)}


def with_arg(name: str, value: Any) -> dict[str, Any]:
    args = matmul_args()
    args[name] = value
    return args


def without_arg(name: str) -> dict[str, Any]:
    args = matmul_args()
    del args[name]
    return args


def read_only_c() -> dict[str, Any]:
    args = matmul_args()
    args["C"].flags.writeable = False
    return args


ARGUMENT_ERRORS = [
    (with_arg("A", np.zeros((4, 5), np.float32)), TypeError,
     r"argument 'A': expected dtype f16 \(numpy float16\), got float32"),
    (with_arg("C", np.zeros((4, 7), np.float64)), TypeError,
     r"argument 'C': expected dtype f32 \(numpy float32\), got float64"),
    (with_arg("A", [[0.0] * 5] * 4), TypeError, "argument 'A': expected a numpy array"),
    (with_arg("B", np.zeros((5, 7, 1), np.float16)), ValueError,
     r"argument 'B': expected rank 2 for tensor<f16,\[K,N\]>, got shape \(5, 7, 1\)"),
    (with_arg("C", np.zeros((3, 7), np.float32)), ValueError,
     r"symbol 'M' is bound inconsistently: argument 'A' \(dim 0\) gives M=4 but argument "
     r"'C' \(dim 0\) gives M=3"),
    (with_arg("B", np.zeros((6, 7), np.float16)), ValueError,
     r"symbol 'K' .*argument 'A' \(dim 1\) gives K=5 but argument 'B' \(dim 0\) gives K=6"),
    (without_arg("C"), TypeError, "missing argument\\(s\\) 'C'"),
    ({**matmul_args(), "D": np.zeros(1)}, TypeError, "unexpected argument\\(s\\) 'D'"),
    (list(matmul_args().values())[:2], TypeError, "takes 3 arguments \\(A, B, C\\), got 2"),
    (np.zeros(3), TypeError, "must be a dict by parameter name or a sequence"),
    (read_only_c(), ValueError, "argument 'C': the kernel stores into it but the array is "
                                "read-only"),
]


@pytest.mark.parametrize("args,error,message", ARGUMENT_ERRORS)
def test_argument_errors(args: Any, error: type, message: str) -> None:
    kernel = build_matmul(F16, F32, 16, 16, 16)
    with pytest.raises(error, match=message):
        run_kernel(kernel, args)


def test_bf16_argument_errors_name_the_accepted_dtypes() -> None:
    kernel = build_matmul(BF16, F32, 16, 16, 16)
    args = {"A": np.zeros((4, 5), np.float16), "B": np.zeros((5, 7), np.uint16),
            "C": np.zeros((4, 7), np.float32)}
    with pytest.raises(TypeError, match=r"argument 'A': expected dtype bf16 \(numpy uint16 "
                                        r"holding bf16 bits.*\), got float16"):
        run_kernel(kernel, args)


@pytest.mark.parametrize("dtype, raw, large", [("bf16", np.uint16, 2.0 ** 100),
                                               ("f8e4m3", np.uint8, 448.0),
                                               ("f8e5m2", np.uint8, 57344.0)])
def test_a_tensor_of_raw_bits_reads_and_writes_values(dtype: str, raw: type,
                                                      large: float) -> None:
    """bf16 and fp8 tensors hold bits; tiles their values in float32: a write encodes, a
    read decodes, and both land in the caller's array through strided views."""
    from tilec.cpu.interpreter import TensorRef
    values = np.array([1.0, -0.5, 0.0, 3.5, -2.0 ** -6, large, -large], np.float32)
    caller = np.zeros(2 * len(values), raw)
    tensor = TensorRef(caller[::2], DType.parse(dtype), "T")
    tensor.write((slice(None),), values)
    assert caller[1::2].tolist() == [0] * len(values)  # the gaps untouched
    assert caller[::2].tolist() != [0] * len(values)
    np.testing.assert_array_equal(tensor.read((slice(None),)), values)


def test_symbols_argument() -> None:
    kernel = build_matmul(F16, F32, 16, 16, 16)
    run_kernel(kernel, matmul_args(), symbols={"M": 4, "N": 7})
    with pytest.raises(ValueError, match=r"symbol 'N' is bound inconsistently: symbols= gives "
                                         r"N=8 but argument 'B' \(dim 1\) gives N=7"):
        run_kernel(kernel, matmul_args(), symbols={"N": 8})
    with pytest.raises(ValueError, match="has no shape symbol 'Z'"):
        run_kernel(kernel, matmul_args(), symbols={"Z": 1})
    with pytest.raises(ValueError, match="'M' must be a non-negative int"):
        run_kernel(kernel, matmul_args(), symbols={"M": -1})


def test_unbound_symbol_and_fixed_dims() -> None:
    params = [Param("X", TensorType(F32, (4, "S")))]
    kernel, b = new_kernel("fixed", params, ["S", "T"])
    verify(kernel)
    with pytest.raises(ValueError, match=r"argument 'X': dim 0 must be 4 for "
                                         r"tensor<f32,\[4,S\]>, got shape \(3, 2\)"):
        run_kernel(kernel, [np.zeros((3, 2), np.float32)], symbols={"T": 1})
    with pytest.raises(ValueError, match="symbol 'T' is not bound"):
        run_kernel(kernel, [np.zeros((4, 2), np.float32)])
    run_kernel(kernel, [np.zeros((4, 2), np.float32)], symbols={"T": 1})


def test_scalar_argument_errors() -> None:
    kernel = build_matmul(F16, F32, 16, 16, 16, epilogue=True)
    good = {**matmul_args(), "bias": np.zeros(7, np.float32), "alpha": 1.0, "beta": 0}
    run_kernel(kernel, good)
    for value, message in [("1.0", "expected a number for f32, got str"),
                           (True, "expected a number for f32, got bool"),
                           (np.ones(1), "expected a number for f32, got ndarray")]:
        with pytest.raises(TypeError, match=f"argument 'alpha': {message}"):
            run_kernel(kernel, {**good, "alpha": value})
    ints = build_scalar_ops(["arith.add"])
    out = np.zeros(1, np.float32)
    with pytest.raises(TypeError, match="argument 'a': expected an int for i32, got float"):
        run_kernel(ints, {"a": 1.5, "b": 1, "OUT": out})
    with pytest.raises(ValueError, match="argument 'b': 2147483648 does not fit in i32"):
        run_kernel(ints, {"a": 1, "b": 2 ** 31, "OUT": out})
