"""Stream-K (stream_k=True: persistent blocks sharing the last waves' K steps, split tiles
meeting in a workspace; tilec/families/stream_k.py) on a compute capability 9.0 GPU, against
float64: the matmul samples at 128x256x64, f16 and bf16, square and ragged sizes, with tiles
split in two parts and in several (fewer tiles than blocks and a long K), K steps that the
block count does not divide; outputs poisoned with NaN; a prepared launch run again (the
flags must be back at zero, or the owners would add stale parts or hang) and giving the same
bits (the parts are added in a fixed order); batched programs over batches x tiles."""
from __future__ import annotations

import pytest

from tilec.runtime.driver import gpu_unavailable_reason, has_gpu

from .test_batched_gpu import HOPPER_TILES, bmm, check as check_batched, operands
from .test_hopper_gpu import (ARCH, SAMPLE_FUNCTIONS, Case, TMA_LOAD, rerun_with_fresh_inputs,
                              run_and_check, sample)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("hopper"),  # tests/gpu/conftest.py
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

STREAM_K = dict(arch=ARCH, BM=128, BN=256, BK=64, stages=3, persistent=True, stream_k=True)
# 1000x1003x77: 32 tiles of 2 K steps (fewer tiles than blocks: all stream-K);
# 1024x1024x8192: 32 tiles of 128 steps, each split over about 4 blocks (middle parts);
# 2048x3072x1000: 192 tiles of 16 steps; 4096^3: 512 tiles (264 whole, 248 shared);
# 4096x4096x4160: 65 K steps a tile; 3000x5000x333: ragged everywhere, 240 tiles.
SHAPES = [(1000, 1003, 77), (1024, 1024, 8192), (2048, 3072, 1000), (4096, 4096, 4096),
          (4096, 4096, 4160), (3000, 5000, 333)]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_stream_k_samples(shape, name, dtype):
    options = {key: value for key, value in STREAM_K.items() if key != "arch"}
    run_and_check(name, dtype, shape, raster_group=16, **options)


@pytest.mark.parametrize("name", ["matmul", "gemm_epilogue"])
@pytest.mark.parametrize("shape", [(1024, 1024, 8192), (4096, 4096, 4160)],
                         ids=lambda s: "x".join(map(str, s)))
def test_a_prepared_launch_runs_again_and_gives_the_same_bits(shape, name):
    dtype = "bf16"
    function = sample(name, dtype)
    case = Case(name, dtype, *shape)
    launch = function.prepare(*case.args(), **STREAM_K)
    assert TMA_LOAD in launch.compiled.ptx and "red.release.gpu" in launch.compiled.ptx
    rerun_with_fresh_inputs(launch, case)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(4, 1000, 1016, 80), (8, 1024, 1024, 1024),
                                   (3, 2048, 2048, 1024)], ids=lambda s: "x".join(map(str, s)))
def test_stream_k_batched(shape, dtype):
    function = bmm(dtype)
    a, b, c = operands(*shape, dtype)
    options = dict(STREAM_K, **{k: v for k, v in HOPPER_TILES[0].items() if k != "stages"})
    check_batched(function, a, b, c, {"f16": 2e-3, "bf16": 1e-2}[dtype], **options)
    roles = function.prepare(a, b, c, **options).compiled.kernel.schedule.roles
    assert roles.stream_k and roles.batches
