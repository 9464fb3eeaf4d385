"""Conversions from and to the 8-bit floats outside `@`: an fp8 tensor read in the epilogue
and widened (`R[...].to(f32)`), and fp8 outputs (`(acc * s).to(f8e4m3)` stored into an fp8
tensor). The CPU semantics (round to nearest even, saturating to the largest finite value,
NaN kept) against the fp8 tables, the kernels in the interpreter, the PTX and LLVM forms
and ptxas, the sm_80 / sm_86 refusal and the frontend's errors. GPU:
tests/gpu/test_fp8_conversions_gpu.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import round_to_dtype, run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.ir.types import F8E4M3, F8E5M2
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline
from tilec.target import fp8
from tilec.tools.checking import tolerance_for

from .test_ptxas import assert_assembles, assert_assembles_for_sm_90a

# X converted to fp8 (C8), the fp8 R widened (C32), and an fp8 output of the product (C).
CONVERSIONS = """from __future__ import annotations

from tilec import f8e4m3, f8e5m2, f16, f32, tile


@tile
def f(A: f16[M, K], B: f16[N, K], X: f32[M, N], R: f8e5m2[M, N], C8: f8e4m3[M, N],
      C32: f32[M, N], C: f8e5m2[M, N], s: f32, BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C8[m * BM : +BM, n * BN : +BN] = X[m * BM : +BM, n * BN : +BN].to(f8e4m3)
        C32[m * BM : +BM, n * BN : +BN] = R[m * BM : +BM, n * BN : +BN].to(f32)
        C[m * BM : +BM, n * BN : +BN] = (acc * s).to(f8e5m2)
"""
NAMES = {F8E4M3: "f8e4m3", F8E5M2: "f8e5m2"}


def conversions():
    return load_file(Path("conversions.py"), text=CONVERSIONS)["f"]


def special_values(name: str) -> np.ndarray:
    """Every finite value of the format, the points halfway between neighbours (ties),
    beyond the largest, infinities, NaN, signed zeros and values under the smallest
    subnormal."""
    table = fp8.decode_table(name).astype(np.float64)
    finite = np.unique(table[np.isfinite(table)])
    halfway = (finite[:-1] + finite[1:]) / 2
    largest = finite[-1]
    extra = [largest * 1.01, largest * 4, -largest * 3, np.inf, -np.inf, np.nan, 0.0, -0.0,
             finite[finite > 0][0] / 2, finite[finite > 0][0] / 3, 1e-30, -1e-30]
    return np.concatenate([finite, halfway, extra]).astype(np.float32)


# ------------------------------------------------------------------------- semantics

@pytest.mark.parametrize("dtype", [F8E4M3, F8E5M2])
def test_rounding_to_fp8_is_the_encoders_and_saturates(dtype) -> None:
    name = NAMES[dtype]
    values = special_values(name)
    rounded = round_to_dtype(dtype, values)
    expected = fp8.decode(fp8.encode(values, name), name)
    np.testing.assert_array_equal(rounded, expected)  # NaN where NaN
    largest = fp8.largest(name)
    assert list(round_to_dtype(dtype, np.float32([np.inf, -np.inf, 1e30]))) == \
        [largest, -largest, largest]
    # Ties to the even pattern: halfway between 1 and the next value goes down to 1.
    one_up = float(fp8.decode_table(name)[int(fp8.encode(np.array([1.0]), name)[0]) + 1])
    assert round_to_dtype(dtype, np.float32([(1 + one_up) / 2]))[0] == 1.0
    assert np.isnan(round_to_dtype(dtype, np.float32([np.nan]))[0])


def test_the_kernel_in_the_interpreter_converts_both_ways() -> None:
    kernel = run_pipeline(conversions().lower(), Options(arch="sm_90")).kernel
    rng = np.random.default_rng(3)
    m, n, k = 70, 333, 50
    x = rng.standard_normal((m, n)).astype(np.float32) * 64
    specials = special_values("f8e4m3")
    x.flat[:specials.size] = specials
    r = np.arange(m * n, dtype=np.uint32).astype(np.uint8).reshape(m, n)  # every pattern
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    values = {"A": a, "B": b, "X": x, "R": r, "C8": np.zeros((m, n), np.uint8),
              "C32": np.zeros((m, n), np.float32), "C": np.zeros((m, n), np.uint8), "s": 0.5}
    run_kernel(kernel, values, ops=op_catalogue())
    np.testing.assert_array_equal(values["C8"], fp8.encode(x, "f8e4m3"))
    np.testing.assert_array_equal(values["C32"], fp8.decode(r, "f8e5m2"))
    reference = 0.5 * (a.astype(np.float64) @ b.astype(np.float64).T)
    out = fp8.decode(values["C"], "f8e5m2")
    error = np.linalg.norm(out - reference) / np.linalg.norm(reference)
    assert 0.01 < error < 0.14, error  # e5m2's rounding: up to 2^-3 of each value


def test_an_fp8_output_takes_the_fp8_tolerance_and_an_fp8_input_f16s() -> None:
    assert tolerance_for(conversions().lower()) == 0.14  # C is written in e5m2
    product = load_file(Path(__file__).resolve().parents[1] / "samples" / "fp8_gemm.py")
    assert tolerance_for(product["fp8_gemm"].lower()) == 2e-3  # reads fp8, writes f16


# ------------------------------------------------------------------------------- PTX

def test_the_ptx_converts_with_the_pair_forms_and_moves_bytes(tmp_path) -> None:
    ptx = conversions().ptx(arch="sm_90")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "cvt.rn.satfinite.e5m2x2.f32" in ptx
    assert "cvt.rn.f16x2.e5m2x2" in ptx
    assert "ld.global.u8" in ptx and "st.global.u8" in ptx
    assert_assembles(lambda arch: conversions().ptx(arch=arch), tmp_path,
                     archs=("sm_90", "sm_90a"))


def test_the_llvm_backend_converts_with_nvvms_intrinsics(tmp_path) -> None:
    ptx = conversions().ptx(arch="sm_90", backend="llvm")
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and "cvt.rn.f16x2.e5m2x2" in ptx
    assert_assembles(lambda arch: conversions().ptx(arch=arch, backend="llvm"), tmp_path,
                     archs=("sm_90",))


def test_an_fp8_output_of_wgmma8_is_tma_stored_and_assembles(tmp_path) -> None:
    """The fp8 sample's product on sm_90a's tuned 8-bit tile with an e4m3 C: staged two
    bytes a write (st.shared.b16 of a prmt-packed pair) in TMA's 128-byte swizzle, a
    128-column box per slab, and TMA-stored."""
    text = (Path(__file__).resolve().parents[1] / "samples" / "fp8_gemm.py").read_text()
    text = text.replace("C: f16[M, N]", "C: f8e4m3[M, N]").replace(".to(f16)", ".to(f8e4m3)")
    function = load_file(Path("fp8_out.py"), text=text)["fp8_gemm"]
    tiles = dict(BM=128, BN=256, BK=128)
    config = dict(arch="sm_90a", stages=4, persistent=True)
    kernel = run_pipeline(function.lower(**tiles), Options(**config)).kernel
    assert kernel.schedule.tiling.kind == "wgmma8"
    epilogue = kernel.schedule.epilogue
    assert (epilogue.via, epilogue.box, epilogue.slabs) == ("tma", (128, 128), 2), epilogue
    ptx = function.ptx(**tiles, **config)
    assert "st.shared.b16" in ptx and "prmt.b32" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert_assembles_for_sm_90a(ptx, tmp_path, "fp8_out")


# ---------------------------------------------------------------------------- errors

@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
@pytest.mark.parametrize("text, converted", [
    ("C8[m * BM : +BM, n * BN : +BN] = X[m * BM : +BM, n * BN : +BN].to(f8e4m3)",
     "converting f32 to f8e4m3 (cvt with e4m3x2)"),
    ("C32[m * BM : +BM, n * BN : +BN] = R[m * BM : +BM, n * BN : +BN].to(f32)",
     "converting f8e5m2 to f32 (cvt with e5m2x2)"),
])
def test_older_targets_are_refused_at_the_conversion(arch, text, converted) -> None:
    others = [row for row in CONVERSIONS.splitlines() if "] = " in row and text not in row]
    program = CONVERSIONS
    for row in others:  # keep only the conversion under test
        program = program.replace(row + "\n", "")
    with pytest.raises(TileError) as info:
        load_file(Path("conversions.py"), text=program)["f"].ptx(arch=arch)
    shown = str(info.value)
    assert f"{converted} needs sm_89 or later; the target is {arch}" in shown, shown
    source_line, caret = shown.splitlines()[1:3]
    line = next(number for number, row in enumerate(program.splitlines(), 1) if text in row)
    assert f"conversions.py:{line}:" in shown
    assert source_line[caret.index("^"):].startswith("to(")


@pytest.mark.parametrize("edit, message", [
    (("(acc * s).to(f8e5m2)", "acc * s"),
     "storing an f32 tile [64,64] into 'C', an f8e5m2 tensor"),
    (("(acc * s).to(f8e5m2)", "(acc * s).to(f8e5m2) * 2.0"),
     "a * b on an f8e5m2 tile [64,64]: 8-bit float tiles are multiplied, converted and "
     "stored, not computed on"),
    (("acc = zeros([BM, BN], f32)", "acc = zeros([BM, BN], f8e4m3)"),
     "tiles are made in f16, bf16, f32, i8 or i32, not f8e4m3"),
])
def test_misuses_are_refused_with_a_caret(edit, message) -> None:
    assert edit[0] in CONVERSIONS
    with pytest.raises(TileError) as info:
        load_file(Path("conversions.py"),
                  text=CONVERSIONS.replace(*edit))["f"].ptx(arch="sm_90")
    shown = str(info.value)
    assert message in shown and "^" in shown, shown


def test_a_number_stored_into_an_fp8_tensor_is_converted_from_f32() -> None:
    program = CONVERSIONS.replace("(acc * s).to(f8e5m2)", "1000000.0")
    kernel = run_pipeline(load_file(Path("conversions.py"), text=program)["f"].lower(),
                          Options(arch="sm_90")).kernel
    casts = [op for op in kernel.walk() if op.name == "tile.cast"
             and op.result.type.dtype == F8E5M2]
    assert casts, "the constant goes in f32, then converted"
    values = {"A": np.zeros((3, 5), np.float16), "B": np.zeros((4, 5), np.float16),
              "X": np.zeros((3, 4), np.float32), "R": np.zeros((3, 4), np.uint8),
              "C8": np.zeros((3, 4), np.uint8), "C32": np.zeros((3, 4), np.float32),
              "C": np.zeros((3, 4), np.uint8), "s": 1.0}
    run_kernel(kernel, values, ops=op_catalogue())
    assert (fp8.decode(values["C"], "f8e5m2") == fp8.largest("f8e5m2")).all()  # saturated
