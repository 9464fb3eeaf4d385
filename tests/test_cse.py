"""The cse pass on its own: repeated pure expressions become one op chain, memory reads merge
only where no effect lies between them, the result computes what the input did (CPU
interpreter), and the PTX lowers a repeated epilogue expression once per element."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tilec.compiler import compile_kernel
from tilec.cpu.interpreter import run_kernel
from tilec.ir import print_kernel, verify
from tilec.ir.core import Builder, Op
from tilec.ir.types import i32
from tilec.kernel import load_file
from tilec.options import Options
from tilec.passes import cse

GEMM = '''
from tilec import f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f16[N], BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        x = acc + bias[n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = ({body}).to(f16)
'''
# Three spellings of sqrt(|acc + bias|): by a name, and with the bias loaded again.
REPEATED = "sqrt(abs(x)) * sqrt(abs(x)) + sqrt(abs(acc + bias[n * BN : +BN]))"

# Y is read, written and read again: the two reads see different values.
READ_WRITE_READ = '''
from tilec import f32, tile

@tile
def rw(X: f32[N], Y: f32[N], BN=64):
    for n in grid(cdiv(N, BN)):
        a = Y[n * BN : +BN]
        Y[n * BN : +BN] = X[n * BN : +BN] + 1.0
        b = Y[n * BN : +BN]
        Y[n * BN : +BN] = a + b + Y[n * BN : +BN]
'''


def kernel_of(source: str, **format_args):
    (function,) = load_file("cse.tile", text=source.format(**format_args)).values()
    return function


def op_names(kernel) -> list[str]:
    return [op.name for op in kernel.walk()]


def run_cse(kernel):
    result = cse.run(kernel, Options())
    verify(result)
    return result


def test_a_repeated_epilogue_expression_becomes_one_chain() -> None:
    kernel = kernel_of(GEMM, body=REPEATED).lower()
    assert op_names(kernel).count("tile.sqrt") == 3
    merged = run_cse(kernel)
    names = op_names(merged)
    assert names.count("tile.sqrt") == names.count("tile.abs") == 1
    # The bias is loaded, converted and broadcast once; each named constant is one op, and
    # BM and BN stay two though both are 32.
    assert names.count("tile.load") == 3 and names.count("tile.broadcast") == 1
    constants = [(op.result.hint, op.attrs["value"]) for op in merged.walk()
                 if op.name == "arith.constant"]
    assert len(constants) == len(set(constants))
    assert {("BM", 32), ("BN", 32)} <= set(constants)
    sqrt = next(op for op in merged.walk() if op.name == "tile.sqrt")
    assert sqrt.loc is not None and sqrt.loc.line == 11  # the first spelling's place


def test_cse_leaves_its_input_alone_and_a_second_run_changes_nothing() -> None:
    kernel = kernel_of(GEMM, body=REPEATED).lower()
    before = print_kernel(kernel, locs=True)
    once = run_cse(kernel)
    assert print_kernel(kernel, locs=True) == before
    assert print_kernel(run_cse(once)) == print_kernel(once)


@pytest.mark.parametrize("body", [REPEATED, "gelu(x) + gelu(acc) + x * x"])
def test_the_merged_program_computes_what_the_input_did(body: str) -> None:
    kernel = kernel_of(GEMM, body=body).lower()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 24)).astype(np.float16)
    b = rng.standard_normal((24, 36)).astype(np.float16)
    bias = rng.standard_normal(36).astype(np.float16)
    outputs = []
    for program in (kernel, run_cse(kernel)):
        c = np.full((40, 36), np.nan, np.float16)
        run_kernel(program, {"A": a, "B": b, "C": c, "bias": bias})
        outputs.append(c)
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_reads_with_a_store_between_them_stay_apart() -> None:
    kernel = run_cse(kernel_of(READ_WRITE_READ).lower())
    reads = [op for op in kernel.walk() if op.name == "tile.load" and op.operands[0].hint == "Y"]
    # a, and b: the last statement's own read of Y comes before its store, after nothing b
    # did not see, so it is b.
    assert len(reads) == 2
    x = np.arange(64, dtype=np.float32)
    y = np.full(64, 5.0, np.float32)
    run_kernel(kernel, {"X": x, "Y": y})
    np.testing.assert_array_equal(y, 5.0 + 2 * (x + 1.0))


def test_reads_with_no_effect_between_them_merge() -> None:
    source = READ_WRITE_READ.replace("        Y[n * BN : +BN] = X[n * BN : +BN] + 1.0\n", "")
    kernel = run_cse(kernel_of(source).lower())
    reads = [op for op in kernel.walk() if op.name == "tile.load" and op.operands[0].hint == "Y"]
    assert len(reads) == 1


def test_ops_with_effects_and_unknown_ops_are_never_merged() -> None:
    kernel = kernel_of(GEMM, body="x").lower()
    store = next(op for op in kernel.walk() if op.name == "tile.store")
    kernel.body.ops.append(Op(store.name, list(store.operands), []))
    # An op no definition describes may have effects: two identical ones both stay.
    builder = Builder(kernel.body)
    for _ in range(2):
        builder.value("mine.effect", [store.operands[1]], i32)
    merged = cse.run(kernel, Options())
    assert op_names(merged).count("tile.store") == 2
    assert op_names(merged).count("mine.effect") == 2


def test_values_defined_in_a_loop_do_not_leak_out_of_it() -> None:
    # A[m * BM...]'s row offset is computed inside the K loop; the store's, after it, is the
    # same expression but must be computed again (the loop's value is out of scope there).
    kernel = run_cse(kernel_of(GEMM, body="x").lower())
    loop = next(op for op in kernel.body.ops if op.name == "scf.for")
    inside = {op.result for op in loop.regions[0].ops if op.name == "arith.mul"}
    store = next(op for op in kernel.body.ops if op.name == "tile.store")
    assert not inside & set(store.operands)


def test_the_ptx_computes_a_repeated_expression_once_per_element() -> None:
    function = kernel_of(GEMM, body=REPEATED)
    # A 32x32 tile on one warp: 32 elements a thread.
    merged = compile_kernel(function.lower(), Options(warps=(1, 1))).ptx
    assert len(re.findall(r"\bsqrt\.rn\.f32\b", merged)) == 32
    unmerged = compile_kernel(function.lower(), Options(warps=(1, 1), disable=("cse",))).ptx
    assert len(re.findall(r"\bsqrt\.rn\.f32\b", unmerged)) == 3 * 32
