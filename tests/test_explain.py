"""``tilec explain``: the numbers it reports for known configurations, the bank-conflict
enumeration against the swizzle pass, the ptxas report, and the CLI subcommand."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tilec.cli import main
from tilec.explain import (Explanation, _degree, _of_it, explain, parse_ptxas,
                           render_explanation)
from tilec.hazards import main_loop
from tilec.ir.core import clone_kernel
from tilec.kernel import TileFunction, load_file

ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "samples" / "matmul.py")
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
    assert h.mma_per_k_step == (64 // 16) * (64 // 8) and h.k_steps == 2
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
    plan = matmul().compile(**KNOWN).kernel.meta["tiling"]
    assert e.registers.estimate == plan.registers_estimate() == 128 + 64 + 40


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


def test_cli_explain_reports_an_unknown_kernel(capsys) -> None:
    assert main(["explain", MATMUL, "--kernel", "nope", "--no-ptxas"]) == 1
    assert "has no tile function 'nope'" in capsys.readouterr().err
