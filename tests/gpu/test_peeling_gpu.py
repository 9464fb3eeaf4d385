"""Peeled launches on the GPU (Options.peel, tilec/launch/peeling.py): the whole tiles' launch
then the remainder's narrow one, against float64, on the mma.sync path and on sm_90a's
warp-specialized schedules (one tile a block, persistent, clusters sharing a B read in place),
along N and along M, with a fused epilogue whose bias, beta * C and f16 output run along the
peeled dim; through a prepared launch and through a plain call. Each checks that the launch
was cut where expected, so an unpeeled launch does not pass for a peeled one."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.errors import TileConfigError
from tilec.kernel import PeeledLaunch
from tilec.runtime import current_device, gpu_unavailable_reason, has_gpu

from .test_packing_gpu import DeviceArray, nan_output, rel_error, sample

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

TOLERANCE = 2e-3
HOPPER = [
    dict(BM=128, BN=128, BK=64, stages=4),
    dict(BM=128, BN=256, BK=64, stages=3, persistent=True, raster_group=16),
    dict(BM=128, BN=128, BK=64, stages=4, persistent=True, raster_group=16, cluster=2),
    dict(BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128, persistent=True, cluster=2),
]
# (M, N, K), the symbol cut and where: N ends 8 columns past whole tiles (rows 16-byte
# aligned, off 128-byte lines), or M 8 rows past them.
SHAPES = [((300, 1032, 200), "N"), ((1032, 512, 136), "M")]


def operands(m: int, n: int, k: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    return a, b


def cut_at(shape, symbol: str, step: int) -> int:
    size = dict(zip("MNK", shape))[symbol]
    return size // step * step


def options_for(arch: str):
    return [dict(BM=128, BN=128, BK=32, stages=3)] + (HOPPER if arch == "sm_90a" else [])


@pytest.mark.parametrize("shape, symbol", SHAPES, ids=["N", "M"])
def test_a_prepared_peeled_matmul_is_right(shape, symbol):
    from tilec.options import target_arch
    arch = target_arch(current_device().compute_capability)
    m, n, k = shape
    a, b = operands(m, n, k)
    for options in options_for(arch):
        c = nan_output(m, n)
        launch = sample("matmul").prepare(a, b, c, arch=arch, peel=True, **options)
        assert isinstance(launch, PeeledLaunch)
        step = options["BN" if symbol == "N" else "BM"]
        assert (launch.peel.site.symbol, launch.peel.main) == \
            (symbol, cut_at(shape, symbol, step))
        launch()
        assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE, options


def test_a_peeled_fused_epilogue_is_right_along_the_peeled_columns():
    """gemm_epilogue: relu(alpha * A @ B + beta * C + bias) into an f16 C, every term but
    A's indexed along the peeled N."""
    from tilec.options import target_arch
    arch = target_arch(current_device().compute_capability)
    m, n, k = 300, 1032, 200
    rng = np.random.default_rng(4)
    a, b = operands(m, n, k, seed=4)
    bias_values = rng.standard_normal(n).astype(np.float32)
    c_values = rng.standard_normal((m, n)).astype(np.float16)
    for options in options_for(arch):
        bias = DeviceArray(bias_values)
        c = DeviceArray(c_values.copy())
        launch = sample("gemm_epilogue").prepare(a, b, c, bias, 0.5, 0.25, arch=arch,
                                                 peel=True, **options)
        assert isinstance(launch, PeeledLaunch) and launch.peel.main == 1024
        launch()
        ref = np.maximum(0.5 * (a.values() @ b.values()) + 0.25 * c_values.astype(np.float64)
                         + bias_values.astype(np.float64), 0)
        assert rel_error(c.values(), ref) < 4e-3, options


def test_a_plain_call_peels_too_and_a_batched_program_is_refused():
    m, n, k = 136, 264, 96
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float32)
    sample("matmul")(a, b, c, device="gpu", peel=True)
    assert rel_error(c.astype(np.float64),
                     a.astype(np.float64) @ b.astype(np.float64)) < TOLERANCE
    bmm = sample("bmm")
    with pytest.raises(TileConfigError, match="cannot be peeled: grid axis 0"):
        bmm(np.zeros((2, 64, 64), np.float16), np.zeros((2, 64, 72), np.float16),
            np.zeros((2, 64, 72), np.float32), device="gpu", peel=True)
