"""``tilec explain``: the numbers it reports for known configurations, the bank-conflict
enumeration against the swizzle pass, the ptxas report, and the CLI subcommand; for the mma
kind (samples/matmul.py) and the FFMA kind (samples/sgemm.py)."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tilec.cli import main
from tilec.families.product import Run
from tilec.tools.explain import Explanation, _degree, explain, parse_ptxas, render_explanation
from tilec.tools.explain_schedule import ScheduleRow, _of_it, _row
from tilec.analysis.hazards import Event, Trace, main_loop
from tilec.ir.core import clone_kernel, defining_op
from tilec.kernel import TileFunction, load_file
from tilec.families.products import family_of
from tilec.passes.tiling import registers_estimate

from .test_swap_product import RESIDUAL_FIRST

ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "samples" / "matmul.py")
SGEMM = str(ROOT / "samples" / "sgemm.py")
PTXAS = shutil.which("ptxas")
KNOWN = {"BM": 128, "BN": 128, "BK": 32, "warps": (2, 2), "stages": 3}


def matmul() -> TileFunction:
    return load_file(MATMUL)["matmul"]


def explained(**options) -> Explanation:
    return explain(matmul().compile(**options), ptxas=False)


def conflicts(e: Explanation) -> dict[tuple[str, str], tuple[int, int]]:
    """(operand, access kind) -> (worst degree, worst degree when linear)."""
    return {(c.role, c.access.split()[0]): (c.worst, c.linear) for c in e.conflicts}


# ------------------------------------------------------------------ a known config

def test_the_hierarchy_of_a_128x128x32_block_on_2x2_warps() -> None:
    h = explained(**KNOWN).hierarchy
    assert (h.block, h.warps, h.warp_tile, h.instruction) == (
        (128, 128, 32), (2, 2), (64, 64), (16, 8, 16))
    assert h.threads == 128
    assert h.kind == "mma" and h.products_per_k_step == (64 // 16) * (64 // 8)
    assert h.loads_per_k_step == (4, 4) and h.k_steps == 2
    a, b = h.copies
    # A is stored 128x32: 16-byte vectors, 4 per row, 128 threads cover 32 rows a pass.
    assert (a.rows, a.cols, a.vec_elems, a.vec_bytes) == (128, 32, 8, 16)
    assert (a.per_thread, a.threads_per_row, a.rows_per_pass, a.mode) == (4, 4, 32, "async")
    assert (b.rows, b.cols, b.per_thread, b.threads_per_row, b.rows_per_pass) == (
        32, 128, 4, 16, 8)


def test_the_shared_memory_plan_of_three_stages_is_48_kib() -> None:
    e = explained(**KNOWN)
    shared = e.shared
    assert [(b.name, b.offset, b.stage_bytes, b.total_bytes, b.alignment)
            for b in shared.buffers] == [("sA", 0, 8192, 24576, 128),
                                         ("sB", 24576, 8192, 24576, 128)]
    assert shared.total_bytes == shared.backend_bytes == 48 * 1024
    assert shared.limit_bytes == 166912 and not shared.needs_opt_in
    text = render_explanation(e)
    assert "128 threads" in text and "64 x 64" in text
    assert "total 49152 B (48 KiB) of 166912 B" in text
    assert explained(**dict(KNOWN, stages=4)).shared.needs_opt_in


def test_the_schedule_table_of_three_stages() -> None:
    rows = explained(**KNOWN).schedule.rows
    prologue = [(r.op, r.target, r.detail) for r in rows if r.phase == "prologue"]
    assert prologue[:3] == [
        ("cp.async", "sA[0]", "A tile of k-iteration 0, only while k < K"),
        ("cp.async", "sB[0]", "B tile of k-iteration 0, only while k < K"),
        ("commit", "", "closes the group of k-iteration 0")]
    assert ("cp.async", "sA[1]", "A tile of k-iteration 1, only while k < K") in prologue
    loop = [(r.op, r.target, r.detail) for r in rows if r.phase == "loop"]
    ops = [op for op, _, _ in loop]
    # The refill comes first (the previous iteration's barrier fenced its stage), the wait
    # for the next stage sits before the last mma, and the next stage's first fragments
    # load right after the barrier.
    assert ops == ["cp.async", "cp.async", "commit", "ldmatrix", "ldmatrix", "mma", "wait",
                   "barrier", "ldmatrix", "ldmatrix", "mma"]
    assert loop[0] == ("cp.async", "sA[(it+2)%3]", "A tile of k-iteration it+2, only while "
                       "k < K")
    assert loop[3] == ("ldmatrix", "sA[it%3]", "A k0=16")
    assert loop[6] == ("wait", "", "pending <= 1: copies of k-iterations <= it+1 complete")
    assert loop[8] == ("ldmatrix", "sA[(it+1)%3]", "A k0=0, carried into the next iteration")
    assert loop[5][2].startswith("A k0=0 (carried), B k0=0 (carried)")
    after = [(r.op, r.detail) for r in rows if r.phase == "after"]
    assert after == [("wait", "pending <= 0: every copy issued so far complete")]


def test_the_schedule_of_one_stage_waits_for_each_copy() -> None:
    rows = explained(**dict(KNOWN, stages=1)).schedule.rows
    loop = [(r.op, r.target) for r in rows if r.phase == "loop"]
    assert loop[:5] == [("barrier", ""), ("cp.async", "sA[0]"), ("cp.async", "sB[0]"),
                        ("commit", ""), ("wait", "")]
    assert not [r for r in rows if r.phase == "prologue"]


def test_swizzle_makes_ldmatrix_conflict_free_and_off_does_not() -> None:
    swizzled = conflicts(explained(**KNOWN))
    assert swizzled[("A", "ldmatrix.x4")] == (1, 4)
    assert swizzled[("B", "ldmatrix.x4.trans")] == (1, 8)
    assert swizzled[("A", "cp.async")] == (1, 1)
    linear = conflicts(explained(**dict(KNOWN, swizzle="off")))
    assert linear[("A", "ldmatrix.x4")] == (4, 4)
    assert linear[("B", "ldmatrix.x4.trans")] == (8, 8)


def test_every_access_instance_is_enumerated() -> None:
    e = explained(**KNOWN)
    by_access = {(c.role, c.access): c.instances for c in e.conflicts}
    # Stores: 3 stages x 4 warps x 4 accesses; ldmatrix: 3 stages x 4 warps x 2 k-steps x
    # 4 pieces of 16 rows in a 64-row warp tile.
    assert by_access[("A", "cp.async 16 B")] == 3 * 4 * 4
    assert by_access[("A", "ldmatrix.x4")] == 3 * 4 * 2 * 4


@pytest.mark.parametrize("options", [
    KNOWN, dict(KNOWN, swizzle="off"), {"BM": 64, "BN": 128, "BK": 64, "stages": 2},
    {"BM": 128, "BN": 64, "BK": 32, "warps": (4, 1)}, {"BM": 64, "BN": 64, "BK": 16},
])
def test_the_full_enumeration_agrees_with_the_swizzle_pass(options) -> None:
    for c in explained(**options).conflicts:
        assert c.pass_figure == c.worst, c


def test_sub_word_stores_count_their_words() -> None:
    # 2-byte stores 128 bytes apart all hit bank 0 in different words: 32 wavefronts.
    assert _degree([lane * 128 for lane in range(32)], 2) == 32
    assert _degree([lane * 2 for lane in range(32)], 2) == 1


def test_synchronous_copies_are_shown_as_element_stores() -> None:
    from tilec.options import Spec, TensorSpec
    e = explain(matmul().compile(spec=Spec(tensors=(("A", TensorSpec(1, 1)),)), **KNOWN),
                ptxas=False)
    (row,) = [c for c in e.conflicts if c.role == "A" and c.access.startswith("st.shared")]
    assert row.access == "st.shared.b16" and row.instances == 3 * 4 * 32
    assert e.hierarchy.copies[0].mode == "sync"
    assert "ld+st.shared" in render_explanation(e)


@pytest.mark.parametrize(("values", "stages", "expected"), [
    ([2, 0, 1, 2, 0], 3, "(it+2)%3"), ([0, 1, 0, 1], 2, "it%2"), ([5, 6, 7], None, "it+5"),
    ([0, 0, 0], 3, "0"), ([None, 1], 3, "?"), ([0, 2, 1], 3, "0,2,1,..."),
])
def test_stage_indices_are_written_as_functions_of_the_iteration(values, stages,
                                                                 expected) -> None:
    assert _of_it(values, stages) == expected


def test_registers_estimate_matches_the_tiling_plan() -> None:
    e = explained(**KNOWN)
    plan = matmul().compile(**KNOWN).kernel.schedule.tiling
    assert e.registers.estimate == registers_estimate(plan) == 128 + 64 + 40


# --------------------------------------------------------------------------- hazards

def test_a_schedule_hazard_is_shown_not_raised() -> None:
    compiled = matmul().compile(**KNOWN)
    kernel = clone_kernel(compiled.kernel)
    body = main_loop(kernel).regions[0]
    body.ops.remove(next(op for op in body.ops if op.name == "gpu.barrier"))
    e = explain(dataclasses.replace(compiled, kernel=kernel), ptxas=False)
    assert "is read without a gpu.barrier" in e.hazard
    assert "Hazard check: FAILED" in render_explanation(e)
    assert explained(**KNOWN).hazard == ""


# ----------------------------------------------------------------------------- ptxas

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'matmul' for 'sm_80'
ptxas info    : Function properties for matmul
    8 bytes stack frame, 12 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 512 bytes smem, 412 bytes cmem[0]
"""


