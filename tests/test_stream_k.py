"""Stream-K (stream_k=True, tilec/families/stream_k.py): the schedule as Python (every
(tile, K step) once, the blocks' K steps even to one, a block's one stored part its first
shared unit, the owner's unit its last, the parts added in block order, and a simulation
that every interleaving of the blocks finishes), the schedule and ops in the IR, the PTX's
order (the parts after the products' final wait), the CPU run and the mbarrier protocol
checker, the options' refusals, explain's words and the launch's workspace size."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

from tilec.analysis.mbarriers import check_roles
from tilec.families.stream_k import (SHARED_WAVES, data_parallel_tiles, partial_holders,
                                     units)
from tilec.ir.printer import print_kernel
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_hopper import _reference, random_inputs, relative_error, run_lowered
from .test_ptxas import load_sample

STREAM_K = dict(arch="sm_90a", persistent=True, stream_k=True)
# (tiles, K steps, blocks): the bench's 4096^3, 8192^3 and 32x1024^3 at 128x256x64 on 132
# SMs, fewer tiles than blocks (tiles split in several parts), blocks dividing the tiles,
# no K steps, one step, and small odd cases.
SCHEDULES = [(512, 64, 132), (2048, 128, 132), (1024, 16, 132), (32, 128, 132), (32, 2, 132),
             (264, 64, 132), (7, 0, 3), (5, 1, 3), (10, 3, 4), (13, 7, 5), (1, 9, 4),
             (9, 4, 4), (100, 5, 7)]


def owners(schedule):
    """tile -> the block holding its step 0."""
    return {tile: b for b, mine in enumerate(schedule) for tile, k0, _ in mine if k0 == 0}


@pytest.mark.parametrize("tiles,steps,blocks", SCHEDULES)
def test_every_tile_step_is_run_once_and_the_blocks_are_even(tiles, steps, blocks):
    schedule = units(tiles, steps, blocks)
    covered = [(tile, k) for mine in schedule for tile, k0, k1 in mine for k in range(k0, k1)]
    assert sorted(covered) == [(t, k) for t in range(tiles) for k in range(steps)]
    assert all(k0 < k1 or steps == 0 for mine in schedule for _, k0, k1 in mine)
    if steps:
        loads = [sum(k1 - k0 for _, k0, k1 in mine) for mine in schedule]
        assert max(loads) - min(loads) <= 1, loads
    dp = data_parallel_tiles(tiles, steps, blocks)
    assert dp % blocks == 0 or dp == tiles
    # Whole tiles first, dealt round the blocks as the plain persistent loop deals them.
    for b, mine in enumerate(schedule):
        assert [t for t, _, _ in mine if t < dp] == list(range(b, dp, blocks))


@pytest.mark.parametrize("tiles,steps,blocks", SCHEDULES)
def test_a_block_stores_at_most_its_first_shared_unit_and_owns_at_its_end(tiles, steps,
                                                                          blocks):
    schedule = units(tiles, steps, blocks)
    dp = data_parallel_tiles(tiles, steps, blocks)
    owner = owners(schedule)
    for b, mine in enumerate(schedule):
        shared = [unit for unit in mine if unit[0] >= dp]
        later = [i for i, (_, k0, _) in enumerate(shared) if k0 > 0]
        assert later in ([], [0])  # one workspace slot a block is enough
        for i, (tile, k0, k1) in enumerate(shared):
            if k0 == 0 and k1 < steps:  # an owner waits only in its last unit
                assert i == len(shared) - 1
                holders = [j for j, theirs in enumerate(schedule)
                           if any(t == tile and k > 0 for t, k, _ in theirs)]
                assert partial_holders(tile, tiles, steps, blocks, b) == holders
                assert holders == list(range(b + 1, b + 1 + len(holders)))
    assert set(owner) == set(range(tiles))


def _simulate(tiles, steps, blocks, seed):
    """Run the blocks' units in a random interleaving, a unit at a time: a later part posts
    its flag, an owner waits for its holders' flags (a block whose owner unit cannot go on
    yet is skipped). The sums are exact integers of one value a K step; returns each tile's
    sum as its owner added it, in block order."""
    rng = random.Random(seed)
    schedule = units(tiles, steps, blocks)
    position = [0] * blocks
    flags, parts, sums = set(), {}, {}
    owner = owners(schedule)
    while any(p < len(mine) for p, mine in zip(position, schedule)):
        runnable = []
        for b, mine in enumerate(schedule):
            if position[b] == len(mine):
                continue
            tile, k0, k1 = mine[position[b]]
            holders = (partial_holders(tile, tiles, steps, blocks, b)
                       if k0 == 0 and k1 < steps else [])
            if all(j in flags for j in holders):
                runnable.append(b)
        assert runnable, f"deadlock at {position}"
        b = rng.choice(runnable)
        tile, k0, k1 = schedule[b][position[b]]
        acc = [(tile, k) for k in range(k0, k1)]
        if k0 > 0:
            assert b not in flags
            flags.add(b)
            parts[b] = acc
        else:
            assert owner[tile] == b
            for j in (partial_holders(tile, tiles, steps, blocks, b) if k1 < steps else []):
                acc = acc + parts[j]
                flags.discard(j)  # set back to 0 by the reader
            sums[tile] = acc
        position[b] += 1
    assert not flags  # the next launch finds every flag at 0
    return sums


@pytest.mark.parametrize("tiles,steps,blocks", SCHEDULES)
def test_no_interleaving_deadlocks_and_the_parts_meet_in_k_order(tiles, steps, blocks):
    for seed in range(5):
        sums = _simulate(tiles, steps, blocks, seed)
        assert sums == {t: [(t, k) for k in range(steps)] for t in range(tiles)}


def pipeline(sample="matmul", dtype="f16", **options):
    kernel = load_sample(sample, dtype).lower(BM=128, BN=256, BK=64)
    return run_pipeline(kernel, Options(stages=3, **{**STREAM_K, **options}),
                        keep_ir=True).kernel


def test_the_schedule_and_the_units_are_in_the_ir():
    kernel = pipeline()
    roles = kernel.schedule.roles
    assert roles.stream_k and roles.persistent and "stream-K" in str(roles)
    names = [op.name for op in kernel.body.ops]
    loop = max(i for i, name in enumerate(names) if name == "scf.for")
    # The parts meet after the products' final wait and the last stage's hand-back.
    assert names[loop + 1] == "wgmma.wait" and "ws.sk_fixup" in names[loop + 1:]
    assert names.index("ws.sk_fixup") > names.index("mbar.arrive", loop)
    loops = [op for op in kernel.walk() if op.name == "scf.for"]
    assert {op.operands[0].owner.name for op in loops} == {"ws.k_begin"}
    assert {op.operands[1].owner.name for op in loops} == {"ws.k_end"}
    text = print_kernel(kernel)
    assert "ws.k_begin" in text and "ws.sk_fixup" in text and "stream-K" in text
    plain = run_pipeline(load_sample("matmul", "f16").lower(BM=128, BN=256, BK=64),
                         Options(arch="sm_90a", stages=3, persistent=True), keep_ir=True).kernel
    assert not plain.schedule.roles.stream_k
    assert not any(op.name.startswith(("ws.k_", "ws.sk_")) for op in plain.walk())


def test_the_ptx_stores_and_adds_the_parts_after_the_final_wait():
    ptx = load_sample("gemm_epilogue", "bf16").ptx(BM=128, BN=256, BK=64, stages=3,
                                                   **STREAM_K)
    release, acquire = ptx.index("red.release.gpu.global.add.u32"), ptx.index("ld.acquire.gpu")
    last_wait = ptx.rindex("wgmma.wait_group.sync.aligned 0;", 0, release)
    assert ptx.rindex("wgmma.mma_async", 0, release) < last_wait < release < acquire
    assert len(re.findall(r"st\.global\.v4\.f32", ptx)) == 32  # 128 registers a thread
    assert len(re.findall(r"ld\.relaxed\.gpu\.global\.v4\.f32", ptx)) == 32
    assert "st.relaxed.gpu.global.u32" in ptx  # the flag back to 0
    # Both roles walk the units: %nctaid.x read for each role's loop.
    assert ptx.count("mov.u32 %r", ) and len(re.findall(r"%nctaid\.x", ptx)) >= 2
    plain = load_sample("gemm_epilogue", "bf16").ptx(BM=128, BN=256, BK=64, stages=3,
                                                     arch="sm_90a", persistent=True)
    assert "red.release" not in plain and "ld.acquire" not in plain


@pytest.mark.parametrize("sample,dtype", [("matmul", "f16"), ("matmul", "bf16")])
def test_the_cpu_runs_it_and_the_barrier_protocol_checks(sample, dtype):
    kernel = load_sample(sample, dtype).lower(BM=128, BN=256, BK=64)
    kernel = run_pipeline(kernel, Options(stages=3, **STREAM_K), keep_ir=True).kernel
    check_roles(kernel)
    arrays = random_inputs(kernel, np.random.default_rng(5))
    got = run_lowered(kernel, arrays, dtype)
    assert relative_error(got, _reference(arrays, dtype)) < 1e-5


def test_the_options_refuse_what_stream_k_does_not_walk():
    for bad in (dict(), dict(persistent=True, cluster=2),
                dict(persistent=True, consumers="pingpong")):
        with pytest.raises(ValueError, match="stream_k divides a persistent block's work"):
            Options(arch="sm_90a", stream_k=True, **bad)


def test_the_cli_takes_the_flag_and_refuses_it_alone(capsys):
    from tilec.cli import main
    from pathlib import Path
    sample = str(Path(__file__).resolve().parent.parent / "samples" / "matmul.py")
    assert main(["compile", sample, "--arch", "sm_90a", "--stream-k", "-o", "/dev/null"]) == 1
    err = capsys.readouterr().err
    assert "stream_k divides" in err and "Traceback" not in err
    assert main(["compile", sample, "--arch", "sm_90a", "--persistent", "--stream-k",
                 "--const", "BM=128", "BN=256", "BK=64", "-o", "/dev/null"]) == 0


def test_explain_describes_it():
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("matmul", "f16").compile(BM=128, BN=256, BK=64, stages=3,
                                                    **STREAM_K)
    text = render_explanation(explain(compiled, ptxas=False))
    assert "stream-K" in text and "red.release.gpu" in text and "block order" in text


def test_the_workspace_is_a_slot_and_a_flag_a_block():
    from tilec.launch.binding import launch_grid
    from tilec.launch.split_workspace import workspace_size
    compiled = load_sample("matmul", "f16").compile(BM=128, BN=256, BK=64, stages=3,
                                                    **STREAM_K)
    size = workspace_size(compiled.kernel, [32, 16], multiprocessors=132)
    assert size.partial_bytes == 132 * 128 * 256 * 4 and size.counter_bytes == 132 * 4
    # Fewer tiles than SMs (a deep K over a few tiles): every SM still takes a share of the
    # K steps, so the grid and the slots are all of them, where a plain persistent kernel
    # launches one block a tile.
    small = workspace_size(compiled.kernel, [2, 3], multiprocessors=132)
    assert small.counter_bytes == 132 * 4
    assert launch_grid([2, 3], compiled.kernel, 132) == (132, 1, 1)
    plain = load_sample("matmul", "f16").compile(BM=128, BN=256, BK=64, stages=3,
                                                 arch="sm_90a", persistent=True)
    assert workspace_size(plain.kernel, [32, 16], multiprocessors=132) is None
    assert launch_grid([2, 3], plain.kernel, 132) == (6, 1, 1)


def test_the_shared_waves_are_the_partial_one():
    # The bench's 4096^3: 3 whole waves dealt whole, the 116 tiles left shared.
    assert SHARED_WAVES == 1 and data_parallel_tiles(512, 64, 132) == 396
    assert data_parallel_tiles(264, 64, 132) == 264 and data_parallel_tiles(7, 0, 3) == 7
    assert data_parallel_tiles(32, 2, 132) == 0
    # Two blocks, three tiles of two steps: a whole tile each, then the third halved; block
    # 0 owns it (its step 0) and adds block 1's part.
    assert units(3, 2, 2) == [[(0, 0, 2), (2, 0, 1)], [(1, 0, 2), (2, 1, 2)]]
    assert partial_holders(2, 3, 2, 2, 0) == [1]
