"""Compile-time branches (issue 13): ``if`` / ``elif`` / ``else`` on constants and constant
expressions (comparisons, and / or / not) choose the statements that are lowered; the other
side is never lowered, so its names need not exist and its code is not compiled; a
parameter only an untaken side names may stay untouched. A condition on a tile or a
run-time scalar, and comparisons of such values anywhere, are errors at their place."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.kernel import load_file

from .test_ptxas import assert_assembles

SOURCE = '''from __future__ import annotations
from tilec import f16, f32, tile

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f32[M, N], bias: f32[N], s: f32,
         BM=32, BN=32, BK=16, HAS_BIAS=1, ACT=0):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        if HAS_BIAS and not BM < 16:
            acc = acc + bias[n * BN : +BN]
        if ACT == 1:
            out = relu(acc)
        elif ACT == 2 or ACT == 3:
            out = acc * s
        else:
            out = acc
        C[m * BM : +BM, n * BN : +BN] = out
'''


def function(text: str = SOURCE):
    return load_file("branches.py", text=text)["gemm"]


def run(consts: dict, text: str = SOURCE) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 24)).astype(np.float16)
    b = rng.standard_normal((24, 36)).astype(np.float16)
    bias = rng.standard_normal(36).astype(np.float32)
    c = np.full((40, 36), np.nan, dtype=np.float32)
    run_kernel(function(text).lower(**consts), {"A": a, "B": b, "C": c, "bias": bias, "s": 0.5},
               ops=op_catalogue())
    product = a.astype(np.float64) @ b.astype(np.float64)
    return c, {"product": product, "bias": bias.astype(np.float64)}


@pytest.mark.parametrize("consts, want", [
    (dict(), lambda p, b: p + b),
    (dict(HAS_BIAS=0), lambda p, b: p),
    (dict(BM=8, BN=8, BK=16), lambda p, b: p),  # not BM < 16 is false
    (dict(ACT=1), lambda p, b: np.maximum(p + b, 0)),
    (dict(ACT=3, HAS_BIAS=0), lambda p, b: p * 0.5),
])
def test_the_taken_side_computes(consts, want):
    got, parts = run(consts)
    np.testing.assert_allclose(got, want(parts["product"], parts["bias"]), rtol=1e-5,
                               atol=1e-5)


def test_the_untaken_side_is_not_lowered():
    kernel = function().lower(HAS_BIAS=0)
    assert not any(op.name == "tile.add" for op in kernel.walk())  # no bias add
    # A name that does not exist is no error on the side not taken.
    text = SOURCE.replace("out = acc * s", "out = no_such_name")
    run(dict(ACT=0), text)
    with pytest.raises(TileError, match="unknown name 'no_such_name'"):
        function(text).lower(ACT=2)


def test_a_parameter_only_the_untaken_side_names_may_stay_untouched():
    kernel = function().lower(HAS_BIAS=0)
    # bias (HAS_BIAS = 0) and s (ACT = 0) are named only on sides not taken.
    assert [p.name for p in kernel.params if p.branch_only] == ["bias", "s"]
    function().compile(HAS_BIAS=0)  # no "never read or stored" error
    unused = SOURCE.replace("bias: f32[N], s: f32", "bias: f32[N], s: f32, D: f32[N]")
    with pytest.raises(TileError, match="tensor 'D' is never read or stored"):
        function(unused).compile()


def test_ptxas_takes_each_variant(tmp_path):
    for consts in (dict(), dict(HAS_BIAS=0, ACT=1), dict(ACT=2)):
        kernel = function()
        assert_assembles(lambda arch: kernel.ptx(arch=arch, **consts), tmp_path)


@pytest.mark.parametrize("condition, message, caret", [
    ("s > 0", "`if` cannot branch on an f32 scalar, known only when the kernel runs", "> 0"),
    ("acc", "`if` cannot branch on an f32 tile", "acc"),
    ("HAS_BIAS and s", "`if` cannot branch on an f32 scalar", "and s"),
    ("not acc", "`if` cannot branch on an f32 tile", "not acc"),
])
def test_a_run_time_condition_is_an_error_at_its_place(condition, message, caret):
    text = SOURCE.replace("if HAS_BIAS and not BM < 16:", f"if {condition}:")
    with pytest.raises(TileError, match=message) as caught:
        function(text).lower()
    rendered = str(caught.value)
    source_line, marker = rendered.split("\n")[1:3]
    assert source_line[marker.index("^"):].startswith(caret), rendered
    assert "select elementwise instead: y = where(x > 0, a, b)" in rendered


def test_comparisons_of_tiles_are_refused_outside_conditions_too():
    text = SOURCE.replace("out = acc * s", "out = acc < s")
    with pytest.raises(TileError, match="`<` takes compile-time constants") as caught:
        function(text).lower(ACT=2)
    assert "on tiles select elementwise with where(x > 0, x, 0.01 * x)" in str(caught.value)


def test_constant_comparisons_fold_like_python():
    text = SOURCE.replace("out = acc * s", "out = acc * ((BM <= 32) + (BN != 32) * 10 "
                          "+ (1 or 0) * 100 + (0 and 1) * 1000)")
    got, parts = run(dict(ACT=2, HAS_BIAS=0), text)
    np.testing.assert_allclose(got, parts["product"] * 101, rtol=1e-5, atol=1e-3)
