"""8-bit operands on the GPU: samples/int8_gemm.py (i8 x i8 -> exact i32 through mma.sync
m16n8k32 .s8) at ragged sizes, checked integer-exact against int64 products on the host,
with torch int8 tensors (zero-copy) and numpy int8 arrays (staged), in several
configurations, and the dequantized f32 output against float64; plus the i32 -> i8 / f16
conversions and the bench's matmul sample against torch._int_mm.

fp8 (sm_90 / sm_90a, mma.sync m16n8k32 .e4m3 / .e5m2): samples/fp8_gemm.py and an f32-output
variant at ragged sizes against float64 of the decoded inputs, from torch float8 tensors
(zero-copy) and numpy uint8 bits; the measured errors are printed (pytest -s)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SHAPES = [(1, 1, 1), (127, 129, 65), (1000, 1003, 77), (333, 517, 4099), (4096, 4096, 4096)]


def int8_gemm():
    return load_file(SAMPLES / "int8_gemm.py")["int8_gemm"]


def operands(m: int, n: int, k: int, seed: int = 0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=generator)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=generator)
    # The extremes: -128 * -128 over all of K is the largest sum (2**14 K).
    a[0, :] = -128
    b[0, :] = -128
    return a, b


def exact(a, b):
    """A @ B.T on the host, exactly: every partial sum of int8 products is an integer below
    2**14 * K in magnitude, far inside float64's 2**53, so BLAS's float64 product is exact
    (numpy's int64 matmul has no BLAS and takes minutes at 4096^3)."""
    return integer_product(a.cpu().numpy(), b.cpu().numpy())


def integer_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    assert 2**14 * a.shape[1] < 2**53
    return (a.astype(np.float64) @ b.astype(np.float64).T).astype(np.int64)


CONFIGS = [dict(), dict(stages=1), dict(stages=4), dict(swizzle="off"),
           dict(BM=128, BN=256, BK=64, warps=(2, 4)), dict(BM=128, BN=256, BK=128, warps=(2, 4)),
           dict(BM=64, BN=64, BK=32)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in
                                                                 c.items()) or "defaults")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_int8_gemm_is_exact(shape, config):
    m, n, k = shape
    a, b = operands(m, n, k)
    cq = torch.full((m, n), -2**31, dtype=torch.int32, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    int8_gemm()(a, b, cq, c, 0.5, **config)
    torch.cuda.synchronize()
    expected = exact(a, b)
    assert np.array_equal(cq.cpu().numpy().astype(np.int64), expected)
    # 0.5 * an integer below 2**24 in magnitude is exact in f32 (K = 4096: 2**26, rounded
    # once by cvt.rn.f32.s32, as float32() rounds).
    assert np.array_equal(c.cpu().numpy(), expected.astype(np.float32) * np.float32(0.5))


@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 1003, 77)],
                         ids=lambda s: "x".join(map(str, s)))
def test_int8_gemm_takes_numpy_arrays(shape):
    m, n, k = shape
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (n, k)).astype(np.int8)
    cq = np.full((m, n), -2**31, np.int32)
    c = np.full((m, n), np.nan, np.float32)
    int8_gemm()(a, b, cq, c, 0.25)
    expected = integer_product(a, b)
    assert np.array_equal(cq, expected)
    assert np.array_equal(c, expected.astype(np.float32) * np.float32(0.25))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_int8_gemm_runs_for_the_targets_this_gpu_runs(arch):
    major, _ = torch.cuda.get_device_capability()
    if arch == "sm_90a" and major != 9:
        pytest.skip("sm_90a needs a Hopper GPU")
    a, b = operands(1000, 1003, 77, seed=7)
    cq = torch.zeros((1000, 1003), dtype=torch.int32, device="cuda")
    c = torch.zeros((1000, 1003), device="cuda")
    int8_gemm()(a, b, cq, c, 1.0, arch=arch)
    torch.cuda.synchronize()
    assert np.array_equal(cq.cpu().numpy().astype(np.int64), exact(a, b))


