"""Issue 12, class 4: programs the frontend accepts but whose shape the backend cannot map
either compile correctly or stop at the user's line with a config error, never with the
backend's NotImplementedError. Inside the K loop only the product computes tiles (the
accumulator lives in the registers the mma updates); a tile of C loaded between
``acc = zeros(...)`` and the K loop is loaded after the loop, where the epilogue holds it."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileConfigError
from tilec.families.catalogue import op_catalogue
from tests.test_ptxas import assert_assembles
from tilec.kernel import load_file

PTXAS = shutil.which("ptxas")


def _function(before_loop: str = "", in_loop: str = "",
              after_loop: str = "C[m * BM : +BM, n * BN : +BN] = acc.to(f16)",
              c_dtype: str = "f16"):
    text = f"""from __future__ import annotations
from tilec import f16, f32, tile


@tile
def k(A: f16[M, K], B: f16[K, N], C: {c_dtype}[M, N], BM=32, BN=32, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        {before_loop}
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
            {in_loop}
        {after_loop}
"""
    (function,) = load_file("shapes.py", text=text).values()
    return function, text.splitlines()


REFUSED = {
    "acc_op_in_k_loop": dict(in_loop="acc = acc * 2"),
    "zeros_in_k_loop": dict(in_loop="acc = acc + zeros([BM, BN], f32)"),
    "full_in_k_loop": dict(in_loop="acc = acc + full([BM, BN], 1.0, f32)"),
    "store_cast_in_k_loop": dict(in_loop="C[m * BM : +BM, n * BN : +BN] = acc.to(f16)"),
    "load_c_before_a_storing_loop": dict(
        before_loop="c = C[m * BM : +BM, n * BN : +BN]",
        in_loop="C[m * BM : +BM, n * BN : +BN] = acc",
        after_loop="C[m * BM : +BM, n * BN : +BN] = acc + c", c_dtype="f32"),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("split_k", [1, 2])
def test_unsupported_k_loop_work_is_refused_at_its_line(case, split_k):
    function, lines = _function(**REFUSED[case])
    options = {"split_k": split_k} if split_k > 1 else {}
    with pytest.raises(TileConfigError) as info:
        function.ptx(**options)
    error = info.value
    assert error.loc is not None
    line = lines[error.loc.line - 1]
    expected = "before_loop" if case.startswith("load_c") else "in_loop"
    assert REFUSED[case][expected] in line, str(error)


LOAD_C = dict(before_loop="c = C[m * BM : +BM, n * BN : +BN]",
              after_loop="C[m * BM : +BM, n * BN : +BN] = (acc + c.to(f32) * 2.0).to(f16)")


@pytest.mark.parametrize("options", [{}, {"stages": 1}, {"split_k": 2}])
def test_a_tile_of_c_loaded_before_the_loop_is_read_correctly(options):
    function, _ = _function(**LOAD_C)
    compiled = function.compile(M=70, N=45, K=96, **options)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((70, 96)).astype(np.float16)
    b = rng.standard_normal((96, 45)).astype(np.float16)
    c = rng.standard_normal((70, 45)).astype(np.float16)
    values = {"A": a, "B": b, "C": c.copy()}
    run_kernel(compiled.kernel, values, ops=op_catalogue())
    expected = a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c.astype(np.float64)
    np.testing.assert_allclose(values["C"].astype(np.float64), expected, rtol=1e-2, atol=5e-2)


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
def test_ptxas_accepts_a_tile_of_c_loaded_before_the_loop(tmp_path):
    function, _ = _function(**LOAD_C)
    assert_assembles(lambda arch: function.ptx(arch=arch, M=70, N=45, K=96), tmp_path)
