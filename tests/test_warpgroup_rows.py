"""Consumer warpgroups of 128 rows (Options.warpgroup_rows=128, sm_90a wgmma): the layout
(warp w of warpgroup g holds rows 128 g + 16 (w % 4) + 64 s, s = 0, 1), the descriptors' 64-row
step, the PTX (two m64 wgmmas a k16 step in one fence / commit group, each on accumulators of
its own), the schedule and its text, the refusals, the CPU runs against numpy with the race
checker (cooperative 256x128, one 128-row warpgroup, pingpong 128x128, persistent, clusters,
batched, the TMA-store epilogue), explain, the CLI flag, and ptxas on the bench's kernels (no
serialized wgmma, no spills)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tilec.analysis.mbarriers import check_roles
from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileConfigError
from tilec.families.catalogue import op_catalogue
from tilec.families.mma_sync import MmaLayout
from tilec.families.tma_boxes import tma_layout
from tilec.families.wgmma import (FAMILY as WGMMA, WgmmaLayout, descriptor_fields,
                                  descriptor_offsets)
from tilec.ir.printer import print_kernel
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline
from tilec.target.layout import SmemLayout

from .test_hopper import _reference, random_inputs, relative_error, run_lowered
from .test_ptxas import PTXAS, SAMPLES, assert_assembles_for_sm_90a, load_sample

ROWS = dict(arch="sm_90a", warpgroup_rows=128)
PINGPONG = dict(persistent=True, consumers="pingpong")
REPO = Path(__file__).resolve().parents[1]


def lowered(sample="matmul", dtype="f16", bm=256, bn=128, stages=3, **options):
    kernel = load_sample(sample, dtype).lower(BM=bm, BN=bn, BK=64)
    return run_pipeline(kernel, Options(stages=stages, **{**ROWS, **options}),
                        keep_ir=True).kernel


# -- the layout ---------------------------------------------------------------------------

def test_each_warp_holds_two_strips_64_rows_apart() -> None:
    layout = WgmmaLayout("C", (8, 1), (32, 128))
    coords = {layout.c_coord(w, lane, r) for w in range(8) for lane in range(32)
              for r in range(layout.regs_per_thread)}
    assert len(coords) == 256 * 128 and max(coords) == (255, 127)  # every element once
    for warp in range(8):
        g, i = divmod(warp, 4)
        rows = {layout.c_coord(warp, lane, r)[0] for lane in range(32)
                for r in range(layout.regs_per_thread)}
        first = 128 * g + 16 * i
        assert rows == set(range(first, first + 16)) | set(range(first + 64, first + 80))
        assert layout.warp_origin(warp) == (first, 0)
    # Register order: strip 0's 64 (one m64n128's accumulators), then strip 1's.
    offsets = layout.register_offsets()
    strip = WgmmaLayout("C", (4, 1), (16, 128)).register_offsets()
    assert offsets == strip + [(row + 64, col) for row, col in strip]


def test_the_64_row_layout_is_mma_syncs_grid_as_before() -> None:
    layout = WgmmaLayout("C", (8, 1), (16, 256))
    assert layout.register_offsets() == MmaLayout("C", (8, 1), (16, 256)).register_offsets()
    assert layout.warp_rows() == (1, 16, 0)
    assert [layout.warp_origin(w) for w in range(8)] == [(16 * w, 0) for w in range(8)]


@pytest.mark.parametrize("span", [128, 64, 32])
@pytest.mark.parametrize("transposed", [False, True], ids=["K-major", "MN-major"])
def test_a_descriptor_start_is_linear_in_whole_strips(transposed, span) -> None:
    """The emitter adds warpgroup g's 128 rows to the stage address and strip s's 64 rows
    with k0 to the descriptor: both operand layouts' starts must add up that way, in every
    swizzle span, and the element offsets of the strip's descriptor are those of rows 64 s
    on."""
    stored = SmemLayout(64, 256, transposed=True) if transposed else SmemLayout(256, 64)
    layout = tma_layout(stored, 2, span)
    d = descriptor_fields(layout, "A", 2)
    for g in range(2):
        for s in range(2):
            for k0 in range(0, 64, 16):
                assert d.start(128 * g + 64 * s, k0, 2) == \
                    g * d.start(128, 0, 2) + d.start(64 * s, k0, 2)
    whole = descriptor_offsets(layout, "A", 0, 16, 256, 2)
    assert np.array_equal(descriptor_offsets(layout, "A", 192, 16, 64, 2), whole[192:])


# -- the schedule and the PTX ------------------------------------------------------------

def test_the_plan_and_the_roles_say_128_rows() -> None:
    kernel = lowered(persistent=True)
    plan, roles = kernel.schedule.tiling, kernel.schedule.roles
    assert plan.kind == "wgmma" and plan.warps == (8, 1) and plan.warp_tile == (32, 128)
    assert (roles.consumer_warpgroups, roles.warpgroup_rows, roles.threads) == (2, 128, 384)
    assert roles.consumer_registers == 232
    text = print_kernel(kernel)
    assert "consumers = 2 warpgroups (232 registers) of 128 rows" in text
    assert "wgmma_c(warps=8x1,warp_tile=32x128)" in text
    assert "of 128 rows" not in str(lowered(bm=128, bn=256, warpgroup_rows=64).schedule.roles)


def test_two_wgmmas_a_k_step_in_one_group_on_their_own_accumulators() -> None:
    ptx = load_sample("matmul", "f16").ptx(BM=256, BN=128, BK=64, stages=4, persistent=True,
                                           **ROWS)
    fence = ptx.index("wgmma.fence.sync.aligned;")
    commit = ptx.index("wgmma.commit_group.sync.aligned;", fence)
    group = ptx[fence:commit]
    products = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16 "
                          r"\{([^}]*)\}, (%rd\d+), (%rd\d+)", group)
    assert len(products) == 8  # 4 k16 steps x 2 strips
    first = [regs.split(", ") for regs, _, _ in products[0::2]]
    second = [regs.split(", ") for regs, _, _ in products[1::2]]
    assert all(len(r) == 64 for r in first + second)
    assert all(r == first[0] for r in first) and all(r == second[0] for r in second)
    assert not set(first[0]) & set(second[0])
    # The strips share B's descriptor, and A's differ by 64 rows of 128 bytes (512 in the
    # descriptors' 16-byte units); the warpgroup's 128 rows on the stage's address.
    assert all(b0 == b1 for (_, _, b0), (_, _, b1) in zip(products[0::2], products[1::2]))
    assert re.search(r"add\.s32 %r\d+, %r\d+, 512;", group)
    assert re.search(r"mad\.lo\.s32 %r\d+, %r\d+, 16384, %r\d+;", group)
    assert ptx.count("wgmma.fence.sync.aligned;") == 1
    assert ".maxntid 384, 1, 1" in ptx and "setmaxnreg.inc.sync.aligned.u32 232;" in ptx


def test_pingpong_on_128_row_tiles() -> None:
    kernel = lowered(bm=128, **PINGPONG)
    roles = kernel.schedule.roles
    assert roles.pingpong and roles.tile_warpgroups == 1 and roles.consumer_warpgroups == 2
    assert kernel.schedule.tiling.warp_tile == (32, 128) and roles.warpgroup_rows == 128


# -- refusals -----------------------------------------------------------------------------

def test_options_take_64_or_128_rows() -> None:
    with pytest.raises(ValueError, match="warpgroup_rows must be one of"):
        Options(warpgroup_rows=96)


@pytest.mark.parametrize("bm, bn, options, words", [
    (64, 128, {}, "BM=64 is not a multiple of the 128 rows"),
    (128, 256, {}, "needs about 282 registers a consumer thread"),
    (64, 128, PINGPONG, "BM=64 is not a multiple of the 128 rows"),
    # ptxas spilled pingpong's 128x208 (C7512).
    (128, 208, PINGPONG, "needs about 234 registers a consumer thread, more than setmaxnreg"),
])
def test_what_128_row_warpgroups_do_not_fit_is_refused_at_the_product(bm, bn, options,
                                                                      words) -> None:
    kernel = load_sample("matmul", "f16").lower(BM=bm, BN=bn, BK=64)
    with pytest.raises(TileConfigError) as caught:
        run_pipeline(kernel, Options(stages=3, **{**ROWS, **options}))
    message = str(caught.value)
    assert words in message and "warpgroup_rows=128" in message and "^" in message
    assert "matmul.py:" in message and "hint" in message


@pytest.mark.parametrize("bm, bn, words", [
    (256, 192, None), (256, 176, None),
    # ptxas 13.0 spilled it (C7512) under setmaxnreg's 232.
    (256, 208, "256x208 in 128-row warpgroups needs about 234 registers a consumer thread, "
               "more than setmaxnreg gives it (232)"),
])
def test_the_accumulators_fit_what_setmaxnreg_gives_not_what_the_block_starts_with(
        bm, bn, words) -> None:
    """A 384-thread block starts with 168 registers a thread; ptxas compiles each m64nN
    wgmma within that and the warpgroup's 2 x N/2 accumulators within setmaxnreg.inc's 232
    (256x192: 192 accumulators, no spill)."""
    from tilec.families.wgmma import FAMILY
    assert FAMILY.block_problem((bm, bn, 64), Options(**ROWS)) == words


def test_a_block_wgmma_declines_anyway_falls_back_as_with_64_rows() -> None:
    """sm_80 (no wgmma) and an explicit warp grid (wgmma's warpgroups own their rows):
    mma.sync, whose warps the option does not concern, as consumers='pingpong' falls
    back."""
    for options in ({"arch": "sm_80"}, {"warps": (2, 4)}):
        kernel = load_sample("matmul", "f16").lower(BM=256, BN=128, BK=64)
        kernel = run_pipeline(kernel, Options(stages=3, **{**ROWS, **options}),
                              keep_ir=True).kernel
        assert kernel.schedule.tiling.kind == "mma" and kernel.schedule.roles is None


# -- the CPU against numpy, and the race checker -----------------------------------------

CPU_CASES = [
    dict(bm=256), dict(bm=256, persistent=True), dict(bm=128), dict(bm=256, cluster=2),
    dict(bm=128, **PINGPONG), dict(bm=128, cluster=2, **PINGPONG), dict(bm=256, stages=1),
    dict(bm=128, stages=1, **PINGPONG), dict(bm=256, bn=64, persistent=True, stream_k=True),
]
CPU_IDS = ["256x128", "256x128-persistent", "128x128-one-warpgroup", "256x128-cluster",
           "128x128-pingpong", "128x128-pingpong-cluster", "256x128-one-stage",
           "128x128-pingpong-one-stage", "256x64-stream-k"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", CPU_CASES, ids=CPU_IDS)
def test_the_cpu_runs_it_and_the_race_checker_accepts_it(case, dtype) -> None:
    kernel = lowered("matmul", dtype, **case)
    assert kernel.schedule.roles.warpgroup_rows == 128
    check_roles(kernel)
    arrays = random_inputs(kernel, np.random.default_rng(5))
    got = run_lowered(kernel, arrays, dtype)
    assert relative_error(got, _reference(arrays, dtype)) < 1e-5


@pytest.mark.parametrize("options", [{}, PINGPONG], ids=["cooperative", "pingpong"])
def test_the_tma_store_epilogue_stages_the_strips(options) -> None:
    """A 16-bit C leaves through the staging tile and TMA: each register's row (strip 1's
    64 rows on) in the staging tile is the layout's; the CPU's C equals numpy's."""
    text = (SAMPLES / "matmul.py").read_text(encoding="utf-8").replace(
        "C: f32[", "C: f16[").replace("] = acc\n", "] = acc.to(f16)\n")
    function = load_file(SAMPLES / "matmul.py", text=text)["matmul"]
    bm = 128 if options else 256
    kernel = run_pipeline(function.lower(BM=bm, BN=128, BK=64),
                          Options(stages=3, **ROWS, **options), keep_ir=True).kernel
    assert kernel.schedule.epilogue.via == "tma"
    rng = np.random.default_rng(6)
    a = rng.standard_normal((300, 96)).astype(np.float16)
    b = rng.standard_normal((96, 136)).astype(np.float16)
    c = np.full((300, 136), np.nan, dtype=np.float16)
    run_kernel(kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert relative_error(c.astype(np.float64), want) < 2e-3


@pytest.mark.parametrize("options", [{}, {"persistent": True}, PINGPONG],
                         ids=["one-tile", "persistent", "pingpong"])
def test_batched_programs_on_the_cpu(options) -> None:
    function = load_file(SAMPLES / "bmm.py")["bmm"]
    bm = 128 if options.get("consumers") else 256
    kernel = run_pipeline(function.lower(BM=bm, BN=128, BK=64),
                          Options(stages=2, **ROWS, **options), keep_ir=True).kernel
    assert kernel.schedule.roles.warpgroup_rows == 128
    check_roles(kernel)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 300, 96)).astype(np.float16)
    b = rng.standard_normal((2, 96, 136)).astype(np.float16)
    c = np.full((2, 300, 136), np.nan, dtype=np.float32)
    run_kernel(kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    assert relative_error(c, want) < 1e-5


# -- explain and the CLI -----------------------------------------------------------------

def test_explain_says_two_strips_a_warp() -> None:
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("matmul", "f16").compile(BM=256, BN=128, BK=64, stages=4,
                                                    persistent=True, **ROWS)
    text = render_explanation(explain(compiled, ptxas=False))
    assert ("32 x 128 per warp, two 16-row strips 64 rows apart: a warpgroup's 128 x 128 "
            "(warpgroup_rows=128) from two wgmma.mma_async m64n128k16 per k-step") in text
    assert "8 x 1 = 8 warps, 256 threads (consumers)" in text


def test_the_cli_flag_reaches_the_compiler() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tilec", "compile", str(SAMPLES / "matmul.py"), "--arch",
         "sm_90a", "--const", "BM=256", "BN=128", "BK=64", "--stages", "4", "--persistent",
         "--warpgroup-rows", "128", "--dump-ir", "all"],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "of 128 rows" in result.stdout + result.stderr
    bad = subprocess.run([sys.executable, "-m", "tilec", "compile", str(SAMPLES / "matmul.py"),
                          "--warpgroup-rows", "96"], capture_output=True, text=True, cwd=REPO,
                         timeout=300)
    assert bad.returncode != 0 and "--warpgroup-rows" in bad.stderr