CONVERSIONS = """
from tilec import f16, f32, i8, i32, tile


@tile
def f(A: i8[M, K], B: i8[N, K], C8: i8[M, N], Ch: f16[M, N], Cs: i8[M, N], BM=64, BN=64,
      BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], i32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C8[m * BM : +BM, n * BN : +BN] = acc.to(i8)
        Ch[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.25).to(f16)
        Cs[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.001).to(i8)
"""


def test_conversions_of_the_i32_accumulator():
    """cvt.s8.s32 keeps the low byte; f16 from f32 rounds once; cvt.rni.s8.f32 rounds to
    nearest even and saturates: the CPU interpreter's semantics (tests/test_int8.py)."""
    kernel = load_file(Path("conversions.tile"), text=CONVERSIONS)["f"]
    m, n, k = 200, 136, 300
    a, b = operands(m, n, k, seed=11)
    c8 = torch.zeros((m, n), dtype=torch.int8, device="cuda")
    ch = torch.zeros((m, n), dtype=torch.float16, device="cuda")
    cs = torch.zeros((m, n), dtype=torch.int8, device="cuda")
    kernel(a, b, c8, ch, cs)
    torch.cuda.synchronize()
    expected = exact(a, b)
    assert np.array_equal(c8.cpu().numpy(), expected.astype(np.int8))
    assert np.array_equal(ch.cpu().numpy(), (expected.astype(np.float32) * 0.25)
                          .astype(np.float16))
    scaled = np.rint((expected.astype(np.float32) * np.float32(0.001)).astype(np.float64))
    assert np.array_equal(cs.cpu().numpy(), np.clip(scaled, -128, 127).astype(np.int8))


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (333, 517, 4099), (256, 256, 1001)],
                         ids=lambda s: "x".join(map(str, s)))
def test_odd_k_int8_operands_are_packed_and_exact(shape, arch, backend):
    """Odd K: 1-byte aligned rows, packed at launch by the byte pack kernel (its llvm twin
    for the llvm backend) to 128-byte rows, K padded to whole BK steps; exact. pack="off"
    (byte copies) gives the same bits."""
    if arch == "sm_90a":
        needs_hopper()
        if backend == "llvm":
            pytest.skip("the llvm backend does not emit the wgmma families")
    m, n, k = shape
    a, b = operands(m, n, k, seed=23)
    outputs = []
    for pack in ("auto", "off"):
        cq = torch.full((m, n), -2**31, dtype=torch.int32, device="cuda")
        c = torch.full((m, n), float("nan"), device="cuda")
        launch = int8_gemm().prepare(a, b, cq, c, 0.5, arch=arch, backend=backend, pack=pack)
        assert launch.packing.names == (("A", "B") if pack == "auto" else ())
        launch()
        torch.cuda.synchronize()
        outputs.append(cq.cpu().numpy())
    expected = exact(a, b)
    assert np.array_equal(outputs[0].astype(np.int64), expected)
    assert np.array_equal(outputs[0], outputs[1])


# Split-K with i32 partials: the slices meet as integers (backend/split.py), so the result is
# exact and the same bits as split_k=1 whichever block is last; the non-linear epilogues
# (saturating cvt.rni.s8.f32, wrapping cvt.s8.s32) run once, after the meeting.
SPLIT_SHAPES = [((16, 1024, 4096), dict(BM=16, BN=64, BK=128, warps=(1, 4), stages=4)),
                ((127, 129, 1000), {}),  # ragged, K not 16-byte aligned (packed)
                ((200, 300, 70), dict(BK=32))]  # 3 K steps: with 7 slices, 4 are empty


