"""Pingpong consumers (consumers="pingpong"): the schedule in the IR (roles, the hand-over ops
around the consumers' K loop, one arrival a stage, a staging tile a warpgroup), the PTX of the
tile loop and the named barriers, the options' and the tiling's refusals, the CPU run and the
race checker, explain's words, and ptxas on the bench's kernels (no serialized wgmma, no
spills: the hand-over once placed before the products' final wait serialized them)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilec.analysis.mbarriers import check_roles
from tilec.errors import TileConfigError
from tilec.ir.printer import print_kernel
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_hopper import _reference, random_inputs, relative_error, run_lowered
from .test_ptxas import PTXAS, assert_assembles_for_sm_90a, load_sample

PINGPONG = dict(arch="sm_90a", persistent=True, consumers="pingpong")


def pipeline(sample="gemm_epilogue", dtype="f16", stages=4, bn=256, **options):
    kernel = load_sample(sample, dtype).lower(BM=64, BN=bn, BK=64)
    return run_pipeline(kernel, Options(stages=stages, **{**PINGPONG, **options}),
                        keep_ir=True).kernel


def test_the_schedule_says_pingpong_and_the_ir_holds_the_hand_over() -> None:
    kernel = pipeline()
    roles = kernel.schedule.roles
    assert roles.pingpong and roles.consumer_warpgroups == 2 and roles.tile_warpgroups == 1
    assert roles.threads == 384 and "pingpong" in str(roles)
    names = [op.name for op in kernel.body.ops]
    loop = max(i for i, name in enumerate(names) if name == "scf.for")
    assert names[loop - 1] == "ws.turn_wait"
    # After the products' final wait (ptxas serialized the wgmmas otherwise).
    assert names[loop + 1:loop + 3] == ["wgmma.wait", "ws.turn_pass"]
    empty = next(op for op in kernel.walk() if op.name == "mbar.alloc"
                 and op.attrs["role"] == "empty")
    assert empty.attrs["count"] == 1
    store = next(op for op in kernel.walk() if op.name == "tile.store")
    assert store.attrs["via"] == "tma" and store.attrs["staging_copies"] == 2
    text = print_kernel(kernel)
    assert "ws.turn_wait" in text and "ws.turn_pass" in text and "staging_copies = 2" in text


def test_a_cluster_counts_the_peer_blocks_warpgroup() -> None:
    kernel = pipeline(cluster=2)
    empty = next(op for op in kernel.walk() if op.name == "mbar.alloc"
                 and op.attrs["role"] == "empty")
    assert empty.attrs["count"] == 2


def test_cooperative_kernels_have_no_hand_over() -> None:
    kernel = load_sample("gemm_epilogue", "f16").lower(BM=128, BN=256, BK=64)
    kernel = run_pipeline(kernel, Options(arch="sm_90a", stages=3, persistent=True),
                          keep_ir=True).kernel
    assert not kernel.schedule.roles.pingpong
    assert not any(op.name.startswith("ws.turn") for op in kernel.walk())
    assert "pingpong" not in str(kernel.schedule.roles)


def test_the_ptx_alternates_the_warpgroups_over_the_tiles() -> None:
    ptx = load_sample("gemm_epilogue", "f16").ptx(BM=64, BN=256, BK=64, stages=4, **PINGPONG)
    assert ".maxntid 384, 1, 1" in ptx
    # The warpgroup's first tile one block stride on, its stride and ring step doubled.
    assert re.search(r"mad\.lo\.s32 (%r\d+), %r\d+, %r\d+, \1;", ptx)
    assert re.search(r"mad\.lo\.s32 (%r\d+), %r\d+, 2, \1;", ptx)
    # The hand-over on register-numbered barriers of both warpgroups; each warpgroup's
    # epilogue meets on a barrier of its own 128 threads.
    assert len(re.findall(r"\tbar\.sync %r\d+, 256;", ptx)) == 1
    assert len(re.findall(r"\tbar\.arrive %r\d+, 256;", ptx)) == 1
    assert re.findall(r"\tbar\.sync %r\d+, 128;", ptx)
    assert "bar.sync 1, 256;" not in ptx
    # Thread ids within the warpgroup after the split.
    assert re.search(r"and\.b32 %r\d+, %r\d+, 127;", ptx)
    turn_pass = ptx.index("bar.arrive")
    assert ptx.rindex("wgmma.wait_group.sync.aligned 0;", 0, turn_pass) > \
        ptx.rindex("wgmma.mma_async", 0, turn_pass)


def test_pingpong_needs_a_persistent_block() -> None:
    with pytest.raises(ValueError, match="persistent=True"):
        Options(arch="sm_90a", consumers="pingpong")
    with pytest.raises(ValueError, match="blocks_per_sm=1"):
        Options(arch="sm_90a", consumers="pingpong", persistent=True, blocks_per_sm=2)
    with pytest.raises(ValueError, match="consumers must be one of"):
        Options(consumers="pingping")


def test_a_tile_of_two_warpgroups_is_refused_where_the_product_is() -> None:
    kernel = load_sample("matmul", "f16").lower(BM=128, BN=256, BK=64)
    with pytest.raises(TileConfigError) as caught:
        run_pipeline(kernel, Options(stages=3, **PINGPONG))
    message = str(caught.value)
    assert "takes 2 warpgroups" in message and "BM=64" in message and "^" in message
    assert "matmul.py:" in message


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("stages", [2, 3])
def test_the_cpu_runs_it_and_the_race_checker_accepts_it(dtype, stages) -> None:
    """A block's one tile on the CPU (as every persistent kernel): one warpgroup's arrival
    frees a stage; the mbarrier protocol checker passes the ring."""
    kernel = load_sample("matmul", dtype).lower(BM=64, BN=128, BK=64)
    kernel = run_pipeline(kernel, Options(stages=stages, **PINGPONG), keep_ir=True).kernel
    check_roles(kernel)
    arrays = random_inputs(kernel, np.random.default_rng(3))
    got = run_lowered(kernel, arrays, dtype)
    assert relative_error(got, _reference(arrays, dtype)) < 1e-5


def test_explain_describes_the_turns() -> None:
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("gemm_epilogue", "f16").compile(BM=64, BN=256, BK=64, stages=4,
                                                           **PINGPONG)
    text = render_explanation(explain(compiled, ptxas=False))
    assert "consumers         pingpong: 2 warpgroups each compute whole 64x256 tiles" in text
    assert "2 warpgroups of them, each on tiles of its own" in text and "384 threads" in text
    assert re.search(r"sC +2x64x256 f16", text)


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tile", [dict(BN=256, stages=4), dict(BN=256, stages=4, cluster=2),
                                  dict(BN=128, stages=6),
                                  dict(BM=128, BN=128, stages=4, warpgroup_rows=128),
                                  dict(BM=128, BN=128, stages=3, warpgroup_rows=128, cluster=2)],
                         ids=["64x256", "64x256c2", "64x128", "128x128", "128x128c2"])
def test_the_bench_kernels_assemble_without_serialization(tmp_path, dtype, tile) -> None:
    from tilec.benchmarking.contenders import sample_kernel
    ptx = sample_kernel(dtype, dtype).ptx(**{"BM": 64, "BK": 64, "raster_group": 16, **tile},
                                          **PINGPONG)
    assert_assembles_for_sm_90a(ptx, tmp_path, "kernel")


# -- the ring across a block's tiles, as the GPU runs it ----------------------------------------
# The CPU runs a block's one tile; the hand-over matters across tiles. A model of the protocol
# the backend emits (backend.ptx._tile_loop, warp_specialize): the producer fills ring
# iterations in order, waiting on empty[s] for parity 1 - p; warpgroup w takes tiles w, w + 2,
# ..., waits on full[s] for parity p of each of its tiles' iterations (a parity wait passes
# when the barrier's completed phases differ in parity), hands each stage back with one
# arrival, and (turns=True) waits for its turn before its mainloop and passes it after.

def _ring_run(tiles: int, trips: int, stages: int, turns: bool, seed: int) -> str:
    """'' when every wait passed on the phase it meant; else what went wrong."""
    rng = np.random.default_rng(seed)
    full, empty = [0] * stages, [0] * stages
    turn = [0]  # tile t may start its mainloop once turn[0] >= t (tile 0 at once)
    errors: list[str] = []

    def passes(phases: int, parity: int) -> bool:
        return phases % 2 != parity

    def producer():
        for it in range(tiles * trips):
            s, p = it % stages, (it // stages) % 2
            yield lambda: passes(empty[s], 1 - p)
            if it >= stages and empty[s] != it // stages:
                errors.append(f"producer refilled stage {s} for iteration {it} early")
            full[s] += 1

    def consumer(w: int):
        for t in range(w, tiles, 2):
            if turns:
                yield lambda: turn[0] >= t
            for it in range(t * trips, (t + 1) * trips):
                s, p = it % stages, (it // stages) % 2
                yield lambda: passes(full[s], p)
                if full[s] != it // stages + 1:
                    errors.append(f"warpgroup {w} read stage {s} for iteration {it} on "
                                  f"phase {full[s]}")
                empty[s] += 1
            turn[0] = max(turn[0], t + 1)

    actors = [producer(), consumer(0), consumer(1)]
    waiting = [next(a) for a in actors]
    while any(w is not None for w in waiting):
        ready = [i for i, w in enumerate(waiting) if w is not None and w()]
        if not ready:
            return "deadlock"
        i = int(rng.choice(ready))
        try:
            waiting[i] = next(actors[i])
        except StopIteration:
            waiting[i] = None
        if errors:
            return errors[0]
    return ""


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("trips", [1, 2, 3, 5])
def test_the_turns_keep_every_wait_on_its_own_phase(stages, trips) -> None:
    for seed in range(40):
        assert _ring_run(7, trips, stages, turns=True, seed=seed) == "", (stages, trips, seed)


def test_without_the_turns_a_warpgroup_reads_a_stage_a_round_early() -> None:
    outcomes = {_ring_run(7, 3, 2, turns=False, seed=seed) for seed in range(40)}
    assert any("read stage" in outcome for outcome in outcomes), outcomes


def test_the_cli_refuses_pingpong_without_a_persistent_block(capsys) -> None:
    from tilec.cli import main
    sample = str(Path(__file__).resolve().parent.parent / "samples" / "gemm_epilogue.py")
    code = main(["compile", sample, "--arch", "sm_90a", "--consumers", "pingpong",
                 "--const", "BM=64", "-o", "/dev/null"])
    err = capsys.readouterr().err
    assert code == 1 and "tilec: error: consumers='pingpong'" in err and "Traceback" not in err
    assert main(["compile", sample, "--arch", "sm_90a", "--consumers", "pingpong",
                 "--persistent", "--const", "BM=64", "-o", "/dev/null"]) == 0


def test_the_verifier_and_bisect_accept_it(capsys) -> None:
    from tilec.cli import main
    kernel = load_sample("matmul", "f16").lower(BM=64, BN=128, BK=64)
    run_pipeline(kernel, Options(stages=3, verify=True, **PINGPONG))
    sample = str(Path(__file__).resolve().parent.parent / "samples" / "matmul.py")
    assert main(["bisect", sample, "--arch", "sm_90a", "--persistent", "--consumers",
                 "pingpong", "--const", "BM=64", "BN=128", "BK=64", "--stages", "3"]) == 0
    assert "all stages agree" in capsys.readouterr().out
