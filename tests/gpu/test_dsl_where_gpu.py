"""Issue 13's where, gelu (erf form), [1, N] / [M, 1] views and operands converted in the
K loop (``B[...].to(f16)`` of a bf16 B) on the GPU, against float64 /
numpy, on the mma.sync path (sm_90 on a 9.0 GPU, else sm_80) and, on a compute capability
9.0 GPU, the wgmma path (sm_90a), at ragged sizes with NaN-poisoned outputs; and the
"f16 GEMM + bias + GELU" bench row's contenders on a small size. (Written without a GPU:
these ran on the CPU executor and through ptxas only, tests/test_where.py,
test_epilogue_math.py, test_unit_views.py, test_operand_casts.py, test_gemm_gelu_sample.py,
test_bench_epilogue.py.)

Bounds: where selects, so it is exact (NaN, signed zeros and infinities included). gelu:
4e-5 relative for results >= 1e-30 (the CPU model of the same steps measured 1.7e-5 at worst,
x = -11.4; ex2.approx and rcp.approx add a few ulp); each region's max error is printed.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import current_device, gpu_unavailable_reason, has_gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
GELU_RTOL, ATOL = 4e-5, 1e-30
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, math.inf, -math.inf, math.nan, 1e-40, -3.0, 2.0, 1e30]


def archs() -> list[str]:
    capability = current_device().compute_capability
    return ["sm_90", "sm_90a"] if capability == (9, 0) else ["sm_80"]


def consts_for(arch: str) -> dict:
    return dict(BM=128, BN=128, BK=64, stages=3) if arch == "sm_90a" else dict(stages=3)


# ------------------------------------------------------------------------------------ where
WHERE = '''from __future__ import annotations
from tilec import f16, f32, tile

@tile
def select(A: f16[M, K], B: f16[K, N], X: f32[M, N], Y: f32[M, N], C: f32[M, N],
           BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        x = acc + X[m * BM : +BM, n * BN : +BN]
        y = Y[m * BM : +BM, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = {body}
'''
CONDITIONS = {
    "x < y": lambda x, y: x < y, "x <= y": lambda x, y: x <= y,
    "x > y": lambda x, y: x > y, "x >= y": lambda x, y: x >= y,
    "x == y": lambda x, y: x == y, "x != y": lambda x, y: x != y,
    "x > 0 and y < 1": lambda x, y: (x > 0) & (y < 1),
    "not x < y or y != y": lambda x, y: ~(x < y) | (y != y),
}


def special_pairs(m: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of SPECIAL values, then random values with ties, tiled over [m, n]."""
    x, y = np.meshgrid(SPECIAL, SPECIAL)
    rng = np.random.default_rng(1)
    pool_x = np.concatenate([x.ravel(), rng.integers(-4, 5, m * n)]).astype(np.float32)
    pool_y = np.concatenate([y.ravel(), rng.integers(-4, 5, m * n)]).astype(np.float32)
    return pool_x[:m * n].reshape(m, n), pool_y[:m * n].reshape(m, n)


@pytest.mark.parametrize("arch", archs())
@pytest.mark.parametrize("condition", list(CONDITIONS))
def test_where_selects_exactly(arch, condition):
    m, n, k = 300, 263, 40  # ragged
    body = f"where({condition}, x, 0.25 * y)"
    function = load_file("where.py", text=WHERE.format(body=body))["select"]
    x, y = special_pairs(m, n)
    a = torch.zeros((m, k), dtype=torch.float16, device="cuda")
    b = torch.zeros((k, n), dtype=torch.float16, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    function(a, b, torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), c, arch=arch,
             **consts_for(arch))
    torch.cuda.synchronize()
    got = c.cpu().numpy()
    with np.errstate(invalid="ignore"):
        # acc + x with acc = +0: -0 + 0 is +0 (IEEE), as the GPU adds it.
        xs = x + np.float32(0)
        want = np.where(CONDITIONS[condition](xs, y), xs, np.float32(0.25) * y)
    # Subnormal inputs: .ftz arithmetic may flush 1e-40 (add, mul) before the select.
    tiny = (np.abs(x) < np.finfo(np.float32).tiny) & (x != 0)
    ok = (got == want) | (np.isnan(got) & np.isnan(want)) | tiny
    assert ok.all(), [(float(x[i]), float(y[i]), float(got[i]), float(want[i]))
                      for i in zip(*np.nonzero(~ok))][:5]


