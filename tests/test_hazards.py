"""The schedule hazard checker: the compiler's own schedules pass; schedules broken the way a
pass could break them (a barrier dropped, a wait's count off by one, a copy moved, a commit
or the final wait lost) fail with an error that names both accesses."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tilec.errors import TileConfigError
from tilec.analysis.hazards import HazardError, check_schedule, main_loop, simulate, trip_counts
from tilec.ir.core import Kernel, Op, clone_kernel
from tilec.kernel import TileFunction, load_file
from tilec.options import Options, Spec, TensorSpec
from tilec.pipeline import pipeline, run_pipeline

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
# A's rows in single elements: its copies stay synchronous (ld.global + st.shared).
SYNC_A = Spec(tensors=(("A", TensorSpec(1, 1)),))


def sample(name: str) -> TileFunction:
    (function,) = load_file(SAMPLES / f"{name}.py").values()
    return function


def compiled_kernel(stages: int, pipeline_fragments: bool = True, **options) -> Kernel:
    """A copy of the compiled matmul's IR, free to break."""
    compiled = sample("matmul").compile(stages=stages, pipeline_fragments=pipeline_fragments,
                                        **options)
    return clone_kernel(compiled.kernel)


def loop_ops(kernel: Kernel) -> list[Op]:
    return main_loop(kernel).regions[0].ops


def first(ops: list[Op], name: str) -> Op:
    return next(op for op in ops if op.name == name)


def broken(kernel: Kernel, edit: Callable[[list[Op]], None]) -> HazardError:
    edit(loop_ops(kernel))
    with pytest.raises(HazardError) as caught:
        check_schedule(kernel)
    return caught.value


# --------------------------------------------------------------------- sound schedules

