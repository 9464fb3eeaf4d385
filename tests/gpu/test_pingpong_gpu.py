"""Pingpong consumers on a compute capability 9.0 GPU (consumers="pingpong": a persistent
block's two consumer warpgroups each own a whole 64-row tile and take the block's tiles in
turn, their mainloops handed over through named barriers), against float64: the matmul
samples, f16 and bf16, square and ragged sizes, blocks with no tile, one, or an uneven count
of them (so one warpgroup has a tile the other has not), K steps that are not a multiple of
the ring, the TMA-store epilogue (each warpgroup stages its own tile) and clusters of two."""
from __future__ import annotations

import pytest

from tilec.runtime.driver import gpu_unavailable_reason, has_gpu

from .test_hopper_gpu import SAMPLE_FUNCTIONS, run_and_check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("hopper"),  # tests/gpu/conftest.py
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

# 1000x1003x77: fewer tiles than SMs (warpgroup 1 of most blocks has none); 2048x3072x1000:
# about three tiles a block (uneven), 16 K steps; 4096^3 and 1000x8200x1000.
SHAPES = [(1000, 1003, 77), (2048, 3072, 1000), (4096, 4096, 4096), (1000, 8200, 1000)]
PINGPONG = dict(persistent=True, consumers="pingpong")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tiles", [dict(BN=256, stages=4), dict(BN=128, stages=3),
                                   dict(BN=256, stages=2)], ids=["64x256s4", "64x128s3",
                                                                  "64x256s2"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pingpong(shape, tiles, name, dtype):
    run_and_check(name, dtype, shape, BM=64, BK=64, **tiles, **PINGPONG)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: "x".join(map(str, s)))
def test_pingpong_clusters(shape, name, dtype):
    """Clusters of two along M: each block's warpgroup w consumes the same ring iterations
    as its peer's, which the multicast B stages need."""
    run_and_check(name, dtype, shape, BM=64, BN=256, BK=64, stages=4, cluster=2, **PINGPONG)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_pingpong_raster_groups(dtype):
    run_and_check("gemm_epilogue", dtype, (2048, 3072, 1000), BM=64, BN=256, BK=64,
                  stages=3, raster_group=16, **PINGPONG)