def split_and_whole(shape, splits: int, **config) -> tuple[tuple, tuple, tuple]:
    """The int8 sample's (i32 C, scaled f32 C) with ``splits`` slices and with one, and
    the operands."""
    m, n, k = shape
    a, b = operands(m, n, k, seed=splits)
    results = []
    for split_k in (splits, 1):
        cq = torch.full((m, n), -2**31, dtype=torch.int32, device="cuda")
        c = torch.full((m, n), float("nan"), device="cuda")
        int8_gemm()(a, b, cq, c, 0.5, split_k=split_k, **config)
        torch.cuda.synchronize()
        results.append((cq.cpu().numpy(), c.cpu().numpy()))
    return results[0], results[1], (a, b)


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("shape, config", SPLIT_SHAPES, ids=["skinny", "ragged", "short-k"])
def test_int8_split_k_is_exact_and_bitwise_the_one_slice_result(shape, config, splits,
                                                                backend):
    *results, (a, b) = split_and_whole(shape, splits, backend=backend, **config)
    expected = exact(a, b)
    assert np.array_equal(results[0][0].astype(np.int64), expected)
    assert np.array_equal(results[0][1], expected.astype(np.float32) * np.float32(0.5))
    assert all(x.tobytes() == y.tobytes() for x, y in zip(*results))


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_int8_split_k_runs_non_linear_epilogues_after_the_meeting(backend):
    kernel = load_file(Path("conversions.tile"), text=CONVERSIONS)["f"]
    m, n, k = 200, 136, 3000
    a, b = operands(m, n, k, seed=13)
    c8 = torch.zeros((m, n), dtype=torch.int8, device="cuda")
    ch = torch.zeros((m, n), dtype=torch.float16, device="cuda")
    cs = torch.zeros((m, n), dtype=torch.int8, device="cuda")
    kernel(a, b, c8, ch, cs, split_k=5, backend=backend)
    torch.cuda.synchronize()
    expected = exact(a, b)
    assert np.array_equal(c8.cpu().numpy(), expected.astype(np.int8))
    assert np.array_equal(ch.cpu().numpy(), (expected.astype(np.float32) * 0.25)
                          .astype(np.float16))
    scaled = np.rint((expected.astype(np.float32) * np.float32(0.001)).astype(np.float64))
    assert np.abs(scaled).max() > 127  # saturated somewhere: the sum of clipped slices differs
    assert np.array_equal(cs.cpu().numpy(), np.clip(scaled, -128, 127).astype(np.int8))


def test_an_int8_split_k_launch_runs_again_and_again():
    """The counters are back at zero after each launch: a prepared launch on fresh inputs."""
    m, n, k = 16, 2048, 4096
    a, b = operands(m, n, k, seed=17)
    cq = torch.empty((m, n), dtype=torch.int32, device="cuda")
    c = torch.empty((m, n), device="cuda")
    launch = int8_gemm().prepare(a, b, cq, c, 1.0, split_k=4, BM=16, BN=64, BK=128,
                                 warps=(1, 4), stages=4)
    for seed in range(3):
        fresh, _ = operands(m, n, k, seed=100 + seed)
        a.copy_(fresh)
        cq.fill_(-1)
        launch()
        torch.cuda.synchronize()
        assert np.array_equal(cq.cpu().numpy().astype(np.int64), exact(a, b))


