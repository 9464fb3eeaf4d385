"""8-bit floats (f8e4m3, f8e5m2): the exact decoder tables, the encoder's rounding, the fp8
family (mma.sync m16n8k32 .e4m3/.e5m2 on sm_90 and sm_90a) run in the executor at ragged
sizes against float64 of the decoded values, the arch refusal and the frontend's errors,
host arrays as uint8 bits, and the PTX (ISA 8.4 header). ptxas: tests/test_ptxas.py; GPU:
tests/gpu/test_int8_fp8_gpu.py."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.families.products import family_for
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline
from tilec.runtime.arrays import as_array_arg
from tilec.target import fp8

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


# ------------------------------------------------------------------------------ formats

@pytest.mark.parametrize("bits, value", [
    (0x00, 0.0), (0x38, 1.0), (0x7E, 448.0), (0xFE, -448.0), (0x01, 2.0 ** -9),
    (0x07, 7 * 2.0 ** -9), (0x08, 2.0 ** -6), (0x3C, 1.5), (0x40, 2.0)])
def test_e4m3_values(bits: int, value: float) -> None:
    assert fp8.decode_table("f8e4m3")[bits] == value


@pytest.mark.parametrize("bits, value", [
    (0x00, 0.0), (0x3C, 1.0), (0x7B, 57344.0), (0x01, 2.0 ** -16), (0x04, 2.0 ** -14),
    (0x7C, np.inf), (0xFC, -np.inf), (0x3E, 1.5)])
def test_e5m2_values(bits: int, value: float) -> None:
    assert fp8.decode_table("f8e5m2")[bits] == value


def test_the_nan_patterns() -> None:
    """e4m3 ("fn"): only S.1111.111 is NaN, no infinities; e5m2: exponent 31 with a
    non-zero mantissa."""
    e4m3, e5m2 = fp8.decode_table("f8e4m3"), fp8.decode_table("f8e5m2")
    assert sorted(np.flatnonzero(np.isnan(e4m3))) == [0x7F, 0xFF]
    assert not np.isinf(e4m3).any()
    assert sorted(np.flatnonzero(np.isnan(e5m2))) == [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]


@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_the_tables_agree_with_ml_dtypes(name: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = np.arange(256, dtype=np.uint8)
    theirs = bits.view(getattr(ml_dtypes, fp8.ML_DTYPES_NAMES[name])).astype(np.float32)
    np.testing.assert_array_equal(fp8.decode(bits, name), theirs)


@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_encode_rounds_to_nearest_even_and_saturates(name: str) -> None:
    table = fp8.decode_table(name)
    bits = np.arange(256, dtype=np.uint8)
    finite = np.isfinite(table)
    np.testing.assert_array_equal(fp8.encode(table[finite], name), bits[finite])
    # Halfway between 1.0 and the next value: to the even pattern (1.0's).
    one = int(fp8.encode(np.array([1.0]), name)[0])
    step = float(table[one + 1]) - 1.0
    assert fp8.encode(np.array([1.0 + step / 2]), name)[0] == one
    assert fp8.encode(np.array([1.0 + 3 * step / 2]), name)[0] == one + 2
    assert table[fp8.encode(np.array([1e30]), name)[0]] == fp8.largest(name)
    assert table[fp8.encode(np.array([-1e30]), name)[0]] == -fp8.largest(name)


# ------------------------------------------------------------------------------ family

def test_fp8_tiles_take_the_fp8_family() -> None:
    """On sm_90 (and sm_90a with a warp grid given, which wgmma's warpgroups do not take);
    sm_90a's own choice for the block is wgmma8 (BK 64: TMA's 64-byte swizzle)."""
    for dtype in ("f8e4m3", "f8e5m2"):
        for options in (Options(arch="sm_90"), Options(arch="sm_90a", warps=(2, 4))):
            family = family_for(dtype, "ffma", (128, 128, 64), options)
            assert family.name == "fp8" and family.instruction == (16, 8, 32)
        assert family_for(dtype, "ffma", (128, 128, 64), Options(arch="sm_90a")).name == \
            "wgmma8"


F32_OUT = """
@tile
def f(A: f8e4m3[M, K], B: f8e4m3[N, K], C: f32[M, N], BM=64, BN=64, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
"""


def lowered(text: str):
    return load_file(Path("test.tile"), text)["f"]


@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("config", [dict(arch="sm_90"), dict(arch="sm_90a", stages=1),
                                    dict(arch="sm_90", swizzle="off", warps=(2, 2))],
                         ids=["sm_90", "sm_90a-1stage", "unswizzled"])
def test_the_lowered_kernel_matches_float64_of_the_decoded_values(name: str,
                                                                  config: dict) -> None:
    kernel = run_pipeline(lowered(F32_OUT.replace("f8e4m3", name)).lower(),
                          Options(**config)).kernel
    # sm_90a takes the 64x64x64 block on wgmma8 (TMA's 64-byte swizzle), in one stage.
    assert kernel.schedule.tiling.kind == ("wgmma8" if config["arch"] == "sm_90a" else "fp8")
    rng = np.random.default_rng(4)
    m, n, k = 70, 45, 100
    a = fp8.encode(rng.standard_normal((m, k)) * 4, name)
    b = fp8.encode(rng.standard_normal((n, k)) * 4, name)
    c = np.full((m, n), np.nan, np.float32)
    values = {"A": a, "B": b, "C": c}
    run_kernel(kernel, values, ops=op_catalogue())
    reference = (fp8.decode(a, name).astype(np.float64)
                 @ fp8.decode(b, name).astype(np.float64).T)
    # One f32 rounding per k32 instruction: a few f32 ulps of the sum's scale.
    error = np.abs(values["C"] - reference).max() / np.abs(reference).max()
    assert error < 1e-6, error


def test_the_sample_runs_in_the_interpreter_with_its_scales() -> None:
    function = load_file(SAMPLES / "fp8_gemm.py")["fp8_gemm"]
    kernel = run_pipeline(function.lower(), Options(arch="sm_90")).kernel
    rng = np.random.default_rng(8)
    m, n, k = 130, 70, 100
    a = fp8.encode(rng.standard_normal((m, k)), "f8e4m3")
    b = fp8.encode(rng.standard_normal((n, k)), "f8e4m3")
    values = {"A": a, "B": b, "C": np.zeros((m, n), np.float16), "scale_a": 0.5,
              "scale_b": 0.25}
    run_kernel(kernel, values, ops=op_catalogue())
    reference = 0.125 * (fp8.decode(a, "f8e4m3").astype(np.float64)
                         @ fp8.decode(b, "f8e4m3").astype(np.float64).T)
    error = np.linalg.norm(values["C"] - reference) / np.linalg.norm(reference)
    assert error < 1e-3, error


def test_fp8_arguments_are_uint8_bits() -> None:
    kernel = run_pipeline(lowered(F32_OUT).lower(), Options(arch="sm_90")).kernel
    a = np.zeros((4, 64), np.float32)
    with pytest.raises(TypeError, match="numpy uint8 holding f8e4m3 bits"):
        run_kernel(kernel, {"A": a, "B": np.zeros((4, 64), np.uint8),
                            "C": np.zeros((4, 4), np.float32)}, ops=op_catalogue())
    assert as_array_arg(np.zeros((4, 64), np.uint8), "A", "f8e4m3", 2).dtype == "f8e4m3"
    with pytest.raises(TypeError, match="expected dtype i8, got uint8"):
        as_array_arg(np.zeros((4, 64), np.uint8), "A", "i8", 2)


# ------------------------------------------------------------------------------ errors

def error_of(text: str, **options: Any) -> TileError:
    with pytest.raises(TileError) as info:
        lowered(text).ptx(**options)
    return info.value


@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
def test_fp8_on_sm_80_and_sm_86_is_refused_at_the_product_naming_the_target(arch: str) -> None:
    err = error_of(F32_OUT, arch=arch)
    text = str(err)
    assert err.loc is not None and err.loc.line == 7, text
    assert "8-bit float products need sm_89 or later" in err.message
    assert f"the target is {arch}" in err.message and "sm_90" in text
    source_line, caret = text.splitlines()[1:3]
    assert source_line[caret.index("^"):].startswith("@ B.T"), text


@pytest.mark.parametrize("edit, message", [
    (("C[m * BM : +BM, n * BN : +BN] = acc",
      "C[m * BM : +BM, n * BN : +BN] = acc + A[m * BM : +BM, 0 : +BN] * 2.0"),
     "a * b on an f8e4m3 tile [64,64]: 8-bit float tiles are multiplied, converted and "
     "stored, not computed on"),
    (("acc = zeros([BM, BN], f32)", "acc = zeros([BM, BN], f8e4m3)"),
     "tiles are made in f16, bf16, f32, i8 or i32, not f8e4m3"),
    (("C: f32[M, N]", "C: f8e4m3[M, N]"),
     "storing an f32 tile [64,64] into 'C', an f8e4m3 tensor"),
    (("B: f8e4m3[N, K]", "B: f8e5m2[N, K]"), "dot operands differ in dtype: f8e4m3 @ f8e5m2"),
    (("acc = zeros([BM, BN], f32)", "acc = zeros([BM, BN], i32)"),
     "f8e4m3 products accumulate in f32, not i32"),
])
def test_frontend_errors(edit: tuple[str, str], message: str) -> None:
    assert edit[0] in F32_OUT
    err = error_of(F32_OUT.replace(*edit), arch="sm_90")
    assert message in err.message, str(err)
    assert err.loc is not None and "^" in str(err)


def test_a_row_major_b_is_refused() -> None:
    text = F32_OUT.replace("B: f8e4m3[N, K]", "B: f8e4m3[K, N]").replace("B.T[k", "B[k")
    err = error_of(text, arch="sm_90")
    assert "8-bit float operand B ('B') is stored [K, N]" in err.message, str(err)


# ---------------------------------------------------------------------------------- PTX

def test_the_ptx_names_isa_8_4_and_the_e4m3_mma() -> None:
    function = load_file(SAMPLES / "fp8_gemm.py")["fp8_gemm"]
    # sm_90a with a warp grid given: mma.sync (wgmma8 takes the sample's block otherwise).
    for arch, options in (("sm_90", {}), ("sm_90a", {"warps": (2, 4)})):
        ptx = function.ptx(arch=arch, **options)
        assert f".version 8.4\n.target {arch}\n" in ptx
        mmas = [line for line in ptx.splitlines() if "mma.sync" in line]
        assert mmas and all("m16n8k32.row.col.f32.e4m3.e4m3.f32" in line for line in mmas)
    int8 = load_file(SAMPLES / "int8_gemm.py")["int8_gemm"]
    assert ".version 8.0\n" in int8.ptx(arch="sm_90")  # other families keep the target's


def test_the_bench_compiles_the_matmul_sample_for_e4m3_into_f16_without_spills(tmp_path) -> None:
    """``tilec bench --dtypes f8e4m3``: samples/matmul.py with e4m3 A and B, f32
    accumulation, f16 C, against torch._scaled_mm; every tuned tile assembles without
    spilling on sm_90a (64x64 warp tiles spill there: FP8_TUNED says why)."""
    import re
    import shutil
    import subprocess

    from tilec.benchmarking.cases import BENCH_TOLERANCE, Case
    from tilec.benchmarking.contenders import (CublasContender, TilecContender, TritonContender,
                                               sample_kernel)
    from tilec.benchmarking.tuning import FP8_TUNED
    from tilec.options import Spec, TensorSpec
    case = Case(4096, 4096, 4096, "f8e4m3")
    assert TilecContender({}, {}).out_dtype(case) == CublasContender(None).out_dtype(case) \
        == "f16"
    assert TritonContender(None).unsupported(case) is not None
    assert 0 < BENCH_TOLERANCE["f8e4m3"] <= 5e-3
    kernel = sample_kernel("f8e4m3", "f16")
    ptxas = shutil.which("ptxas")
    for problem, config in FP8_TUNED.items():
        compiled = kernel.compile(spec=Spec(tensors=(("B", TensorSpec(0, 16)),)),
                                  arch="sm_90a", **config)
        assert compiled.kernel.schedule.tiling.kind == "fp8", problem
        if ptxas is None:
            continue
        path = tmp_path / f"{problem}.ptx"
        path.write_text(compiled.ptx)
        done = subprocess.run([ptxas, "-v", "-arch=sm_90a", str(path), "-o",
                               str(path.with_suffix(".cubin"))], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert re.findall(r"(\d+) bytes spill stores", done.stderr) == ["0"], (problem,
                                                                              done.stderr)
