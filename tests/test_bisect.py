"""tilec bisect: a pass that breaks the result is named, and a correct pipeline is cleared.

Broken passes are planted in the pass list (appended after a real pass, or substituted for
one), each a realistic slip: a cp.async wait one group short, a dropped barrier, a copy that
swizzles differently from the reads, two k steps' fragments swapped.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import tilec.tools.bisect
from tilec.tools.bisect import BisectReport, bisect, launch_options, main, make_inputs
from tilec.tools.checking import worst_errors
from tilec.ir.core import Kernel, clone_kernel
from tilec.kernel import TileFunction, load_file
from tilec.target.layout import Swizzle
from tilec.options import Options
from tilec.pipeline import Pass, pipeline

ROOT = Path(__file__).resolve().parents[1]
MATMUL = str(ROOT / "samples" / "matmul.py")
GEMM = str(ROOT / "samples" / "gemm_epilogue.py")
SHAPES = {"M": 40, "N": 48, "K": 40}
CONSTS = {"BM": 32, "BN": 32, "BK": 32}
STAGE_NAMES = ["tile", "cse", "dequantize", "swap_product", "tiling", "split_k",
               "double_buffer", "swizzle", "fragments", "promote_accumulation", "tma_store",
               "row_store"]


def gemm() -> TileFunction:
    return load_file(GEMM)["gemm"]


def planted(after: str, name: str, corrupt: Callable[[Kernel], None]) -> list[Pass]:
    """The pipeline with a pass ``name`` that corrupts a copy of its input, after ``after``."""
    def run(kernel: Kernel, options: Options) -> Kernel:
        kernel = clone_kernel(kernel)
        corrupt(kernel)
        return kernel

    passes = []
    for p in pipeline():
        passes.append(p)
        if p.name == after:
            passes.append(Pass(name, run, ("tiling",)))
    return passes


def substituted(name: str, corrupt: Callable[[Kernel], None]) -> list[Pass]:
    """The pipeline with pass ``name`` replaced by itself followed by ``corrupt``."""
    def wrap(p: Pass) -> Pass:
        def run(kernel: Kernel, options: Options) -> Kernel:
            kernel = p.run(kernel, options)
            corrupt(kernel)  # p.run returned a new kernel: ours to change
            return kernel
        return Pass(p.name, run, p.requires)
    return [wrap(p) if p.name == name else p for p in pipeline()]


def loop_body(kernel: Kernel):
    return next(op for op in kernel.body.ops if op.name == "scf.for").regions[0]


def wait_one_group_short(kernel: Kernel) -> None:
    for op in loop_body(kernel).ops:
        if op.name == "copy.wait":
            op.attrs["pending"] += 1


def drop_the_barrier_after_the_wait(kernel: Kernel) -> None:
    body = loop_body(kernel)
    wait = next(i for i, op in enumerate(body.ops) if op.name == "copy.wait")
    barrier = next(op for op in body.ops[wait:] if op.name == "gpu.barrier")
    body.ops.remove(barrier)


def unswizzle_the_copies_of_a(kernel: Kernel) -> None:
    """The copies into A's buffer write it linearly; its reads still use the swizzle."""
    for op in kernel.walk():
        if op.name == "copy.global_to_shared":
            view = op.operands[1 + op.operands[0].type.rank]
            buffer = view.owner.operands[0]
            if buffer.owner.attrs["role"] == "A":
                view.type = view.type.with_(layout=view.type.layout.with_swizzle(Swizzle(0)))


def swap_the_k_steps_of_a(kernel: Kernel) -> None:
    for op in kernel.walk():
        if op.name == "frag.ldmatrix" and op.attrs["operand"] == "A":
            op.attrs["k0"] = 16 - op.attrs["k0"]


def run_bisect(passes=None, stages: int = 3, **consts) -> BisectReport:
    options = launch_options(SHAPES, stages=stages, warps=(2, 1))
    return bisect(gemm(), {**CONSTS, **consts}, options, SHAPES, seed=1, passes=passes)


def assert_first_bad(report: BisectReport, name: str) -> None:
    bad = report.first_bad
    assert bad is not None, report.table()
    assert bad.stage == name, report.table()
    for stage in report.stages[:report.stages.index(bad)]:
        assert stage.ok and stage.rel_error <= report.tolerance


# ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_correct_pipeline_agrees_at_every_stage(stages: int) -> None:
    report = run_bisect(stages=stages)
    assert [s.stage for s in report.stages] == STAGE_NAMES
    assert report.first_bad is None, report.table()
    assert report.stages[0].compared_with == "float64 reference"
    assert all(s.verdict == "ok" and not s.note for s in report.stages)
    assert report.tolerance == 2e-3


def test_bisect_takes_a_lowered_kernel() -> None:
    kernel = gemm().lower(**CONSTS)
    report = bisect(kernel, shapes=SHAPES)
    assert report.first_bad is None, report.table()
    with pytest.raises(ValueError, match="consts are folded"):
        bisect(kernel, {"BM": 64}, shapes=SHAPES)


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_wait_one_group_short_is_named(stages: int) -> None:
    report = run_bisect(planted("double_buffer", "late_wait", wait_one_group_short), stages)
    assert_first_bad(report, "late_wait")
    assert report.first_bad.verdict == "DIFFERS"


def test_a_dropped_barrier_is_named() -> None:
    report = run_bisect(planted("fragments", "no_fence", drop_the_barrier_after_the_wait))
    assert_first_bad(report, "no_fence")


