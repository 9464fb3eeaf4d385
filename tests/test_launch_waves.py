"""Residency and waves (tilec/target/occupancy.py) and explain's launch line
(tilec/tools/explain_launch.py): how a launch's blocks fall onto the SMs."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from tilec.cli import main
from tilec.kernel import load_file
from tilec.launch.binding import grid_size
from tilec.target.occupancy import SM_LIMITS, Waves, resident_blocks
from tilec.launch import waves as launch_waves
from tilec.launch.waves import launch_of
from tilec.tools.explain_launch import launch_text

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
H100 = (132, "an H100's")


@pytest.mark.parametrize("arch, threads, registers, smem, expected", [
    # 256 threads of 128 registers: 8 warps x 4096 = 32768 registers a block, two an SM.
    ("sm_80", 256, 128, 0, (2, "registers")),
    # A thread's registers are allocated in eights: 121 take 128, as above.
    ("sm_80", 256, 121, 0, (2, "registers")),
    # 236 registers (the 128x128x32 sample on 4 warps, ptxas 13.0): 7680 a warp, 2 blocks.
    ("sm_80", 128, 236, 49152, (2, "registers")),
    # Shared memory: 96 KiB + the driver's 1 KiB a block, twice into sm_90's 228 KiB.
    ("sm_90", 128, 32, 98304, (2, "shared memory")),
    # ... but only once into sm_86's 100 KiB.
    ("sm_86", 128, 32, 98304, (1, "shared memory")),
    # Small blocks run into the thread limit (sm_86: 1536 threads), then the block limit.
    ("sm_86", 512, 32, 0, (3, "threads")),
    ("sm_90", 32, 16, 0, (32, "blocks")),
])
def test_resident_blocks_take_the_scarcest_resource(arch, threads, registers, smem,
                                                    expected):
    residency = resident_blocks(arch, threads, registers, smem)
    assert (residency.blocks, residency.limit) == expected


def test_waves_count_the_last_one_and_the_fill():
    tail = Waves(544, 132)  # 4096x4104 in 128x256 tiles on an H100
    assert (tail.count, tail.last) == (5, 16)
    assert tail.fill == pytest.approx(544 / 660)
    whole = Waves(1056, 132)
    assert (whole.count, whole.last, whole.fill) == (8, 132, 1.0)
    assert (Waves(0, 132).count, Waves(0, 132).fill) == (0, 1.0)
    assert SM_LIMITS["sm_90a"] == SM_LIMITS["sm_90"]


def compile_sample(**options):
    fn = load_file(SAMPLES / "matmul.py")["matmul"]
    sizes = {name: options.pop(name) for name in ("M", "N", "K")}
    compiled = fn.compile(**options, **sizes)
    return compiled, grid_size(fn.lower(**{k: options[k] for k in ("BM", "BN", "BK")}),
                               sizes)


def test_one_tile_a_block_leaves_a_nearly_empty_fifth_wave_at_4096x4104():
    compiled, axes = compile_sample(arch="sm_90a", BM=128, BN=256, BK=64, stages=3,
                                    M=4096, N=4104, K=4096)
    assert axes == [32, 17]
    text = launch_text(compiled, axes, 168, sms=H100)
    assert text == ("544 output tiles (32 x 17): 544 blocks, one a tile, 1 resident an SM "
                    "(as compiled) on 132 SMs (an H100's): 5 waves, the last 16 of 132 "
                    "(12% of the GPU busy while it runs)")


def test_persistent_blocks_count_rounds_of_tiles():
    compiled, axes = compile_sample(arch="sm_90a", BM=128, BN=128, BK=64, stages=4,
                                    persistent=True, M=4096, N=4104, K=4096)
    assert launch_text(compiled, axes, 168, sms=H100) == (
        "1056 output tiles (32 x 33) over 132 persistent blocks, 1 resident an SM (as "
        "compiled) on 132 SMs (an H100's): 8 full rounds of tiles")
    streamed, axes = compile_sample(arch="sm_90a", BM=128, BN=256, BK=64, stages=3,
                                    persistent=True, stream_k=True, M=4096, N=4104, K=4096)
    text = launch_text(streamed, axes, 168, sms=H100)
    assert "5 rounds of tiles, the last 16 of 132" in text
    assert text.endswith("stream-K shares the last round's K steps among all the blocks")


def test_a_persistent_grid_smaller_than_the_gpu_says_the_sms_it_leaves_idle():
    """88 tiles make a grid of 88 blocks: one round, but on 88 of 132 SMs (it said "88 of
    88 (100%)", which hid the idle third that stream-K or smaller tiles would fill)."""
    compiled, axes = compile_sample(arch="sm_90a", BM=128, BN=192, BK=64, stages=4,
                                    persistent=True, M=1024, N=2056, K=4096)
    launch = launch_of(compiled, axes, 168, sms=H100)
    assert (launch.tiles, launch.blocks) == (88, 88)
    assert launch_text(compiled, axes, 168, sms=H100).endswith(
        "one round, 88 of 132 (67% of the GPU busy while it runs)")


def test_a_persistent_cluster_walks_whole_pairs_of_m_tiles():
    """33 M tiles in clusters of 2 walk as 34: 544 pairs over 66 clusters' places, 9
    rounds, where the 1056 tiles alone would fill 8 (H200, 4104x4096x4096, 128x128: 258.7
    against 239.0 us without the cluster, ncu at locked clocks)."""
    compiled, axes = compile_sample(arch="sm_90a", BM=128, BN=128, BK=64, stages=4,
                                    persistent=True, cluster=2, M=4104, N=4096, K=4096)
    launch = launch_of(compiled, axes, 168, sms=H100)
    assert (launch.tiles, launch.walked, launch.blocks) == (1056, 1088, 132)
    assert launch_text(compiled, axes, 168, sms=H100) == (
        "1056 output tiles (33 x 32) over 132 persistent blocks (M tiles rounded up to "
        "clusters of 2), 1 resident an SM (as compiled) on 132 SMs (an H100's): 9 rounds of "
        "tiles, the last 32 of 132 (24% of the GPU busy while it runs)")
    even, axes = compile_sample(arch="sm_90a", BM=128, BN=128, BK=64, stages=4,
                                persistent=True, cluster=2, M=4096, N=4104, K=4096)
    assert launch_text(even, axes, 168, sms=H100).endswith("8 full rounds of tiles")


def test_split_k_counts_its_slices_as_blocks_of_one_wave():
    compiled, axes = compile_sample(arch="sm_90a", BM=128, BN=128, BK=64, stages=4,
                                    split_k=4, M=512, N=512, K=65536)
    assert axes == [4, 4]  # the lowered program's grid: the slices come from the pass
    text = launch_text(compiled, axes, 168, sms=H100)
    assert text.startswith("16 output tiles (4 x 4): 64 blocks, 4 a tile (split-K)")
    assert text.endswith("one wave, 64 of 132 (48% of the GPU busy while it runs)")


def test_an_mma_sync_kernel_takes_its_residency_from_its_registers():
    compiled, axes = compile_sample(arch="sm_80", BM=128, BN=128, BK=32, M=4096, N=4096,
                                    K=4096)
    text = launch_text(compiled, axes, 236, sms=(108, "an A100's"))
    assert text == ("1024 output tiles (32 x 32): 1024 blocks, one a tile, 2 resident an SM "
                    "(registers) on 108 SMs (an A100's): 5 waves, the last 160 of 216 "
                    "(74% of the GPU busy while it runs)")


def test_cli_explain_prints_the_launch_only_when_every_size_is_given(capsys, monkeypatch):
    monkeypatch.setattr(launch_waves, "multiprocessors", lambda arch: H100)
    flags = ["explain", str(SAMPLES / "matmul.py"), "--arch", "sm_90a", "--const",
             "BM=128", "BN=256", "BK=64", "--stages", "3", "--no-ptxas"]
    assert main(flags + ["--shape", "M=2048", "--shape", "N=2056", "--shape", "K=2048"]) == 0
    assert ("  launch            144 output tiles (16 x 9): 144 blocks, one a tile, 1 resident "
            "an SM (as compiled) on 132 SMs (an H100's): 2 waves, the last 12 of 132 (9% of "
            "the GPU busy while it runs)") in capsys.readouterr().out
    assert main(flags + ["--shape", "M=2048"]) == 0
    assert "  launch  " not in capsys.readouterr().out


def test_without_a_gpu_the_waves_are_counted_on_the_targets_usual_part(monkeypatch):
    import tilec.runtime.driver as driver
    monkeypatch.setattr(driver, "has_gpu", lambda: False)
    assert launch_waves.multiprocessors("sm_90a") == (132, "an H100 SXM's or H200's")
    assert launch_waves.multiprocessors("sm_80") == (108, "an A100's")


SIZES = [dict(M=1000, N=1003, K=77), dict(M=4096, N=4104, K=512), dict(M=64, N=8192, K=256)]
CONFIGS = [
    ("matmul.py", dict(arch="sm_80")),
    ("matmul.py", dict(arch="sm_86", BM=128, BN=256, BK=32, stages=2)),
    ("matmul.py", dict(arch="sm_90", split_k=4)),
    ("matmul.py", dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3)),
    ("matmul.py", dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, persistent=True)),
    ("matmul.py", dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, cluster=2)),
    ("matmul.py", dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, cluster=2,
                       persistent=True)),
    ("matmul.py", dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, persistent=True,
                       stream_k=True)),
    ("matmul.py", dict(arch="sm_90a", BM=128, BN=128, BK=64, stages=4, split_k=3)),
    ("matmul.py", dict(arch="sm_90a", BM=64, BN=128, BK=64, stages=4, blocks_per_sm=2)),
    ("matmul.py", dict(arch="sm_90a", BM=64, BN=256, BK=64, stages=4, persistent=True,
                       consumers="pingpong")),
    ("matmul.py", dict(arch="sm_90a", BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128)),
    ("bmm.py", dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, persistent=True)),
    ("bmm.py", dict(arch="sm_80")),
    ("sgemm.py", dict(arch="sm_86")),
    ("int8_gemm.py", dict(arch="sm_80")),
    ("fp8_gemm.py", dict(arch="sm_90a")),
    ("w8a16.py", dict(arch="sm_80")),
]


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "x".join(map(str, s.values())))
@pytest.mark.parametrize("sample, options", CONFIGS,
                         ids=[f"{s}-{'-'.join(f'{k}={v}' for k, v in o.items())}"
                              for s, o in CONFIGS])
