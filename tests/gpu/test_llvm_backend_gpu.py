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


def _pack_cases():
    from tests.gpu.test_packing_gpu import (
        test_pack_kernel_copies_rows_and_zero_fills_the_padding as check)
    (marker,) = [m for m in check.pytestmark if m.name == "parametrize"]
    return check, marker.args[1]


@pytest.mark.parametrize("case", range(len(_pack_cases()[1])))
def test_the_llvm_pack_kernel_copies_rows_as_ours_does(case, monkeypatch):
    """The pack kernel's own GPU test (every row layout, misaligned starts, padding rows,
    threads looping over rows), run on the pack kernel LLVM compiled."""
    from tilec.backend.llvm.pack import pack_ptx
    from tilec.launch import packing
    monkeypatch.setattr(packing, "pack_ptx", pack_ptx)
    monkeypatch.setattr(packing, "_FUNCTIONS", {})
    check, cases = _pack_cases()
    assert "Generated by LLVM NVPTX" in packing.backend_pack_ptx("ptx")(2, "sm_80")
    check(*cases[case])
