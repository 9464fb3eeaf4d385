"""The llvm backend on the GPU: every sample through both backends, at ragged and square
sizes, stages 1 to 4, split-K and packed operands, each result checked against float64
and the two backends' results against each other.

Bitwise equal where both backends issue the same arithmetic in the same order: the mma.sync,
tf32 and FFMA products (each accumulator's chain of mma/fma in the PTX backend's order),
split-K's sum in slice order, and C stored as it is. The fused epilogue (gemm_epilogue) is
compared within its dtype's tolerance instead: LLVM may contract alpha * acc + beta * c into
an fma where ptxas keeps a mul and an add, or the other way round.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")
pytest.importorskip("llvmlite.binding")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5, "tf32": 5e-3}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
# Ragged (masks on every edge, odd K and N: operands packed at launch) and square.
SHAPES = [(1000, 1003, 77), (257, 263, 135), (512, 512, 512), (1024, 1024, 1024)]
SHAPE_IDS = ["ragged", "ragged-odd", "square-512", "square-1024"]


def sample(name: str, dtype: str):
    path = SAMPLES / f"{name}.py"
    text = path.read_text()
    if dtype != "f32":
        text = re.sub(r"\bf16\b", dtype, text)
    (function,) = load_file(path, text=text).values()
    return function


def rel_error(out, ref) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - ref) / max(float(torch.linalg.norm(ref)),
                                                            1e-30))


def operands(m, n, k, dtype, b_transposed=False):
    b_shape = (n, k) if b_transposed else (k, n)
    return (torch.randn(m, k, device="cuda").to(TORCH[dtype]),
            torch.randn(*b_shape, device="cuda").to(TORCH[dtype]))


def both(fn, make_args, **options):
    """The outputs of the PTX and the llvm backends' kernels, run on fresh copies of the
    same arguments (the written tensor is the argument ``make_args`` returns last)."""
    outs = []
    for backend in ("ptx", "llvm"):
        args = make_args()
        fn(*args, backend=backend, **options)
        torch.cuda.synchronize()
        outs.append(args[2])
    return outs


def check_same_bits(ptx, llvm) -> None:
    differ = int((ptx.view(torch.int32) != llvm.view(torch.int32)).sum()) if ptx.dtype == \
        torch.float32 else int((ptx.view(torch.int16) != llvm.view(torch.int16)).sum())
    assert differ == 0, f"{differ} of {ptx.numel()} elements differ between the backends"


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["matmul", "matmul_bt"])
def test_matmul_samples(name, dtype, stages, shape):
    m, n, k = shape
    a, b = operands(m, n, k, dtype, b_transposed=name == "matmul_bt")

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda")
    ptx, llvm = both(sample(name, dtype), args, stages=stages)
    check_same_bits(ptx, llvm)
    ref = a.double() @ (b.double().T if name == "matmul_bt" else b.double())
    assert rel_error(llvm, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("stages", [1, 3, 4])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gemm_epilogue(dtype, stages, shape):
    m, n, k = shape
    a, b = operands(m, n, k, dtype)
    c0 = torch.randn(m, n, device="cuda").to(TORCH[dtype])
    bias = torch.randn(n, device="cuda")

    def args():
        return a, b, c0.clone(), bias, 0.75, -0.5
    ptx, llvm = both(sample("gemm_epilogue", dtype), args, stages=stages)
    ref = torch.relu(0.75 * (a.double() @ b.double()) - 0.5 * c0.double() + bias.double())
    # Each result is rounded to the dtype once: the two differ by at most that rounding.
    assert rel_error(llvm, ptx.double()) < TOLERANCE[dtype]
    assert rel_error(llvm, ref) < TOLERANCE[dtype] + 1e-3
    assert rel_error(ptx, ref) < TOLERANCE[dtype] + 1e-3


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("math", ["ffma", "tf32"])
@pytest.mark.parametrize("stages", [2, 3])
def test_sgemm_ffma_and_tf32(math, stages, shape):
    m, n, k = shape
    a, b = operands(m, n, k, "f32")

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda")
    ptx, llvm = both(sample("sgemm", "f32"), args, stages=stages, f32_math=math)
    check_same_bits(ptx, llvm)
    assert rel_error(llvm, a.double() @ b.double()) < TOLERANCE["f32" if math == "ffma"
                                                                else "tf32"]


@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("name, dtype", [("matmul", "f16"), ("matmul", "bf16"),
                                         ("sgemm", "f32")])
@pytest.mark.parametrize("shape", [(16, 1024, 4096), (127, 129, 1000), (200, 300, 70)],
                         ids=["skinny", "ragged", "short-k"])
def test_split_k(name, dtype, splits, shape):
    m, n, k = shape
    a, b = operands(m, n, k, dtype)
    config = dict(BM=32, BN=64, BK=32, stages=4) if dtype == "f32" else {}

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda")
    ptx, llvm = both(sample(name, dtype), args, split_k=splits, **config)
    check_same_bits(ptx, llvm)
    assert rel_error(llvm, a.double() @ b.double()) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_split_k_epilogue_reads_c_after_the_meeting(dtype):
    m, n, k = 100, 260, 900
    a, b = operands(m, n, k, dtype)
    c0 = torch.randn(m, n, device="cuda").to(TORCH[dtype])
    bias = torch.randn(n, device="cuda")

    def args():
        return a, b, c0.clone(), bias, 0.75, -0.5
    ptx, llvm = both(sample("gemm_epilogue", dtype), args, split_k=4)
    ref = torch.relu(0.75 * (a.double() @ b.double()) - 0.5 * c0.double() + bias.double())
    assert rel_error(llvm, ref) < TOLERANCE[dtype] + 1e-3
    assert rel_error(llvm, ptx.double()) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", ["matmul", "matmul_bt"])
def test_packed_operands(name, dtype):
    """Rows 2-byte aligned (odd K): the launch packs them, then runs the llvm kernel."""
    m, n, k = 1000, 1003, 77
    a, b = operands(m, n, k, dtype, b_transposed=name == "matmul_bt")
    fn = sample(name, dtype)
    c = torch.full((m, n), float("nan"), device="cuda")
    launch = fn.prepare(a, b, c, backend="llvm", pack="always")
    assert launch.packing, "expected the launch to pack the misaligned operands"
    assert "Generated by LLVM NVPTX" in launch.compiled.ptx
    launch()
    torch.cuda.synchronize()
    ptx = torch.full((m, n), float("nan"), device="cuda")
    fn(a, b, ptx, pack="always")
    torch.cuda.synchronize()
    check_same_bits(ptx, c)
    ref = a.double() @ (b.double().T if name == "matmul_bt" else b.double())
    assert rel_error(c, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("level", [0, 1, 2])
def test_every_llvm_opt_level_computes_the_same(level):
    m, n, k = 1000, 1003, 77
    a, b = operands(m, n, k, "f16")

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda")
    fn = sample("matmul", "f16")
    ptx, _ = both(fn, args)
    c = args()[2]
    fn(a, b, c, backend="llvm", llvm_opt=level)
    torch.cuda.synchronize()
    check_same_bits(ptx, c)


# The pack kernel through LLVM: tests/gpu/test_packing_gpu.py runs its every row layout for
# both backends (its ``backend`` parameter).


# -- the samples and DSL features added after the first llvm merge (llvm-catchup) -------------
# Bitwise equal where the arithmetic is the same sequence in both backends: bmm, int8 (exact
# integers: required), fp8 (one multiply by the scalar scale after the same mma chain), where
# (compares and selects, 0.125 x alone), frag.cvt (exact widening, one rounding, then the
# same mma chain). Within the dtype's tolerance where LLVM may contract differently: gelu (its
# fma-heavy erfc sequence next to acc + bias) and the unit views (acc * scale + bias).

def outputs_of_both(fn, make_args, written, **options):
    """The tensors at positions ``written`` after the PTX and the llvm backends' kernels
    ran on fresh copies of the same arguments: [(ptx, llvm), ...]."""
    runs = []
    for backend in ("ptx", "llvm"):
        args = make_args()
        fn(*args, backend=backend, **options)
        torch.cuda.synchronize()
        runs.append([args[i] for i in written])
    return list(zip(*runs))


def same_bits(ptx, llvm) -> None:
    views = {1: torch.int8, 2: torch.int16, 4: torch.int32}
    width = views[ptx.element_size()]
    differ = int((ptx.view(width) != llvm.view(width)).sum())
    assert differ == 0, f"{differ} of {ptx.numel()} elements differ between the backends"


# The batch count differs from both tile counts but in square-512, which once hid a grid that
# folded the batch and M axes (tests/test_llvm_grid.py); "wide": one M tile, eight N tiles.
BATCHED = [(3, 1000, 1003, 77), (2, 257, 263, 135), (4, 512, 512, 512), (5, 100, 1000, 64)]


@pytest.mark.parametrize("shape", BATCHED, ids=["ragged", "ragged-odd", "square-512", "wide"])
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("shared_b", [False, True], ids=["own-b", "expanded-b"])
def test_bmm_sample(shape, stages, shared_b):
    """Expanded B: one matrix for every batch, a batch stride of 0."""
    bt, m, n, k = shape
    a = torch.randn(bt, m, k, device="cuda").half()
    b = (torch.randn(k, n, device="cuda").half().expand(bt, k, n) if shared_b
         else torch.randn(bt, k, n, device="cuda").half())

    def args():
        return a, b, torch.full((bt, m, n), float("nan"), device="cuda")
    ((ptx, llvm),) = outputs_of_both(sample("bmm", "f16"), args, [2], stages=stages)
    same_bits(ptx, llvm)
    assert rel_error(llvm, torch.bmm(a.double(), b.double())) < TOLERANCE["f16"]


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_gemm_gelu_sample(shape):
    m, n, k = shape
    a, b = operands(m, n, k, "f16")
    bias = torch.randn(n, device="cuda").half()

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda").half(), bias
    ((ptx, llvm),) = outputs_of_both(sample("gemm_gelu", "f16"), args, [2])
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    # LLVM may fuse the sum and the erfc sequence's products differently: each result is
    # rounded to f16 once, so the backends differ by about that rounding.
    assert rel_error(llvm, ptx.double()) < TOLERANCE["f16"]
    assert rel_error(llvm, ref) < TOLERANCE["f16"] + 1e-3


def int8_operands(m, n, k):
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda")
    a[0, :] = -128  # the largest sums
    b[0, :] = -128
    return a, b


@pytest.mark.parametrize("shape", [(1, 1, 1), (127, 129, 65), (1000, 1003, 77),
                                   (333, 517, 4099)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("stages", [1, 3])
def test_int8_gemm_sample_is_exact_in_both(shape, stages):
    m, n, k = shape
    a, b = int8_operands(m, n, k)

    def args():
        return (a, b, torch.full((m, n), -2**31, dtype=torch.int32, device="cuda"),
                torch.full((m, n), float("nan"), device="cuda"), 0.5)
    (cq_ptx, cq), (c_ptx, c) = outputs_of_both(sample("int8_gemm", "f32"), args, [2, 3],
                                               stages=stages)
    same_bits(cq_ptx, cq)
    same_bits(c_ptx, c)
    exact = (a.double() @ b.double().T).long()  # integers below 2**53: exact
    assert torch.equal(cq.long(), exact)
    assert torch.equal(c, exact.float() * 0.5)


INT8_CONVERSIONS = """
from tilec import f16, f32, i8, i32, tile