def test_every_launch_falls_into_waves_that_cover_its_tiles(sample, options, sizes):
    """Across the schedules: blocks resident (at least one), a plain grid's blocks the tiles
    times the slices, a persistent grid at most a wave of them and at most one a tile but
    under stream-K (tiles rounded up to whole clusters), and waves that hold every block."""
    (fn,) = load_file(SAMPLES / sample).values()
    options = dict(options)
    consts = {name: options.pop(name) for name in ("BM", "BN", "BK") if name in options}
    sizes = dict(sizes, **({"Bt": 3} if "Bt" in fn.signature.symbols else {}))
    compiled = fn.compile(**options, **consts, **sizes)
    axes = grid_size(fn.lower(**consts), sizes)
    launch = launch_of(compiled, axes, 128, sms=H100)
    assert launch.residency.blocks >= 1
    # Clusters pair M tiles: a grid may round any axis up to whole clusters, no more.
    rounded = math.prod(-(-axis // launch.cluster) * launch.cluster for axis in axes)
    if launch.persistent:
        assert launch.blocks <= H100[0] * launch.residency.blocks
        if not launch.stream_k:
            assert launch.blocks <= rounded
    else:
        assert launch.blocks % launch.split == 0
        assert launch.tiles * launch.split <= launch.blocks <= rounded * launch.split
    waves = launch.waves
    assert 0 < waves.last <= waves.per_wave
    assert (waves.count - 1) * waves.per_wave < waves.work <= waves.count * waves.per_wave
    assert launch_text(compiled, axes, 128, sms=H100)
