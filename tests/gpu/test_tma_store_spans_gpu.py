"""TMA stores from 64- and 32-byte staging slabs on a compute capability 9.0 GPU
(arch="sm_90a", passes/tma_store.py): C tiles whose rows are not whole 128-byte lines (16-bit
BN 96, 144, 160, 176, 208, 224; 8-bit BN 96 and 192; i32 BN 80) are staged in TMA's swizzle
of the widest span their rows take and stored a box a slab, or (beside a ring too deep for
the whole tile) a slab at a time through two buffers. A staging write that missed TMA's
swizzle would put elements in the wrong place: wrong numbers here, not an error. Ragged
edges check that TMA clips each narrow box at the tensor's bounds."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import gpu_unavailable_reason, has_gpu

from ..test_tma_store import I8_OUT, i32_out
from .test_hopper_gpu import ARCH, Case, sample
from .test_int8_fp8_gpu import exact, operands

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("hopper"),  # tests/gpu/conftest.py
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

# C's rows 16-byte aligned (N a multiple of 8), edges ragged in M and N against every tile.
SHAPES = [(1000, 1000, 200), (2048, 3080, 1000), (333, 4104, 512)]
# (tile and schedule, the staging span it takes): stmatrix (64 accumulators a thread or
# fewer) and pair writes, one tile a block, persistent, clusters and pingpong.
TILES = [
    (dict(BM=128, BN=96, BK=64, stages=4), 64),
    (dict(BM=128, BN=208, BK=64, stages=4), 32),
    (dict(BM=128, BN=224, BK=64, stages=3, persistent=True), 64),
    (dict(BM=128, BN=160, BK=64, stages=3, cluster=2), 64),
    (dict(BM=128, BN=208, BK=64, stages=3, persistent=True, cluster=2), 32),
    (dict(BM=64, BN=96, BK=64, stages=4, persistent=True, consumers="pingpong"), 64),
    # 256-row tiles in 128-row warpgroups: the slabs take turns a strip (64 rows of each
    # warpgroup) at a time, odd counts of them too (9, 5 and 11 slabs).
    (dict(BM=256, BN=144, BK=64, stages=3, warpgroup_rows=128, persistent=True), 32),
    (dict(BM=256, BN=160, BK=64, stages=3, warpgroup_rows=128), 64),
    (dict(BM=256, BN=176, BK=64, stages=3, warpgroup_rows=128, persistent=True, cluster=2),
     32),
]


def ids(config: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles, span", TILES, ids=[ids(t) for t, _ in TILES])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_16_bit_c_goes_out_from_narrow_slabs(shape, tiles, span, dtype):
    """samples/gemm_epilogue.py (C read and written, f16 or bf16): the fused result against
    float64, through the narrow-span TMA store."""
    function = sample("gemm_epilogue", dtype)
    case = Case("gemm_epilogue", dtype, *shape)
    ref = case.reference()
    launch = function.prepare(*case.args(), arch=ARCH, **tiles)
    plan = launch.compiled.kernel.schedule.epilogue
    assert (plan.via, plan.span) == ("tma", span)
    launch()
    case.check(ref)


@pytest.mark.parametrize("bn, span", [(96, 32), (192, 64), (256, 128)])
# C's rows 16-byte aligned: N a multiple of 16 bytes, ragged against every tile.
@pytest.mark.parametrize("shape", [(1000, 1008, 256), (300, 4112, 384)],
                         ids=lambda s: "x".join(map(str, s)))
def test_an_8_bit_c_goes_out_from_narrow_slabs_exactly(shape, bn, span):
    """An i8 C (the int8 product's i32 sums wrapped to their low bytes by acc.to(i8)):
    exact. BN 192 was staged as a slab and a half of 128 bytes before (an illegal address
    in the 128x192 promoted fp8 kernel with an e4m3 C)."""
    m, n, k = shape
    a, b = operands(m, n, k, seed=bn)
    c = torch.full((m, n), 77, dtype=torch.int8, device="cuda")
    function = load_file(Path("i8_out.py"), text=I8_OUT)["f"]
    launch = function.prepare(a, b, c, arch=ARCH, BM=128, BN=bn, BK=128, stages=4)
    plan = launch.compiled.kernel.schedule.epilogue
    assert (plan.via, plan.span) == ("tma", span)
    launch()
    torch.cuda.synchronize()
    wrapped = exact(a, b).astype(np.int8)  # the low byte, as two's complement
    assert np.array_equal(c.cpu().numpy(), wrapped)


@pytest.mark.parametrize("bn, span", [(80, 64), (96, 128)])
@pytest.mark.parametrize("persistent", [False, True])
def test_an_i32_c_goes_out_from_narrow_slabs_exactly(bn, span, persistent):
    m, n, k = 1000, 1000, 384
    a, b = operands(m, n, k, seed=bn + persistent)
    c = torch.full((m, n), -7, dtype=torch.int32, device="cuda")
    launch = i32_out().prepare(a, b, c, arch=ARCH, BM=128, BN=bn, BK=128, stages=3,
                              persistent=persistent)
    plan = launch.compiled.kernel.schedule.epilogue
    assert (plan.via, plan.span) == ("tma", span)
    launch()
    torch.cuda.synchronize()
    assert np.array_equal(c.cpu().numpy().astype(np.int64), exact(a, b))
