"""Issue 12, class 6: programs that would compile but leave outputs unwritten or read wrong
data are refused, naming the tensor and the dim: a grid that does not reach a stored dim (counted
in BM tiles along N while storing BN-wide tiles, swapped axes, a constant grid over a symbolic
dim), stores that leave gaps, an output never stored, a K loop stepping other than the width of
the slices it reads. Launch checks the known sizes again."""
from __future__ import annotations

import pytest

from tilec.errors import TileConfigError
from tilec.kernel import load_file
from tilec.launch.binding import grid_size
from tilec.passes.coverage import check_launch, coverage


def _function(grid: str = "cdiv(M, BM), cdiv(N, BN)", step: str = "BK",
              store: str = "C[m * BM : +BM, n * BN : +BN] = acc", extra: str = ""):
    text = f"""from __future__ import annotations
from tilec import f16, f32, tile


@tile
def k(A: f16[M, K], B: f16[K, N], C: f32[M, N]{extra}, BM=64, BN=32, BK=32):
    for m, n in grid({grid}):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, {step}):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        {store}
"""
    (function,) = load_file("coverage.py", text=text).values()
    return function, text.splitlines()


REFUSED = {
    "grid_counts_bm_along_n": (dict(grid="cdiv(M, BM), cdiv(N, BM)"), ["'C' dim 1 (N)"], 11),
    "swapped_axes": (dict(grid="cdiv(N, BN), cdiv(M, BM)"), ["'C' dim 0 (M)"], 11),
    "constant_grid": (dict(grid="4, cdiv(N, BN)"), ["'C' dim 0 (M)"], 11),
    "gaps": (dict(store="C[m * BM : +BM, n * 64 : +BN] = acc"), ["'C' dim 1", "gaps"],
             11),
    "never_stored": (dict(extra=", D: f32[M, N]"), ["'D' is never read or stored"], 6),
    "k_step_narrower": (dict(step="64"), ["steps by 64", "read 32 wide", "skip"], 10),
    "k_step_wider": (dict(step="16"), ["steps by 16", "read 32 wide", "twice"], 10),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("options", [{}, {"split_k": 2, "stages": 2}])
def test_uncovered_outputs_are_refused_naming_tensor_and_dim(case, options):
    kwargs, words, line = REFUSED[case]
    function, _ = _function(**kwargs)
    with pytest.raises(TileConfigError) as info:
        function.ptx(**options)
    assert all(w in info.value.message for w in words), info.value.message
    assert info.value.loc is not None and info.value.loc.line == line


@pytest.mark.parametrize("grid", ["cdiv(M, BM), cdiv(N, BN)", "cdiv(M, 32), cdiv(N, 16)",
                                  "cdiv(M, BM), N"])
def test_grids_that_cover_the_output_compile(grid):
    function, _ = _function(grid=grid)
    assert ".entry k(" in function.ptx()


def test_launch_checks_the_known_sizes():
    function, _ = _function()
    kernel = function.lower()
    assert grid_size(kernel, {"M": 100, "N": 70, "K": 64}) == [2, 3]
    (rows, cols) = coverage(kernel)
    assert (rows.tensor, rows.dim, rows.step, cols.dim, cols.step) == ("C", 0, 64, 1, 32)
    check_launch(kernel, [2, 3], {"M": 128, "N": 96})
    with pytest.raises(ValueError, match=r"'C' dim 1 \(N\) unwritten: axis 1 has 2 blocks"):
        check_launch(kernel, [2, 2], {"M": 128, "N": 96})
