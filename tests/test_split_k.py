"""Split-K on the CPU: the pass's IR, every stage of the pipeline run in the reference
executor against the float64 reference (empty slices and fused epilogues included), the
meeting's semantics, the launch grid and workspace sizes, the hidden parameters, and the
errors for what cannot be split."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

from tilec.backend.signature import kernel_abi
from tilec.tools.bisect import bisect, launch_options
from tilec.errors import TileConfigError
from tilec.frontend import lower, parse_function
from tilec.cpu.interpreter import run_kernel
from tilec.ir.printer import print_kernel
from tilec.families.catalogue import op_catalogue
from tilec.ir.core import Kernel
from tilec.ir.verifier import verify as verify_ir
from tilec.kernel import load_file
from tilec.launch.binding import launch_grid
from tilec.options import Options
from tilec.passes import split_k, tiling
from tilec.launch.split_workspace import workspace_size

from tests.test_passes import MATMUL  # 32x32x16 tiles over M, N, K


def verify(kernel: Kernel, after: Optional[str] = None) -> None:
    """The verifier with the op catalogue: lowered IR holds the families' ops."""
    verify_ir(kernel, after=after, ops=op_catalogue())

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def tiled(text: str = MATMUL, **option_args):
    kernel = lower(parse_function(text, "matmul.tile"), {})
    options = Options(warps=(2, 1), **option_args)
    return tiling.run(kernel, options), options


def test_one_slice_leaves_the_kernel_as_it_is() -> None:
    kernel, options = tiled()
    assert split_k.run(kernel, options) is kernel


def test_the_grid_gains_a_slice_axis_and_the_loop_a_slice_of_k() -> None:
    kernel, options = tiled(split_k=4)
    out = split_k.run(kernel, options)
    verify(out, after="split_k")
    grid = next(op for op in out.body.ops if op.name == "tile.grid")
    assert len(grid.operands) == len(grid.results) == 3
    assert grid.attrs["split_k"] == 4 and out.schedule.splits == 4
    assert grid.operands[2].owner.attrs["value"] == 4
    loop = next(op for op in out.body.ops if op.name == "scf.for")
    assert loop.operands[0].owner.name == "arith.add"  # k_begin = lower + slice * width
    assert loop.operands[1].owner.name == "arith.min"  # k_end = min(k_begin + width, K)
    index = out.body.ops.index(loop)
    reduce = out.body.ops[index + 1]
    assert reduce.name == "split.reduce" and reduce.attrs["splits"] == 4
    assert reduce.operands == [loop.results[0], grid.results[2]]
    store = next(op for op in out.body.ops if op.name == "tile.store")
    assert store.operands[-1] is reduce.result  # the epilogue reads the sum, not the slice
    text = print_kernel(out)
    assert "%m, %n, %slice = tile.grid %0, %1, %splits {raster_group = 8, split_k = 4}" in text
    assert "%acc_sum = split.reduce %acc.1, %slice {splits = 4}" in text


def slice_bounds(kernel, K: int, splits: int) -> list[tuple[int, int]]:
    """Each slice's [k_begin, k_end) as the tile IR computes it (host evaluation)."""
    from tilec.families.catalogue import op_catalogue
    catalogue = op_catalogue()
    bounds = []
    loop = next(op for op in kernel.body.ops if op.name == "scf.for")
    grid = next(op for op in kernel.body.ops if op.name == "tile.grid")
    for slice_id in range(splits):
        env = {kernel.symbol_value(s): v for s, v in dict(M=64, N=64, K=K).items()}
        env[grid.results[2]] = slice_id
        for op in kernel.body.ops:
            fold = catalogue[op.name].fold
            if fold is not None and all(v in env for v in op.operands):
                env[op.result] = fold([env[v] for v in op.operands], op.attrs,
                                      op.result.type.dtype)
        bounds.append((env[loop.operands[0]], env[loop.operands[1]]))
    return bounds


@pytest.mark.parametrize("K, splits, expected", [
    (128, 4, [(0, 32), (32, 64), (64, 96), (96, 128)]),  # two steps of 16 each
    (100, 3, [(0, 48), (48, 96), (96, 100)]),  # 7 steps: 3, 3, 1 (the edge step is masked)
    (40, 4, [(0, 16), (16, 32), (32, 40), (48, 40)]),  # 3 steps: the last slice is empty
])
def test_slices_are_whole_steps_and_cover_k_once(K: int, splits: int, expected) -> None:
    kernel, options = tiled(split_k=splits)
    assert slice_bounds(split_k.run(kernel, options), K, splits) == expected


def test_a_3d_grid_has_no_axis_left() -> None:
    text = MATMUL.replace("for m, n in grid(cdiv(M, BM), cdiv(N, BN)):",
                          "for m, n, z in grid(cdiv(M, BM), cdiv(N, BN), 1):")
    kernel, options = tiled(text, split_k=2)
    with pytest.raises(TileConfigError, match="split_k adds a grid axis; a 3-D grid"):
        split_k.run(kernel, options)