@pytest.mark.parametrize("after", ["swizzle", "fragments"])
def test_copies_and_reads_that_disagree_on_the_swizzle_are_named(after: str) -> None:
    report = run_bisect(planted(after, "skewed_copies", unswizzle_the_copies_of_a))
    assert_first_bad(report, "skewed_copies")
    # The verifier sees the views disagree with their buffer; the executor sees the result.
    assert "verifier" in report.first_bad.note


def test_a_substituted_pass_is_named_by_its_own_name() -> None:
    report = run_bisect(substituted("swizzle", unswizzle_the_copies_of_a))
    assert_first_bad(report, "swizzle")


def test_swapped_k_steps_are_named() -> None:
    report = run_bisect(planted("fragments", "swapped_k", swap_the_k_steps_of_a))
    assert_first_bad(report, "swapped_k")


def test_a_pass_that_raises_is_named_with_its_error() -> None:
    def explode(kernel: Kernel) -> None:
        raise RuntimeError("planted failure")

    report = run_bisect(planted("swizzle", "explodes", explode))
    assert_first_bad(report, "explodes")
    assert report.first_bad.verdict == "FAILED"
    assert "planted failure" in report.first_bad.failure
    through_swizzle = STAGE_NAMES[:STAGE_NAMES.index("swizzle") + 1]
    assert [s.stage for s in report.stages] == through_swizzle + ["explodes"]


def test_a_stage_the_executor_cannot_run_is_named_with_the_reason() -> None:
    def stage_out_of_range(kernel: Kernel) -> None:
        for op in kernel.walk():
            if op.name == "smem.alloc":
                op.attrs["stages"] = 1
                op.result.type = op.result.type.with_(shape=(1, *op.result.type.shape[1:]))

    report = run_bisect(planted("double_buffer", "one_stage_buffers", stage_out_of_range))
    assert_first_bad(report, "one_stage_buffers")
    assert "stage 1 of a 1-stage buffer" in report.first_bad.failure


# ----------------------------------------------------------------------------------------
# inputs and error measure

def test_inputs_poison_what_the_kernel_only_writes() -> None:
    kernel = load_file(MATMUL)["matmul"].lower(**CONSTS)
    arrays, scalars = make_inputs(kernel, SHAPES, np.random.default_rng(0))
    assert np.isnan(arrays["C"]).all() and arrays["C"].shape == (40, 48)
    assert np.isfinite(arrays["A"]).all() and arrays["B"].shape == (40, 48)
    kernel = gemm().lower(**CONSTS)
    arrays, scalars = make_inputs(kernel, SHAPES, np.random.default_rng(0))
    assert np.isfinite(arrays["C"]).all()  # read by the epilogue: real values
    assert set(scalars) == {"alpha", "beta"} and all(0.5 <= v < 1.5 for v in scalars.values())


def test_error_measure_is_tilec_runs_and_an_unwritten_element_fails() -> None:
    ref = {"C": np.array([[1.0, -2.0], [2.0, 4.0]]), "D": np.array([3.0, 4.0])}
    assert worst_errors({"C": ref["C"].copy(), "D": ref["D"].copy()}, ref) == (0.0, 0.0)
    # ||C - ref|| / ||ref|| = 0.5 / 5 for C, 1 / 5 for D: the worse one counts.
    max_abs, rel = worst_errors({"C": np.array([[1.0, -2.0], [2.0, 4.5]]),
                                 "D": np.array([3.0, 5.0])}, ref)
    assert (max_abs, rel) == (pytest.approx(1.0), pytest.approx(0.2))
    unwritten = {"C": np.array([[np.nan, -2.0], [2.0, 4.0]]), "D": ref["D"].copy()}
    assert np.isnan(worst_errors(unwritten, ref)[1])


# ----------------------------------------------------------------------------------------
# the command line

SMALL = [MATMUL, "--shape", "M=40,N=48,K=40", "--const", "BM=32,BN=32,BK=16"]


def test_main_clears_a_correct_pipeline(capsys, tmp_path: Path) -> None:
    code = main([*SMALL, "--stages", "2", "--warps", "2x1", "--dump-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    for stage in STAGE_NAMES:
        assert f"\n{stage} " in out
    assert "all stages agree" in out
    assert len(list(tmp_path.glob("matmul.*.ir"))) == len(STAGE_NAMES)


def test_main_names_the_first_bad_stage_and_its_ir(capsys, monkeypatch, tmp_path: Path
                                                   ) -> None:
    passes = planted("double_buffer", "late_wait", wait_one_group_short)
    monkeypatch.setattr(tilec.tools.bisect, "pipeline", lambda: passes)
    code = main([*SMALL, "--dump-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "first bad stage: late_wait (differs)" in out
    position = STAGE_NAMES.index("double_buffer")  # the file names count the stages from 0
    bad_ir = tmp_path / f"matmul.{position + 1}-late_wait.ir"
    good_ir = tmp_path / f"matmul.{position}-double_buffer.ir"
    assert str(bad_ir) in out and str(good_ir) in out
    assert "copy.wait {pending = 2}" in bad_ir.read_text()
    assert "copy.wait {pending = 1}" in good_ir.read_text()


def test_main_reports_mistakes_in_the_command(capsys) -> None:
    assert main([*SMALL, "--const", "BX=3"]) == 1
    assert "has no constant BX" in capsys.readouterr().err
    assert main([MATMUL, "--shape", "M=forty"]) == 2
    assert "not a size" in capsys.readouterr().err