@tile
def f(A: i8[M, K], B: i8[N, K], W: i8[M, N], C8: i8[M, N], Ch: f16[M, N], Cs: i8[M, N],
      Cw: f32[M, N], BM=64, BN=64, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], i32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C8[m * BM : +BM, n * BN : +BN] = acc.to(i8)
        Ch[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.25).to(f16)
        Cs[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.001).to(i8)
        Cw[m * BM : +BM, n * BN : +BN] = W[m * BM : +BM, n * BN : +BN].to(f32)
"""


def test_int8_conversions_are_exact_in_both():
    """i32 -> i8 keeps the low byte, f32 -> i8 rounds to nearest even and saturates, i8 ->
    f32 is exact: the same bits from both backends, and the CPU semantics'."""
    kernel = load_file(Path("conversions.tile"), text=INT8_CONVERSIONS)["f"]
    m, n, k = 200, 136, 300
    a, b = int8_operands(m, n, k)
    w = torch.randint(-128, 128, (m, n), dtype=torch.int8, device="cuda")

    def args():
        return (a, b, w, torch.zeros((m, n), dtype=torch.int8, device="cuda"),
                torch.zeros((m, n), dtype=torch.float16, device="cuda"),
                torch.zeros((m, n), dtype=torch.int8, device="cuda"),
                torch.full((m, n), float("nan"), device="cuda"))
    results = outputs_of_both(kernel, args, [3, 4, 5, 6])
    for ptx, llvm in results:
        same_bits(ptx, llvm)
    (_, c8), (_, ch), (_, cs), (_, cw) = results
    exact = (a.double() @ b.double().T).long().cpu().numpy()
    assert np.array_equal(c8.cpu().numpy(), exact.astype(np.int8))
    assert np.array_equal(ch.cpu().numpy(), (exact.astype(np.float32) * 0.25)
                          .astype(np.float16))
    scaled = np.rint((exact.astype(np.float32) * np.float32(0.001)).astype(np.float64))
    assert np.array_equal(cs.cpu().numpy(), np.clip(scaled, -128, 127).astype(np.int8))
    assert np.array_equal(cw.cpu().numpy(), w.cpu().numpy().astype(np.float32))


