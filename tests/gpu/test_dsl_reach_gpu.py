"""Issue 13's DSL additions on the GPU, against float64: vectors of f16/bf16/f32 broadcast
along rows and columns, ``x ** n``, and compile-time ``if`` variants of one program, on the
mma.sync path (sm_90) and, on a compute capability 9.0 GPU, the wgmma path (sm_90a), at a
ragged size with NaN-poisoned outputs. (Written when the device budget was spent: these ran
on the CPU executor and through ptxas only, tests/test_vectors.py, test_powers.py and
test_compile_time_if.py.)"""
from __future__ import annotations

import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import current_device, gpu_unavailable_reason, has_gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
SHAPE = (300, 520, 200)  # ragged M, 16-byte aligned rows for N

SOURCE = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f32[M, N], bias: {bias}[N], scale: {scale}[M],
         BM=128, BN=128, BK=64, HAS_BIAS=1, POWER=1):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        x = acc * scale[m * BM : +BM][:, None]
        if HAS_BIAS:
            x = x + bias[n * BN : +BN]
        if POWER == 2:
            x = x ** 2
        elif POWER == -1:
            x = (x * x + 1.0) ** -1
        C[m * BM : +BM, n * BN : +BN] = x
'''


def archs() -> list[str]:
    capability = current_device().compute_capability
    return ["sm_90", "sm_90a"] if capability == (9, 0) else ["sm_80"]


@pytest.mark.parametrize("arch", archs())
@pytest.mark.parametrize("bias, scale", [("f16", "f16"), ("bf16", "f32"), ("f32", "bf16")])
@pytest.mark.parametrize("consts", [dict(), dict(HAS_BIAS=0), dict(POWER=2), dict(POWER=-1)],
                         ids=["bias", "no-bias", "square", "reciprocal"])
def test_vectors_powers_and_branches(arch, bias, scale, consts):
    m, n, k = SHAPE
    gen = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float16)
    b = torch.randn(k, n, device="cuda", generator=gen).to(torch.float16)
    bias_t = torch.randn(n, device="cuda", generator=gen).to(TORCH[bias])
    scale_t = torch.randn(m, device="cuda", generator=gen).to(TORCH[scale])
    c = torch.full((m, n), float("nan"), device="cuda")
    function = load_file("reach.py", text=SOURCE.format(bias=bias, scale=scale))["gemm"]
    function(a, b, c, bias_t, scale_t, arch=arch, stages=3, **consts)
    torch.cuda.synchronize()
    x = (a.double() @ b.double()) * scale_t.double()[:, None]
    if consts.get("HAS_BIAS", 1):
        x = x + bias_t.double()
    power = consts.get("POWER", 1)
    want = x * x if power == 2 else 1 / (x * x + 1) if power == -1 else x
    assert not torch.isnan(c).any(), "some outputs were never written"
    error = float(torch.linalg.norm(c.double() - want) / torch.linalg.norm(want))
    assert error < 1e-5, error
