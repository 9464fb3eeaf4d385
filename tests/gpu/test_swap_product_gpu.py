"""The swapped 16-bit product (swap_product="always": C.T = B.T @ A.T, the block's rows of C
along wgmma's n) on the GPU against a float64 reference: the bench's tuned tiles of 152 and
136 rows (one warpgroup unsplit, two split along K), ragged M, N and K, a k-contiguous B,
a fused bias + GELU epilogue along C.T's columns, f32 and f16 outputs, clusters of 2 sharing
B's tile (the swapped A; 450 rows: three M tiles, the last pair's second block past M);
and an unswapped k-contiguous B of 152 columns. Every output starts as NaN, so an element
never written fails."""
from __future__ import annotations

import pytest

from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

from .test_split_k_gpu import TOLERANCE, TORCH, rel_error, sample  # noqa: E402

SWAP = dict(arch="sm_90a", swap_product="always")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape, config", [
    ((300, 3000, 4100), dict(BM=152, BN=64, BK=64, stages=6)),
    ((300, 3001, 8200), dict(BM=152, BN=128, BK=64, stages=4, split_k=2)),
    ((257, 1030, 1000), dict(BM=136, BN=128, BK=64, stages=4, split_k=3)),
    ((61, 136, 72), dict(BM=64, BN=64, BK=64, stages=3)),
    ((600, 4104, 1030), dict(BM=152, BN=128, BK=64, stages=4, cluster=2)),
    ((450, 3000, 1000), dict(BM=152, BN=128, BK=64, stages=4, cluster=2, persistent=True)),
    ((310, 3001, 8200), dict(BM=104, BN=128, BK=64, stages=4, cluster=2, split_k=2)),
], ids=["300-152x64", "300-152x128-split2", "257-136x128-split3", "small", "600-cluster2",
        "450-cluster2-persistent", "310-104x128-cluster2-split2"])
def test_matmul(hopper, dtype, shape, config):
    m, n, k = shape
    a = torch.randn(m, k, device="cuda").to(TORCH[dtype])
    b = torch.randn(k, n, device="cuda").to(TORCH[dtype])
    c = torch.full((m, n), float("nan"), device="cuda")
    launch = sample("matmul", dtype).prepare(a, b, c, **SWAP, **config)
    assert launch.compiled.kernel.schedule.swap.swapped
    launch()
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE[dtype]


@pytest.mark.parametrize("swap", [True, False], ids=["swapped-104", "unswapped-bn152"])
def test_a_k_contiguous_b(hopper, swap):
    """matmul_bt (B stored [N, K]): swapped, wgmma's A is K-major; unswapped, B's 152 rows
    of k are wgmma's n."""
    m, n, k = 310, 1000, 1030
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(n, k, device="cuda").half()
    c = torch.full((m, n), float("nan"), device="cuda")
    config = dict(BM=104, BN=128, BK=64, stages=4, **SWAP) if swap else \
        dict(BM=128, BN=152, BK=64, stages=4, arch="sm_90a")
    sample("matmul_bt", "f16")(a, b, c, **config)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double().T) < TOLERANCE["f16"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_bias_gelu_epilogue(hopper, dtype):
    m, n, k = 300, 1000, 2050
    a = torch.randn(m, k, device="cuda").to(TORCH[dtype])
    b = torch.randn(k, n, device="cuda").to(TORCH[dtype])
    bias = torch.randn(n, device="cuda").to(TORCH[dtype])
    c = torch.full((m, n), float("nan"), device="cuda").to(TORCH[dtype])
    sample("gemm_gelu", dtype)(a, b, c, bias, BM=152, BN=128, BK=64, stages=4, split_k=2,
                               **SWAP)
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    assert rel_error(c, ref) < TOLERANCE[dtype] + 4e-3  # C rounded to dtype once more


@pytest.mark.parametrize("config", [
    dict(BM=152, BN=128, BK=64, stages=4),
    dict(BM=136, BN=64, BK=64, stages=6, cluster=2),
    dict(BM=200, BN=128, BK=64, stages=4, persistent=True),
    dict(BM=104, BN=128, BK=64, stages=4, split_k=2, cluster=2),
], ids=["152x128", "136x64-cluster2", "200x128-persistent", "104x128-split2-cluster2"])
def test_c_f16_goes_out_through_tma_staged_transposed(hopper, config):
    """A 16-bit C: the C.T tile staged in C's rows by stmatrix.trans (a last run of two
    matrices where the rows end 8 past a multiple of 16) and stored with TMA, clipped at
    ragged M and N."""
    m, n, k = 390, 1000, 1030
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(k, n, device="cuda").half()
    c = torch.full((m, n), float("nan"), device="cuda").half()
    from tilec.benchmarking.contenders import sample_kernel
    launch = sample_kernel("f16", "f16").prepare(a, b, c, **SWAP, **config)
    assert launch.compiled.kernel.schedule.epilogue.writes == "stmatrix.trans"
    launch()
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < TOLERANCE["f16"] + 1e-3