# ------------------------------------------------------------------------------------ gelu
GELU = '''from __future__ import annotations
from tilec import f16, f32, tile

@tile
def apply(A: f16[M, K], B: f16[K, N], X: f32[M, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = gelu(acc + X[m * BM : +BM, n * BN : +BN])
'''


def gelu64(x: np.ndarray) -> np.ndarray:
    from tilec.cpu.reference import ELEMENTWISE
    with np.errstate(all="ignore"):
        return ELEMENTWISE["tile.gelu"](x.astype(np.float64))


@pytest.mark.parametrize("arch", archs())
def test_gelu_sweep_accuracy(arch):
    values = np.concatenate([
        np.geomspace(1e-30, 1e30, 300), -np.geomspace(1e-30, 1e30, 300),
        np.linspace(-20, 20, 8001), [0.0, -0.0, 1e-40, -1e-40, math.inf, -math.inf, math.nan],
    ]).astype(np.float32)
    n = 131
    x = np.resize(values, (math.ceil(values.size / n) * n,)).reshape(-1, n)
    m = x.shape[0]
    function = load_file("gelu.py", text=GELU)["apply"]
    a = torch.zeros((m, 8), dtype=torch.float16, device="cuda")
    b = torch.zeros((8, n), dtype=torch.float16, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    function(a, b, torch.from_numpy(x).cuda(), c, arch=arch, **consts_for(arch))
    torch.cuda.synchronize()
    got = c.cpu().numpy().astype(np.float64)
    want = gelu64(x)
    with np.errstate(all="ignore"):
        diff = np.abs(got - want)
        finite = np.isfinite(want)
        big = finite & (np.abs(want) >= ATOL)
        rel = np.where(big, diff / np.abs(want), 0.0)
        for bound in (3, 6, 11.5, math.inf):
            inside = big & (np.abs(x) <= bound)
            print(f"gelu {arch}: |x| <= {bound}: max rel error {rel[inside].max():.3g} "
                  f"({rel[inside].max() / 2 ** -23:.0f} ulp)")
        same = (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want))
        ok = same | (diff <= GELU_RTOL * np.abs(want) + ATOL)
    bad = np.argwhere(~ok)[:5]
    assert ok.all(), [(float(x[i, j]), got[i, j], want[i, j]) for i, j in bad]


@pytest.mark.parametrize("arch", archs())
def test_gemm_gelu_sample_at_a_ragged_size(arch):
    function = load_file(ROOT / "samples" / "gemm_gelu.py")["gemm_gelu"]
    m, n, k = 1000, 1003, 77  # N odd: misaligned rows, packed at launch
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float16)
    b = (torch.randn(k, n, device="cuda", generator=gen) / 4).to(torch.float16)
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    function(a, b, c, bias, arch=arch, **consts_for(arch))
    torch.cuda.synchronize()
    x = a.double() @ b.double() + bias.double()
    want = 0.5 * x * torch.special.erfc(-x / math.sqrt(2.0))
    assert not torch.isnan(c).any(), "some outputs were never written"
    # f16 output: one f16 rounding (2^-11 relative) over the f32 result, plus the f32 sum's
    # own error, which is absolute: where acc + bias nearly cancels, x (and gelu(x) ~ x / 2)
    # keeps only its absolute accuracy. The tensor cores' f32 sum of K exact products errs by
    # at most K 2^-23 of the sum of |products| (truncating adds: 2^-23, not 2^-24), and
    # |gelu'| < 1.13.
    magnitude = a.double().abs() @ b.double().abs() + bias.double().abs()
    allowed = 2 ** -10 * want.abs() + 2 ** -24 + 1.13 * (k + 1) * 2 ** -23 * magnitude
    excess = (c.double() - want).abs() - allowed
    assert (excess <= 0).all(), f"{int((excess > 0).sum())} outputs beyond the bound"