# -- every stage in the executor --------------------------------------------------------

CASES = [
    ("matmul", dict(M=40, N=48, K=200), dict(BM=32, BN=32, BK=16)),
    ("gemm_epilogue", dict(M=40, N=48, K=72), dict(BM=32, BN=32, BK=16)),  # beta * C, bias
    ("sgemm", dict(M=40, N=72, K=50), dict(BM=32, BN=64, BK=8)),
]


@pytest.mark.parametrize("splits", [2, 3, 8])  # 8: more slices than K steps in two cases
@pytest.mark.parametrize("sample, shapes, consts", CASES, ids=[c[0] for c in CASES])
def test_every_stage_agrees_with_the_reference(sample, shapes, consts, splits) -> None:
    (function,) = load_file(SAMPLES / f"{sample}.py").values()
    report = bisect(function, consts, launch_options(shapes, split_k=splits), shapes)
    assert "split_k" in [s.stage for s in report.stages]
    assert report.first_bad is None, report.table()


def test_the_meeting_sums_in_slice_order_and_ends_the_other_programs() -> None:
    from dataclasses import replace

    from tilec.families.catalogue import op_catalogue
    kernel, options = tiled(split_k=3)
    out = split_k.run(kernel, options)
    stores = []
    ops = op_catalogue()
    store = ops["tile.store"].evaluate
    ops["tile.store"] = replace(ops["tile.store"],
                                evaluate=lambda state, op, operands:
                                stores.append(state.program_id) or store(state, op, operands))
    rng = np.random.default_rng(0)
    # K = 48 is three steps, one per slice.
    A = rng.standard_normal((32, 48)).astype(np.float16)
    B = rng.standard_normal((48, 32)).astype(np.float16)
    C = np.full((32, 32), np.nan, np.float32)
    run_kernel(out, dict(A=A, B=B, C=C), ops=ops)
    assert stores == [(0, 0, 2)]  # only the last slice of the one tile gets to the store
    partials = [A[:, k:k + 16].astype(np.float32) @ B[k:k + 16].astype(np.float32)
                for k in (0, 16, 32)]
    np.testing.assert_allclose(C, (partials[0] + partials[1]) + partials[2], rtol=1e-6,
                               atol=1e-5)


# -- sm_90a: the warp-specialized wgmma kernels ----------------------------------------------

@pytest.mark.parametrize("splits", [2, 3, 7])  # 7: K = 200 is 4 steps, so 3 slices are empty
@pytest.mark.parametrize("sample", ["matmul", "gemm_epilogue"])
def test_wgmma_slices_agree_with_the_reference_at_every_stage(sample, splits) -> None:
    """The slice bounds the producer's TMA loads and the consumers' ring alike: the
    executor (producer coroutine, mbarrier phases) matches float64 after every pass."""
    (function,) = load_file(SAMPLES / f"{sample}.py").values()
    shapes = dict(M=150, N=130, K=200)
    options = launch_options(shapes, arch="sm_90a", stages=3, split_k=splits)
    report = bisect(function, dict(BM=128, BN=128, BK=64), options, shapes)
    assert report.first_bad is None, report.table()
    last = report.stages[-1].ir
    assert "ws.producer" in last and "wgmma.mma" in last and "split.reduce" in last


def test_wgmma_slices_meet_on_the_consumers_barrier() -> None:
    compiled = load_file(SAMPLES / "matmul.py")["matmul"].compile(
        arch="sm_90a", BM=128, BN=128, BK=64, stages=4, split_k=4)
    ptx = compiled.ptx
    assert "wgmma.mma_async" in ptx and compiled.kernel.schedule.roles is not None
    meeting = ptx[ptx.index("atom.acq_rel.gpu.global.add.u32") - 400:]
    # The producer warpgroup has left: the 256 consumer threads meet on barrier 1, never 0.
    assert "bar.sync 1, 256;" in meeting and "bar.red.or.pred %p" in meeting
    assert re.search(r"bar\.red\.or\.pred %p\d+, 1, 256, %p\d+;", ptx)
    assert "bar.sync 0;" not in meeting
    assert launch_grid([3, 5], compiled.kernel) == (15, 4, 1)


def test_split_k_is_refused_beside_persistent_blocks() -> None:
    with pytest.raises(ValueError, match="split_k gives each K slice a block of its own"):
        Options(arch="sm_90a", split_k=2, persistent=True)
    Options(arch="sm_90a", split_k=2, cluster=2)  # a pair shares a slice


