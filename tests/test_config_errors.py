"""Configurations that cannot work are refused with an error that names the problem, before any
PTX is produced: tile sizes against the mma shape, shared memory, registers and warps; bad
options; disabled passes; epilogues the fragments pass cannot map.

Cases that do not get a clear error yet are written for the behaviour we want and marked
``xfail(strict=True)`` with what happens today.
"""
from __future__ import annotations

import pytest

import tilec.compiler
from tilec.errors import TileConfigError, TileError, TileNameError
from tilec.frontend import parse_function
from tilec.kernel import TileFunction
from tilec.target.layout import Swizzle
from tilec.options import Options
from tilec.passes.tiling import registers_estimate
from tilec.pipeline import run_pipeline

MATMUL = '''\
def matmul(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
'''
DOT_LINE, DOT_COL = 5, MATMUL.splitlines()[4].index("@") + 1

EPILOGUE_HEADER = '''\
def gemm(A: f16[M, K], B: f16[K, N], C: f32[M, N], D: f32[M, N], row: f32[1, N],
         BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
'''


def function(text: str = MATMUL) -> TileFunction:
    return TileFunction(parse_function(text, "cfg.tile"), text, "cfg.tile", text.splitlines())


@pytest.fixture(autouse=True)
def no_backend(monkeypatch):
    """Every error here must come before the backend writes any PTX."""
    def render(kernel, options):
        raise AssertionError(f"the backend was reached for {kernel.name} with {options}")
    monkeypatch.setattr(tilec.compiler, "render", render)


def compile_error(error: type[Exception], text: str = MATMUL, **kwargs) -> Exception:
    with pytest.raises(error) as info:
        function(text).compile(**kwargs)
    return info.value


def accepted(text: str = MATMUL, **kwargs):
    """The pipeline's result for a configuration that must be accepted (no backend here)."""
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in ("arch", "stages", "warps")}
    return run_pipeline(function(text).lower(**kwargs), Options(**options)).kernel


# ------------------------------------------------------------------ tile sizes and targets

@pytest.mark.parametrize("kwargs, message", [
    (dict(BK=8), "BK=8 is not a multiple of the mma k (16)"),
    (dict(BK=24), "BK=24 is not a multiple of the mma k (16)"),
    (dict(BM=48, warps=(2, 1)), "each warp's 24x128 tile must be a multiple of 16x16"),
    (dict(BM=64, BN=16, warps=(1, 2)), "each warp's 64x8 tile must be a multiple of 16x16"),
    (dict(BM=8, BN=64), "each warp's 8x64 tile must be a multiple of 16x16"),
    (dict(BK=512, arch="sm_86"), "3 stages of 128x512 and 512x128 tiles need 786432 bytes of "
     "shared memory; sm_86 allows 101376"),
    (dict(BM=128, BN=256, BK=64, warps=(2, 4), stages=4, arch="sm_86"),
     "4 stages of 128x64 and 64x256 tiles need 196608 bytes of shared memory; sm_86 allows "
     "101376"),
    (dict(stages=12, arch="sm_80"), "12 stages of 128x32 and 32x128 tiles need 196608 bytes "
     "of shared memory; sm_80 allows 166912"),
    (dict(BM=256, BN=256, warps=(1, 1)), "a 256x256 warp tile needs about 2344 registers per "
     "thread, more than 255"),
    (dict(BM=96, warps=(5, 1)), "the 96x128 block does not divide among 5x1 warps"),
    (dict(BN=96, warps=(1, 5)), "the 128x96 block does not divide among 1x5 warps"),
    (dict(BM=256, BN=256, warps=(8, 8)), "8x8 warps make 2048 threads, more than 1024"),
], ids=["BK=8", "BK=24", "warp-rows", "warp-cols", "BM=8", "smem-BK", "smem-stages",
        "smem-sm_80", "registers", "warps-rows", "warps-cols", "threads"])