def test_the_bench_kernel_matches_torch_int_mm():
    """`tilec bench --dtypes i8`'s kernel (samples/matmul.py in i8 into i32) on torch's
    column-major B, exactly torch._int_mm's result."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.contenders import sample_kernel
    from tilec.benchmarking.tuning import tuned_config
    m = n = k = 1024
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()  # [K, N], k-major
    out = torch.full((m, n), -1, dtype=torch.int32, device="cuda")
    sample_kernel("i8", "i32")(a, b, out, **tuned_config(Case(m, n, k, "i8")))
    torch.cuda.synchronize()
    assert torch.equal(out, torch._int_mm(a, b))


@pytest.mark.parametrize("shape", [(199, 1680, 3), (250, 7930, 19), (1825, 141, 115),
                                   (300, 520, 1)],  # K = 1: B's strides (1, 1)
                         ids=lambda v: "x".join(map(str, v)))
def test_the_bench_kernel_for_rows_the_launch_leaves_misaligned(shape):
    """The tuned kernel where an 8-bit operand's K-byte rows stay misaligned (too few
    elements to pack: the tuning's unpacked_rows, session 36), exactly torch._int_mm's."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.contenders import sample_kernel
    from tilec.benchmarking.tuning import tuned_rules
    m, n, k = shape
    config, _, rules = tuned_rules(Case(m, n, k, "i8"))
    assert "unpacked_rows" in rules, rules
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda").t()  # [K, N], k-major
    out = torch.full((m, n), -1, dtype=torch.int32, device="cuda")
    sample_kernel("i8", "i32")(a, b, out, **config)
    torch.cuda.synchronize()
    expected = (a.cpu().numpy().astype(np.int64) @ b.cpu().numpy().astype(np.int64))
    assert np.array_equal(out.cpu().numpy(), expected.astype(np.int32))


# ----------------------------------------------------------------------------------- fp8

FP8_F32 = """
from tilec import f8e4m3, f32, tile


@tile
def f(A: f8e4m3[M, K], B: f8e4m3[N, K], C: f32[M, N], BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
"""
FP8_TORCH = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
# Relative Frobenius error against float64 of the decoded inputs. f32 C: the tensor cores'
# accumulation of fp8 products, which on Hopper keeps fewer bits than f32 (published
# measurements: about 14), so not f32's 1e-6; f16 C adds f16's rounding (2^-11).
FP8_TOLERANCE = {"f32": 2e-3, "f16": 3e-3}


def needs_fp8():
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        pytest.skip("fp8 tensor cores need sm_89 or later")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")


def fp8_operands(m, n, k, name, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, FP8_TORCH[name])
    a = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
    b = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
    return a, b


def fp8_reference(a, b):
    return a.float().double() @ b.float().double().t()


def fp8_rel_error(out, ref) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (127, 129, 65), (1000, 1003, 77),
                                   (4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_fp8_products_in_f32(shape, name, arch):
    needs_fp8()
    if arch == "sm_90a" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("sm_90a needs a Hopper GPU")
    m, n, k = shape
    kernel = load_file(Path("fp8.tile"), text=FP8_F32.replace("f8e4m3", name))["f"]
    a, b = fp8_operands(m, n, k, name)
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c, arch=arch)
    torch.cuda.synchronize()
    error = fp8_rel_error(c, fp8_reference(a, b))
    print(f"fp8 {name} {arch} {shape}: rel Frobenius error {error:.3g} against float64")
    assert error < FP8_TOLERANCE["f32"]


@pytest.mark.parametrize("config", [dict(), dict(stages=1), dict(swizzle="off"),
                                    dict(BM=128, BN=128, BK=128, warps=(2, 4), stages=4)],
                         ids=["defaults", "1stage", "unswizzled", "bench-tile"])
@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 1003, 77), (333, 517, 4099)],
                         ids=lambda s: "x".join(map(str, s)))
def test_fp8_sample_with_scales(shape, config):
    needs_fp8()
    m, n, k = shape
    kernel = load_file(SAMPLES / "fp8_gemm.py")["fp8_gemm"]
    a, b = fp8_operands(m, n, k, "f8e4m3", seed=1)
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    kernel(a, b, c, 0.5, 0.25, **config)
    torch.cuda.synchronize()
    error = fp8_rel_error(c, 0.125 * fp8_reference(a, b))
    print(f"fp8_gemm {shape} {config}: rel Frobenius error {error:.3g} against float64")
    assert error < FP8_TOLERANCE["f16"]


