"""Promoted fp8 accumulation on the GPU (passes/promote_accumulation.py): fp8 products on
wgmma at ragged sizes and long K, against float64 of the decoded operands; the promoted
kernels' errors are those of f32 sums (cuBLAS's default), well under the fast ones'."""
from __future__ import annotations

from pathlib import Path

import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TORCH_NAMES = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
PROMOTED = [dict(BM=128, BN=128, BK=128, stages=4, persistent=True),
            dict(BM=128, BN=192, BK=128, stages=4, persistent=True),
            dict(BM=128, BN=128, BK=128, stages=4),
            dict(BM=64, BN=128, BK=128, stages=4, persistent=True, consumers="pingpong"),
            dict(BM=256, BN=64, BK=128, stages=4, warpgroup_rows=128),
            dict(BM=128, BN=128, BK=128, stages=4, persistent=True, stream_k=True),
            dict(BM=128, BN=128, BK=128, stages=4, persistent=True, cluster=2)]


def f32_out(name: str):
    text = (SAMPLES / "fp8_gemm.py").read_text().replace("f8e4m3", name)
    text = text.replace("C: f16[M, N]", "C: f32[M, N]").replace(".to(f16)", "")
    return load_file(Path("fp8_f32.py"), text=text)["fp8_gemm"]


def error(function, a, b, **config) -> float:
    m, n = a.shape[0], b.shape[0]
    c = torch.full((m, n), float("nan"), device="cuda")
    function(a, b, c, 1.0, 1.0, arch="sm_90a", **config)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "some outputs were never written"
    reference = a.double() @ b.double().t()
    return float(torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference))


@pytest.mark.parametrize("config", PROMOTED, ids=lambda c: ",".join(f"{k}={v}" for k, v in
                                                                    c.items()))
@pytest.mark.parametrize("shape", [(127, 129, 64), (1000, 1008, 4096), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
@pytest.mark.usefixtures("hopper")
def test_promoted_sums_are_f32_accurate(name, shape, config):
    m, n, k = shape
    dtype = getattr(torch, TORCH_NAMES[name])
    generator = torch.Generator(device="cuda").manual_seed(4)
    a = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
    b = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
    function = f32_out(name)
    promoted = error(function, a, b, fp8_accumulation="promoted", **config)
    fast = error(function, a, b, **config)
    print(f"{name} {shape} {config}: promoted {promoted:.3g}, fast {fast:.3g}")
    assert promoted < 2e-4
    if k >= 4096:
        assert promoted < fast / 4
