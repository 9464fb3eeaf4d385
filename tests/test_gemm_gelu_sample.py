"""samples/gemm_gelu.py, C = gelu(A @ B + bias) with f16 output: the lowered kernel (mma.sync
for sm_80, wgmma + TMA for sm_90a), run by the CPU executor, matches float64 at a ragged
size; ptxas takes it for sm_80, sm_86, sm_90 and sm_90a without spilling in the benchmark's
configurations."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_ptxas import ARCHS, PTXAS, RAGGED, run_ptxas

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "gemm_gelu.py"
HOPPER = dict(BM=128, BN=256, BK=64, stages=3)  # the wgmma tile the bench runs


def sample():
    return load_file(SAMPLE)["gemm_gelu"]


def gelu64(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2.0))


@pytest.mark.parametrize("arch, consts", [("sm_80", {}),
                                          ("sm_90a", dict(BM=128, BN=128, BK=64))])
def test_the_lowered_sample_matches_float64(arch, consts):
    kernel = run_pipeline(sample().lower(**consts), Options(arch=arch, stages=2)).kernel
    assert any(op.name == "tile.gelu" for op in kernel.walk())
    rng = np.random.default_rng(11)
    M, N, K = 150, 140, 70
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = (rng.standard_normal((K, N)) / 4).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float16)
    c = np.full((M, N), np.nan, dtype=np.float16)
    run_kernel(kernel, {"A": a, "B": b, "C": c, "bias": bias}, ops=op_catalogue())
    want = gelu64(a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64))
    # f16 output: half an f16 ulp (2^-11 relative) plus the f32 math's error.
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2 ** -10, atol=2 ** -24)


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("arch, options", [
    *((arch, {}) for arch in ARCHS),
    *((arch, dict(RAGGED)) for arch in ARCHS),
    ("sm_90a", HOPPER), ("sm_90a", {**HOPPER, **dict(RAGGED)}),
    ("sm_90a", dict(BM=128, BN=128, BK=64, stages=4)),
])
def test_ptxas_takes_the_sample_without_spilling(arch, options, tmp_path):
    path = tmp_path / f"{arch}.ptx"
    path.write_text(sample().ptx(arch=arch, **options), encoding="utf-8")
    result = run_ptxas(path, arch)
    assert result.returncode == 0, result.log
    assert "0 bytes spill stores" in result.log, result.log