@pytest.mark.parametrize("name", ["matmul", "matmul_bt", "gemm_epilogue", "sgemm"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("pipeline_fragments", [True, False])
def test_the_compilers_schedules_have_no_hazards(name, stages, pipeline_fragments) -> None:
    kernel = sample(name).compile(stages=stages, pipeline_fragments=pipeline_fragments).kernel
    check_schedule(kernel)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_schedules_with_synchronous_copies_have_no_hazards(stages: int) -> None:
    kernel = compiled_kernel(stages, spec=SYNC_A, BK=16)
    modes = {op.attrs["mode"] for op in kernel.walk() if op.name == "copy.global_to_shared"}
    assert modes == {"sync", "async"}
    check_schedule(kernel)


@pytest.mark.parametrize("passes", [4, 5, 6])  # cse, dequantize, swap_product, tiling, ...
@pytest.mark.parametrize("stages", [1, 3])
def test_schedules_are_checked_after_any_pass_from_tiling_on(passes: int, stages: int) -> None:
    # Before the fragments pass the tile.dot itself reads the shared views.
    kernel = sample("matmul").lower()
    kernel = run_pipeline(kernel, Options(stages=stages), pipeline()[:passes]).kernel
    check_schedule(kernel)
    reads = [e for e in simulate(kernel, 2).events if e.op.name == "tile.dot"]
    assert [(e.buffer_name, e.iteration) for e in reads] == [
        ("sA", 0), ("sB", 0), ("sA", 1), ("sB", 1)]


def test_the_simulation_evaluates_stage_indices_per_iteration() -> None:
    trace = simulate(compiled_kernel(3), 6)
    loop_copies = [e for e in trace.events if e.is_write and e.phase == "loop"
                   and e.buffer_name == "sA"]
    assert [(e.iteration, e.stage, e.group) for e in loop_copies] == [
        (it, (it + 2) % 3, it + 2) for it in range(6)]
    # The K offset of iteration it's copy is (it + 2) * BK; the tile row offset is the first
    # program's, 0.
    assert [e.offsets for e in loop_copies[:2]] == [(0, 64), (0, 96)]
    reads = [(e.iteration, e.stage, e.op.attrs["k0"]) for e in trace.events
             if e.op.name == "frag.ldmatrix" and e.buffer_name == "sB" and e.phase == "loop"]
    assert reads[:4] == [(0, 0, 16), (0, 1, 0), (1, 1, 16), (1, 2, 0)]


def test_trip_counts_cover_the_steady_state_and_short_loops() -> None:
    assert trip_counts(3) == [8, 1, 2, 3]
    assert trip_counts(1) == [4, 1]


# ------------------------------------------------------------------- broken schedules

def test_a_missing_barrier_before_the_reads_names_the_copy_and_the_read() -> None:
    error = broken(compiled_kernel(3), lambda ops: ops.remove(first(ops, "gpu.barrier")))
    assert error.first.op.name == "copy.global_to_shared" and error.first.phase == "prologue"
    assert error.second.op.name == "frag.ldmatrix" and error.second.iteration == 0
    assert error.first.stage == error.second.stage == 1
    text = error.render()
    assert "sA stage 1 is read without a gpu.barrier after the copy.wait" in text
    assert "copy.global_to_shared (async) writing sA stage 1 before the K loop, at " in text
    assert ("frag.ldmatrix of operand A (k0 = 0) reading sA stage 1 in K-loop iteration 0, "
            "at ") in text
    assert str(error.first.op.loc) in text and str(error.second.op.loc) in text
    assert text.startswith(f"{error.second.op.loc}: schedule error:")


def test_ffma_operand_reads_are_checked_like_ldmatrix() -> None:
    kernel = clone_kernel(sample("sgemm").compile(stages=3).kernel)
    error = broken(kernel, lambda ops: ops.remove(first(ops, "gpu.barrier")))
    assert error.second.op.name == "frag.lds"
    assert "frag.lds of operand A (k0 = " in error.render()


def test_tf32_operand_reads_are_checked_like_ldmatrix() -> None:
    kernel = clone_kernel(sample("sgemm").compile(stages=3, f32_math="tf32").kernel)
    error = broken(kernel, lambda ops: ops.remove(first(ops, "gpu.barrier")))
    assert error.second.op.name == "frag.ldtf32"
    assert "frag.ldtf32 of operand A (k0 = " in error.render()


def test_a_wait_that_leaves_the_stage_in_flight_is_a_read_after_write_race() -> None:
    def wait_for_less(ops: list[Op]) -> None:
        first(ops, "copy.wait").attrs["pending"] = 3 - 1

    error = broken(compiled_kernel(3), wait_for_less)
    assert "is read while the copy that fills it may still be in flight" in error.message
    assert (error.first.op.name, error.second.op.name) == ("copy.global_to_shared",
                                                           "frag.ldmatrix")
    assert error.first.stage == error.second.stage
    assert error.first.describe() in error.message and error.second.describe() in error.message


def test_a_lost_commit_leaves_the_copies_out_of_every_wait() -> None:
    error = broken(compiled_kernel(3), lambda ops: ops.remove(first(ops, "copy.commit")))
    assert "no copy.wait covers its commit group" in error.message
    assert error.first.op.name == "copy.global_to_shared"
    assert error.second.op.name == "frag.ldmatrix"


def test_a_refill_without_a_barrier_after_the_last_read_is_a_write_after_read_race() -> None:
    # One stage: the barrier that opens each iteration keeps the copy off the stage that the
    # previous iteration's ldmatrix loads were reading.
    error = broken(compiled_kernel(1), lambda ops: ops.remove(first(ops, "gpu.barrier")))
    assert "sA stage 0 is refilled while another warp may still be reading it" in error.message
    assert error.first.op.name == "frag.ldmatrix" and error.first.iteration == 0
    assert error.first.op.attrs["k0"] == 16  # the stage's last read, not its first
    assert error.second.op.name == "copy.global_to_shared" and error.second.iteration == 1


def test_a_copy_moved_above_the_barrier_races_with_the_previous_iterations_reads() -> None:
    def move_copies_up(ops: list[Op]) -> None:
        # The copies (and their index arithmetic) now come first: the wait and the barrier
        # that opened the iteration go right after the commit.
        fences = [first(ops, "copy.wait"), first(ops, "gpu.barrier")]
        for op in fences:
            ops.remove(op)
        commit = ops.index(first(ops, "copy.commit"))
        ops[commit + 1:commit + 1] = fences

    kernel = compiled_kernel(3, pipeline_fragments=False)
    ops = loop_ops(kernel)
    assert ops.index(first(ops, "gpu.barrier")) < ops.index(first(ops, "copy.global_to_shared"))
    error = broken(kernel, move_copies_up)
    assert "refilled while another warp may still be reading it" in error.message
    assert error.first.op.name == "frag.ldmatrix"
    assert error.second.op.name == "copy.global_to_shared"
    assert error.second.iteration == error.first.iteration + 1
    assert error.first.stage == error.second.stage == (error.second.iteration + 2) % 3


def test_synchronous_copies_need_a_barrier_too() -> None:
    kernel = compiled_kernel(2, pipeline_fragments=False, spec=SYNC_A, BK=16)
    error = broken(kernel, lambda ops: ops.remove(first(ops, "gpu.barrier")))
    assert "without a gpu.barrier after the copy that fills it" in error.message
    assert error.first.op.attrs["mode"] == "sync"
    assert "copy.global_to_shared (sync) writing sA stage" in error.message


def test_a_kernel_that_ends_with_copies_in_flight_is_reported() -> None:
    kernel = compiled_kernel(3)
    drain = kernel.body.ops[kernel.body.ops.index(main_loop(kernel)) + 1]
    assert drain.name == "copy.wait" and drain.attrs["pending"] == 0
    kernel.body.ops.remove(drain)
    with pytest.raises(HazardError, match="can finish with a copy into") as caught:
        check_schedule(kernel)
    assert caught.value.first.op.name == "copy.global_to_shared"
    assert caught.value.second.op.name == "copy.wait"


def test_a_read_of_a_stage_no_copy_filled_names_the_buffer() -> None:
    kernel = compiled_kernel(2, pipeline_fragments=False)
    top = kernel.body.ops
    kernel.body.ops = [op for op in top if op.name != "copy.global_to_shared"]
    with pytest.raises(HazardError, match="is read before any copy fills it") as caught:
        check_schedule(kernel)
    assert caught.value.first.op.name == "smem.alloc"
    assert caught.value.second.op.name == "frag.ldmatrix"


def test_a_stage_index_known_only_at_run_time_cannot_be_checked() -> None:
    kernel = compiled_kernel(2)
    stage = first(loop_ops(kernel), "smem.stage")
    stage.operands[1] = kernel.symbol_value("M")
    with pytest.raises(TileConfigError, match="cannot be evaluated at compile time"):
        check_schedule(kernel)


def test_hazard_errors_are_config_errors_with_a_caret() -> None:
    error = broken(compiled_kernel(2), lambda ops: ops.remove(first(ops, "gpu.barrier")))
    assert isinstance(error, TileConfigError)
    lines = error.render().splitlines()
    caret = next(line for line in lines if line.strip() == "^")
    assert caret.index("^") == 4 + error.loc.col - 1
