"""TMA's 64- and 32-byte swizzles on a compute capability 9.0 GPU (arch="sm_90a"): tiles whose
operand rows are not whole 128-byte spans load in the widest span they take, and wgmma reads
them through SW64 / SW32 descriptors; the results against float64 (16-bit), exactly (int8),
and within the fp8 and w8a16 bounds. A mismatch between the descriptors' layout and where TMA
put the data would give wrong numbers here, not an error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import gpu_unavailable_reason, has_gpu

from .test_hopper_gpu import SAMPLE_FUNCTIONS, run_and_check
from .test_int8_fp8_gpu import (FP8_F32, FP8_TOLERANCE, exact, fp8_operands, fp8_reference,
                                fp8_rel_error, int8_gemm, needs_fp8, operands)
from .test_w8a16_gpu import assert_within_bound, operands as w8a16_operands, w8a16

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("hopper"),  # tests/gpu/conftest.py
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

SHAPES = [(1000, 1003, 77), (2048, 3080, 1000)]
# B N-major of 208 columns (32-byte slabs), 160 or 224 (64), and a span asked for: BK 32 and
# 16 (A's rows 64 and 32 bytes), which stay on mma.sync unless it is, and BK 64.
TILES = [
    dict(BM=128, BN=208, BK=64, stages=4),
    dict(BM=128, BN=160, BK=64, stages=4, persistent=True),
    dict(BM=128, BN=224, BK=64, stages=3, cluster=2),
    dict(BM=128, BN=256, BK=32, stages=6, tma_swizzle=64),
    dict(BM=128, BN=96, BK=16, stages=8, tma_swizzle=32),
    dict(BM=128, BN=256, BK=64, stages=3, tma_swizzle=64, persistent=True),
    dict(BM=128, BN=256, BK=64, stages=3, tma_swizzle=32),
]


def ids(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tiles", TILES, ids=ids)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_16_bit_samples_in_every_span(shape, tiles, name, dtype):
    run_and_check(name, dtype, shape, **tiles)


@pytest.mark.parametrize("config", [dict(BM=128, BN=256, BK=64, stages=4),
                                    dict(BM=128, BN=128, BK=32, stages=6, persistent=True),
                                    dict(BM=128, BN=256, BK=128, stages=3, tma_swizzle=32)],
                         ids=ids)
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (333, 517, 4099), (2048, 2048, 2048)],
                         ids=lambda s: "x".join(map(str, s)))
def test_int8_in_every_span_is_exact(shape, config):
    m, n, k = shape
    a, b = operands(m, n, k)
    cq = torch.full((m, n), -2**31, dtype=torch.int32, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    function = int8_gemm()
    launch = function.prepare(a, b, cq, c, 0.5, arch="sm_90a", **config)
    assert launch.compiled.kernel.schedule.tiling.kind == "wgmma8"
    launch()
    torch.cuda.synchronize()
    assert np.array_equal(cq.cpu().numpy().astype(np.int64), exact(a, b))


@pytest.mark.parametrize("config", [dict(BM=128, BN=256, BK=64, stages=4, persistent=True),
                                    dict(BM=128, BN=128, BK=32, stages=6)], ids=ids)
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_fp8_in_64_and_32_byte_spans(shape, config):
    needs_fp8()
    m, n, k = shape
    kernel = load_file(Path("fp8.tile"), text=FP8_F32)["f"]
    a, b = fp8_operands(m, n, k, "f8e4m3")
    c = torch.full((m, n), float("nan"), device="cuda")
    launch = kernel.prepare(a, b, c, arch="sm_90a", **config)
    assert launch.compiled.kernel.schedule.tiling.kind == "wgmma8"
    launch()
    torch.cuda.synchronize()
    assert fp8_rel_error(c, fp8_reference(a, b)) < FP8_TOLERANCE["f32"]


@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("config", [dict(), dict(BK=32, stages=6),
                                    dict(BK=64, stages=4, persistent=True)], ids=ids)
@pytest.mark.parametrize("shape", [(127, 129, 96), (512, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_w8a16_at_its_default_bk_runs_on_the_register_form(shape, config, activations):
    """samples/w8a16.py with BK 64 (its default) or 32: the int8 weights' rows are 64 or 32
    bytes, in TMA's 64- or 32-byte swizzle, which the register form reads."""
    m, n, k = shape
    a, w, scale = w8a16_operands(m, n, k, activations)
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    launch = w8a16(activations).prepare(a, w, scale, c, arch="sm_90a", **config)
    schedule = launch.compiled.kernel.schedule
    assert schedule.swap.swapped and schedule.tiling.kind == "wgmma_rs"
    launch()
    torch.cuda.synchronize()
    assert_within_bound(c, a, w, scale, f"w8a16 {activations} {shape} {config}")