def test_tile_configuration_errors(kwargs, message: str) -> None:
    err = compile_error(TileConfigError, **kwargs)
    assert message in err.message
    # Located at the product, with the source line and a caret under the `@`.
    assert (err.loc.line, err.loc.col) == (DOT_LINE, DOT_COL)
    text = str(err).splitlines()
    assert text[0].startswith(f"cfg.tile:{DOT_LINE}:{DOT_COL}: config error: ")
    assert text[1].strip() == MATMUL.splitlines()[DOT_LINE - 1].strip()
    assert text[2].index("^") == text[1].index("@")


@pytest.mark.parametrize("kwargs, hint", [
    (dict(BK=512, arch="sm_86"), "use fewer stages or smaller tiles"),
    (dict(BM=256, BN=256, warps=(1, 1)), "use more warps or a smaller block tile"),
    (dict(BM=48, warps=(2, 1)), "use BM, BN multiples of 16 per warp row/column"),
])
def test_tile_configuration_errors_suggest_a_fix(kwargs, hint: str) -> None:
    err = compile_error(TileConfigError, **kwargs)
    assert err.hint == hint and f"hint: {hint}" in str(err)


def test_a_block_wgmma_declines_says_why_beside_the_fallbacks_error() -> None:
    """On sm_90a a block wgmma declines falls back to mma.sync, whose error alone would hide
    what the user aimed at: 64x200 fails mma.sync's warp grid because wgmma wants an
    n-contiguous B's BN a multiple of 16. The hint says so; on sm_80 it does not."""
    err = compile_error(TileConfigError, BM=64, BN=200, BK=64, arch="sm_90a")
    assert err.message == "the 64x200 block does not divide among 1x3 warps"
    assert err.hint.startswith("wgmma declined the 64x200x64 block (BN=200 is not a "
                               "multiple of 16 with B stored n contiguous")
    assert err.hint.endswith("), so it fell back to mma.sync")
    assert compile_error(TileConfigError, BM=64, BN=200, BK=64, arch="sm_80").hint == ""
    # A block wgmma takes reports its own error alone (no fallback to explain).
    err = compile_error(TileConfigError, BM=128, BN=256, BK=64, stages=9, arch="sm_90a")
    assert "fell back" not in err.hint


@pytest.mark.parametrize("kwargs, warp_tile", [
    (dict(BM=96, warps=(2, 2)), (48, 64)),  # 48 rows per warp: three m16 tiles
    (dict(BM=128, BN=256, BK=64, warps=(2, 4), stages=4, arch="sm_90"), (64, 64)),
    (dict(BM=64, BN=32, BK=16, warps=(4, 2)), (16, 16)),  # the smallest warp tile
])
def test_limits_are_not_too_strict(kwargs, warp_tile) -> None:
    assert accepted(**kwargs).schedule.tiling.warp_tile == warp_tile


@pytest.mark.parametrize("dtype, kind", [("f16", "mma"), ("bf16", "mma"), ("f32", "simt")])
def test_each_dtype_gets_its_product_kind(dtype: str, kind: str) -> None:
    plan = accepted(MATMUL.replace("f16[", f"{dtype}[")).schedule.tiling
    assert (plan.dtype, plan.kind) == (dtype, kind)


def test_simt_warp_tiles_come_in_lane_runs() -> None:
    text = MATMUL.replace("f16[", "f32[")
    err = compile_error(TileConfigError, text, BM=64, BN=48, BK=32, warps=(1, 1))
    assert err.message == ("each warp's 64x48 tile must be a multiple of 16x32 (4 x 8 lanes, "
                           "each owning runs of 4 rows and 4 columns)")
    assert "multiples of 16 (BM) and 32 (BN)" in err.hint


# --------------------------------------------------------------------------- program shape

