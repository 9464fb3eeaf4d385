"""Peeling a grid axis's partial last tile (tilec/launch/peeling.py, Options.peel): which
programs may be peeled and why not, where a launch is cut, the views each part gets, and, in
the CPU interpreter, that the two parts compute what the whole launch does."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.launch.binding import Bound
from tilec.launch.peeling import (REMAINDER_WIDTH, Peel, PeelSite, parts, peel_sites,
                                  peeled_bounds, peeled_dims, plan_peel, remainder_settings)
from tilec.options import Options
from tilec.runtime.arrays import ArrayArg, c_strides

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
PEELABLE = ["matmul", "matmul_bt", "gemm_epilogue", "gemm_gelu", "sgemm", "int8_gemm",
            "w8a16", "fp8_gemm", "wfp8a16"]


def sample(name: str):
    (function,) = load_file(SAMPLES / f"{name}.py").values()
    return function


def program(source: str):
    (function,) = load_file("peel_programs.py", "from __future__ import annotations\n"
                            "from tilec import f16, f32, tile\n\n" + source).values()
    return function


@pytest.mark.parametrize("name", PEELABLE)
def test_the_samples_peel_m_or_n(name):
    sites, why = peel_sites(sample(name).lower())
    assert why == ""
    assert [(s.axis, s.symbol, s.const) for s in sites] == [(0, "M", "BM"), (1, "N", "BN")]
    assert all(s.step == sample(name).lower().consts[s.const] for s in sites)


# A matmul whose N axis one edit makes unpeelable: {width} of its tiles along N, {extra}
# statements after its K loop, C stored at {c_offset}.
UNPEELABLE = """
@tile
def k(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, {width}], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +{width}]
{extra}        C[m * BM : +BM, {c_offset} : +{width}] = acc
"""
PLAIN = dict(width="BN", extra="", c_offset="n * BN")
REFUSED = {
    "N bounds a loop": (
        dict(PLAIN, extra="        for j in range(0, N, BN):\n            acc += 1.0\n"),
        "N is used beside the grid's cdiv(N, BN)"),
    "a tile's N offset is not n * BN": (
        dict(PLAIN, c_offset="n * 32"), "the grid variable n is used other than as n * BN"),
    "a tile half a step wide along N": (
        dict(PLAIN, width="32"),
        "B: its tile.load along N is not one 64-wide tile at the grid variable times the step"),
}


def test_the_unedited_program_peels_both_axes():
    sites, why = peel_sites(program(UNPEELABLE.format(**PLAIN)).lower())
    assert [s.symbol for s in sites] == ["M", "N"] and why == ""


@pytest.mark.parametrize("case", list(REFUSED))
def test_programs_that_cannot_be_peeled_along_n_say_why(case):
    edits, why = REFUSED[case]
    sites, reasons = peel_sites(program(UNPEELABLE.format(**edits)).lower())
    assert [s.symbol for s in sites] == ["M"]  # M's tiles are still whole-step tiles
    assert reasons == f"grid axis 1: {why}"


def test_a_program_with_no_peelable_axis_gives_every_reason():
    sites, why = peel_sites(sample("bmm").lower())
    assert sites == ()
    assert why == ("grid axis 0: not cdiv(a shape symbol, a constant); grid axis 1: A: read "
                   "by tensor.batch, not only by tile loads and stores; grid axis 2: B: read by "
                   "tensor.batch, not only by tile loads and stores")


N_SITE = PeelSite(1, "N", 128, "BN")
M_SITE = PeelSite(0, "M", 128, "BM")


@pytest.mark.parametrize("sizes, expected", [
    (dict(M=4096, N=4104), Peel(N_SITE, 4096, 8, 64)),
    (dict(M=4104, N=4096), Peel(M_SITE, 4096, 8, 64)),
    (dict(M=4104, N=4104), Peel(N_SITE, 4096, 8, 64)),    # a tie: the later axis
    (dict(M=4120, N=4104), Peel(N_SITE, 4096, 8, 64)),    # N's last tile the emptier
    (dict(M=4100, N=4104), Peel(M_SITE, 4096, 4, 64)),    # M's the emptier
    (dict(M=4096, N=4096), None),                          # no partial tile
    (dict(M=4096, N=4196), None),                          # 100 columns: a whole tile's width
    (dict(M=4096, N=100), None),                           # no whole tile
    (dict(M=4096, N=4160), Peel(N_SITE, 4096, 64, 64)),
])
def test_the_launch_is_cut_after_the_whole_tiles(sizes, expected):
    assert plan_peel((M_SITE, N_SITE), sizes) == expected
    if expected is not None:
        assert expected.width % REMAINDER_WIDTH == 0 and expected.width < expected.site.step


def test_peel_describes_its_parts():
    assert Peel(N_SITE, 4096, 8, 64).describe() == (
        "N peeled at 4096: 32 whole 128-wide tiles, then the last 8 in a launch of 64-wide "
        "tiles (BN=64, one tile a block)")


def array_arg(name, shape, dtype="f16", ptr=1 << 20):
    return ArrayArg(name, ptr, dtype, shape, c_strides(shape), device=0)


def test_each_part_sees_views_that_start_at_its_columns():
    kernel = sample("gemm_epilogue").lower()
    m, n, k = 300, 4104, 200
    tensors = {"A": array_arg("A", (m, k)), "B": array_arg("B", (k, n)),
               "C": array_arg("C", (m, n)), "bias": array_arg("bias", (n,), "f32")}
    bound = Bound(tensors, {"alpha": 1.0, "beta": 0.0}, {"M": m, "N": n, "K": k})
    peel = plan_peel(peel_sites(kernel)[0], bound.symbols)
    main, rest = peeled_bounds(kernel, bound, peel)
    assert peeled_dims(kernel, "N") == {"B": [1], "C": [1], "bias": [0]}
    assert main.symbols == {"M": m, "N": 4096, "K": k} and rest.symbols["N"] == 8
    assert main.tensors["A"] is tensors["A"] and rest.tensors["A"] is tensors["A"]
    assert (main.tensors["B"].shape, main.tensors["B"].ptr) == ((k, 4096), 1 << 20)
    assert (rest.tensors["B"].shape, rest.tensors["B"].ptr) == ((k, 8), (1 << 20) + 4096 * 2)
    assert rest.tensors["B"].strides == (n, 1)  # the rows keep the tensor's pitch
    assert rest.tensors["bias"].ptr == (1 << 20) + 4096 * 4
    assert rest.tensors["C"].shape == (m, 8)


def test_the_remainder_runs_narrow_tiles_one_a_block():
    peel = Peel(N_SITE, 4096, 8, 64)
    options, consts = remainder_settings(
        peel, dict(arch="sm_90a", persistent=True, cluster=2, raster_group=16,
                   warpgroup_rows=128, stages=3, pack="auto", peel=True),
        dict(BM=256, BN=128, BK=64))
    assert consts == dict(BM=256, BN=64, BK=64)
    assert options["persistent"] is False and options["cluster"] == 1
    assert options["warpgroup_rows"] == 64 and options["pack"] == "off"
    assert options["peel"] is False and options["stages"] == 3
    Options(**options)
    assert remainder_settings(peel, dict(pack="always"), {})[0]["pack"] == "always"


def _random(rng, shape, dtype):
    if dtype == "f32":
        return rng.standard_normal(shape).astype(np.float32)
    return rng.standard_normal(shape).astype(np.float16)


@pytest.mark.parametrize("name, sizes", [
    ("matmul", dict(M=136, N=264, K=96)),        # N: 2 whole 128-wide tiles and 8 columns
    ("matmul", dict(M=264, N=256, K=96)),        # M peeled
    ("gemm_epilogue", dict(M=72, N=136, K=64)),  # bias and beta * C along the peeled N
    ("matmul_bt", dict(M=64, N=136, K=40)),      # B stored [N, K], transposed
])
def test_the_parts_compute_what_the_whole_launch_does(name, sizes):
    """In the CPU interpreter: the program over the whole arrays against the program over
    the whole tiles' views, then the remainder's program (BN or BM = 64) over the rest's."""
    from tilec.cpu.interpreter import run_kernel
    function = sample(name)
    kernel = function.lower()
    rng = np.random.default_rng(7)
    arrays = {}
    for param in kernel.params:
        if hasattr(param.type, "shape"):
            shape = tuple(sizes[d] if isinstance(d, str) else d for d in param.type.shape)
            arrays[param.name] = _random(rng, shape, param.type.dtype.short)
        else:
            arrays[param.name] = 0.5
    whole = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
    run_kernel(kernel, whole)
    peel = plan_peel(peel_sites(kernel)[0], sizes)
    assert peel is not None
    dims = peeled_dims(kernel, peel.site.symbol)
    peeled = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in arrays.items()}
    _, rest_consts = remainder_settings(peel, {}, {})
    for (start, extent), part in zip(parts(peel), (kernel, function.lower(**rest_consts))):
        views = dict(peeled)
        for tensor, tensor_dims in dims.items():
            index = [slice(None)] * peeled[tensor].ndim
            for dim in tensor_dims:
                index[dim] = slice(start, start + extent)
            views[tensor] = peeled[tensor][tuple(index)]
        run_kernel(part, views)
    for tensor in dims:
        np.testing.assert_array_equal(peeled[tensor], whole[tensor])