def test_parse_ptxas_reads_registers_spills_and_shared() -> None:
    report = parse_ptxas(PTXAS_LOG, "sm_80")
    assert (report.registers, report.spill_stores, report.spill_loads, report.stack_bytes,
            report.static_smem_bytes, report.barriers) == (255, 12, 16, 8, 512, 1)
    assert parse_ptxas("ptxas fatal   : Unresolved extern function", "sm_80") is None


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
def test_ptxas_reports_the_sample_without_spills() -> None:
    e = explain(matmul().compile(**KNOWN))
    assert e.ptxas is not None and e.ptxas_note == ""
    assert 0 < e.ptxas.registers <= 255
    assert e.ptxas.spill_stores == e.ptxas.spill_loads == 0
    assert f"{e.ptxas.registers} registers" in render_explanation(e)


# ------------------------------------------------------------------------------- CLI

def test_cli_explain_the_sample(capsys) -> None:
    assert main(["explain", MATMUL]) == 0
    out = capsys.readouterr().out
    for heading in ("Tile hierarchy", "Pipeline schedule: 3 stages", "Shared memory",
                    "Bank conflicts", "Registers per thread", "Hazard check: no"):
        assert heading in out


def test_cli_explain_options_reach_the_compiler(capsys) -> None:
    code = main(["explain", MATMUL, "--kernel", "matmul", "--stages", "2", "--warps", "2x2",
                 "--swizzle", "off", "--const", "BK=64", "--shape", "M=4096", "--no-ptxas"])
    out = capsys.readouterr().out
    assert code == 0
    assert "128 x 128 x 64" in out and "Pipeline schedule: 2 stages" in out
    assert "ptxas     not run" in out
    assert "sA[(it+1)%2]" in out


