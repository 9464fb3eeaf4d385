"""The CPU and the GPU path check the same things (one binding, the same option checks, the
same arrays refused, the numerics f32_math asks for), and sizes that cannot run are clear
errors naming the size (bug classes 7 and 8 of issue 12)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.cli import main
from tilec.cpu.interpreter import round_tf32
from tilec.errors import TileError
from tilec.kernel import load_file

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
SMALL = {"BM": 32, "BN": 32, "BK": 16}


@pytest.fixture
def matmul():
    return load_file(SAMPLES / "matmul.py")["matmul"]


def operands(m=40, n=24, k=40, dtype=np.float16, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    return a, b, np.zeros((m, n), np.float32)


# -- one binding for both paths --------------------------------------------------------------

@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_an_extra_positional_argument_is_refused(matmul, device):
    a, b, c = operands()
    with pytest.raises(TypeError, match="3 arguments expected"):
        matmul(a, b, c, c, device=device, **SMALL)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_an_argument_given_twice_is_refused(matmul, device):
    a, b, c = operands()
    with pytest.raises(TypeError, match="'A' given twice"):
        matmul(a, b, c, A=a.copy(), device=device, **SMALL)


def test_keyword_arguments_still_bind_on_the_cpu(matmul):
    a, b, c = operands()
    matmul(a, B=b, C=c, device="cpu", **SMALL)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3,
                               atol=1e-3)


# -- the options are checked on the CPU as on the GPU ---------------------------------------

@pytest.mark.parametrize("options, error, match", [
    ({"stages": 0}, ValueError, "stages"),
    ({"warps": (3, 5)}, TileError, "does not divide among 3x5 warps"),
    ({"BM": 256, "BN": 256, "BK": 128, "stages": 4}, TileError, "shared memory"),
    ({"f32_math": "tf16"}, ValueError, "f32_math"),
])
def test_options_the_compile_refuses_are_refused_on_the_cpu(matmul, options, error, match):
    a, b, c = operands()
    with pytest.raises(error, match=match):
        matmul(a, b, c, device="cpu", **{**SMALL, **options})
    assert not c.any()  # refused before running


def test_a_negative_stride_is_refused_on_the_cpu_as_on_the_gpu(matmul):
    a, b, c = operands()
    with pytest.raises(ValueError, match="negative stride"):
        matmul(a[::-1], b, c, device="cpu", **SMALL)


def test_tf32_rounds_the_cpu_products_as_the_tensor_cores_do():
    sgemm = load_file(SAMPLES / "sgemm.py")["sgemm"]
    a, b, _ = operands(64, 64, 64, dtype=np.float32, seed=1)
    exact, tf32 = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
    consts = {"BM": 64, "BN": 64, "BK": 16}
    sgemm(a, b, exact, device="cpu", **consts)
    sgemm(a, b, tf32, device="cpu", f32_math="tf32", **consts)
    rounded = round_tf32(a).astype(np.float64) @ round_tf32(b).astype(np.float64)
    np.testing.assert_allclose(tf32, rounded, rtol=1e-5, atol=1e-4)
    assert np.abs(tf32 - exact).max() > 1e-3  # the rounding is visible


def test_round_tf32_keeps_ten_mantissa_bits_ties_away():
    one_and_half_ulp = np.float32(1 + 2**-11)  # halfway between 1 and 1 + 2**-10
    assert round_tf32(np.array([one_and_half_ulp]))[0] == np.float32(1 + 2**-10)
    assert np.isnan(round_tf32(np.array([np.nan], np.float32))[0])


# -- sizes that cannot run -------------------------------------------------------------------

@pytest.mark.parametrize("value, error", [
    (float("inf"), TypeError), (1.5, TypeError), ("4096", TypeError), (True, TypeError),
    (2**31, ValueError), (-1, ValueError),
])
def test_a_size_that_cannot_run_is_a_clear_error(matmul, value, error):
    with pytest.raises(error, match=r"size M="):
        matmul.ptx(M=value, **SMALL)


def test_the_largest_i32_size_compiles(matmul):
    assert ".entry" in matmul.ptx(M=2**31 - 1, **SMALL)
    assert ".entry" in matmul.ptx(M=np.int64(4096), **SMALL)


@pytest.mark.parametrize("verb, shape", [("compile", "M=2147483648"),
                                         ("run", "M=2147483648,N=1,K=1")])
def test_the_cli_refuses_sizes_past_i32(capsys, verb, shape):
    extra = ["--cpu"] if verb == "run" else []
    with pytest.raises(SystemExit) as exit_:
        main([verb, str(SAMPLES / "matmul.py"), *extra, "--shape", shape])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "2147483648" in err and "32-bit" in err and "Traceback" not in err
