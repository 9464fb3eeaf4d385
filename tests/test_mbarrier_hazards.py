"""The mbarrier protocol checker (tilec/analysis/mbarriers.py): the warp-specialized kernels the
compiler builds for sm_90a pass; protocols broken the way a pass could break them (a wait
dropped or given the wrong parity or stage, an expect_tx off by a box, a barrier count off by
one, an arrival lost, a generic write without its proxy fence) fail with an error naming both
accesses."""
from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path

import pytest

from tilec.analysis.hazards import HazardError, check_schedule
from tilec.analysis.mbarriers import FENCE, programs, trip_counts
from tilec.errors import TileConfigError
from tilec.families.tma_boxes import Box
from tilec.families.wgmma import FAMILY as WGMMA
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_kernel
from tilec.ir.types import i32
from tilec.kernel import TileFunction, load_file
from tilec.options import ARCHS, Options
from tilec.pipeline import pipeline, run_pipeline
from tilec.tools.explain import explain, render_explanation

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
KERNELS = {"matmul": "matmul", "matmul_bt": "matmul_bt", "gemm_epilogue": "gemm"}
SMEM = int(ARCHS["sm_90a"]["smem_optin"])


@lru_cache(maxsize=None)
def sample(name: str, dtype: str = "f16") -> TileFunction:
    path = SAMPLES / f"{name}.py"
    text = path.read_text(encoding="utf-8").replace("f16", dtype)
    return load_file(path, text)[KERNELS[name]]


def hopper_kernel(stages: int = 4, BM: int = 128, BN: int = 128, BK: int = 64,
                  name: str = "matmul") -> Kernel:
    """A copy of a warp-specialized kernel's IR, free to break."""
    compiled = sample(name).compile(arch="sm_90a", stages=stages, BM=BM, BN=BN, BK=BK)
    assert compiled.kernel.schedule.roles is not None
    return clone_kernel(compiled.kernel)


def producer_ops(kernel: Kernel) -> list[Op]:
    region = first(kernel.body.ops, "ws.producer").regions[0]
    return first(region.ops, "scf.for").regions[0].ops


def consumer_ops(kernel: Kernel) -> list[Op]:
    top = kernel.body.ops
    after = top[top.index(first(top, "ws.producer")) + 1:]
    return first(after, "scf.for").regions[0].ops


def first(ops: list[Op], name: str) -> Op:
    return next(op for op in ops if op.name == name)


def alloc(kernel: Kernel, role: str) -> Op:
    return next(op for op in kernel.body.ops if op.name == "mbar.alloc"
                and op.attrs["role"] == role)


def before(ops: list[Op], anchor: Op, build) -> Value:
    """Insert the ops ``build(builder)`` makes right before ``anchor``; its value."""
    b = Builder(Block(), anchor.loc)
    value = build(b)
    at = ops.index(anchor)
    ops[at:at] = b.block.ops
    return value


def const(b: Builder, value: int) -> Value:
    return b.value("arith.constant", [], i32, f"c{value}", value=value)


def broken(kernel: Kernel, **kw) -> HazardError:
    with pytest.raises(HazardError) as caught:
        check_schedule(kernel, **kw)
    error = caught.value
    text = error.render()
    assert error.first.describe() in text and error.second.describe() in text
    assert text.startswith(f"{error.loc}: schedule error:")
    return error


# --------------------------------------------------------------------- sound schedules

def _fits(stages: int, bm: int, bn: int, bk: int) -> bool:
    """The tile fits shared memory and the wgmma family takes it (the registers its
    consumers need fit what the block starts with)."""
    return stages * (bm + bn) * bk * 2 <= SMEM and WGMMA.block_problem(
        (bm, bn, bk), Options(arch="sm_90a")) is None


SOUND = [c for c in itertools.product(KERNELS, ("f16", "bf16"), (2, 3, 4, 5), (64, 128, 256),
                                      (64, 128, 192, 256), (64, 128)) if _fits(*c[2:])]