def test_cli_explain_names_the_passes_switched_off(capsys) -> None:
    """--disable shows in the header, and a warp-specialized kernel without the tma_store
    pass says its epilogue stores each thread's registers because the pass is off (it said
    nothing); mma.sync kernels, which never store by TMA, say nothing of it."""
    hopper = ["explain", MATMUL, "--arch", "sm_90a", "--const", "BM=128,BN=256,BK=64",
              "--stages", "3", "--shape", "M=1024,N=1024,K=512", "--no-ptxas"]
    assert main(hopper) == 0
    out = capsys.readouterr().out
    assert "passes off" not in out
    assert "epilogue          registers -> 2 one-slab staging buffers sC" in out
    assert main([*hopper, "--disable", "tma_store"]) == 0
    out = capsys.readouterr().out
    assert "raster group 8, passes off: tma_store" in out
    assert "epilogue          each thread stores its registers (st.global): the tma_store " \
        "pass is off" in out
    assert main(["explain", MATMUL, "--disable", "tma_store", "--no-ptxas"]) == 0
    out = capsys.readouterr().out
    assert "passes off: tma_store" in out and "epilogue " not in out


def test_cli_explain_tuned_shows_the_configuration_the_bench_runs(capsys) -> None:
    """--tuned: the bench's tuned configuration for the product at --shape's sizes (64 rows:
    one 64x128 wgmma tile; 4104^2: 192x176 in persistent clusters of 2); flags given win;
    a tile size given, or sizes missing, are refused at the command line."""
    base = ["explain", MATMUL, "--arch", "sm_90a", "--tuned", "--no-ptxas"]
    assert main([*base, "--shape", "M=64,N=12288,K=4096"]) == 0
    out = capsys.readouterr().out
    assert "for sm_90a: stages 6," in out and "block tile        64 x 128 x 64" in out
    assert main([*base, "--shape", "M=4104,N=4104,K=4096", "--stages", "3"]) == 0
    out = capsys.readouterr().out
    assert "for sm_90a: stages 3," in out and "block tile        192 x 176 x 64" in out
    assert "cluster           2 blocks along M" in out
    # Why: the table entry, the rules that moved the case off it, what was given over it.
    assert out.startswith("tuned: 4104x4104x4096 f16 on sm_90a: the ragged class's wgmma "
                          "entry (TUNED), 128x256x64, stages 3\n")
    assert "tuned: then _multicast_for_rows_off_lines: clusters of 2 sharing B" in out
    assert "tuned: chosen: 192x176x64, stages 4, persistent, raster_group 16, cluster 2\n" \
        "tuned: over it, as given: stages 3\n" in out
    assert main([*base, "--shape", "M=64,N=128,K=64", "--const", "BM=64"]) == 1
    assert "--tuned chooses the tile of 'matmul': drop --const BM" in capsys.readouterr().err
    assert main([*base, "--shape", "M=64"]) == 1
    assert "--tuned needs the product's sizes: --shape N=..,K=.." in capsys.readouterr().err