NO_PRODUCT = '''\
def f(A: f16[M, K], C: f32[M, K], BM=64, BK=32):
    for m in grid(cdiv(M, BM)):
        acc = zeros([BM, BK], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK].to(f32)
        C[m * BM : +BM, 0 : +BK] = acc
'''
NO_LOOP = '''\
def f(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        C[m * BM : +BM, n * BN : +BN] = A[m * BM : +BM, 0 : +BK] @ B[0 : +BK, n * BN : +BN]
'''
NOT_ACCUMULATED = '''\
def f(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        for k in range(0, K, BK):
            C[m * BM : +BM, n * BN : +BN] = A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
'''
TWO_PRODUCTS = EPILOGUE_HEADER + (
    "        C[m * BM : +BM, n * BN : +BN] = acc + A[m * BM : +BM, 0 : +BK] @ "
    "B[0 : +BK, n * BN : +BN]\n")


@pytest.mark.parametrize("text, message, line", [
    (NO_PRODUCT, "the program has no tile product (`@`) to map to mma", 2),
    (NO_LOOP, "the product must sit directly in a K loop", 3),
    (NOT_ACCUMULATED, "the product must accumulate into a loop-carried tile (`acc += a @ b`)",
     4),
    (TWO_PRODUCTS, "only one tile product per program is supported", 7),
], ids=["no-product", "no-loop", "not-accumulated", "two-products"])
def test_program_shape_errors(text: str, message: str, line) -> None:
    err = compile_error(TileConfigError, text)
    assert message in err.message
    assert err.loc.line == line


# ------------------------------------------------------------------------------- options

@pytest.mark.parametrize("kwargs, message", [
    (dict(arch="sm_75"), "unknown arch 'sm_75' (supported: sm_80, sm_86, sm_90, sm_90a)"),
    (dict(arch="sm_89"), "unknown arch 'sm_89' (supported: sm_80, sm_86, sm_90, sm_90a)"),
    (dict(stages=0), "stages must be an integer >= 1, got 0"),
    (dict(stages=2.5), "stages must be an integer >= 1, got 2.5"),
    (dict(swizzle="on"), "swizzle must be 'auto', 'off' or a Swizzle, got 'on'"),
    (dict(warps=(0, 2)), "warps must be a pair of positive counts, got (0, 2)"),
    (dict(warps=(2,)), "warps must be a pair of positive counts, got (2,)"),
    (dict(raster_group=0), "raster_group must be >= 1, got 0"),
    (dict(disable=("tiling",)), "pass 'split_k' needs 'tiling', which is disabled"),
    (dict(split_k=0), "split_k must be an integer from 1 to 64, got 0"),
    (dict(split_k=65), "split_k must be an integer from 1 to 64, got 65"),
    (dict(split_k=2.0), "split_k must be an integer from 1 to 64, got 2.0"),
], ids=["sm_75", "sm_89", "stages=0", "stages=2.5", "swizzle", "warps-zero", "warps-one",
        "raster", "disable-tiling", "split_k=0", "split_k=65", "split_k=2.0"])
def test_option_errors(kwargs, message: str) -> None:
    err = compile_error(ValueError, **kwargs)
    assert str(err) == message


def test_a_misspelt_option_is_named_as_an_unknown_constant() -> None:
    err = compile_error(TileNameError, stage=3)
    assert "unknown constant 'stage' for 'matmul' (its constants: BM, BN, BK)" in err.message


def test_an_explicit_swizzle_must_fit_the_tile() -> None:
    err = compile_error(TileConfigError, BM=64, BN=64, BK=32, swizzle=Swizzle(3, 3, 7))
    assert "swizzle for operand A: swizzle(3,3,7) does not fit a 64x32 tile" in err.message


@pytest.mark.parametrize("given", [Swizzle(1, 2, 3), Swizzle(2, 2, 4)])
def test_an_explicit_swizzle_must_keep_16_byte_chunks_whole(given: Swizzle) -> None:
    err = compile_error(TileConfigError, BM=64, BN=64, BK=64, warps=(2, 2), swizzle=given)
    assert str(given) in err.message