def test_fp8_sample_takes_numpy_uint8_bits():
    """numpy arrays of fp8 are uint8 arrays of the bits (tilec.target.fp8 encodes them)."""
    needs_fp8()
    from tilec.target import fp8
    m, n, k = 200, 300, 130
    rng = np.random.default_rng(2)
    a = fp8.encode(rng.standard_normal((m, k)), "f8e4m3")
    b = fp8.encode(rng.standard_normal((n, k)), "f8e4m3")
    c = np.full((m, n), np.nan, np.float16)
    load_file(SAMPLES / "fp8_gemm.py")["fp8_gemm"](a, b, c, 1.0, 1.0)
    reference = (fp8.decode(a, "f8e4m3").astype(np.float64)
                 @ fp8.decode(b, "f8e4m3").astype(np.float64).T)
    error = np.linalg.norm(c - reference) / np.linalg.norm(reference)
    assert error < FP8_TOLERANCE["f16"], error


def test_the_bench_fp8_kernel_matches_torch_scaled_mm():
    """`tilec bench --dtypes f8e4m3`'s kernel (samples/matmul.py in e4m3 into f16) on torch's
    column-major B, close to torch._scaled_mm's result and to float64."""
    needs_fp8()
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.contenders import sample_kernel
    from tilec.benchmarking.tuning import tuned_config
    m = n = k = 1024
    a, b_nk = fp8_operands(m, n, k, "f8e4m3", seed=3)
    b = b_nk.t()  # [K, N], k contiguous
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    sample_kernel("f8e4m3", "f16")(a, b, out, **tuned_config(Case(m, n, k, "f8e4m3")))
    one = torch.ones((), dtype=torch.float32, device="cuda")
    theirs = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.float16)
    torch.cuda.synchronize()
    reference = a.float().double() @ b.float().double()
    ours, cublas = fp8_rel_error(out, reference), fp8_rel_error(theirs, reference)
    print(f"1024^3 e4m3: tilec {ours:.3g}, torch._scaled_mm {cublas:.3g} against float64")
    assert ours < FP8_TOLERANCE["f16"]


# ------------------------------------------------------------ sm_90a: wgmma m64nNk32 (wgmma8)

WGMMA8_CONFIGS = [dict(BM=128, BN=256, BK=128, stages=3), dict(BM=128, BN=128, BK=128, stages=4),
                  dict(BM=256, BN=128, BK=128, stages=3),
                  dict(BM=128, BN=256, BK=128, stages=3, persistent=True),
                  dict(BM=128, BN=256, BK=128, stages=3, cluster=2),
                  # the bench's tuned "tiled" kernel (tuning.TUNED's wgmma8 entry)
                  dict(BM=128, BN=256, BK=128, stages=4, raster_group=8, persistent=True)]


def needs_hopper():
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma needs a Hopper GPU (sm_90a)")


def config_id(config) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


