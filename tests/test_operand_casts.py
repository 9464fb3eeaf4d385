"""Operands converted in the K loop (issue 13): ``a @ B[...].to(f16)`` with B stored in bf16
(or A in bf16 converted to f16, and f16 to bf16). The operand is copied to shared memory and
loaded into fragments as stored; ``frag.cvt`` converts each fragment in registers (bf16 ->
f32 exactly, then cvt.rn to the product's dtype) before mma.sync. wgmma (sm_90a) reads its
operands from shared memory as stored, so it declines such a block and mma.sync takes it;
explain says both. The lowered kernel, run by the CPU executor, matches float64 with the
conversion's rounding; ptxas takes the PTX on every target; other conversions (f32, or in
the epilogue of the loop) are refused at the `.to`.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilec.cpu.interpreter import round_to_dtype, run_kernel
from tilec.errors import TileConfigError
from tilec.families.catalogue import op_catalogue
from tilec.ir.types import BF16, F16
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_ptxas import assert_assembles
from .test_vectors import to_dtype

SOURCE = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: {a}[M, K], B: {b}[K, N], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += {lhs} @ {rhs}
        C[m * BM : +BM, n * BN : +BN] = acc
'''
LHS, RHS = "A[m * BM : +BM, k : +BK]", "B[k : +BK, n * BN : +BN]"
# (A's dtype, B's dtype, the product's dtype): which operand is converted follows.
CASES = [("f16", "bf16", "f16"), ("bf16", "f16", "f16"), ("f16", "bf16", "bf16")]
DTYPES = {"f16": F16, "bf16": BF16}


def function(a: str, b: str, product: str, lhs: str = LHS, rhs: str = RHS):
    if a != product:
        lhs += f".to({product})"
    if b != product:
        rhs += f".to({product})"
    text = SOURCE.format(a=a, b=b, lhs=lhs, rhs=rhs)
    return load_file("casts.py", text=text)["gemm"]


@pytest.mark.parametrize("a, b, product", CASES)
@pytest.mark.parametrize("arch, consts", [("sm_80", {}),
                                          ("sm_90a", dict(BM=128, BN=256, BK=64))])
def test_the_lowered_kernel_converts_in_registers(a, b, product, arch, consts):
    kernel = run_pipeline(function(a, b, product).lower(**consts),
                          Options(arch=arch, stages=3)).kernel
    plan = kernel.schedule.tiling
    assert plan.kind == "mma" and plan.dtype == product
    converted = {op.role: op.source for op in plan.operands if op.source}
    assert converted == {role: d for role, d in (("A", a), ("B", b)) if d != product}
    cvts = [op for op in kernel.walk() if op.name == "frag.cvt"]
    assert cvts and all(op.result.type.dtype == DTYPES[product] for op in cvts)
    rng = np.random.default_rng(2)
    M, N, K = 150, 140, 70
    a_arg, a_exact = to_dtype(rng.standard_normal((M, K)), a)
    b_arg, b_exact = to_dtype(rng.standard_normal((K, N)), b)
    c = np.full((M, N), np.nan, dtype=np.float32)
    run_kernel(kernel, {"A": a_arg, "B": b_arg, "C": c}, ops=op_catalogue())
    # The converted operand rounded once to the product's dtype, then exact products.
    a_used = round_to_dtype(DTYPES[product], a_exact.astype(np.float32)).astype(np.float64)
    b_used = round_to_dtype(DTYPES[product], b_exact.astype(np.float32)).astype(np.float64)
    want = a_used @ b_used
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    # ... and not the product of the unconverted values (bf16 -> f16 rounds most of them).
    if (a, b, product) == ("f16", "bf16", "f16"):
        assert not np.allclose(c, a_exact @ b_exact, rtol=1e-7, atol=0)


@pytest.mark.parametrize("a, b, product", CASES)
def test_ptxas_takes_converted_operands(a, b, product, tmp_path):
    kernel = function(a, b, product)
    ptx = kernel.ptx(arch="sm_80")
    assert ("cvt.rn.f16x2.f32" if product == "f16" else "cvt.rn.bf16x2.f32") in ptx
    assert_assembles(lambda arch: kernel.ptx(arch=arch, M=1000, N=1003, K=77), tmp_path)
    assert_assembles(lambda arch: kernel.ptx(arch=arch, BM=128, BN=256, BK=64), tmp_path,
                     archs=("sm_90a",))


def test_explain_says_where_the_conversion_happens_and_why_not_wgmma():
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(function("f16", "bf16", "f16").compile(
        arch="sm_90a", BM=128, BN=256, BK=64)))
    assert "8 x bf16 = 16 B" in text, text
    assert ("converted         operand B: stored bf16, each fragment converted to f16 in "
            "registers after its ldmatrix.x4") in text, text
    assert ("not wgmma         the mma family multiplies: operand B is converted from bf16 "
            "in registers") in text, text


@pytest.mark.parametrize("b, rhs, message, caret", [
    ("f32", RHS + ".to(f16)", "converted in the K loop from f32 to f16, which is not "
     "supported (converted operands: bf16 to f16, f16 to bf16, f8e4m3 to bf16, f8e4m3 to f16, "
     "f8e5m2 to bf16, f8e5m2 to f16, i8 to bf16, i8 to f16)",
     "to(f16)"),
])
def test_other_conversions_are_refused_at_the_conversion(b, rhs, message, caret):
    text = SOURCE.format(a="f16", b=b, lhs=LHS, rhs=rhs)
    with pytest.raises(TileConfigError) as info:
        load_file("casts.py", text=text)["gemm"].compile()
    err = info.value
    assert message in err.message, str(err)
    line = text.splitlines()[err.loc.line - 1]
    assert line[err.loc.col - 1:].startswith(caret), (line, err.loc)


def test_a_converted_operand_used_again_in_the_loop_is_refused():
    body = ("            w = " + RHS + ".to(f16)\n"
            "            acc += " + LHS + " @ w\n"
            "            twice = w + w\n")
    text = SOURCE.format(a="f16", b="bf16", lhs=LHS, rhs=RHS).replace(
        "            acc += " + LHS + " @ " + RHS + "\n", body)
    assert "twice = w + w" in text
    with pytest.raises(TileConfigError) as info:
        load_file("casts.py", text=text)["gemm"].compile()
    assert "converted in the K loop and used there again" in info.value.message