def test_cli_tuned_takes_the_swapped_product_only_where_the_pass_swaps_it(capsys,
                                                                         tmp_path) -> None:
    """At 300x3000x8192 the tuning swaps the product (152-row tiles along wgmma's n): taken
    for the matmul sample; for a program the swap_product pass leaves as written (a tile
    read before the K loop), or with --swap-product auto given, the tuning's choice without
    the swap, and why; a 3-D program is batched (no split, no swap); tuned options the
    given ones cannot go with are a usage error, not a traceback."""
    base = ["explain", "--arch", "sm_90a", "--tuned", "--no-ptxas",
            "--shape", "M=300,N=3000,K=8192"]
    assert main([*base, MATMUL]) == 0
    out = capsys.readouterr().out
    assert "tuned: then _swapped: the product swapped" in out
    assert "tuned: chosen: 152x64x64, stages 6, swap_product always, cluster 2\n" in out
    assert "swapped product   C.T = B.T @ A.T" in out
    assert "they share each stage of B's tile (the product's A)" in out
    path = tmp_path / "residual_first.py"
    path.write_text(RESIDUAL_FIRST)
    assert main([*base, str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tuned: the swapped product the tuning chose first does not apply: "
                          "a 2-D tile is computed before the K loop; chosen without it\n")
    assert "tuned: then _tall: " in out and "block tile        192 x 128 x 64" in out
    assert main([*base, MATMUL, "--swap-product", "auto"]) == 0
    out = capsys.readouterr().out
    assert "does not apply: swap_product is not 'always' (as given)" in out
    assert "tuned: chosen: 192x128x64, stages 4, split_k 2\n" in out
    assert main([*base, str(ROOT / "samples" / "bmm.py")]) == 0
    out = capsys.readouterr().out
    assert "tuned: 2x300x3000x8192 f16 on sm_90a" in out and "split_k" not in out
    assert main([*base, MATMUL, "--blocks-per-sm", "2"]) == 1
    assert "--tuned chose 152x64x64, stages 6, swap_product always, cluster 2, which the " \
        "options given (blocks_per_sm 2) cannot go with: cluster=2" in capsys.readouterr().err


def test_cli_run_tuned_runs_the_tuned_kernel_in_the_cpu_interpreter(capsys) -> None:
    assert main(["run", MATMUL, "--tuned", "--cpu", "--arch", "sm_90a",
                 "--shape", "M=48,N=256,K=128"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("PASS")
    assert "tuned: 48x256x128 f16 on sm_90a: the short class's wgmma entry" in out


def test_cli_explain_reports_an_unknown_kernel(capsys) -> None:
    assert main(["explain", MATMUL, "--kernel", "nope", "--no-ptxas"]) == 1
    assert "has no tile function 'nope'" in capsys.readouterr().err


# ------------------------------------------------------------------- the FFMA kind

def sgemm() -> TileFunction:
    return load_file(SGEMM)["sgemm"]


SGEMM_BT = """
from __future__ import annotations
from tilec import f32, tile

@tile
def sgemm_bt(A: f32[M, K], B: f32[N, K], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
"""


def sgemm_bt(tmp_path: Path) -> TileFunction:
    """An f32 kernel whose B is stored k-contiguous: B's 16-byte reads run along k."""
    path = tmp_path / "sgemm_bt.py"
    path.write_text(SGEMM_BT, encoding="utf-8")
    return load_file(str(path))["sgemm_bt"]


def test_the_sgemm_hierarchy_is_lanes_and_ffma_not_mma_tiles() -> None:
    compiled = sgemm().compile()
    assert compiled.kernel.schedule.tiling.kind == "simt"
    e = explain(compiled, ptxas=False)
    h = e.hierarchy
    assert (h.block, h.warps, h.warp_tile, h.kind) == ((128, 128, 16), (4, 2), (32, 64), "simt")
    assert (h.k_step, h.k_steps) == (4, 4)
    # A lane of the 4 x 8 lane grid owns rows {0..3, 16..19} and columns {0..3, 32..35}
    # (relative to its first): an 8 x 8 piece of C.
    assert h.lanes.lane_grid == (4, 8) and h.lanes.shape == (8, 8)
    assert (h.lanes.rows, h.lanes.cols) == (Run(2, 4, 16), Run(2, 4, 32))
    # A is k-contiguous: one 16-byte read per row (8); B is n-contiguous: one per run of 4
    # columns per k (2 x 4). Every (row, column) of the piece at every k: 8 x 8 x 4 FFMAs.
    assert h.loads_per_k_step == (8, 8)
    assert h.products_per_k_step == 8 * 8 * 4
    text = render_explanation(e)
    assert ("  warp tile         32 x 64: 4 x 8 lanes, each an 8 x 8 piece of C (runs of 4 rows "
            "16 apart, 4 columns 32 apart); per k-step of 4: 16 ld.shared.v4 (A 8, B 8) and "
            "256 fma.rn.f32 per thread\n") in text
    assert ("  instruction       fma.rn.f32, one multiply-add per thread (exact f32 product, "
            "one rounding); 4 k-steps of 4 per BK\n") in text
    # Nothing of the mma kind: no mma tiles, no ldmatrix, no mma order option.
    assert "mma" not in text and "ldmatrix" not in text and "m1n1k1" not in text
    assert text.splitlines()[0].endswith(": stages 3, swizzle auto, pipeline_fragments on, "
                                         "raster group 8")
    assert "mma order n" in render_explanation(explained(**KNOWN))


def test_the_sgemm_counts_are_the_instructions_the_backend_emits() -> None:
    # Without cross-iteration fragment pipelining every k-step's loads and FFMAs are
    # emitted once in the loop body.
    compiled = sgemm().compile(pipeline_fragments=False)
    h = explain(compiled, ptxas=False).hierarchy
    assert compiled.ptx.count("ld.shared.v4.f32") == h.k_steps * sum(h.loads_per_k_step)
    assert compiled.ptx.count("fma.rn.f32") == h.k_steps * h.products_per_k_step


def test_a_warp_tile_of_one_run_per_lane(tmp_path) -> None:
    e = explain(sgemm().compile(BM=64, BN=64, warps=(4, 2)), ptxas=False)
    assert e.hierarchy.warp_tile == (16, 32)
    assert ("16 x 32: 4 x 8 lanes, each a 4 x 4 piece of C (4 rows, 4 columns); per k-step of "
            "4: 8 ld.shared.v4 (A 4, B 4) and 64 fma.rn.f32 per thread") in render_explanation(e)
    # B stored k-contiguous: one read per column, along k.
    h = explain(sgemm_bt(tmp_path).compile(), ptxas=False).hierarchy
    assert h.loads_per_k_step == (8, 8) and h.k_steps == 8


def test_sgemm_registers_come_from_the_simt_kind() -> None:
    compiled = sgemm().compile()
    plan = compiled.kernel.schedule.tiling
    r = explain(compiled, ptxas=False).registers
    # 8 x 8 accumulators; A 8 rows x 4 k and B 8 columns x 4 k, double-buffered.
    assert (r.accumulators, r.fragments, r.overhead) == (64, 2 * (8 + 8) * 4, 40)
    assert r.fragments == 2 * family_of(plan).fragment_registers(32, 64)
    assert r.estimate == registers_estimate(plan) == 64 + 128 + 40
    assert ("  estimate  232: 64 accumulators + 128 fragments (double-buffered) + 40 addresses "
            "and indices\n") in render_explanation(explain(compiled, ptxas=False))


def test_sgemm_conflict_rows_are_its_16_byte_operand_reads() -> None:
    compiled = sgemm().compile()
    report = compiled.kernel.schedule.conflict_report()
    e = explain(compiled, ptxas=False)
    rows = {(c.role, c.access): c for c in e.conflicts}
    assert set(rows) == {("A", "cp.async 16 B"), ("A", "ld.shared.v4"),
                         ("B", "cp.async 16 B"), ("B", "ld.shared.v4")}
    for role in "AB":
        row = rows[(role, "ld.shared.v4")]
        assert row.worst == row.pass_figure == report[role]["chosen"]["lds"]
        assert row.linear == report[role]["linear"]["lds"]
        # 3 stages x 8 warps x 4 k-steps x 8 loads.
        assert row.instances == 3 * 8 * 4 * 8
    # The 8 lanes of a lane row read one A row: linear, the 4 lane rows' 16-byte reads of
    # a 64-byte-row tile land on 4 words of one bank; the pass's swizzle spreads them.
    assert report["A"]["swizzle"] == "swizzle(2,2,4)"
    assert (rows[("A", "ld.shared.v4")].worst, rows[("A", "ld.shared.v4")].linear) == (1, 4)
    assert (rows[("B", "ld.shared.v4")].worst, rows[("B", "ld.shared.v4")].linear) == (1, 1)
    text = render_explanation(e)
    assert "  A        ld.shared.v4   swizzle(2,2,4)  768        1      4\n" in text
    assert "  B        ld.shared.v4   linear          768        1      1\n" in text
    assert "stages x warps x k-steps x loads)" in text
    assert "note: the swizzle pass computed" not in text


@pytest.mark.parametrize("options", [
    {}, {"swizzle": "off"}, {"BM": 64, "BN": 64, "warps": (4, 2)},
    {"BK": 32, "stages": 2}, {"BM": 64, "BN": 128, "BK": 8, "stages": 4},
])
def test_the_ffma_enumeration_agrees_with_the_swizzle_pass(options) -> None:
    compiled = sgemm().compile(**options)
    report = compiled.kernel.schedule.conflict_report()
    for c in explain(compiled, ptxas=False).conflicts:
        assert c.pass_figure == c.worst, c
        key = "lds" if c.access == "ld.shared.v4" else "copy"
        assert c.linear == report[c.role]["linear"][key], c


def test_the_ffma_enumeration_of_a_k_contiguous_b(tmp_path) -> None:
    compiled = sgemm_bt(tmp_path).compile()
    report = compiled.kernel.schedule.conflict_report()
    rows = {(c.role, c.access): c for c in explain(compiled, ptxas=False).conflicts}
    for role in "AB":
        row = rows[(role, "ld.shared.v4")]
        assert (row.worst, row.linear) == (report[role]["chosen"]["lds"],
                                           report[role]["linear"]["lds"])
    assert rows[("B", "ld.shared.v4")].linear > 1 == rows[("B", "ld.shared.v4")].worst


def _sgemm_loop():
    kernel = sgemm().compile().kernel
    loop = main_loop(kernel)
    return loop, loop.regions[0].ops


def test_schedule_rows_of_ffma_fragment_loads_and_products() -> None:
    """The rows explain writes for frag.lds and frag.fma events."""
    loop, ops = _sgemm_loop()
    lds = [op for op in ops if op.name == "frag.lds"]
    fma = [op for op in ops if op.name == "frag.fma"]
    assert len(fma) == 4  # BK 16 / k-step 4

    def row(op, stages=(0, 1, 2, 0, 1, 2), offset=0):
        buffer = defining_op(op.operands[0]).operands[0] if op.name == "frag.lds" else None
        events = [Event(op, "loop", it, it, buffer=buffer,
                        stage=None if buffer is None else (s + offset) % 3)
                  for it, s in enumerate(stages)]
        return _row("loop", events, Trace(), {}, 3, loop)

    assert row(lds[0]) == ScheduleRow("loop", "lds", "sA[it%3]", "A k0=4")
    assert row(lds[1]) == ScheduleRow("loop", "lds", "sB[it%3]", "B k0=4")
    assert row(lds[-1], offset=1) == ScheduleRow("loop", "lds", "sB[(it+1)%3]",
                                                 "B k0=0, carried into the next iteration")
    assert row(fma[0]) == ScheduleRow(
        "loop", "fma", "", "A k0=0 (carried), B k0=0 (carried): 256 fma.rn.f32 per thread")
    assert row(fma[1]) == ScheduleRow("loop", "fma", "",
                                      "A k0=4, B k0=4: 256 fma.rn.f32 per thread")


def test_the_ffma_fragment_ops_are_simulated_and_carried() -> None:
    e = explain(sgemm().compile(), ptxas=False)
    assert {"lds", "fma"} <= {row.op for row in e.schedule.rows}
    assert e.schedule.carried == ("a0 = A k0=0 (carried)", "b0 = B k0=0 (carried)")


def test_the_sgemm_schedule_table_shows_its_fragment_ops() -> None:
    rows = explain(sgemm().compile(), ptxas=False).schedule.rows
    loop = [(r.op, r.target, r.detail) for r in rows if r.phase == "loop"]
    assert [op for op, _, _ in loop] == [
        "cp.async", "cp.async", "commit", "lds", "lds", "fma", "lds", "lds", "fma", "lds",
        "lds", "fma", "wait", "barrier", "lds", "lds", "fma"]
    assert loop[3] == ("lds", "sA[it%3]", "A k0=4")
    assert loop[14] == ("lds", "sA[(it+1)%3]", "A k0=0, carried into the next iteration")
    assert loop[-1] == ("fma", "", "A k0=12, B k0=12: 256 fma.rn.f32 per thread")
    prologue = [(r.op, r.target, r.detail) for r in rows if r.phase == "prologue"]
    assert prologue[-2:] == [("lds", "sA[0]", "A k0=0, carried into iteration 0"),
                             ("lds", "sB[0]", "B k0=0, carried into iteration 0")]


def test_cli_explain_sgemm_with_shapes(capsys) -> None:
    code = main(["explain", SGEMM, "--shape", "M=1000", "--shape", "N=1000", "--shape",
                 "K=1000", "--no-ptxas"])
    out = capsys.readouterr().out
    assert code == 0
    assert "packed at launch, for row-major arrays of these sizes:" in out
    assert "16 ld.shared.v4 (A 8, B 8) and 256 fma.rn.f32 per thread" in out
    assert "ld.shared.v4" in out and "ldmatrix" not in out and "mma" not in out


# ------------------------------------------------------------------- the tf32 kind

def test_the_tf32_hierarchy_names_each_operands_reads() -> None:
    compiled = sgemm().compile(f32_math="tf32")
    e = explain(compiled, ptxas=False)
    h = e.hierarchy
    assert (h.block, h.warps, h.warp_tile, h.instruction, h.kind) == (
        (128, 128, 16), (2, 2), (64, 64), (16, 8, 8), "tf32")
    assert (h.k_step, h.k_steps, h.products_per_k_step, h.lanes) == (8, 2, 32, None)
    # A (k contiguous): 4 ldmatrix.x4 per k-step; row-major B: 8 n8 tiles x 2 registers.
    assert h.loads_per_k_step == (4, 16)
    text = render_explanation(e)
    assert e.options.startswith("stages 3, swizzle auto, pipeline_fragments on, f32 math tf32, "
                                "mma order n")
    assert ("  warp tile         64 x 64: 4 x 8 mma tiles, 32 mma.sync and 20 fragment loads "
            "(A 4 ldmatrix.x4, B 16 ld.shared.b32) per k-step, each register then rounded by "
            "cvt.rna.tf32.f32\n") in text
    assert ("  instruction tile  m16n8k8 .tf32 (f32 inputs rounded to tf32, f32 accumulation), "
            "2 k-steps per BK\n") in text
    assert "fma.rn.f32" not in text and "ld.shared.v4" not in text


@pytest.mark.parametrize("b_transposed", [False, True])
def test_the_tf32_counts_are_the_instructions_the_backend_emits(tmp_path, b_transposed):
    fn = sgemm_bt(tmp_path) if b_transposed else sgemm()
    compiled = fn.compile(f32_math="tf32", pipeline_fragments=False)
    h = explain(compiled, ptxas=False).hierarchy
    a, b = h.loads_per_k_step
    words = 0 if b_transposed else b
    ptx = compiled.ptx
    assert ptx.count("ldmatrix.sync") == h.k_steps * (a + b - words)
    assert ptx.count("ld.shared.b32") == h.k_steps * words
    assert ptx.count("mma.sync.aligned.m16n8k8") == h.k_steps * h.products_per_k_step
    registers = 4 * (a + b - words) + words  # 4 registers an ldmatrix.x4, 1 a b32 read
    assert ptx.count("cvt.rna.tf32.f32") == h.k_steps * registers


@pytest.mark.parametrize("options", [{}, {"swizzle": "off"}, {"BN": 32, "warps": (4, 1)},
                                     {"BK": 32, "stages": 2}])
def test_the_tf32_enumeration_agrees_with_the_swizzle_pass(options) -> None:
    compiled = sgemm().compile(f32_math="tf32", **options)
    report = compiled.kernel.schedule.conflict_report()
    rows = explain(compiled, ptxas=False).conflicts
    assert [(c.role, c.access) for c in rows] == [
        ("A", "cp.async 16 B"), ("A", "ldmatrix.x4"), ("B", "cp.async 16 B"),
        ("B", "ld.shared.b32")]
    for c in rows:
        assert c.pass_figure == c.worst, c
        key = "copy" if c.access.startswith("cp.async") else "ldtf32"
        assert c.linear == report[c.role]["linear"][key], c
    b32 = rows[3]
    assert b32.linear == 4  # 4 k rows of 8 words on the same banks, unswizzled
    assert b32.worst == (4 if options.get("swizzle") == "off" else 1)


def test_the_tf32_schedule_rows() -> None:
    rows = explain(sgemm().compile(f32_math="tf32"), ptxas=False).schedule.rows
    loop = [(r.op, r.target, r.detail) for r in rows if r.phase == "loop"]
    assert [op for op, _, _ in loop] == [
        "cp.async", "cp.async", "commit", "ldtf32", "ldtf32", "mma", "wait", "barrier",
        "ldtf32", "ldtf32", "mma"]
    assert loop[3] == ("ldtf32", "sA[it%3]", "A k0=8")
    assert loop[5] == ("mma", "", "A k0=0 (carried), B k0=0 (carried): 32 mma.sync per warp")