@pytest.mark.parametrize("name,dtype,stages,BM,BN,BK", SOUND)
def test_the_compilers_warp_specialized_schedules_pass(name, dtype, stages, BM, BN, BK) -> None:
    kernel = sample(name, dtype).compile(arch="sm_90a", stages=stages, BM=BM, BN=BN,
                                         BK=BK).kernel
    assert kernel.schedule.roles is not None
    check_schedule(kernel)


@pytest.mark.parametrize("last", ["double_buffer", "swizzle"])
def test_schedules_are_checked_before_the_fragments_pass(last: str) -> None:
    # tile.dot reads the stages itself until the fragments pass makes it a wgmma.mma.
    lowered = sample("matmul").lower(BM=128, BN=128, BK=64)
    passes = pipeline()
    passes = passes[:[p.name for p in passes].index(last) + 1]
    kernel = run_pipeline(lowered, Options(arch="sm_90a", stages=3), passes).kernel
    assert kernel.schedule.roles is not None
    check_schedule(kernel)
    ops = consumer_ops(kernel)
    ops.remove(first(ops, "mbar.wait"))
    error = broken(kernel)
    assert (error.first.op.name, error.second.op.name) == ("tma.load", "tile.dot")


def test_the_programs_evaluate_stage_and_parity_per_iteration() -> None:
    _, producer, consumer = programs(hopper_kernel(stages=3), 7)
    waits = [(s.ring.hint, s.index, s.parity)
             for s in producer if s.kind == "wait"]
    assert waits == [("empty", it % 3, 1 - (it // 3) % 2) for it in range(7)]
    waits = [(s.ring.hint, s.index, s.parity) for s in consumer if s.kind == "wait"]
    assert waits == [("full", it % 3, (it // 3) % 2) for it in range(7)]
    loads = [(s.buffer.hint, s.stage, s.iteration, s.bytes) for s in producer if s.kind == "load"]
    assert loads[:4] == [("sA", 0, 0, 16384), ("sB", 0, 0, 16384), ("sA", 1, 1, 16384),
                         ("sB", 1, 1, 16384)]
    assert [s.bytes for s in producer if s.kind == "expect"] == [32768] * 7
    reads = [(s.buffer.hint, s.stage, s.async_proxy) for s in consumer if s.kind == "read"]
    assert reads[:2] == [("sA", 0, True), ("sB", 0, True)]


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("base", [0, 1, 5, 7, 12])
def test_the_carried_ring_continues_from_any_ring_base(stages: int, base: int) -> None:
    """The loops carry stage and parity (a wrapping increment, the parity flipping as the
    stage wraps) from ws.ring_base, where a persistent block's earlier tiles left the ring:
    iteration it = base + k waits on stage it % S for parity (it / S) % 2 (the producer for
    the other parity), and the consumers hand back the stage of every iteration, the last
    after the loop, as the division form said."""
    kernel = hopper_kernel(stages=stages)
    for op in kernel.walk():
        if op.name == "ws.ring_base":
            op.name, op.attrs = "arith.constant", {"value": base}
    trips = 2 * stages + 1
    _, producer, consumer = programs(kernel, trips)
    ring = range(base, base + trips)
    assert [(s.ring.hint, s.index, s.parity) for s in producer if s.kind == "wait"] == [
        ("empty", it % stages, 1 - (it // stages) % 2) for it in ring]
    assert [(s.index, s.stage) for s in producer if s.kind == "load"] == [
        (it % stages, it % stages) for it in ring for _ in range(2)]
    assert [(s.ring.hint, s.index, s.parity) for s in consumer if s.kind == "wait"] == [
        ("full", it % stages, (it // stages) % 2) for it in ring]
    assert [(s.ring.hint, s.index) for s in consumer if s.kind == "arrive"] == [
        ("empty", it % stages) for it in ring]


def test_the_k_loops_divide_nothing_per_step() -> None:
    """No division or remainder inside either role's K loop: the ring's arithmetic there is
    a wrapping increment and a select."""
    kernel = hopper_kernel(stages=3)
    for ops in (producer_ops(kernel), consumer_ops(kernel)):
        names = {op.name for op in ops}
        assert not names & {"arith.mod", "arith.floordiv", "arith.cdiv"}, names
        assert {"arith.wrap_inc", "arith.select"} <= names


def test_trip_counts_cover_two_rounds_and_every_short_loop() -> None:
    assert trip_counts(4) == [9, 1, 2, 3, 4, 5]


def test_explain_shows_the_producer_and_the_consumers() -> None:
    compiled = sample("matmul").compile(arch="sm_90a", stages=4, BM=128, BN=256, BK=64)
    text = render_explanation(explain(compiled, ptxas=False))
    assert "producer wait        empty[it%4]" in text
    assert "producer tma.load    sB[it%4]" in text
    assert "consumers wgmma.mma  sA[it%4], sB[it%4]" in text
    assert "Hazard check: no shared-memory race" in text


# ------------------------------------------------------------ (a) reads before the fill

def test_a_missing_full_wait_reads_a_stage_before_its_fill() -> None:
    kernel = hopper_kernel()
    ops = consumer_ops(kernel)
    ops.remove(first(ops, "mbar.wait"))
    error = broken(kernel)
    assert error.rule == "a"
    assert (error.first.op.name, error.second.op.name) == ("tma.load", "wgmma.mma")
    assert error.first.stage == error.second.stage == 0
    assert "sA stage 0 is read before any tma.load fills it" in error.message
    assert "consumer warpgroup 0 has not waited on full[0]" in error.message
    assert ("tma.load of A by the producer into sA stage 0 (16384 bytes, completing on "
            "full[0]) in K-loop iteration 0, at ") in error.message
    assert ("wgmma.mma of consumer warpgroup 0 reading sA stage 0 in K-loop iteration 0, "
            "at ") in error.message


def test_a_flipped_full_parity_passes_before_the_fill() -> None:
    kernel = hopper_kernel()
    ops = consumer_ops(kernel)
    wait = first(ops, "mbar.wait")
    wait.operands[2] = before(ops, wait, lambda b: b.value(
        "arith.sub", [const(b, 1), wait.operands[2]], i32, "flipped"))
    error = broken(kernel)
    assert error.rule == "a"
    assert (error.first.op.name, error.second.op.name) == ("tma.load", "wgmma.mma")
    assert ("consumer warpgroup 0's last wait on full[0] (in K-loop iteration 0, parity 1) "
            "passed with 0 phase(s) of it completed") in error.message


@pytest.mark.parametrize("parity", [0, 1])
def test_a_constant_full_parity_is_reported(parity: int) -> None:
    kernel = hopper_kernel()
    ops = consumer_ops(kernel)
    wait = first(ops, "mbar.wait")
    wait.operands[2] = before(ops, wait, lambda b: const(b, parity))
    error = broken(kernel)
    if parity:  # round 0 waits for parity 1: it passes at once
        assert error.rule == "a" and error.second.op.name == "wgmma.mma"
    else:  # round 1 passes on round 0's phase: a warpgroup running ahead then arrives twice
        # on empty[s] in one round and frees the stage while the other still reads it.
        assert error.rule == "b" and error.second.op.name == "tma.load"
        assert "refilled while consumer warpgroup 1 may still be reading it" in error.message


def test_a_wait_on_the_wrong_stage_does_not_order_the_fill() -> None:
    kernel = hopper_kernel(stages=4)
    ops = consumer_ops(kernel)
    wait = first(ops, "mbar.wait")
    wait.operands[1] = before(ops, wait, lambda b: b.value("arith.mod", [b.value(
        "arith.add", [wait.operands[1], const(b, 1)], i32, "next"), const(b, 4)], i32, "s"))
    error = broken(kernel)
    assert error.rule == "a"
    assert "sA stage 0 is read before the tma.load that fills it is made visible" in \
        error.message
    assert "no completed wait on full[0] for phase 0 (parity 0)" in error.message
    assert (error.first.op.name, error.second.op.name) == ("tma.load", "wgmma.mma")


# -------------------------------------------------------- (b) refills before the reads end

def test_a_missing_empty_wait_refills_a_stage_being_read() -> None:
    kernel = hopper_kernel(stages=3)
    ops = producer_ops(kernel)
    ops.remove(first(ops, "mbar.wait"))
    error = broken(kernel)
    assert error.rule == "b"
    assert (error.first.op.name, error.second.op.name) == ("wgmma.mma", "tma.load")
    assert error.first.stage == error.second.stage == 0
    assert error.second.iteration == error.first.iteration + 3
    assert "sA stage 0 is refilled while consumer warpgroup 1 may still be reading it" in \
        error.message
    assert "the producer has not waited on empty[0]" in error.message


def test_an_empty_count_below_the_consumers_lets_one_warpgroup_free_the_stage() -> None:
    kernel = hopper_kernel(BM=128)  # two consumer warpgroups
    alloc(kernel, "empty").attrs["count"] = 1
    error = broken(kernel)
    assert error.rule == "b"
    assert "refilled while consumer warpgroup 1 may still be reading it" in error.message
    assert "the producer running ahead and the consumers arriving late" in error.message
    assert (error.first.op.name, error.second.op.name) == ("wgmma.mma", "tma.load")


@pytest.mark.parametrize("BM", [64, 128])
def test_an_empty_count_above_the_consumers_hangs(BM: int) -> None:
    kernel = hopper_kernel(BM=BM)
    empty = alloc(kernel, "empty")
    empty.attrs["count"] += 1
    error = broken(kernel)
    assert error.rule == "d"
    count = empty.attrs["count"]
    assert f"the producer waits for empty[0]'s phase 0 (parity 0) to complete: {count - 1} of " \
           f"{count} arrivals" in error.message
    assert (error.first.op.name, error.second.op.name) == ("mbar.wait", "mbar.wait")
    assert "the producer on empty[0]" in error.first.describe()
    assert "consumer warpgroup 0 on full[0]" in error.second.describe()


def test_a_wrong_empty_parity_hangs_at_once() -> None:
    kernel = hopper_kernel()
    ops = producer_ops(kernel)
    wait = first(ops, "mbar.wait")
    loop = first(first(kernel.body.ops, "ws.producer").regions[0].ops, "scf.for")
    # The phase parity the loop carries, the consumers' for full, not its complement.
    wait.operands[2] = next(arg for arg in loop.regions[0].args if arg.hint == "parity")
    error = broken(kernel)
    assert error.rule == "d"
    assert "the producer waits for empty[0]'s phase 0 (parity 0)" in error.message
    assert error.first.iteration == error.second.iteration == 0


def test_a_lost_arrival_hangs_the_producer() -> None:
    kernel = hopper_kernel(stages=2)
    ops = consumer_ops(kernel)
    ops.remove(first(ops, "mbar.arrive"))
    error = broken(kernel)
    assert error.rule == "d"
    assert "the producer waits for empty[0]'s phase 0 (parity 0) to complete: 0 of 2 " \
           "arrivals" in error.message
    assert error.first.op.name == error.second.op.name == "mbar.wait"
    assert error.first.iteration == 2


def test_a_full_count_above_one_arrival_hangs() -> None:
    kernel = hopper_kernel()
    alloc(kernel, "full").attrs["count"] = 2
    error = broken(kernel)
    assert error.rule == "d"
    assert "waits for full[0]'s phase 0 (parity 0) to complete: 1 of 2 arrivals" in \
        error.message


# --------------------------------------------------------------- (c) transaction bytes

@pytest.mark.parametrize("operand", [0, 1])
@pytest.mark.parametrize("sign", [1, -1])
def test_expect_tx_bytes_off_by_one_box_name_the_expect_and_the_loads(operand, sign) -> None:
    kernel = hopper_kernel(BN=256)
    ops = producer_ops(kernel)
    loads = [op for op in ops if op.name == "tma.load"]
    box = Box.of(loads[operand])
    expect = first(ops, "mbar.arrive_expect_tx")
    right = expect.attrs["bytes"]
    expect.attrs["bytes"] += sign * box.inner * box.outer * 2
    error = broken(kernel)
    assert error.rule == "c"
    assert (error.first.op, error.second.op) == (expect, loads[-1])
    assert (f"full[0] expects {expect.attrs['bytes']} transaction bytes in the phase its "
            f"mbar.arrive_expect_tx opens, but the tma.loads completing on it move {right}") \
        in error.message
    assert ("the phase never completes" if sign > 0 else "the phase completes before the "
            "last") in error.message
    assert "tma.load of A" in error.message and "tma.load of B" in error.message
    assert error.loc == expect.loc


# ----------------------------------------------------- (e) loads in flight at the end

def test_loads_no_consumer_waits_for_are_in_flight_at_the_end() -> None:
    kernel = hopper_kernel(stages=4)
    ops = consumer_ops(kernel)
    for name in ("mbar.wait", "wgmma.mma", "mbar.arrive"):
        ops.remove(first(ops, name))
    error = broken(kernel, trip_count=2)
    assert error.rule == "e"
    assert "the block can finish with the tma.load into sA stage 0 in flight" in error.message
    assert error.first.op.name == "tma.load"


# ------------------------------------------------------------ (f) the async proxy rule

def _generic_write_before_the_product(kernel: Kernel, fence: bool) -> None:
    ops = consumer_ops(kernel)
    product = first(ops, "wgmma.mma")
    load = first(producer_ops(kernel), "tma.load")
    write = Op("copy.global_to_shared", [*load.operands[:3], product.operands[0]], [],
               {"mode": "sync"}, [], product.loc)
    at = ops.index(product)
    ops[at:at] = [write] + ([Op(FENCE, [], [], {}, [], product.loc)] if fence else [])


def test_a_generic_write_read_by_wgmma_needs_a_proxy_fence() -> None:
    kernel = hopper_kernel(BM=64)
    _generic_write_before_the_product(kernel, fence=False)
    error = broken(kernel)
    assert error.rule == "f"
    assert (error.first.op.name, error.second.op.name) == ("copy.global_to_shared",
                                                           "wgmma.mma")
    assert "written through the generic proxy and then accessed through the async proxy" in \
        error.message
    assert FENCE in error.message


def test_a_fenced_generic_write_passes() -> None:
    kernel = hopper_kernel(BM=64)
    _generic_write_before_the_product(kernel, fence=True)
    check_schedule(kernel)


# -------------------------------------------------------------------- initialisation

def test_barriers_used_before_the_cta_barrier_publishes_their_init() -> None:
    kernel = hopper_kernel()
    kernel.body.ops.remove(first(kernel.body.ops, "gpu.barrier"))
    error = broken(kernel)
    assert error.rule == "g"
    assert error.first.op.name == "mbar.alloc"
    assert "is used before a gpu.barrier publishes its initialisation" in error.message


def test_a_barrier_index_known_only_at_run_time_cannot_be_checked() -> None:
    kernel = hopper_kernel()
    first(consumer_ops(kernel), "mbar.wait").operands[1] = kernel.symbol_value("M")
    with pytest.raises(TileConfigError, match="cannot be evaluated at compile time"):
        check_schedule(kernel)


def test_mbarrier_errors_are_config_errors_with_a_caret() -> None:
    kernel = hopper_kernel()
    ops = consumer_ops(kernel)
    ops.remove(first(ops, "mbar.wait"))
    error = broken(kernel)
    assert isinstance(error, TileConfigError)
    lines = error.render().splitlines()
    caret = next(line for line in lines if line.strip() == "^")
    assert caret.index("^") == 4 + error.loc.col - 1