# ------------------------------------------------------------------------ [1, N] / [M, 1]
VIEWS = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f32[M, N], bias: {bias}[1, N], scale: {scale}[M, 1],
         table: f32[E, N], unit: f32[1, 1], row: i32, BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        y = acc * scale[m * BM : +BM, 0:1] + bias[0:1, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = (y + table[row : +1, n * BN : +BN]) * unit[0:1, 0:1]
'''
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


@pytest.mark.parametrize("arch", archs())
@pytest.mark.parametrize("bias, scale", [("f16", "f32"), ("bf16", "f16"), ("f32", "bf16")])
def test_unit_views_broadcast(arch, bias, scale):
    m, n, k, e = 300, 520, 200, 5
    gen = torch.Generator(device="cuda").manual_seed(9)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float16)
    b = torch.randn(k, n, device="cuda", generator=gen).to(torch.float16)
    bias_t = torch.randn(1, n, device="cuda", generator=gen).to(TORCH[bias])
    scale_t = torch.randn(m, 1, device="cuda", generator=gen).to(TORCH[scale])
    table = torch.randn(e, n, device="cuda", generator=gen)
    unit = torch.full((1, 1), 0.75, device="cuda")
    function = load_file("views.py", text=VIEWS.format(bias=bias, scale=scale))["gemm"]
    for row in (3, e):  # a row past the end reads zeros
        c = torch.full((m, n), float("nan"), device="cuda")
        function(a, b, c, bias_t, scale_t, table, unit, row, arch=arch, **consts_for(arch))
        torch.cuda.synchronize()
        picked = table[row].double() if row < e else torch.zeros(n, device="cuda").double()
        want = ((a.double() @ b.double()) * scale_t.double() + bias_t.double() + picked) * 0.75
        assert not torch.isnan(c).any(), "some outputs were never written"
        error = float(torch.linalg.norm(c.double() - want) / torch.linalg.norm(want))
        assert error < 1e-5, (row, error)


# ---------------------------------------------------------------------------- the bench row
def test_the_bias_gelu_bench_row_checks_every_contender():
    from tilec.benchmarking import epilogue
    from tilec.benchmarking.array_libraries import TorchArrays
    from tilec.benchmarking.timing import make_timer
    arrays = TorchArrays(torch.cuda.current_device())
    timer, _ = make_timer(arrays, True)
    try:
        import triton  # noqa: F401
        has_triton = True
    except ImportError:
        has_triton = False
    contenders = epilogue.epilogue_contenders(arrays, {}, {}, has_triton)
    case = epilogue.EpilogueCase(1024, 1024, 1024, "f16")
    result = epilogue.run_epilogue_case(case, arrays, contenders, timer, None)
    for name, measured in result.measurements.items():
        print(f"{name}: {measured.status} {result.tflops(name)} TFLOP/s, error "
              f"{measured.error}, {measured.config} {measured.note}")
        assert measured.status == "ok", (name, measured)


# ----------------------------------------------------------------- operands converted in K
CASTS = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: {a}[M, K], B: {b}[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK]{ca} @ B[k : +BK, n * BN : +BN]{cb}
        C[m * BM : +BM, n * BN : +BN] = acc
'''


@pytest.mark.parametrize("arch", archs())
@pytest.mark.parametrize("a, b, product", [("f16", "bf16", "f16"), ("bf16", "f16", "f16"),
                                           ("f16", "bf16", "bf16")])
def test_operands_converted_in_registers(arch, a, b, product):
    """On sm_90a wgmma declines (it reads operands as stored) and mma.sync runs it."""
    m, n, k = 300, 520, 200
    gen = torch.Generator(device="cuda").manual_seed(4)
    a_t = torch.randn(m, k, device="cuda", generator=gen).to(TORCH[a])
    b_t = torch.randn(k, n, device="cuda", generator=gen).to(TORCH[b])
    text = CASTS.format(a=a, b=b, ca=f".to({product})" if a != product else "",
                        cb=f".to({product})" if b != product else "")
    function = load_file("casts.py", text=text)["gemm"]
    c = torch.full((m, n), float("nan"), device="cuda")
    function(a_t, b_t, c, arch=arch, **consts_for(arch))
    torch.cuda.synchronize()
    # The converted operand rounded once to the product's dtype, products exact in f64.
    want = a_t.to(TORCH[product]).double() @ b_t.to(TORCH[product]).double()
    assert not torch.isnan(c).any(), "some outputs were never written"
    error = float(torch.linalg.norm(c.double() - want) / torch.linalg.norm(want))
    assert error < 1e-5, error
