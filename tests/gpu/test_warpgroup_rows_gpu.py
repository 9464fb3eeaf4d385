"""Consumer warpgroups of 128 rows (warpgroup_rows=128: two m64 wgmmas a k16 step, each on
accumulators of its own) on a compute capability 9.0 GPU, against float64: cuBLAS's 256x128
cooperative tile (two warpgroups), one 128-row warpgroup a 128x128 tile, and pingpong on
128x128 tiles (each warpgroup a whole tile), one tile a block and persistent, clusters of two,
stream-K, the matmul samples (f32 C stored directly, gemm's fused epilogue and 16-bit C through
the TMA store's staging tile), f16 and bf16, square and ragged sizes, and batched programs
(samples/bmm.py) with f32 and 16-bit C. Each run checks that the kernel it ran has 128-row
warpgroups, so a silent fallback does not pass for them."""
from __future__ import annotations

import pytest

from tilec.runtime.driver import gpu_unavailable_reason, has_gpu

from .test_batched_gpu import TOLERANCE as BATCHED_TOLERANCE
from .test_batched_gpu import bmm, check, operands
from .test_hopper_gpu import ARCH, SAMPLE_FUNCTIONS, Case, sample

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("hopper"),  # tests/gpu/conftest.py
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

ROWS = dict(warpgroup_rows=128)
PINGPONG = dict(persistent=True, consumers="pingpong")
# 1000x1003x77: ragged edges, one whole K step and a ragged one, fewer tiles than SMs;
# 2048x3072x1000: several tiles a persistent block (uneven), 16 K steps; 4096^3.
SHAPES = [(1000, 1003, 77), (2048, 3072, 1000), (4096, 4096, 4096)]
SCHEDULES = {
    "256x128": dict(BM=256, stages=4),
    "256x128-persistent": dict(BM=256, stages=4, persistent=True, raster_group=16),
    "256x128-cluster": dict(BM=256, stages=4, persistent=True, cluster=2),
    "128x128-one-warpgroup": dict(BM=128, stages=4),
    "128x128-pingpong": dict(BM=128, stages=4, raster_group=16, **PINGPONG),
    "128x128-pingpong-cluster": dict(BM=128, stages=3, cluster=2, **PINGPONG),
}


def run_and_check(name: str, dtype: str, shape: tuple[int, int, int], **options) -> None:
    function = sample(name, dtype)
    case = Case(name, dtype, *shape)
    options = dict(arch=ARCH, BN=128, BK=64, **ROWS, **options)
    ref = case.reference()
    function(*case.args(), **options)
    case.check(ref)
    compiled = function.prepare(*case.args(), **options).compiled
    assert compiled.kernel.schedule.roles.warpgroup_rows == 128
    assert "wgmma.mma_async" in compiled.ptx and "cp.async.bulk.tensor" in compiled.ptx


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "x".join(map(str, s)))
def test_samples(shape, schedule, name, dtype):
    run_and_check(name, dtype, shape, **SCHEDULES[schedule])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("schedule", ["256x128-persistent", "128x128-pingpong"])
def test_4096_cubed(schedule, dtype):
    run_and_check("gemm_epilogue", dtype, SHAPES[2], **SCHEDULES[schedule])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (300, 520, 1000)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("schedule", [dict(BM=256), dict(BM=128, **PINGPONG)],
                         ids=["256x128", "pingpong"])
def test_one_stage(schedule, shape, dtype):
    run_and_check("matmul", dtype, shape, stages=1, **schedule)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_stream_k(dtype):
    run_and_check("matmul", dtype, (2048, 3072, 1000), BM=256, stages=4, persistent=True,
                  stream_k=True)


# -- batched (samples/bmm.py) --------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("out", ["f32", "c16"])
@pytest.mark.parametrize("schedule", [dict(BM=256), dict(BM=256, persistent=True),
                                      dict(BM=128, **PINGPONG)],
                         ids=["256x128", "256x128-persistent", "pingpong"])
@pytest.mark.parametrize("shape", [(4, 1000, 1016, 80), (32, 1024, 1024, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
def test_batched(shape, schedule, out, dtype):
    out = dtype if out == "c16" else out
    function = bmm(dtype, out)
    a, b, c = operands(*shape, dtype, out=out)
    options = dict(arch=ARCH, BN=128, BK=64, stages=4, **ROWS, **schedule)
    check(function, a, b, c, 2 * BATCHED_TOLERANCE[dtype], **options)
    compiled = function.prepare(a, b, c, **options).compiled
    assert compiled.kernel.schedule.roles.warpgroup_rows == 128
    assert "cp.async.bulk.tensor.3d" in compiled.ptx