@pytest.mark.parametrize("m", [256, 300], ids=["pairs", "a-block-past-m"])
@pytest.mark.parametrize("swap", [False, True], ids=["plain", "swapped"])
@pytest.mark.parametrize("cluster", [2, 4])
def test_slices_in_clusters_agree_with_the_reference_at_every_stage(m, swap, cluster) -> None:
    """A cluster's blocks run one slice of as many M tiles, sharing B's tile (the swapped
    A): all take the same K steps and any may be its tile's last. 300 rows are 3 M tiles
    (the executor runs the grid's tiles; on the GPU the second pair's second block, past M,
    meets in a slot of its own: test_split_k_gpu.py)."""
    (function,) = load_file(SAMPLES / "matmul.py").values()
    shapes = dict(M=m, N=130, K=200)
    consts = dict(BM=104 if swap else 128, BN=64, BK=64)
    swapping = dict(swap_product="always") if swap else {}
    if m == 300 and swap:
        shapes["M"] = 310  # 3 M tiles of 104
    options = launch_options(shapes, arch="sm_90a", stages=3, split_k=3, cluster=cluster,
                             **swapping)
    report = bisect(function, consts, options, shapes)
    assert report.first_bad is None, report.table()
    last = report.stages[-1].ir
    assert "split.reduce" in last and f"multicast = {cluster}" in last


# -- launch ------------------------------------------------------------------------------

def compiled_kernel(**option_args):
    function = load_file(SAMPLES / "matmul.py")["matmul"]
    return function.compile(**option_args).kernel


def test_the_slice_axis_follows_the_folded_tile_axes() -> None:
    kernel = compiled_kernel(split_k=4)
    assert launch_grid([3, 5], kernel) == (15, 4, 1)
    assert launch_grid([3, 5], compiled_kernel()) == (15, 1, 1)


def test_the_workspace_holds_a_block_tile_per_slice_and_a_counter_per_tile() -> None:
    kernel = compiled_kernel(split_k=4, BM=64, BN=32, warps=(2, 1))
    size = workspace_size(kernel, [3, 5])
    assert size.partial_bytes == 15 * 4 * 64 * 32 * 4
    assert size.counter_bytes == 15 * 4
    assert workspace_size(compiled_kernel(), [3, 5]) is None
    # In clusters of 2, 3 M tiles are 2 pairs: a slot and a counter for the fourth's block.
    paired = compiled_kernel(split_k=4, BM=64, BN=64, BK=64, arch="sm_90a", cluster=2)
    assert workspace_size(paired, [3, 5]).counter_bytes == 4 * 5 * 4
    # In fours, 5 M tiles are 2 clusters: slots and counters for 8 blocks' tiles.
    fours = compiled_kernel(split_k=4, BM=64, BN=64, BK=64, arch="sm_90a", cluster=4)
    assert workspace_size(fours, [5, 5]).counter_bytes == 8 * 5 * 4


def test_the_workspace_is_two_hidden_pointers_after_the_symbols() -> None:
    abi = kernel_abi(compiled_kernel(split_k=2))
    assert [(p.name, p.role) for p in abi[-2:]] == [("split_partials", "workspace"),
                                                    ("split_counters", "workspace")]
    assert all(p.role != "workspace" for p in kernel_abi(compiled_kernel()))


def test_the_ptx_stores_and_sums_every_accumulator_register() -> None:
    compiled = load_file(SAMPLES / "matmul.py")["matmul"].compile(split_k=3, warps=(2, 2))
    ptx = compiled.ptx
    registers = 128 * 128 // compiled.rendered.threads
    assert ptx.count("st.global.f32") >= registers  # the partial (the epilogue stores more)
    assert ptx.count("ld.relaxed.gpu.global.f32") == 3 * registers
    # Each register's sum loaded in the epilogue chunk that reads it (split.OnDemand): the
    # first chunk's stores of C come before the last sum's loads.
    first_store = ptx.index("st.global.v2.f32", ptx.index("bar.red.or.pred"))
    assert first_store < ptx.rindex("ld.relaxed.gpu.global.f32")
    assert ptx.count("atom.acq_rel.gpu.global.add.u32") == 1
    assert ptx.count("exit;") == 1
    # The meeting comes before the epilogue's chunks: one barrier reduction in all.
    assert ptx.count("bar.red.or.pred") == 1
    assert ptx.index("bar.red.or.pred") < ptx.rindex("st.global.v2.f32")


def test_explain_names_the_split_and_the_schedule_of_a_slice() -> None:
    from tilec.tools.explain import explain, render_explanation
    compiled = load_file(SAMPLES / "matmul.py")["matmul"].compile(split_k=4, stages=3)
    text = render_explanation(explain(compiled, ptxas=False))
    assert "split-K           4 blocks per output tile" in text
    assert "256 KiB of workspace per tile" in text  # 4 partials of 128 x 128 f32
    assert "k = the slice start + it * BK" in text
    assert "A tile of k-iteration 1, only while k < the slice's end" in text
    assert "?" not in text.split("Pipeline schedule")[1].split("\n\n")[1]