@pytest.mark.parametrize("config", WGMMA8_CONFIGS, ids=config_id)
# K a multiple of 16 (TMA reads 16-byte aligned rows; other K: test_int8_ragged_k_on_sm_90a),
# M and N ragged, K past the last whole BK.
@pytest.mark.parametrize("shape", [(127, 129, 64), (1000, 1003, 112), (333, 517, 4112),
                                   (4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_int8_on_wgmma_is_exact(shape, config):
    needs_hopper()
    kernel = int8_gemm()
    assert "wgmma.mma_async.sync.aligned.m64n" in kernel.ptx(arch="sm_90a", **config)
    m, n, k = shape
    a, b = operands(m, n, k, seed=5)
    cq = torch.full((m, n), -2**31, dtype=torch.int32, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, cq, c, 0.5, arch="sm_90a", **config)
    torch.cuda.synchronize()
    expected = exact(a, b)
    assert np.array_equal(cq.cpu().numpy().astype(np.int64), expected)
    assert np.array_equal(c.cpu().numpy(), expected.astype(np.float32) * np.float32(0.5))


@pytest.mark.parametrize("shape", [(1000, 1003, 77), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_int8_ragged_k_on_sm_90a(shape):
    """A K whose rows are not 16-byte aligned: packed at launch (the byte pack kernel), so
    the packed operands are TMA-readable and wgmma8 takes the block; exact."""
    needs_hopper()
    m, n, k = shape
    a, b = operands(m, n, k, seed=9)
    cq = torch.zeros((m, n), dtype=torch.int32, device="cuda")
    c = torch.zeros((m, n), device="cuda")
    int8_gemm()(a, b, cq, c, 1.0, arch="sm_90a", BM=128, BN=256, BK=128, stages=3)
    torch.cuda.synchronize()
    assert np.array_equal(cq.cpu().numpy().astype(np.int64), exact(a, b))


I32_OUT = """
from tilec import i8, i32, tile


@tile
def f(A: i8[M, K], B: i8[N, K], C: i32[M, N], BM=128, BN=128, BK=128):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], i32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
"""


@pytest.mark.parametrize("options", [dict(stages=3), dict(stages=2, persistent=True),
                                     dict(BN=256, stages=2)],
                         ids=["one-tile", "persistent", "128x256"])
# N a multiple of 4 (C's rows 16-byte aligned): TMA-stored; N = 1003: stored directly.
@pytest.mark.parametrize("shape, via", [((127, 132, 64), "tma"), ((1000, 1004, 4112), "tma"),
                                        ((4096, 4096, 4096), "tma"), ((333, 1003, 160), "direct")],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_an_i32_output_is_tma_stored_exactly(shape, via, options):
    """wgmma8's i32 sums staged with st.shared.v2.b32 in TMA's swizzle and TMA-stored
    (passes/tma_store.py), exact against the float64 product; the epilogue the launch took
    is asserted from its prepared launch."""
    needs_hopper()
    kernel = load_file(Path("i32_out.tile"), text=I32_OUT)["f"]
    m, n, k = shape
    a, b = operands(m, n, k, seed=21)
    c = torch.full((m, n), -2**31, dtype=torch.int32, device="cuda")
    launch = kernel.prepare(a, b, c, arch="sm_90a", **options)
    assert launch.compiled.kernel.schedule.epilogue.via == via
    launch()
    torch.cuda.synchronize()
    assert np.array_equal(c.cpu().numpy().astype(np.int64), exact(a, b))


@pytest.mark.parametrize("config", WGMMA8_CONFIGS, ids=config_id)
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("shape", [(127, 129, 64), (1000, 1008, 4096), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_fp8_on_wgmma(shape, name, config):
    needs_hopper()
    needs_fp8()
    kernel = load_file(Path("fp8.tile"), text=FP8_F32.replace("f8e4m3", name))["f"]
    assert "wgmma.mma_async.sync.aligned.m64n" in kernel.ptx(arch="sm_90a", **config)
    m, n, k = shape
    a, b = fp8_operands(m, n, k, name, seed=6)
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c, arch="sm_90a", **config)
    torch.cuda.synchronize()
    error = fp8_rel_error(c, fp8_reference(a, b))
    print(f"wgmma fp8 {name} {shape} {config}: rel Frobenius error {error:.3g}")
    assert error < FP8_TOLERANCE["f32"]


@pytest.mark.parametrize("splits", [3, 7])
@pytest.mark.parametrize("shape", [(1000, 1003, 4112), (256, 256, 16384)],
                         ids=lambda s: "x".join(map(str, s)))
def test_int8_split_k_on_wgmma_is_exact_and_bitwise_the_one_slice_result(shape, splits):
    """wgmma8's i32 slices meet on the consumers' barrier: exact, and the same bits as one
    slice (integer sums in any order)."""
    needs_hopper()
    kernel = int8_gemm()
    config = dict(arch="sm_90a", BM=128, BN=128, BK=128, stages=4)
    assert "wgmma.mma_async.sync.aligned.m64n" in kernel.ptx(split_k=splits, **config)
    *results, (a, b) = split_and_whole(shape, splits, **config)
    assert np.array_equal(results[0][0].astype(np.int64), exact(a, b))
    assert all(x.tobytes() == y.tobytes() for x, y in zip(*results))