def test_disabling_a_pass_the_backend_needs_is_refused() -> None:
    err = compile_error(ValueError, disable=("fragments",))
    assert "fragments" in str(err)


@pytest.mark.parametrize("disable, name", [(("tilling",), "tilling"), ("tiling", "tiling")],
                         ids=["misspelt", "string"])
def test_disable_names_only_known_passes(disable, name: str) -> None:
    err = compile_error(ValueError, disable=disable)
    assert repr(name) in str(err)


def test_pipeline_fragments_is_an_option(monkeypatch) -> None:
    monkeypatch.undo()  # this one compiles to the end
    compiled = function(MATMUL).compile(pipeline_fragments=False)
    assert compiled.options.pipeline_fragments is False
    assert "ldmatrix" in compiled.ptx


@pytest.mark.parametrize("kwargs", [dict(BM=96), dict(BM=256, BN=256)], ids=["96", "256"])
def test_automatic_warps_choose_a_grid_that_fits(kwargs) -> None:
    plan = accepted(**kwargs).schedule.tiling
    assert registers_estimate(plan) <= 255


# ---------------------------------------------------------------------------- epilogues

@pytest.mark.parametrize("statement", [
    "        C[m * BM : +BM, n * BN : +BN] = acc + zeros([BN], f32)\n",
    "        C[m * BM : +BM, n * BN : +BN] = acc + zeros([BM], f32)[:, None]\n",
    "        C[m * BM : +BM, n * BN : +BN] = acc + 2.0 * row[0 : +1, n * BN : +BN]\n",
], ids=["made-row", "made-column", "computed-2-D-row"])
def test_epilogue_broadcasts_only_loaded_1d_tiles(statement: str) -> None:
    err = compile_error(TileConfigError, EPILOGUE_HEADER + statement)
    assert "only tiles loaded from 1-D tensors (bias rows or columns) or [1, N] / [M, 1] " \
           "slices of 2-D tensors, converted or not, can be broadcast in an epilogue" \
           in err.message
    assert err.loc.line == 7


def test_a_loaded_2_d_row_broadcasts() -> None:
    """A [1, N] slice of a 2-D tensor is a bias row (tests/test_unit_views.py)."""
    statement = "        C[m * BM : +BM, n * BN : +BN] = acc + row[0 : +1, n * BN : +BN]\n"
    kernel = accepted(EPILOGUE_HEADER.replace("D: f32[M, N], ", "") + statement)
    (load,) = [op for op in kernel.walk() if op.name == "frag.load"]
    assert load.attrs["dims"] == [-1, 1]


@pytest.mark.parametrize("statements", [
    "        C[m * BM : +32, n * BN : +BN] = zeros([32, BN], f32)\n"
    "        D[m * BM : +BM, n * BN : +BN] = acc\n",
    "        half = D[m * BM : +32, n * BN : +BN]\n"
    "        C[m * BM : +32, n * BN : +BN] = half\n"
    "        D[m * BM : +BM, n * BN : +BN] = acc\n",
], ids=["zeros", "load"])
def test_epilogue_tiles_of_another_shape_are_refused(statements: str) -> None:
    err = compile_error(TileError, EPILOGUE_HEADER + statements)
    assert "32x64" in err.message or "[32, 64]" in err.message


def test_an_operand_converted_in_the_k_loop_is_refused_at_the_conversion() -> None:
    """f16 <-> bf16 conversions run (tests/test_operand_casts.py); f32 is refused."""
    text = MATMUL.replace("B: f16[", "B: f32[").replace(
        "B[k : +BK, n * BN : +BN]", "B[k : +BK, n * BN : +BN].to(f16)")
    assert ".to(f16)" in text
    err = compile_error(TileConfigError, text)
    assert "operand B of `@` is converted in the K loop from f32 to f16, which is not " \
           "supported" in err.message
    line = text.splitlines()[err.loc.line - 1]
    assert line[err.loc.col - 1:].startswith("to(f16)"), (line, err.loc)
