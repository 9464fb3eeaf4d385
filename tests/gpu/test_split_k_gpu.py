"""Split-K on the GPU against a float64 reference: f16, bf16 and f32, slices that divide K
and slices that do not (empty ones too), a fused epilogue that reads C after the meeting,
the skinny shape split-K is for; the counters are left at zero for the next launch (a
prepared launch called again and again on fresh inputs, and plain calls sharing one
workspace); the result is the same bits from run to run whichever block is last."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
SKINNY = dict(BM=16, BN=64, BK=128, warps=(1, 4), stages=4)


def sample(name: str, dtype: str):
    path = SAMPLES / f"{name}.py"
    (function,) = load_file(path, text=re.sub(r"\bf16\b", dtype, path.read_text())).values()
    return function


def rel_error(out, ref) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - ref) / max(float(torch.linalg.norm(ref)),
                                                            1e-30))


def operands(m, n, k, dtype):
    return (torch.randn(m, k, device="cuda").to(TORCH[dtype]),
            torch.randn(k, n, device="cuda").to(TORCH[dtype]))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("shape, config", [
    ((16, 1024, 4096), SKINNY),
    ((127, 129, 1000), {}),  # ragged; 7 slices of 32 steps leave no slice empty
    ((200, 300, 70), {}),  # 3 K steps of 32: with 7 slices, 4 are empty
], ids=["skinny", "ragged", "short-k"])
def test_matmul(dtype, splits, shape, config):
    m, n, k = shape
    config = dict(config)
    if dtype == "f32" and config:
        config = dict(BM=32, BN=64, BK=32, stages=4)  # the FFMA granule is 32x32 per warp
    a, b = operands(m, n, k, dtype)
    c = torch.full((m, n), float("nan"), device="cuda")
    sample("matmul", dtype)(a, b, c, split_k=splits, **config)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_epilogue_reads_c_after_the_meeting(dtype):
    m, n, k = 100, 260, 900
    a, b = operands(m, n, k, dtype)
    c = torch.randn(m, n, device="cuda").to(TORCH[dtype])
    bias = torch.randn(n, device="cuda")
    c_in = c.double()
    sample("gemm_epilogue", dtype)(a, b, c, bias, 0.75, -0.5, split_k=4)
    torch.cuda.synchronize()
    ref = torch.relu(0.75 * (a.double() @ b.double()) - 0.5 * c_in + bias.double())
    assert rel_error(c, ref) < TOLERANCE[dtype] + 1e-3  # C is rounded to dtype once more


def test_a_prepared_launch_runs_again_and_again():
    m, n, k = 16, 2048, 4096
    a, b = operands(m, n, k, "f16")
    c = torch.empty(m, n, device="cuda")
    launch = sample("matmul", "f16").prepare(a, b, c, split_k=4, **SKINNY)
    assert launch.grid == (2048 // 64, 4, 1)
    for _ in range(4):
        a.copy_(torch.randn(m, k, device="cuda"))  # fresh inputs, same buffers
        c.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        assert rel_error(c, a.double() @ b.double()) < TOLERANCE["f16"]


def test_plain_calls_share_a_workspace_and_agree_bit_for_bit():
    m, n, k = 64, 512, 8192
    a, b = operands(m, n, k, "f16")
    outputs = []
    for _ in range(3):
        c = torch.full((m, n), float("nan"), device="cuda")
        sample("matmul", "f16")(a, b, c, split_k=8, BM=64, BN=64, BK=64)
        outputs.append(c)
    torch.cuda.synchronize()
    assert rel_error(outputs[0], a.double() @ b.double()) < TOLERANCE["f16"]
    assert all(torch.equal(outputs[0], other) for other in outputs[1:])


# -- sm_90a: the warp-specialized wgmma kernels' split-K -----------------------------------
# Its slices meet on the consumers' barrier (the producer warpgroup has left); the slice's K
# range bounds the producer's TMA loads and the consumers' ring alike.
# (shape, tile, splits): a long K over few tiles (what split-K is for), 4 slices of 128
# steps at 128x256; ragged everywhere, 3 slices that do not divide the 47 steps; K = 200 in
# 4 steps over 7 slices, 3 of them empty; 8 slices of a 512^2 output; the short slices the
# tuning cuts in the skinny 64x128 six-stage tile (tuning.split.SHORT_SLICE_STEPS): 10 slices of
# 18 steps (the last of 10) over a ragged M, and 16 of 5 steps over 65 (3 of them empty).
SKINNY_TILE = dict(BM=64, BN=128, BK=64, stages=6)
HOPPER_SPLITS = [((1024, 1024, 8192), dict(BM=128, BN=256, BK=64, stages=3), 4),
                 ((1000, 1003, 3000), dict(BM=128, BN=128, BK=64, stages=4), 3),
                 ((200, 300, 200), dict(BM=128, BN=128, BK=64, stages=4), 7),
                 ((512, 512, 16384), dict(BM=128, BN=128, BK=64, stages=4), 8),
                 ((60, 1000, 11008), SKINNY_TILE, 10),
                 ((130, 1030, 4100), SKINNY_TILE, 16),
                 # The tall tiles: tuning.swap.TALL_TILE, 192 rows in three consumer
                 # warpgroups, and 256 in two of 128 rows (tuning.autotune.SPLIT_TILES);
                 # ragged M, N and K.
                 ((300, 1030, 4100), dict(BM=192, BN=128, BK=64, stages=4), 4),
                 ((1000, 1000, 4100), dict(BM=256, BN=128, BK=64, stages=3,
                                           warpgroup_rows=128), 4),
                 # In clusters of 2 sharing B, a pair on one slice: 8 M tiles, and 3 (the
                 # second pair's second block past M, meeting in a slot of its own).
                 ((1000, 1000, 16384), dict(BM=128, BN=128, BK=64, stages=6, cluster=2), 2),
                 ((300, 1030, 4100), dict(BM=128, BN=128, BK=64, stages=4, cluster=2), 3)]


@pytest.mark.usefixtures("hopper")  # tests/gpu/conftest.py
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["matmul", "matmul_bt", "gemm_epilogue"])
@pytest.mark.parametrize("shape, tile, splits", HOPPER_SPLITS,
                         ids=lambda value: "x".join(map(str, value))
                         if isinstance(value, tuple) else None)
def test_wgmma_split_k(shape, tile, splits, name, dtype):
    from .test_hopper_gpu import run_and_check
    run_and_check(name, dtype, shape, split_k=splits, **tile)


@pytest.mark.usefixtures("hopper")
def test_a_prepared_wgmma_split_k_launch_runs_again_with_the_same_bits():
    from .test_hopper_gpu import ARCH, Case, rerun_with_fresh_inputs, sample as hopper_sample
    case = Case("gemm_epilogue", "bf16", 1000, 1003, 3000)
    options = dict(arch=ARCH, BM=128, BN=128, BK=64, stages=4, split_k=3)
    launch = hopper_sample("gemm_epilogue", "bf16").prepare(*case.args(), **options)
    # The slice is the grid's axis after the tiles, folded onto x in grouped order.
    assert launch.grid[1:] == (3, 1) and "wgmma.mma_async" in launch.compiled.ptx
    rerun_with_fresh_inputs(launch, case)