def test_cli_explain_says_where_a_peeled_launch_is_cut(capsys):
    from tilec.cli import main
    args = ["explain", str(SAMPLES / "gemm_epilogue.py"), "--arch", "sm_90a", "--const",
            "BM=128", "BN=256", "BK=64", "--stages", "3", "--persistent", "--cluster", "2",
            "--shape", "M=2048,N=2056,K=2048", "--no-ptxas"]
    assert main(args + ["--peel"]) == 0
    out = capsys.readouterr().out
    assert ("  peeled            N peeled at 2048: 8 whole 256-wide tiles, then the last 8 in a "
            "launch of 64-wide tiles (BN=64, one tile a block); the rest of this explanation "
            "is the whole tiles' launch\n") in out
    # The whole tiles' part: 16 x 8 tiles, its B a view whose rows keep N's pitch.
    assert "128 output tiles (16 x 8)" in out
    assert "B read in place (rows 4112 bytes apart" in out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "peeled" not in out and "144 output tiles (16 x 9)" in out
    assert main(["explain", str(SAMPLES / "bmm.py"), "--arch", "sm_90a", "--peel", "--shape",
                 "Bt=2,M=256,N=264,K=64", "--no-ptxas"]) == 0
    assert "  peeled            not peeled: the program cannot be (grid axis 0: not cdiv" \
        in capsys.readouterr().out


def test_peel_is_a_boolean_option():
    with pytest.raises(ValueError, match="peel must be True or False, got 'yes'"):
        Options(peel="yes")