# -- ptxas ---------------------------------------------------------------------------------

PTXAS_CASES = [
    ("matmul", dict(BM=256, stages=4, persistent=True, raster_group=16)),
    ("matmul_bt", dict(BM=256, stages=4)),
    ("gemm_epilogue", dict(BM=256, stages=4, persistent=True)),
    ("matmul", dict(BM=256, stages=4, cluster=2, persistent=True)),
    ("gemm_epilogue", dict(BM=128, stages=4, **PINGPONG)),
    ("matmul", dict(BM=128, stages=4, raster_group=16, **PINGPONG)),
    ("matmul_bt", dict(BM=128, stages=3, cluster=2, **PINGPONG)),
    ("matmul", dict(BM=128, stages=4)),
    ("matmul", dict(BM=256, BN=64, stages=4, persistent=True, stream_k=True)),
]


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("sample, options", PTXAS_CASES,
                         ids=[f"{s}-{'-'.join(f'{k}{v}' for k, v in o.items())}"
                              for s, o in PTXAS_CASES])
def test_the_kernels_assemble_without_serialization_or_spills(tmp_path, sample, options,
                                                              dtype) -> None:
    ptx = load_sample(sample, dtype).ptx(**{"BN": 128, "BK": 64, **options, **ROWS})
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert_assembles_for_sm_90a(ptx, tmp_path, "kernel")


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("options", [{"persistent": True}, PINGPONG], ids=["persistent",
                                                                           "pingpong"])
def test_the_batched_bench_kernels_assemble(tmp_path, options) -> None:
    """The 32x1024^3 bench row's kernels: a 16-bit C through TMA stores, batches x tiles."""
    text = (SAMPLES / "bmm.py").read_text(encoding="utf-8").replace(
        "C: f32[", "C: f16[").replace("] = acc\n", "] = acc.to(f16)\n")
    function = load_file(SAMPLES / "bmm.py", text=text)["bmm"]
    bm = 128 if options.get("consumers") else 256
    compiled = function.compile(BM=bm, BN=128, BK=64, stages=4, **ROWS, **options)
    assert compiled.kernel.schedule.roles.batches
    assert_assembles_for_sm_90a(compiled.ptx, tmp_path, "bmm")


def test_wgmma8_takes_128_row_warpgroups_too() -> None:
    """The 8-bit family shares the emitter: two m64nNk32 a k32 step."""
    ptx = load_sample("int8_gemm", "i8").ptx(BM=256, BN=128, BK=128, stages=3, **ROWS)
    group = ptx[ptx.index("wgmma.fence"):ptx.index("wgmma.commit_group")]
    assert group.count("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8") == 8
    assert WGMMA.block_problem((256, 128, 64), Options(**ROWS)) is None
