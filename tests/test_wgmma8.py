"""8-bit operands on sm_90a's wgmma (the wgmma8 family: m64nNk32 .s8 / .e4m3 / .e5m2, TMA
fed, warp-specialized): which blocks it takes and why it declines the others (to the mma.sync
families), TMA's 128-byte swizzle on 1-byte elements against the descriptors' byte view, the
lowered kernels run in the executor at ragged sizes (int8 exact, fp8 against float64 of the
decoded values), and the instruction in the PTX. ptxas: tests/test_ptxas.py (HOPPER)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.families.products import FAMILIES, family_for
from tilec.families.tma_boxes import SWIZZLE_128B, swizzle_128b, tma_layout, tma_swizzle
from tilec.families.wgmma import descriptor_offsets
from tilec.families.wgmma8 import FAMILY as WGMMA8
from tilec.ir.schedule import OperandPlan
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline
from tilec.target import fp8
from tilec.target.layout import SmemLayout

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
HOPPER = Options(arch="sm_90a")


def operands(b_k_major: bool = True) -> tuple[OperandPlan, OperandPlan]:
    a = OperandPlan("A", "A", SmemLayout(128, 128), 16)
    b = OperandPlan("B", "B", SmemLayout(128, 128, transposed=b_k_major), 16)
    return a, b


@pytest.mark.parametrize("dtype", ["i8", "f8e4m3", "f8e5m2"])
def test_8_bit_tiles_take_wgmma8_on_sm_90a_where_it_applies(dtype: str) -> None:
    assert family_for(dtype, "ffma", (128, 256, 128), HOPPER, operands()).name == "wgmma8"
    # BK 64 and 32: rows of 64 and 32 bytes, in TMA's 64- and 32-byte swizzles.
    for bk in (64, 32):
        assert family_for(dtype, "ffma", (128, 256, bk), HOPPER, operands()).name == "wgmma8"
    fallback = "int8" if dtype == "i8" else "fp8"
    # BK 16 is half a k32 step; sm_90 has no wgmma.
    assert family_for(dtype, "ffma", (128, 256, 16), HOPPER, operands()).name == fallback
    assert family_for(dtype, "ffma", (128, 256, 128), Options(arch="sm_90"),
                      operands()).name == fallback
    assert family_for(dtype, "ffma", (128, 256, 128), HOPPER,
                      operands(b_k_major=False)).name == fallback


def test_the_reasons_it_declines() -> None:
    assert "MN-major" in WGMMA8.declined((128, 256, 128), HOPPER, operands(b_k_major=False))
    assert WGMMA8.declined((128, 256, 16), HOPPER, operands()) == (
        "BK=16 is not a multiple of 32 (32 bytes: TMA's narrowest swizzle span, and one k "
        "step)")
    assert WGMMA8.declined((128, 256, 128), HOPPER, operands()) is None
    assert [f.name for f in FAMILIES].index("wgmma8") < [f.name for f in FAMILIES].index("int8")


@pytest.mark.parametrize("span", [128, 64, 32])
def test_tma_swizzle_on_bytes_is_the_descriptors(span: int) -> None:
    """TMA's swizzles permute 16-byte chunks by row: on 1-byte elements the chunk is 16
    elements (Swizzle(3, 4, 3) for 128 bytes); the shared layout and the descriptors' byte
    view agree in every span."""
    assert swizzle_128b(2) == SWIZZLE_128B and str(swizzle_128b(1)) == "swizzle(3,4,3)"
    assert str(tma_swizzle(64, 1)) == "swizzle(2,4,3)" and str(tma_swizzle(32, 2)) == \
        "swizzle(1,3,3)"
    layout = tma_layout(SmemLayout(128, 128), 1, span)
    for k0 in (0, 32, 64, 96):
        offsets = descriptor_offsets(layout, "A", 64, k0, 64, 1)
        expected = [[layout.offset(64 + m, k0 + k) for k in range(32)] for m in range(64)]
        np.testing.assert_array_equal(offsets, expected)


def run_sample(name: str, consts: dict[str, Any], values: dict[str, Any]) -> Any:
    function = load_file(SAMPLES / f"{name}.py")[name]
    kernel = run_pipeline(function.lower(**consts), HOPPER).kernel
    assert kernel.schedule.tiling.kind == "wgmma8"
    run_kernel(kernel, values, ops=op_catalogue())
    return kernel


@pytest.mark.parametrize("consts", [dict(BM=128, BN=128, BK=128), dict(BM=256, BN=128, BK=128)],
                         ids=["128x128x128", "256x128x128"])
def test_int8_on_wgmma_is_exact_at_ragged_sizes(consts: dict[str, int]) -> None:
    rng = np.random.default_rng(6)
    m, n, k = 150, 70, 300  # K: two full BK steps and a ragged one (TMA zero-fills)
    a = rng.integers(-128, 128, size=(m, k)).astype(np.int8)
    b = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    a[0], b[0] = -128, -128
    values = {"A": a, "B": b, "Cq": np.full((m, n), -1, np.int32),
              "C": np.full((m, n), np.nan, np.float32), "scale": np.float32(0.5)}
    run_sample("int8_gemm", consts, values)
    exact = a.astype(np.int64) @ b.astype(np.int64).T
    np.testing.assert_array_equal(values["Cq"], exact)
    np.testing.assert_array_equal(values["C"], exact.astype(np.float32) * np.float32(0.5))


@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_fp8_on_wgmma_matches_float64_of_the_decoded_values(name: str) -> None:
    rng = np.random.default_rng(7)
    m, n, k = 150, 200, 300
    a = fp8.encode(rng.standard_normal((m, k)), name)
    b = fp8.encode(rng.standard_normal((n, k)), name)
    text = (SAMPLES / "fp8_gemm.py").read_text().replace("f8e4m3", name)
    function = load_file(SAMPLES / "fp8_gemm.py", text=text)["fp8_gemm"]
    kernel = run_pipeline(function.lower(BM=128, BN=128, BK=128), HOPPER).kernel
    assert kernel.schedule.tiling.kind == "wgmma8"
    values = {"A": a, "B": b, "C": np.zeros((m, n), np.float16), "scale_a": 2.0,
              "scale_b": 0.5}
    run_kernel(kernel, values, ops=op_catalogue())
    reference = (fp8.decode(a, name).astype(np.float64)
                 @ fp8.decode(b, name).astype(np.float64).T)
    error = np.linalg.norm(values["C"] - reference) / np.linalg.norm(reference)
    assert error < 1e-3, error


def test_the_ptx_issues_m64nNk32_per_32_bytes_of_k() -> None:
    int8 = load_file(SAMPLES / "int8_gemm.py")["int8_gemm"].ptx(arch="sm_90a", BK=128)
    lines = [line.strip() for line in int8.splitlines() if "wgmma.mma_async" in line]
    assert len(lines) == 4  # BK 128 / k32
    # .s8 takes no scale or transpose immediates: the descriptors, then scale-d.
    assert all(line.startswith("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 ")
               and re.search(r"\}, %rd\d+, %rd\d+, %p\d+;$", line) for line in lines), lines
    assert "cp.async.bulk.tensor" in int8 and ".version 8.0" in int8
    e4m3 = load_file(SAMPLES / "fp8_gemm.py")["fp8_gemm"].ptx(arch="sm_90a", BK=128)
    lines = [line.strip() for line in e4m3.splitlines() if "wgmma.mma_async" in line]
    assert lines and all("m64n128k32.f32.e4m3.e4m3 " in line and line.endswith(", 1, 1;")
                         for line in lines)
