"""[1, N] and [M, 1] views of 2-D tensors in an epilogue (issue 13): ``bias: f16[1, N]`` loaded
as ``bias[0:1, n * BN : +BN]`` and ``scale: f32[M, 1]`` as ``scale[m * BM : +BM, 0:1]``
broadcast along rows / columns as 1-D vectors do (tests/test_vectors.py). The syntax is
numpy's: a slice of extent 1 keeps the dim, and the [1, BN] / [BM, 1] tile broadcasts by
numpy's rule. The fragments pass loads each as one ``frag.load`` whose extent-1 tensor dim no
tile dim walks (it is read at its offset alone: any row of a [E, N] tensor too); the lowered
kernel, run by the CPU executor, matches float64 at ragged sizes; ptxas takes the PTX on every
target; a malformed slice of a dim declared with one element is an error with a caret.
"""
from __future__ import annotations

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError, TileShapeError
from tilec.families.catalogue import op_catalogue
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_ptxas import assert_assembles
from .test_vectors import to_dtype

SOURCE = '''from __future__ import annotations
from tilec import bf16, f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f32[M, N], bias: {bias}[1, N], scale: {scale}[M, 1],
         table: f32[E, N], unit: f32[1, 1], row: i32, BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        y = acc * scale[m * BM : +BM, 0:1] + bias[0:1, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = {out}
'''
OUT = "(y + table[row : +1, n * BN : +BN]) * unit[0:1, 0:1]"
VIEWS = [("f16", "f32"), ("bf16", "f16"), ("f32", "bf16")]


def function(bias: str = "f16", scale: str = "f32", out: str = OUT):
    return load_file("views.py", text=SOURCE.format(bias=bias, scale=scale, out=out))["gemm"]


@pytest.mark.parametrize("bias, scale", VIEWS)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_lowered_kernel_broadcasts_unit_views(bias, scale, arch):
    consts = dict(BM=128, BN=128, BK=64) if arch == "sm_90a" else {}
    kernel = run_pipeline(function(bias, scale).lower(**consts),
                          Options(arch=arch, stages=2)).kernel
    dims = {op.operands[0].hint: op.attrs["dims"] for op in kernel.walk()
            if op.name == "frag.load"}
    assert dims == {"bias": [-1, 1], "scale": [0, -1], "table": [-1, 1], "unit": [-1, -1]}
    rng = np.random.default_rng(5)
    M, N, K, E = 150, 140, 70, 5
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias_arg, bias_exact = to_dtype(rng.standard_normal((1, N)), bias)
    scale_arg, scale_exact = to_dtype(rng.standard_normal((M, 1)), scale)
    table = rng.standard_normal((E, N)).astype(np.float32)
    unit = np.array([[0.75]], dtype=np.float32)
    for row in (3, E):  # a row past the end reads zeros, as every load does
        c = np.full((M, N), np.nan, dtype=np.float32)
        run_kernel(kernel, {"A": a, "B": b, "C": c, "bias": bias_arg, "scale": scale_arg,
                            "table": table, "unit": unit, "row": row}, ops=op_catalogue())
        picked = table[row] if row < E else np.zeros(N)
        want = ((a.astype(np.float64) @ b.astype(np.float64)) * scale_exact + bias_exact
                + picked.astype(np.float64)) * 0.75
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def test_only_the_run_time_row_is_masked():
    kernel = run_pipeline(function().lower(), Options(arch="sm_80")).kernel
    masks = {op.operands[0].hint: op.attrs["masked"] for op in kernel.walk()
             if op.name == "frag.load"}
    # bias[0:1] of a [1, N] tensor is proven in bounds; table's run-time row is not.
    assert masks["bias"][0] is False and masks["unit"] == [False, False]
    assert masks["table"][0] is True


@pytest.mark.parametrize("bias, scale", VIEWS)
def test_ptxas_takes_unit_views(bias, scale, tmp_path):
    kernel = function(bias, scale)
    assert_assembles(lambda arch: kernel.ptx(arch=arch, M=1000, N=1003, K=77), tmp_path)
    assert_assembles(lambda arch: kernel.ptx(arch=arch, BM=128, BN=128, BK=64),
                     tmp_path, archs=("sm_90a",))


@pytest.mark.parametrize("replace, message, fragment", [
    ("bias[0:1, n", "has one element; this slice starts at 1", "1:2"),
    ("bias[0:1, n", "has one element; this slice takes 2 elements", "0:2"),
    ("scale[m * BM : +BM, 0:1]", "has one element; this slice takes 4 elements", "0 : +4"),
])
def test_a_malformed_unit_slice_is_an_error_with_a_caret(replace, message, fragment):
    source = SOURCE.format(bias="f16", scale="f32", out=OUT)
    if replace == "bias[0:1, n":
        source = source.replace("bias[0:1, n", f"bias[{fragment}, n")
    else:
        source = source.replace(replace, "scale[m * BM : +BM, 0 : +4]")
    with pytest.raises(TileShapeError) as info:
        load_file("views.py", text=source)["gemm"].lower()
    err = info.value
    assert message in err.message, str(err)
    rendered = str(err)
    assert "views.py:11:" in rendered and "0:1" in err.hint, rendered
    source_line, caret = rendered.split("\n")[1:3]
    assert source_line[caret.index("^"):].startswith(fragment), rendered


def test_a_single_index_asks_for_a_unit_slice():
    source = SOURCE.format(bias="f16", scale="f32", out=OUT).replace("bias[0:1, n",
                                                                     "bias[0, n")
    with pytest.raises(TileError, match="takes slices, not single indices") as info:
        load_file("views.py", text=source)["gemm"].lower()
    assert "`i : +1` for one row" in str(info.value)


def test_ptxas_takes_a_constant_row_of_a_table(tmp_path):
    kernel = function(out=OUT.replace("row : +1", "2:3"))
    assert_assembles(lambda arch: kernel.ptx(arch=arch, M=1000, N=1003, K=77), tmp_path)