@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 1003, 77)],
                         ids=lambda s: "x".join(map(str, s)))
def test_fp8_gemm_sample(fmt, shape):
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9) or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("fp8 tensor cores need sm_89 or later and a torch with float8 dtypes")
    m, n, k = shape
    dtype = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[fmt]
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(n, k, device="cuda").to(dtype)
    text = (SAMPLES / "fp8_gemm.py").read_text().replace("f8e4m3", fmt)
    (fn,) = load_file(SAMPLES / "fp8_gemm.py", text=text).values()

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda").half(), 0.5, 0.25
    ((ptx, llvm),) = outputs_of_both(fn, args, [2], arch="sm_90")
    same_bits(ptx, llvm)
    ref = 0.125 * (a.float().double() @ b.float().double().T)
    assert rel_error(llvm, ref) < 3e-3  # tests/gpu/test_int8_fp8_gpu.py's f16 bound


def test_where_in_the_epilogue():
    from tests.test_where import gemm
    m, n, k = 1000, 1003, 77
    a, b = operands(m, n, k, "f16")
    bias = torch.randn(n, device="cuda")

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda").half(), bias, -0.5
    ((ptx, llvm),) = outputs_of_both(gemm(), args, [2])
    same_bits(ptx, llvm)
    x = a.double() @ b.double() + bias.double()
    ref = torch.where((x > -0.5) & (x < 2.0), x, 0.125 * x)
    assert rel_error(llvm, ref) < TOLERANCE["f16"]


@pytest.mark.parametrize("stored, product", [("bf16", "f16"), ("f16", "bf16")])
def test_operands_converted_in_registers(stored, product):
    """B stored as ``stored``, converted by frag.cvt to the product's dtype."""
    from tests.test_operand_casts import LHS, RHS, SOURCE
    a_dtype = product
    text = SOURCE.format(a=a_dtype, b=stored, lhs=LHS, rhs=f"{RHS}.to({product})")
    fn = load_file("casts.py", text=text)["gemm"]
    m, n, k = 1000, 1003, 136
    a = torch.randn(m, k, device="cuda").to(TORCH[a_dtype])
    b = torch.randn(k, n, device="cuda").to(TORCH[stored])

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda")
    ((ptx, llvm),) = outputs_of_both(fn, args, [2])
    same_bits(ptx, llvm)
    ref = a.double() @ b.to(TORCH[product]).double()
    assert rel_error(llvm, ref) < TOLERANCE[product]


def test_unit_views_in_the_epilogue():
    from tests.test_unit_views import function
    m, n, k, e = 1000, 1003, 77, 5
    a, b = operands(m, n, k, "f16")
    bias = torch.randn(1, n, device="cuda").half()
    scale = torch.randn(m, 1, device="cuda")
    table = torch.randn(e, n, device="cuda")
    unit = torch.full((1, 1), 1.5, device="cuda")

    def args():
        return (a, b, torch.full((m, n), float("nan"), device="cuda"), bias, scale, table,
                unit, 3)
    ((ptx, llvm),) = outputs_of_both(function(), args, [2])
    y = (a.double() @ b.double()) * scale.double() + bias.double()
    ref = (y + table[3:4].double()) * 1.5
    # LLVM may contract acc * scale + bias into one fma.
    assert rel_error(llvm, ptx.double()) < TOLERANCE["f32"]
    assert rel_error(llvm, ref) < TOLERANCE["f16"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_tuned_ragged_4k_with_packed_operands(dtype):
    """tilec bench's ragged 4K row (4095 x 4097 x 4093, the tuned 128x128x64 tiles, 3 stages,
    A and B packed with K padded, C in the input dtype): the K loop's copies masked at M's
    and N's edges (the predicate folded into the row bound through LLVM) give the PTX
    backend's bits."""
    from tilec.benchmarking.contenders import sample_kernel
    m, n, k = 4095, 4097, 4093
    a, b = operands(m, n, k, dtype)
    fn = sample_kernel(dtype, dtype)

    def args():
        return a, b, torch.full((m, n), float("nan"), device="cuda").to(TORCH[dtype])
    ((ptx, llvm),) = outputs_of_both(fn, args, [2], BM=128, BN=128, BK=64, stages=3,
                                     warps=(2, 2))
    same_bits(ptx, llvm)
    assert rel_error(llvm, a.double() @ b.double()) < TOLERANCE[dtype]


# -- 8-bit weights converted in registers (frag.ldbytes + frag.cvt): w8a16 and wfp8a16 ----
# Bitwise equal: the conversions are exact in both backends (i8: the same xor/prmt/sub
# sequence; fp8: the same cvt.rn.f16x2.e4m3x2 / .e5m2x2, through f32 for bf16), then the same
# mma chain and one multiply by the channel's scale.

@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 1003, 77), (16, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("weights, dtype", [("i8", "f16"), ("i8", "bf16"),
                                            ("f8e4m3", "f16"), ("f8e4m3", "bf16"),
                                            ("f8e5m2", "f16")])
def test_weights_converted_in_registers(weights, dtype, shape, stages):
    from tilec.target import fp8
    m, n, k = shape
    if weights != "i8":
        if torch.cuda.get_device_capability() < (8, 9) or not hasattr(torch, "float8_e5m2"):
            pytest.skip("fp8 conversions need sm_89 or later and a torch with float8 dtypes")
    rng = np.random.default_rng(3)
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).cuda().to(
        TORCH[dtype])
    if weights == "i8":
        bits = rng.integers(-128, 128, (n, k), dtype=np.int8)
        w, w_exact = torch.from_numpy(bits).cuda(), bits.astype(np.float64)
        fn = sample("w8a16", dtype)
    else:
        bits = fp8.encode(rng.standard_normal((n, k)) * 8, weights)
        torch_dtype = {"f8e4m3": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2}[weights]
        w = torch.from_numpy(bits).cuda().view(torch_dtype)
        w_exact = fp8.decode(bits, weights).astype(np.float64)
        text = (SAMPLES / "wfp8a16.py").read_text().replace("f8e4m3", weights)
        text = re.sub(r"\bf16\b", dtype, text)
        (fn,) = load_file(SAMPLES / "wfp8a16.py", text=text).values()
    rms = np.sqrt(np.mean(w_exact ** 2, axis=1)) + 2.0 ** -20
    scale = torch.from_numpy((1.0 / (np.sqrt(k) * rms)).astype(np.float32)).cuda()

    def args():
        return a, w, scale, torch.full((m, n), float("nan"), device="cuda").to(TORCH[dtype])
    ((ptx, llvm),) = outputs_of_both(fn, args, [3], stages=stages)
    same_bits(ptx, llvm)
    ref = (a.double() @ torch.from_numpy(w_exact).cuda().T) * scale.double()
    assert rel_error(llvm, ref) < TOLERANCE[dtype]
