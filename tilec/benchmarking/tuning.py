"""The bench's tuned configurations: what tilec runs for a case when neither the command
line nor ``--autotune`` chooses (:func:`tuned_config`), and the space ``--autotune`` searches
(:func:`autotune_space`). The tables hold the best measured configurations per product
family and problem class (benchmarks/NOTES.md); the rules after :func:`tuned_config` move a
case off its table entry where a measured effect says so (rows off 128-byte lines, a nearly
empty last wave, tiles that fill their rounds, few tiles over a deep K)."""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Iterable, Iterator, Optional

from tilec.benchmarking.cases import Case
from tilec.ir.types import DType
from tilec.target.occupancy import SM_LIMITS, Waves


def on_wgmma(arch: Optional[str], backend: str = "ptx") -> bool:
    """Whether rows compiled for ``arch`` by ``backend`` may run on sm_90a's wgmma families:
    the target, and a backend that emits them (the llvm backend does not: there the
    families decline every block, and its sm_90a rows run mma.sync, tuned as on sm_90)."""
    from tilec.families.wgmma import FAMILY as WGMMA
    return WGMMA.target_problem(arch, backend) is None


def autotune_space(case: Case, fixed: dict[str, Any],
                   arch: Optional[str] = None, backend: str = "ptx") -> list[dict[str, Any]]:
    """A small space for ``tilec bench --autotune``, without the knobs fixed on the command
    line (the autotuner takes those beside the space). Short M gets short block tiles; on
    sm_90a the f16/bf16 rows search wgmma's tiles (BM / 64 consumer warpgroups, BN up to
    256, BK 64; 192x192, 128x192 and 64x192 too), the ring depth, the raster group and the
    schedule: one tile a block, a persistent block, a cluster of two sharing B, persistent
    clusters, or (64-row tiles) pingpong consumers; and with consumer warpgroups of 128
    rows, 256x128 tiles and the whole-round ones (256x64, 256x144 to 256x176) under the four
    schedules and 128x128 pingpong (the autotuner prunes what does not fit; batched rows try
    the four schedules but pingpong, their clusters pairing M tiles within each batch); with
    a backend that emits no wgmma (:func:`on_wgmma`), the mma.sync spaces. On wgmma, f16 and
    bf16 products not batched also try :func:`_split_candidates`, and past SHORT_M up to
    SWAP_SEARCHED_MAX_M rows the swapped product's tiles (:func:`_swap_configs`); every
    space starts with the tuned configuration (:func:`tuned_config`)."""
    from tilec.tools.autotune import search_space
    schedules = SM90A_SCHEDULES
    wgmma = on_wgmma(arch, backend)
    if wgmma and FAMILY[case.dtype] in EIGHT_BIT_WGMMA and case.M > SHORT_M:
        # 8-bit rows: wgmma8's tiles (BK 128, one 128-byte row of 8-bit elements).
        from tilec.families.wgmma8 import FAMILY as WGMMA8
        from tilec.options import Options
        tiles = [config for config in search_space(
                     BM=(128, 256), BN=(128, 256), BK=(128,), stages=(3, 4),
                     raster_group=(8, 16))
                 if WGMMA8.block_problem((config["BM"], config["BN"], config["BK"]),
                                         Options(arch=arch)) is None]
        space = [{**config, **schedule} for config in tiles for schedule in schedules]
    elif wgmma and FAMILY[case.dtype] == "mma" and case.M > SHORT_M:
        from tilec.families.wgmma import FAMILY as WGMMA
        from tilec.options import Options
        # And the tiles that fill whole rounds where the others do not (WHOLE_ROUND_TILES:
        # 192x192 in three consumer warpgroups, 128x192, the padded ones) and the skinny
        # products' one wave (SKINNY_TILES: 64x192), in their stages.
        tiles = [config for config in [*search_space(
                     BM=(64, 128, 256), BN=(128, 256), BK=(64,), stages=(3, 4, 6),
                     raster_group=(8, 16)),
                     *_searched(t for t in (*WHOLE_ROUND_TILES, *SKINNY_TILES)
                                if "warpgroup_rows" not in t)]
                 if WGMMA.block_problem((config["BM"], config["BN"], config["BK"]),
                                        Options(arch=arch)) is None]
        space = [{**config, **schedule} for config in tiles for schedule in schedules]
        if not case.batched:
            # Pingpong consumers take a warpgroup's tile each: the 64-row ones.
            space += [{**config, **PINGPONG} for config in tiles if config["BM"] == 64]
        # Consumer warpgroups of 128 rows (two m64 wgmmas a k step, BN = 128 so their
        # accumulators fit): cuBLAS's 256x128 cooperative tile under the four schedules,
        # and CUTLASS's pingpong on 128x128 tiles.
        deep = [config for config in tiles if config["BN"] == 128 and config["BM"] >= 128
                and WGMMA.block_problem((config["BM"], config["BN"], config["BK"]),
                                        Options(arch=arch, **ROWS_128)) is None]
        space += [{**config, **schedule, **ROWS_128} for config in deep if config["BM"] == 256
                  for schedule in schedules]
        if not case.batched:
            space += [{**config, **PINGPONG, **ROWS_128} for config in deep
                      if config["BM"] == 128]
        # And the whole-round tiles in 128-row warpgroups (STRIP_TILES, 256x64) under the
        # four schedules.
        space += [{**config, **schedule} for config in
                  _searched(t for t in WHOLE_ROUND_TILES if "warpgroup_rows" in t)
                  for schedule in schedules]
        # Not searched: blocks_per_sm=2 (64x128 tiles, the largest whose accumulators fit
        # half the registers) ran at 377-394 TFLOP/s at 4096^2 f16 on an H100, against 593
        # for one block of 128x256.
    elif case.M <= 64:
        fitting = max(16, 1 << (case.M - 1).bit_length())
        space = search_space(BM=tuple(bm for bm in (16, 32, 64) if bm <= fitting),
                             BN=(64, 128, 256), BK=(64, 128), stages=(3, 4),
                             split_k=(1, 2, 4, 8))
    else:
        space = search_space(BM=(64, 128), BN=(128, 256), BK=(32, 64), stages=(3, 4))
    if wgmma and FAMILY[case.dtype] == "mma" and not case.batched:
        space += _split_candidates(case)
        if SHORT_M < case.M <= SWAP_SEARCHED_MAX_M:
            space += list(_swap_configs(case, SHORT_SLICE_STEPS))
    # The tuned configuration first: autotuning never ends on one slower than the default
    # (the search's grid holds neither the split nor, at 4096^3, the persistent raster).
    space.insert(0, tuned_config(case, arch, backend, fixed.get("fp8_accumulation", "fast")))
    trimmed: list[dict[str, Any]] = []
    for config in space:
        config = {knob: value for knob, value in config.items() if knob not in fixed}
        if config not in trimmed:
            trimmed.append(config)
    return trimmed


# The most rows of C the autotuner tries the swapped product's tiles at (_swap_configs): the
# measured range of `_swapped` and the shapes it lost or was not taken on (257-1000).
SWAP_SEARCHED_MAX_M = 1024
# The slice counts the autotuner tries on wgmma where the tiles leave SMs idle.
SEARCHED_SPLITS = (2, 3, 4, 6, 8, 12, 16)


def _split_candidates(case: Case) -> list[dict[str, Any]]:
    """SPLIT_TILES split along K in SEARCHED_SPLITS slices, where the tiles alone make less
    than a wave: one wave at most, slices of SHORT_SLICE_STEPS steps at least (as
    :func:`_sliced` cuts them); each alone and, where its M tiles pair up, in clusters of 2
    (a pair on one slice, sharing B: :func:`_split_in_clusters`)."""
    return [{**tile, "split_k": splits, **pair} for tile in SPLIT_TILES
            for splits in SEARCHED_SPLITS
            if splits <= _most_slices(case, tile, SHORT_SLICE_STEPS)
            for pair in ({}, {"cluster": 2}) if not pair or _m_tiles_pair(case, tile)]


def _searched(tiles: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each of ``tiles`` in each raster group of the autotune space, as search_space writes
    a configuration, its other knobs kept."""
    from tilec.tools.autotune import search_space
    blocks = ("BM", "BN", "BK", "stages")
    return [{**config, **{knob: value for knob, value in tile.items() if knob not in blocks}}
            for tile in tiles
            for config in search_space(**{knob: (tile[knob],) for knob in blocks},
                                       raster_group=(8, 16))]


# mma.sync m16n8k32 on 8-bit operands: the f16 tiles with BK doubled (the same bytes a
# row). Starting points, not yet measured; split-K (exact i32 partial sums) is not chosen
# by default: no int8 row has been measured with it.
EIGHT_BIT_TUNED = {
    "tiled": dict(BM=128, BN=256, BK=128, stages=3, warps=(2, 4)),
    "small": dict(BM=64, BN=128, BK=128, stages=3, warps=(1, 2)),
    "shallow": dict(BM=128, BN=128, BK=128, stages=3),
    "ragged": dict(BM=128, BN=128, BK=128, stages=3),
    "short": dict(BM=16, BN=64, BK=256, stages=4, warps=(1, 4)),
}
# fp8 needs 64x32 warp tiles: ptxas spills (72 bytes at 128x256x128) with 64x64 ones,
# where int8 does not (mma.sync .e4m3 on sm_90 takes more registers than .s8).
FP8_TUNED = {
    "tiled": dict(BM=128, BN=128, BK=128, stages=4, warps=(2, 4)),
    "small": dict(BM=64, BN=128, BK=128, stages=4, warps=(1, 4)),
    "shallow": dict(BM=128, BN=128, BK=128, stages=3, warps=(2, 4)),
    "ragged": dict(BM=128, BN=128, BK=128, stages=3, warps=(2, 4)),
    "short": dict(BM=16, BN=64, BK=256, stages=4, warps=(1, 4)),
}
# The configurations tilec runs when neither --autotune nor the command line chooses: the
# best measured (benchmarks/NOTES.md), per dtype family and problem class.
TUNED = {
    ("mma", "tiled"): dict(BM=128, BN=256, BK=128, stages=2, warps=(2, 4)),
    # 1024^2 has 32 tiles of 128x256 for 132 SMs; 64x128 tiles: 131.5 against 89.6 TFLOP/s.
    ("mma", "small"): dict(BM=64, BN=128, BK=64, stages=3, warps=(1, 2)),
    # K = 256: two steps of BK=128 leave the pipeline empty; 226.8 against 198.1 TFLOP/s.
    ("mma", "shallow"): dict(BM=128, BN=128, BK=64, stages=3),
    ("mma", "ragged"): dict(BM=128, BN=128, BK=64, stages=3),
    ("mma", "short"): dict(BM=16, BN=64, BK=128, stages=4, warps=(1, 4)),
    ("simt", "tiled"): dict(BM=64, BN=128, BK=32, stages=3),
    ("simt", "small"): dict(BM=64, BN=128, BK=32, stages=3),
    ("simt", "shallow"): dict(BM=64, BN=128, BK=32, stages=3),
    ("simt", "ragged"): dict(BM=64, BN=128, BK=32, stages=3),
    # Split-K: 32 output tiles of 16x256 x 4 slices (H100, autotuned: 20.6 TFLOP/s, 0.85 of
    # the memory bound at 16x8192x8192, against 8.5 unsplit with 32x64 tiles).
    ("simt", "short"): dict(BM=16, BN=256, BK=64, stages=3, warps=(1, 4), split_k=4),
    # tf32 mma: tiled measured on an H100 (195 TFLOP/s at 4096 against 173 for 128x128x32);
    # ragged and short are mma-like starting points, not yet tuned.
    ("tf32", "tiled"): dict(BM=128, BN=256, BK=64, stages=2, warps=(2, 4)),
    ("tf32", "small"): dict(BM=64, BN=128, BK=32, stages=3, warps=(1, 2)),
    ("tf32", "shallow"): dict(BM=128, BN=128, BK=32, stages=3),
    ("tf32", "ragged"): dict(BM=128, BN=128, BK=32, stages=3),
    ("tf32", "short"): dict(BM=32, BN=128, BK=32, stages=4, warps=(1, 4)),
    # sm_90a: wgmma fed by TMA, one producer and BM / 64 consumer warpgroups. 16-row M keeps
    # the mma path (its warp grid makes wgmma decline): 64-row wgmma tiles would waste most
    # of a 16-row problem, which is memory-bound anyway; deeper short M takes one M tile as
    # deep as M (SHORT_TILES).
    # H100, C f16 (TMA-store epilogue where C's rows are aligned), TFLOP/s against cuBLAS in
    # one run (benchmarks/NOTES.md): 4096^3 128x256x64 3 stages 0.96 (4 stages, whose
    # staging tile does not fit, 0.88; 128x128 0.84); 1024^3 64x128x64 6 stages 0.99
    # (128x128 0.80, 128x256 0.56); 8192x8192x256 128x128 persistent 0.96 (128x256 one tile
    # a block 0.66: all fill and epilogue); 4095x4097x4093 128x256 3 stages 2.83.
    # raster group 16: 4096^3 +0.6% (f16 749.9 / 743.8 against 745.2 / 739.3 in two rounds,
    # bf16 762.5 / 761.4 against 757.4 / 756.7), 8192^3 level (one run, H100).
    # Persistent where a block gets several tiles (tuned_config), once the ring's stage and
    # phase were carried by the K loop instead of divided out of the iteration count every
    # step (one run, round robin, f16 / bf16 against cuBLAS): 4096^3 0.987 / 0.987 against
    # one tile a block 0.966 / 0.963, 8192^3 1.018 / 1.032 against 0.999 / 1.000; with
    # cluster=2 0.973 / 0.970, 1.012 / 1.028; raster group 8 0.986 / 0.984, 1.024 / 1.013.
    # With a cluster's raster group counting rows of tiles (backend/grid.py cluster_group),
    # two rounds against this config in the same run: 4096^3 0.992-0.991 / 0.991 against
    # 0.994 / 0.993-0.992; 32x1024^3 0.958 / 0.950-0.951 against 0.966-0.967 / 0.956-0.958
    # (8192^3 swung 5-8% between rounds). Not adopted (benchmarks/NOTES.md).
    # Batched 32x1024x1024x1024 f16 (H100, two rounds, us): 128x256x64 st3 119.5-121.3
    # (raster 1, 8 or 16 alike), 256x128x64 st3 129, 128x128x64 st4/st5/st6 135-139,
    # 64x128x64 st6 175, 128x256x64 st4 (direct stores: no room to stage) 210; cuBLAS
    # 105-107: 0.88x, the per-tile fill and epilogue at 16 K steps a tile, which only a
    # persistent kernel would hide.
    # Persistent blocks over batches x tiles (tuned_config keeps persistent for batched
    # rows), H100, one run per config (raster group 8), TFLOP/s f16 / bf16 against
    # torch.bmm in that run:
    # 32x1024x1024x1024 128x256x64 st3 persistent 625.4 / 634.6 (0.97 / 0.97), 128x128x64
    # st4 persistent 591.3 / 596.7 (0.92 / 0.91), 128x256x64 st3 one tile a block 569.8 /
    # 576.8 (0.89 / 0.88); torch.bmm 641.5-643.0 / 656.1-657.5. What is left: the two
    # consumer warpgroups share each tile, so its epilogue still stalls the products (the
    # producer only runs ahead into the next tile's loads).
    #
    # Pingpong consumers (two warpgroups a block, a 64x256 tile each, mainloops in turn),
    # 64x256x64 st4 raster 16, one run: 4096^3 0.68 / 0.67, 8192^3 0.76 / 0.69 of cuBLAS
    # (f16 / bf16; cluster 2 alike) against 0.99 / 0.99, 1.05 / 0.98 for this config in the
    # next run; ptxas had serialized its wgmmas (C7514), since fixed, not yet re-measured.
    #
    # Stream-K (stream_k=True: whole tiles, then the partial wave's K steps shared evenly,
    # split tiles meeting in a workspace), this config, one call each against the same
    # config without it (benchmarks/NOTES.md), tilec / without, f16 / bf16: sharing the
    # partial wave 4096^3 0.93 / 0.93, 8192^3 1.00 / 0.99, 32x1024^3 0.93 / 0.93; sharing
    # the last two waves (CUTLASS's DP + SK) 0.69 / 0.68, 0.98 / 0.94, 0.89 / 0.89. Not
    # chosen.
    ("wgmma", "tiled"): dict(BM=128, BN=256, BK=64, stages=3, raster_group=16,
                             persistent=True),
    ("wgmma", "small"): dict(BM=64, BN=128, BK=64, stages=6),
    ("wgmma", "shallow"): dict(BM=128, BN=128, BK=64, stages=4, persistent=True),
    # (And six stages over many rounds: SHALLOW_DEEP_RING_STAGES.)
    # Batched ragged rows take this too: 8x4095x4097x128 f16 (H100, two rounds, C's rows
    # 2-byte aligned so staged and stored by rows, B packed): 128x256x64 st3 216-221 us
    # (raster 16 the same), 128x128x64 st3/st4 and 128x128x128 st2 247-254, 64x256x64 st4
    # 253, 64x128x64 st6 340-346; cuBLAS 401-407. Reading B in place instead of packing it
    # (mma.sync, 2-byte copies) 690-874 us. benchmarks/NOTES.md, session 9. Persistent
    # over batches x tiles (BATCHED_PERSISTENT; one run per config, TFLOP/s f16 / bf16):
    # 128x256x64 st3 176.6 / 175.6 (2.04 / 2.11x torch.bmm), 128x128x64 st4 179.9 / 174.1
    # (2.08 / 2.10), against one tile a block 156.3 / 159.2 (1.81 / 1.91).
    ("wgmma", "ragged"): dict(BM=128, BN=256, BK=64, stages=3),
    ("wgmma", "short"): dict(BM=16, BN=64, BK=128, stages=4, warps=(1, 4)),
    # The 8-bit families (int8 on every target, fp8 on sm_90/sm_90a; wgmma declines 8-bit
    # operands): EIGHT_BIT_TUNED.
    **{("int8", problem): config for problem, config in EIGHT_BIT_TUNED.items()},
    **{("fp8", problem): config for problem, config in FP8_TUNED.items()},
    # sm_90a's 8-bit rows: wgmma m64nNk32 fed by TMA (the wgmma8 family), the f16 wgmma
    # tiles with BK doubled (the same bytes a row). Starting points, not yet measured, but
    # "tiled": persistent, raster group 8, four stages. H100, two runs in one call, x the
    # one-tile-a-block 128x256x128 st3 kernel, 4096^3 / 8192^3: f8e4m3 1.06, 1.06 / 1.02,
    # 1.00 (x torch._scaled_mm 1.06 / 1.07-1.09), i8 1.09, 1.09 / 1.03, 1.03; raster 16 at
    # four stages 1.06 / 0.97-1.02, cluster 2 1.06 / 0.96-1.03, raster 8 at three stages
    # 1.06-1.07 / 0.94-1.01 (benchmarks/NOTES.md, session 16).
    ("wgmma8", "tiled"): dict(BM=128, BN=256, BK=128, stages=4, raster_group=8,
                              persistent=True),
    ("wgmma8", "small"): dict(BM=128, BN=128, BK=128, stages=4),
    ("wgmma8", "shallow"): dict(BM=128, BN=128, BK=128, stages=4, persistent=True),
    ("wgmma8", "ragged"): dict(BM=128, BN=256, BK=128, stages=3),
}
# fp8 rows with promoted accumulation (fp8_accumulation="promoted": a second accumulator
# set, so no 128x256 tile). H100, one call, TFLOP/s at 4096^3 / 8192^3 against cuBLAS
# without fast accumulation (1340.1 / 1321.7): 128x192 st4 persistent raster 8 1225.7 /
# 1361.1; 128x128 st4 1168.7 / 1176.5, st5 1232.8 / 1141.4; with cluster 2 1108.4 / 1070.0;
# 256x64 in 128-row warpgroups 949.4 / 888.6; 64x128 pingpong 834.8 / 796.0. Other problem
# classes keep their tiles, BN at most 128 (benchmarks/NOTES.md, session 16).
PROMOTED_TILED = dict(BM=128, BN=192, BK=128, stages=4, raster_group=8, persistent=True)
PROMOTED_MAX_BN = 128
# Where batched rows (which may be ragged) run persistent blocks over batches x tiles beside
# TUNED's own persistent entries, when they have more tiles than a wave: measured in the
# comments above ("wgmma", "ragged").
BATCHED_PERSISTENT = {("wgmma", "ragged")}
# Batched rows of whole tiles with more tiles than a wave (32x1024x1024x1024): 128x128x64 in
# six stages, persistent. H100, `tilec bench --autotune` over 112 configurations: best 0.1086
# ms against 0.1100 for the 2-D rows' 128x256x64 st3; then two rounds, one call, x torch.bmm
# f16 / bf16: 0.98, 0.98 / 0.98, 0.98 against 0.97, 0.97 / 0.96, 0.96. The ragged batched
# row (8x4095x4097x128) keeps 128x256: this tile ran it at 1.80x torch.bmm against 2.05x.
# Raster group 4 (two groups of 4 x 8 tiles a 1024^2 batch) rather than 16 (the whole
# batch), once the tile loop decoded tiles without divisions: two runs, one call, x the
# raster-16 kernel f16 / bf16 1.007, 1.007 / 1.005, 1.006 (x torch.bmm 0.998, 0.998 / 1.000,
# 1.001); raster 8 1.00. The 2-D rows keep 16: 4096^3 level, 8192^3 0.97-0.98.
BATCHED_TILED = dict(BM=128, BN=128, BK=64, stages=6, raster_group=4, persistent=True)
# A shallow K over many rounds of tiles: six stages of 128x128x64 hold the next tile's K
# steps (K = 256: four) while the consumers stage and store this one's C, so its loads are
# in flight before the epilogue ends. H100, one call, x the four-stage kernel, f16 / bf16:
# 8192x8192x256 (32 rounds of 132) 1.04 / 1.04 (x cuBLAS 1.02 / 1.02), 8192x8192x384 1.05
# / 1.06, 16384x8192x256 (63 rounds) 1.03 / 1.04; K = 128 (two steps) 1.00 / 1.00; but
# 4096x4096x256 (8 rounds) 0.97 / 0.97. Five stages 1.00-1.03; six in clusters of 2
# 0.93-1.05 (benchmarks/NOTES.md, session 21).
SHALLOW_DEEP_RING_STAGES = 6
SHALLOW_DEEP_RING_ROUNDS = 16  # measured at 8 (slower) and 32 or more (faster)
# The product families whose rows run on wgmma8 on sm_90a (but short M: mma.sync's tiles).
EIGHT_BIT_WGMMA = ("int8", "fp8")
SIXTEEN_BIT = ("f16", "bf16")
# The block schedules sm_90a's autotuning tries for each tile: one tile a block, persistent
# blocks, a cluster of two sharing B, and persistent clusters walking pairs of tiles.
SM90A_SCHEDULES = ({}, {"persistent": True}, {"cluster": 2}, {"persistent": True, "cluster": 2})
# And for 64-row tiles, pingpong consumers: two warpgroups a block, each on tiles of its own.
PINGPONG = {"persistent": True, "consumers": "pingpong"}
# And consumer warpgroups of 128 rows each (two m64 wgmmas a k step).
ROWS_128 = {"warpgroup_rows": 128}
C_DTYPES = ("inputs", "f32")
# The product family (tilec.families.products) each bench dtype runs on.
FAMILY = {"f16": "mma", "bf16": "mma", "f32": "simt", "tf32": "tf32", "i8": "int8",
          "f8e4m3": "fp8"}
# What tilec compiles each bench dtype as: the inputs' DSL dtype and the options it needs.
TILEC_AS = {"tf32": ("f32", {"f32_math": "tf32"})}
# Small ragged problems with K up to this take all of K in one step (mma's k of 16 rounds
# it up): measured at K = 77.
ONE_STEP_K = 128
SHORT_M = 64  # M at most this: block tiles of 16 or 32 rows instead of 128
# Fewer 128x256 output tiles than this (half an H100's SMs) and the large tiles leave most
# of the GPU idle: "small" takes smaller ones.
SMALL_TILES = 64
# An H100's (and H200's) SMs: up to this many output tiles, a persistent grid gives each
# block one tile.
ONE_WAVE = SM_LIMITS["sm_90a"].sms
# Fewer K steps of 128 than this and the large tiles' two-stage pipeline barely fills:
# "shallow" takes a shorter BK and three stages.
SHALLOW_STEPS = 4


def problem_class(case: Case) -> str:
    """short (M <= SHORT_M), tiled (every dim a multiple of the large tiles), small (tiled,
    but too few large tiles to fill the GPU), shallow (tiled, but few K steps) or ragged:
    ragged edges mask every copy and waste the edge blocks, where smaller tiles win."""
    if case.M <= SHORT_M:
        return "short"
    if not (case.M % 128 == 0 and case.N % 256 == 0 and case.K % 128 == 0):
        return "ragged"
    if (case.M // 128) * (case.N // 256) * case.batch < SMALL_TILES:
        return "small"
    return "shallow" if case.K // 128 < SHALLOW_STEPS else "tiled"


def tuned_config(case: Case, arch: Optional[str] = None, backend: str = "ptx",
                 fp8_accumulation: str = "fast", swap: bool = True) -> dict[str, Any]:
    """The tuned configuration of a case on a target: sm_90a's f16/bf16 rows run on wgmma
    (and its 8-bit rows on wgmma8) where the backend emits it (:func:`on_wgmma`); fp8 rows
    summed promoted take tiles with room for the second accumulator set; on a target whose
    shared memory cannot hold a configuration's ring, a shallower one
    (:func:`_within_shared_memory`). ``swap`` False: never the swapped product (for a
    program the swap_product pass does not swap)."""
    tuned = _tuned(case, arch, backend, fp8_accumulation, swap)
    fitted = _within_shared_memory(case, tuned, arch, backend)
    if fitted is not tuned:
        _took("_within_shared_memory")
    return fitted


# What each rule that may move a case off its table entry does, as :func:`tuned_rules` names
# it (the functions and constants are this module's).
RULES = {
    "_skinny": "the skinny tile whose one wave spends the most on the product "
               "(SKINNY_TILES), split along K or in clusters of 2 sharing B where that pays",
    "_swapped": "the product swapped, C.T = B.T @ A.T, where the tall tile would be taken "
                "or past SWAP_UNSPLIT_MIN_M rows: M in tiles of any multiple of 8 rows "
                "along wgmma's n (SWAP_TILES), split along K or paired in clusters of 2 "
                "sharing B's tile",
    "_split_in_clusters": "few tiles over a deep K: a larger tile than the skinny one, "
                          "split along K into slices of SPLIT_CLUSTER_MIN_STEPS steps, "
                          "in clusters of 2 sharing B (SPLIT_CLUSTER_TILES)",
    "_tall": "a 192-row tile split along K, whose rows of tiles read B fewer times "
             "(TALL_TILE)",
    "one_step_k": f"all of a shallow K (at most ONE_STEP_K = {ONE_STEP_K}) in one step, "
                  "misaligned rows read as words and C stored by rows",
    "few_ragged_tiles": "mma.sync's 64x64x32 tiles, the operands read in place (no pack "
                        "launch): few ragged tiles over a K too shallow to split",
    "_short_tile": "one M tile as deep as M (SHORT_TILES), split along K where its tiles "
                   "fill under a wave",
    "promoted": "fp8 summed promoted: room for the second accumulator set (PROMOTED_TILED)",
    "batched_persistent": "persistent blocks over batches x tiles (BATCHED_PERSISTENT)",
    "batched_tiled": "the batched rows' own tile (BATCHED_TILED)",
    "shallow_deep_ring": "six stages over many rounds of a shallow K "
                         "(SHALLOW_DEEP_RING_STAGES)",
    "one_tile_a_block": "one tile a block: the tiles make one wave, so nothing to run ahead "
                        "into",
    "_multicast_for_rows_off_lines": "clusters of 2 sharing B, whose rows are off 128-byte "
                                     "lines (MULTICAST_TILES)",
    "_narrower_for_the_last_wave": "128x128 persistent tiles: the wide tiles' last wave "
                                   "would run nearly empty (NARROW_TILE)",
    "_tile_for_whole_waves": "a tile that fills its rounds or its one wave better "
                             "(WHOLE_ROUND_TILES)",
    "_sliced": "split along K: the tiles alone leave SMs idle (_sliced)",
    "_persistent_for_shallow_rounds": "persistent 128x128 tiles (192x192 where they fill "
                                      "the rounds better) over several waves of a shallow "
                                      "K (SHALLOW_ROUND_TILE, SHALLOW_SQUARE)",
    "_within_shared_memory": "a shallower ring: the tuned one does not fit this target's "
                             "shared memory",
}
_TRACE: ContextVar[Optional[list[str]]] = ContextVar("tuning_trace", default=None)


def tuned_rules(case: Case, arch: Optional[str] = None, backend: str = "ptx",
                fp8_accumulation: str = "fast", swap: bool = True
                ) -> tuple[dict[str, Any], tuple[str, str], list[str]]:
    """:func:`tuned_config`'s choice, the TUNED key it started from (:func:`_entry`) and the
    RULES that moved it off the entry, in the order they did."""
    trace: list[str] = []
    token = _TRACE.set(trace)
    try:
        config = tuned_config(case, arch, backend, fp8_accumulation, swap)
    finally:
        _TRACE.reset(token)
    return config, _entry(case, arch, backend), trace


def describe_tuned(case: Case, arch: Optional[str] = None, backend: str = "ptx",
                   fp8_accumulation: str = "fast", swap: bool = True) -> list[str]:
    """:func:`tuned_rules` in words, a line each: the table entry and its configuration,
    each rule that moved the case off it, the configuration chosen."""
    config, (family, problem), rules = tuned_rules(case, arch, backend, fp8_accumulation,
                                                   swap)
    table = TUNED.get((family, problem))
    lines = [f"{case.shape} {case.dtype} on {arch or 'any target'}: the {problem} class's "
             f"{family} entry (TUNED), {config_words(table) if table else 'none'}"]
    lines += [f"then {rule}: {RULES[rule]}" for rule in rules]
    if not rules:
        lines.append("no rule moved it")
    lines.append(f"chosen: {config_words(config)}")
    return lines


def config_words(config: dict[str, Any]) -> str:
    """``128x256x64, stages 3, persistent, raster_group 16``."""
    def value_words(value: Any) -> str:
        return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
    tile = "x".join(str(config[knob]) for knob in ("BM", "BN", "BK") if knob in config)
    rest = [knob if value is True else f"{knob} {value_words(value)}"
            for knob, value in config.items() if knob not in ("BM", "BN", "BK")]
    return ", ".join([tile, *rest] if tile else rest)


def _took(rule: str, config: Any = None) -> Any:
    """Record that RULES' ``rule`` chose (in :func:`tuned_rules`); ``config`` back."""
    assert rule in RULES, rule
    trace = _TRACE.get()
    if trace is not None:
        trace.append(rule)
    return config


def _entry(case: Case, arch: Optional[str], backend: str) -> tuple[str, str]:
    """The TUNED key a case starts from on a target: its product family, as the target runs
    it, and its problem class."""
    family, problem = FAMILY[case.dtype], problem_class(case)
    wgmma = on_wgmma(arch, backend)
    if family in EIGHT_BIT_WGMMA and wgmma and problem != "short":
        family = "wgmma8"
    if family == "mma" and wgmma:
        family = "wgmma"
    return family, problem


# The shallowest BK a ring is cut to, by element bytes: an mma.sync k step (k32 on 8-bit
# operands, k16 on 16-bit ones), a few FFMA k steps on f32.
LEAST_BK = {1: 32, 2: 16, 4: 8}


def _within_shared_memory(case: Case, config: dict[str, Any], arch: Optional[str],
                          backend: str) -> dict[str, Any]:
    """``config``, or its ring (BM x BK and BK x BN elements a stage) cut to ``arch``'s
    shared memory: fewer stages, down to two, then BK halved with the stages that keep the
    ring as deep in K, and fewer again. The mma.sync and FFMA tiles were tuned on an H100,
    whose blocks take 227 KiB: 128x256x128 in two stages needs 192 KiB, more than an A100's
    163 or an sm_86 GPU's 99. wgmma's rings (sm_90a) and an unknown target's stay as they
    are."""
    if arch is None or on_wgmma(arch, backend) or "BK" not in config:
        return config
    from tilec.options import Options
    from tilec.passes.tiling import ring_bytes
    limit = Options(arch=arch).smem_limit
    size = DType.parse(TILEC_AS.get(case.dtype, (case.dtype,))[0]).bytes  # tf32: f32's
    bk, stages = config["BK"], config["stages"]

    def ring(bk: int, stages: int) -> int:
        return ring_bytes((config["BM"], config["BN"], bk), size, size, stages)

    while ring(bk, stages) > limit:
        if stages > 2:
            stages -= 1
        elif bk // 2 >= LEAST_BK[size] and bk % 2 == 0:
            bk //= 2
            stages = config["stages"] * config["BK"] // bk
        else:
            return config  # nothing fits: the compiler's error says why
    return config if (bk, stages) == (config["BK"], config["stages"]) else \
        {**config, "BK": bk, "stages": stages}


def _tuned(case: Case, arch: Optional[str], backend: str,
           fp8_accumulation: str, swap: bool = True) -> dict[str, Any]:
    """:func:`tuned_config`'s choice, as tuned (on an H100 or H200)."""
    family, problem = _entry(case, arch, backend)
    if family == "wgmma":
        skinny = _skinny(case) if SHORT_M < case.M <= SKINNY_M else None
        if skinny is not None:
            return _took("_skinny", skinny)
        tall = _tall(case) if problem == "ragged" else None
        if tall is not None:
            swapped = _swapped(case, tall) if swap else None
            return _took("_swapped", swapped) if swapped is not None else \
                _took("_tall", tall)
        swapped = _swapped(case) if swap and problem == "ragged" and not case.batched and \
            case.K >= SWAP_UNSPLIT_MIN_K and SWAP_UNSPLIT_MIN_M < case.M <= SWAP_UNSPLIT_MAX_M \
            else None
        if swapped is not None:
            return _took("_swapped", swapped)
        if problem == "ragged" and _large_tiles(case) < SMALL_TILES:
            # A few tiles and K steps (1000x1003x77), H100, one run, f16 C: mma.sync's
            # 64x64x32 tiles reading the misaligned operands in place 13.4 us; packed first
            # 16.9; 128x128 packed 18.6 (unpacked 20.9); wgmma 64x128 packed 16.7. The pack
            # launches cost more than the aligned copies save here.
            if case.K <= ONE_STEP_K:
                # All of K in one step of one stage: the loads issued at once, one barrier.
                # 1000x1003x77 (152 configurations swept, one run): 64x128x80 with 2x4 warps
                # 11.4 us, BK 96 11.6, BK 128 12.2, 64x64x64 in 2 stages 12.5, the 64x64x32
                # 3-stage kernel 13.5 (cuBLAS 9.6).
                # The misaligned rows read as words (aligned 4-byte loads + prmt, 16-byte
                # shared vectors): 1064 -> 728 SASS instructions, 238 -> 127 registers; H100,
                # one run: 11.3 us against 11.8 element by element and 12.5 as vectors
                # (element loads into 16-byte vectors), cuBLAS 9.95; bench 0.88x cuBLAS
                # (0.84x by elements). What is left is C's 2-byte stores: with them off the
                # kernel takes 7.5 us, with C's rows 16-byte aligned 7.9.
                # C's rows (2-byte aligned) staged in shared memory and stored a row at a
                # time by each warp (passes/row_store.py), not scattered 2-byte pieces:
                # H100, one run (f16 and bf16 alike): 19.3 TFLOP/s (8.0 us), 1.23x cuBLAS;
                # misaligned_store pairs 15.3 (1.00x), elements 13.4 (0.87x); Triton 8.7.
                return _took("one_step_k", dict(
                    BM=64, BN=128, BK=-(-case.K // 16) * 16, stages=1, warps=(2, 4),
                    pack="off", misaligned_copy="words", misaligned_store="rows"))
            # A deep K: the skinny products' tiles (their M aside: these are few tiles
            # whatever the sizes), split along K (past SKINNY_M rows in SPLIT_TILE) or in
            # clusters; else SPLIT_TILE split where it fills the GPU (_sliced).
            skinny = _skinny(case) if case.M > SKINNY_M else None
            if skinny is not None:
                split = _split_in_clusters(case, skinny) \
                    if skinny.get("cluster") and skinny["BM"] * skinny["BN"] < 128 * 128 \
                    else None
                return _took("_split_in_clusters", split) if split is not None else \
                    _took("_skinny", skinny)
            sliced = _sliced(case, dict(SPLIT_TILE))
            if "split_k" in sliced:
                return _took("_sliced", sliced)
            shallow = _skinny(case, SKINNY_ALIGNED_MIN_K) if _rows_aligned(case) else None
            if shallow is not None:
                return _took("_skinny", shallow)
            return _took("few_ragged_tiles",
                         dict(BM=64, BN=64, BK=32, stages=3, warps=(2, 2), pack="off"))
    config = dict(TUNED[family, problem])
    if (family, problem) == ("wgmma", "short") and not case.batched:
        short = _short_tile(case, config)
        return short if short == config else _took("_short_tile", short)
    if family == "wgmma8" and case.dtype != "i8" and fp8_accumulation == "promoted":
        config = _took("promoted", dict(PROMOTED_TILED) if problem == "tiled" else
                       {**config, "BN": min(config["BN"], PROMOTED_MAX_BN)})
    if case.batched and (family, problem) in BATCHED_PERSISTENT and \
            _large_tiles(case) > ONE_WAVE:
        config["persistent"] = _took("batched_persistent", True)
    if case.batched and (family, problem) == ("wgmma", "tiled") and \
            _large_tiles(case) > ONE_WAVE:
        config = _took("batched_tiled", dict(BATCHED_TILED))
    if (family, problem) == ("wgmma", "shallow") and not case.batched and \
            _tiles(case, config) >= SHALLOW_DEEP_RING_ROUNDS * ONE_WAVE:
        config["stages"] = _took("shallow_deep_ring", SHALLOW_DEEP_RING_STAGES)
    if config.get("persistent") and problem == "tiled" and _large_tiles(case) <= ONE_WAVE:
        # A block gets one tile at most: nothing to run ahead into, only the tile loop's
        # cost. 2048^3 (64 tiles), one run: 0.958 / 0.946 of cuBLAS persistent against
        # 0.976 / 0.964 one tile a block (f16 / bf16).
        _took("one_tile_a_block")
        del config["persistent"]
    if family == "wgmma":
        multicast = _multicast_for_rows_off_lines(case, config)
        moved = multicast or _narrower_for_the_last_wave(case, config)
        if moved != config:
            _took("_multicast_for_rows_off_lines" if multicast else
                  "_narrower_for_the_last_wave")
        config = moved
        # Slices that fill a wave come first (2048x1024x8192: 128 blocks, 64 tiles of
        # 128x256 split in two, against 96 tiles of 128x192), but for ONE_WAVE_TILES'
        # unsplit tiles where they fill it as well (:func:`_tile_for_whole_waves`).
        whole = _tile_for_whole_waves(case, config)
        sliced = _sliced(case, config)
        if whole != config and ("split_k" not in sliced or _one_wave_tile(case, whole)):
            _took("_tile_for_whole_waves")
            sliced = _sliced(case, whole)
        if "split_k" in sliced:
            _took("_sliced")
        config = sliced
        shallow = _persistent_for_shallow_rounds(case, config)
        if shallow != config:
            config = _took("_persistent_for_shallow_rounds", shallow)
    return config


# Short M on sm_90a (TUNED's 16-row tiles past 16 rows): one M tile as deep as M, so B,
# whose bytes bound these products, streams through once rather than once per 16-row tile;
# the 64-row one on wgmma, split along K where its tiles fill under a wave (_sliced, the
# tile kept). H200, f16, one call, TFLOP/s against the 16x64x128 tile (cuBLAS):
#   32x64x128  32x12288x4096 104.3 / 85.6 (105.2); 64x128 99.4
#   64x128x64  64x12288x4096 211.0 / 119.3 (212.1); 64x96 211.5, 64x64 187.5
#              64x4096x11008 split 2 186.7 / 125.9 (187.3); unsplit 142.8, 64x64 184.6
#              48x8192x4096 144.8 / 91.3 (150.5), 64x14336x4096 222.6 / 110.6 (225.4),
#              128x2048x8192 (M 128: the small class's tile, split) 207.1 / 153.0 unsplit
# 16 rows keep TUNED's (16x8192x8192: 59.9, against 59.0 for 32x64x128 and 49.2 for 64x128;
# benchmarks/NOTES.md, session 28), and so does a product too narrow for the deeper tile's
# blocks (split or not) to make the entry's least count, each streaming its B columns alone:
# 32x4096x11008 (64 blocks of 32x64) 82.0 against 89.0, 24x8192x8192 (128) 88.4 / 88.1,
# 64x2048x4096 (16 of 64x128, unsplit then) 63.9 / 75.4; in four short slices (session 30:
# SHORT_SLICE_STEPS) 82.6 / 75.9 (80.3), 64x2000x4096 80.5 / 67.0 (78.0).
SHORT_TILES = ((32, dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 4)), ONE_WAVE + 1),
               (SHORT_M, dict(BM=64, BN=128, BK=64, stages=6), ONE_WAVE // 4))
SHORT_TUNED_ROWS = 16


def _short_tile(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """TUNED's short tile for M up to SHORT_TUNED_ROWS, else the first of SHORT_TILES as
    deep as M (the wgmma one split along K by :func:`_sliced`, which keeps a short M's
    tile) where its blocks make the entry's least count."""
    if case.M <= SHORT_TUNED_ROWS:
        return config
    tile, least = next((dict(tile), least) for rows, tile, least in SHORT_TILES
                       if case.M <= rows)
    if "warps" not in tile:
        tile = _sliced(case, tile)
    return tile if _tiles(case, tile) * tile.get("split_k", 1) >= least else config


# Skinny products (M from SHORT_M to SKINNY_M rows, and the ragged small class whatever its
# sizes), K from ONE_WAVE_MIN_K: B streams through once and bounds them, so what counts is
# keeping as much of one wave busy as the tiles allow. The tile is the one of SKINNY_TILES
# whose tiles, one a block in one wave, spend the largest share of the SMs' time on the
# product's own elements (:func:`_useful_share`; the first on a tie), split along K by
# _sliced where its blocks fill the wave too little. 64x192 only where B's rows are whole
# 128-byte lines (off them its 384-byte B rows straddle lines; 500x3000x4096: 302.6 against
# 420.6 for 128x128); 128x96 (128 tiles at 128x12288) ran 0.86-0.92 of 64x192 and is not one.
# H200, f16, one call, TFLOP/s, the rule's tile against the tuning before (cuBLAS;
# benchmarks/NOTES.md, session 29):
#   128x12288x4096  64x192 423.4 / 338.9 64x128 in two waves (443.9); 64x256 395.5
#   128x10240x8192  64x192 431.3 / 329.4 (457.8); 64x256 394.1, 128x96 380.2
#   192x8192x4096   64x192 529.8 / 369.4 128x128, half its M tiles empty (471.5)
#   160x8192x8192   64x192 454.7 / 271.3 (551.0); 192x128 split 2 427.4
#   192x4096x11008  64x128 434.9 / 379.4 128x128 split 2 (317.5)
#   96x12288x4096   64x192 314.6 / 162.7 mma.sync 64x64 (314.9); 128x128 279.4
#   80x8192x4096    64x128 210.2 / 97.4 (244.6); 64x192 219.3
#   200x4000x4096   64x128 299.0 / 122.5 (317.0)
#   1000x1003x4096  64x128 306.0 / 69.8 (102.3)
#   500x3000x4096   128x128 420.6 / 201.6 (519.6)
# and where the tuning already took the rule's tile: 128x16384x4096 128x128 447.0 (64x256
# 451.2, 462.0), 128x28672x4096 128x256 486.3 (292.5), 192x12288x4096 128x192 518.0 (64x192
# in two waves 453.1; 429.6), 256x12288x4096 128x192 666.6 (661.2). Not yet fitted to fused
# epilogues: 64x256 in four stages spills 8-188 bytes under a fused epilogue with ragged
# edges (ptxas 13.0; none in three stages, none for the plain product).
SKINNY_TILES = (dict(BM=64, BN=192, BK=64, stages=6), dict(BM=64, BN=128, BK=64, stages=6),
                dict(BM=128, BN=128, BK=64, stages=6), dict(BM=64, BN=256, BK=64, stages=4),
                dict(BM=128, BN=192, BK=64, stages=4), dict(BM=128, BN=256, BK=64, stages=3))
SKINNY_M = 256
# The ragged small class's few tiles over a shallower K, every row 16-byte aligned (nothing to
# pack, so TMA reads the operands where they lie): the skinny tile too, not mma.sync's 64x64
# tiles reading them in place. H200, f16, one call, TFLOP/s, against mma.sync 64x64x32
# (cuBLAS; benchmarks/NOTES.md, session 34): 1685x320x512 64x128 71.0 / 48.9 (76.0),
# 803x320x512 64x128 35.1 / 25.1 (38.4); both in four stages, and at 2368x512x512 (148 tiles
# of 64x128: two waves) 128x128 138.6, 64x128 111.8 / 98.7 (149.8).
SKINNY_ALIGNED_MIN_K = 512
LINE_ROWS_TILES = {(64, 192)}  # skinny tiles taken only with B's rows on 128-byte lines


def _skinny_tile(case: Case, min_k: Optional[int] = None) -> Optional[dict[str, Any]]:
    """The tile of SKINNY_TILES that makes one wave, one tile a block, with the largest
    :func:`_useful_share` (K from ``min_k``, by default ONE_WAVE_MIN_K), or None."""
    if case.K < (ONE_WAVE_MIN_K if min_k is None else min_k):
        return None
    fitting = [tile for tile in SKINNY_TILES if _tiles(case, tile) <= ONE_WAVE and
               ((tile["BM"], tile["BN"]) not in LINE_ROWS_TILES or _b_rows_on_lines(case))]
    return dict(max(fitting, key=lambda tile: _useful_share(case, tile))) if fitting else None


# Where B's rows are off 128-byte lines, the skinny tile in clusters of 2 sharing B, if its M
# tiles pair up and the pairs make one wave. H200, f16, one call, x the tile alone (session
# 29): 1000x1000x4096 64x128 1.36 (336.4 TFLOP/s; cuBLAS 416.3), 200x3000x2048 64x128
# 1.15, 1500x1200x4096 128x128 1.08; against it, 640x2000x4096 (5 M tiles of 128: the last
# pair half empty) 0.89 and 300x3000x8192 (64x128: 6 M tiles in pairs, 144 blocks) 0.84.
def _skinny(case: Case, min_k: Optional[int] = None) -> Optional[dict[str, Any]]:
    """:func:`_skinny_tile`'s tile (K from ``min_k``) split along K by :func:`_sliced`, or
    unsplit in clusters of 2 sharing B where :func:`_clusters_pay`; None for batched rows
    (not measured) or where no skinny tile makes one wave."""
    tile = None if case.batched else _skinny_tile(case, min_k)
    if tile is None:
        return None
    clusters = _clusters_pay(case, tile)
    config = _sliced(case, tile, clusters)
    return {**config, "cluster": 2} if clusters and "split_k" not in config else config


def _clusters_pay(case: Case, tile: dict[str, Any]) -> bool:
    """Whether the skinny ``tile`` runs in clusters of 2 sharing B, unsplit: B's rows off
    lines, its M tiles paired, the pairs in one wave."""
    return _b_rows_off_lines(case) and _m_tiles_pair(case, tile) and \
        _tiles(case, {**tile, "cluster": 2}) <= ONE_WAVE


# Few tiles over a deep K past SKINNY_M rows, where a skinny tile under 128x128 would run in
# clusters of 2 (B's rows off lines): a larger tile split along K, each pair of blocks on one slice
# sharing B, its pairs of M tiles whole, in slices of SPLIT_CLUSTER_MIN_STEPS steps at least,
# spending as large a share of the SMs' time on the product. The first of
# SPLIT_CLUSTER_TILES that does, in its most slices. H200, f16, one call, TFLOP/s, against
# the 64x128 skinny tile in clusters then (the same tile split alone; cuBLAS):
#   1000x1000x16384  128x256 split 4 546.4, 128x128 split 2 520.3 / 417.1 (404.6; 579.8)
#   1000x1000x8192   128x128 split 2 447.2, 128x256 split 4 (32 steps) 421.7 / 392.3
#                    (369.7; 499.0)
# and not at 900x1200x4096 (128x160 split 2, 32-step slices: 0.95; benchmarks/NOTES.md,
# session 33).
SPLIT_CLUSTER_TILES = (dict(BM=128, BN=256, BK=64, stages=4),
                       dict(BM=128, BN=128, BK=64, stages=6))
SPLIT_CLUSTER_MIN_STEPS = 64


def _split_in_clusters(case: Case, skinny: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The first tile of SPLIT_CLUSTER_TILES whose M tiles pair up, in the most slices
    (SPLIT_CLUSTER_MIN_STEPS steps at least, the pairs in one wave) whose useful share is
    the ``skinny`` configuration's at least; or None."""
    share = _useful_share(case, skinny)
    for tile in SPLIT_CLUSTER_TILES:
        if not _m_tiles_pair(case, tile):
            continue
        paired = dict(tile, cluster=2)  # whole pairs: as many tiles as alone
        for splits in range(_most_slices(case, tile, SPLIT_CLUSTER_MIN_STEPS), 1, -1):
            if _useful_share(case, paired, splits) >= share * (1 - 1e-9):
                return dict(paired, split_k=splits)
    return None


# A tall tile for few tiles over a deep K past the skinny products' rows: 192 rows of the
# output in three consumer warpgroups, split along K to fill the wave. B is read once per
# row of tiles, so covering M in fewer, fuller rows of tiles than 64- or 128-row ones
# reads B fewer times. Taken where its rows of tiles cover M (TALL_M_FILL of their rows
# used), K from TALL_FIT_MIN_K; or where two of them cover M and B is large
# (TALL_B_ELEMENTS), K from TALL_TWO_ROWS_MIN_K, unless the skinny tile is wider than 128
# columns; in both, in TALL_MAX_SPLIT slices at most, filling TALL_WAVE_FILL of a wave at
# least. H200, f16, one call, x the tuned configuration before (x cuBLAS;
# benchmarks/NOTES.md, session 31):
#   covering M   768x1000x8192 split 4 1.15 (1.05), 384x2000x8192 split 4 1.14 (1.10),
#                768x2000x8192 split 2 1.01 (0.85)
#   two rows     300x3000x8192 split 2 1.20 (0.72; 192x192 split 4 1.32), 300x3000x16384
#                1.48 (0.90), 300x4104x8192 1.17 (0.79), 300x2048x11008 split 4 1.06
#                (0.94), 384x4104x4096 split 2 1.07 (1.05), 384x3000x4096 1.02 (1.00)
#   and in an earlier call 300x2000x8192 split 4 1.09, 300x3000x4096 split 2 1.07,
#   300x4000x4096 1.04; in a later one, on shapes not fitted to, 384x4104x11008 1.43,
#   384x2000x16384 1.38, 768x1000x16384 1.38, 300x3000x11008 1.36, 300x4104x16384 1.34,
#   300x2000x16384 1.32, 384x3000x8192 1.18, 300x4104x4096 1.10, 768x2000x11008 1.06, but
#   300x2048x8192 0.97.
# Against it: in 8 slices (384x1000x8192 0.86, 300x1000x16384 1.01); the skinny 64x192 tile's
# one wave (300x4096x4096 0.76); 600x2000x8192 (four rows of 192, 78% used) 0.90,
# 640x2000x4096 0.90, 500x3000x4096 0.75, 400x2500x8192 0.85. 256x128 in 128-row warpgroups
# split along K won only at N = 1000 (1000x1000x16384 split 4 1.19, 1024x1000x11008 1.05)
# and lost elsewhere (1000x1024x8192 0.77, 500x4096x8192 0.82, 500x2000x8192 0.90,
# 1000x2048x16384 0.89, 512x1000x8192 split 8 0.77): the autotuner tries it
# (_split_candidates), the rule does not.
TALL_TILE = dict(BM=192, BN=128, BK=64, stages=4)
TALL_M_FILL = 0.95
TALL_FIT_MIN_K = 8192
TALL_B_ELEMENTS = 12_000_000
TALL_TWO_ROWS_MIN_K = 4096
TALL_MAX_SPLIT = 4
TALL_WAVE_FILL = 0.7
TALL_MAX_M = 1024  # measured from 300 to 768 rows


def _tall(case: Case) -> Optional[dict[str, Any]]:
    """TALL_TILE split along K where it pays, as measured: M past SKINNY_M up to
    TALL_MAX_M, the 128x256 tiles in one wave, and its rows of tiles covering M
    (TALL_M_FILL) with K from TALL_FIT_MIN_K, or two of them covering M with B of
    TALL_B_ELEMENTS at least and no skinny tile wider than 128 columns, K from
    TALL_TWO_ROWS_MIN_K; in the most slices (:func:`_most_slices`, SHORT_SLICE_STEPS steps
    at least) up to TALL_MAX_SPLIT, the blocks filling TALL_WAVE_FILL of a wave; else
    None."""
    if case.batched or not SKINNY_M < case.M <= TALL_MAX_M or _large_tiles(case) > ONE_WAVE:
        return None
    rows = -(-case.M // TALL_TILE["BM"])
    covers = case.K >= TALL_FIT_MIN_K and case.M >= TALL_M_FILL * rows * TALL_TILE["BM"]
    two_rows = case.K >= TALL_TWO_ROWS_MIN_K and rows <= 2 and \
        case.K * case.N >= TALL_B_ELEMENTS and \
        (_skinny_tile(case) or TALL_TILE)["BN"] <= TALL_TILE["BN"]
    splits = min(TALL_MAX_SPLIT, _most_slices(case, TALL_TILE, SHORT_SLICE_STEPS))
    if not (covers or two_rows) or splits < 2 or \
            _tiles(case, TALL_TILE) * splits < TALL_WAVE_FILL * ONE_WAVE:
        return None
    return dict(TALL_TILE, split_k=splits)


# The product swapped (passes/swap_product.py, Options.swap_product "always"), where the tall
# tile would be taken, and unsplit for 513-1024 rows: each block a BN x BM tile of C.T, its
# BM rows of C along wgmma's n, any multiple of 8 up to 256, so that M is covered with less
# than 8 rows of padding a tile (M = 300: two tiles of 152 rows, not two of 192). BN, C.T's
# rows (wgmma's m), 128 on two consumer warpgroups or 64 on one. C.T's tile is stored
# transposed by each thread (st.global: no TMA store of a transposed view). H200, f16, one
# call per M, TFLOP/s, the rule's choice / the tall tile it replaces (cuBLAS;
# benchmarks/NOTES.md, session 32):
#   K 4096, 64 on one warpgroup, one wave unsplit: 260x3000 271.3 / 208.2 (332.2),
#     260x4104 353.2 / 233.5 (343.2), 300x3000 302.8 / 262.4 (366.9), 300x4104 393.0 /
#     294.3 (382.0); 128 split 2 ran 0.92-0.98 of it, 128 unsplit (half a wave) 0.80-0.84
#   K 8192, 128 split 2: 260x3000 360.1 / 237.4 (402.6), 260x4104 408.9 / 263.6 (397.9),
#     300x3000 397.2 / 318.9 (443.9), 300x4104 454.8 / 345.4 (437.8); 64 unsplit ran
#     0.87-0.96 of it
#   in a later call, on shapes not fitted to: 257x4104x4096 348.0 / 228.2 (334.2),
#     280x4104x11008 473.4 / 335.3 (558.7), 300x3000x16384 484.3 / 379.4 (449.3),
#     320x2000x8192 (64 split 2) 400.6 / 340.6 (383.7), 300x2048x11008 (split 4) 423.6 /
#     376.4 (397.7), 320x3000x8192 418.7 / 379.6 (334.4); bf16 300x3000x8192 400.0 / 333.2
#     (446.1), 300x4104x4096 392.0 / 290.8 (378.4), 260x3000x4096 270.9 / 209.1 (331.7)
# Past SWAP_UNSPLIT_MIN_M rows too, up to SWAP_UNSPLIT_MAX_M, where the swapped tiles fill
# the wave unsplit (128 columns on two warpgroups, in four to six rows of tiles), against
# the tuned configuration before (128x192, 128x128, 128x256 or persistent 128x128; cuBLAS):
#   600x3000x4096 465.9 / 406.3 (521.3), 600x3000x8192 543.4 / 431.9 (582.6), 600x4104x4096
#   514.6 / 462.5 (636.7), 600x4104x8192 536.5 / 476.8 (717.1), 700x3000x4096 482.2 / 448.0
#   (561.2), 700x3000x8192 558.3 / 482.4 (621.5), 700x4104x8192 621.7 / 501.7 (735.4),
#   800x3000x4096 543.2 / 440.4 (604.7), 800x3000x8192 571.5 / 469.0 (683.0), 800x4104x4096
#   626.3 / 478.9 (596.9), 800x4104x8192 713.2 / 503.7 (683.3), 900x3000x4096 568.4 / 441.7
#   (614.9), 900x3000x8192 653.3 / 476.4 (684.7), 900x4104x8192 703.0 / 401.7 (737.9),
#   1000x3000x4096 588.1 / 507.9 (637.9), 1000x3000x8192 671.0 / 536.3 (703.9),
#   1000x4104x4096 637.9 / 470.1 (690.3), 1000x4104x8192 706.5 / 487.1 (745.1)
# but at 450-500 rows, where the tuning runs 128x128 tiles or 256x64 strips in clusters of 2
# sharing B: 450x3000x4096 389.6 / 391.8, 450x3000x8192 (split 2) 434.4 / 454.7,
# 500x3000x8192 (256x128 split 2) 445.2 / 546.6, 500x4104x8192 560.0 / 580.6; only
# 450x4104x4096 won (492.0 / 389.8). In a later call, on shapes not fitted to, f16:
# 550x3000x8192 509.2 / 371.7 (538.8), 513x4104x4096 440.7 / 358.1 (564.4), 600x4096x8192
# 692.9 / 609.9 (719.4), 600x5120x4096 595.3 / 555.4 (654.3), 800x4096x4096 631.7 / 580.9
# (640.8), 700x5120x8192 671.2 / 660.8 (705.5), 900x3000x16384 669.4 / 498.6 (685.7); bf16
# 800x3000x8192 557.8 / 467.4 (695.0), 700x3000x4096 480.4 / 459.5 (559.4); but where the
# swapped tiles compute as many rows as 128-row ones (SWAP_UNSPLIT_FEWER_THAN), now left
# alone: 1000x4096x8192 (4 x 256 rows) 719.9 / 742.1, 1024x3000x4096 581.3 / 644.6,
# 1024x4104x8192 713.7 / 697.0, 1000x4104x4096 (bf16) 648.5 / 470.3.
SWAP_UNSPLIT_MIN_M = 512
SWAP_UNSPLIT_MAX_M = 1024
SWAP_UNSPLIT_MIN_K = 4096  # measured at 4096 to 16384
SWAP_UNSPLIT_FEWER_THAN = 128
# Elsewhere it did not pay, or was not measured: under the wave the tall tile's rows fill
# (300x1000x4096, 48 blocks: 108.9 against 132.0 for 128x128 split 4), 450 rows where the
# tuning runs 128x128 in clusters of 2 (450x3000x8192 433.9 / 466.4; 900x1200x4096 0.87x),
# but 450x4104x4096 1.27x, 800x3000x4096 (200x128) 1.11x, 1000x1000x8192 (200x128 split
# 3) 1.07x, taken by no rule yet.
SWAP_TILES = (dict(BN=128, BK=64, stages=4), dict(BN=64, BK=64, stages=6))
SWAP_MAX_ROWS = 256
SWAP_MAX_SPLIT = 4
SWAP_MIN_SLICE_STEPS = 40  # K 4096 (64 steps) unsplit, as measured; 8192 in two or three
# The one-warpgroup tile's rate against two warpgroups' on equal shares of the wave (0.87-0.96
# measured at K 8192); it decides ties only.
SWAP_ONE_WARPGROUP_RATE = 0.95
# The most of the tall tiles' rows the swapped ones may compute: M a multiple of 192 (384,
# 768) leaves them nothing to save.
SWAP_MAX_ROWS_SHARE = 0.9
# Unsplit in clusters of 2 along M, sharing B's tile (the swapped product's A), against
# the same tile alone; it decides against split-K and the other tiles. H200, f16, one call,
# TFLOP/s, clusters / the tuned configuration then (cuBLAS): same tile 600x4104x8192
# (152x128) 678.6 / 542.0 (709.9), 300x3000x4096 (152x64) 359.4 / 303.2 (367.5),
# 700x4104x8192 (176x128) 694.5 / 689.3 (727.4), 600x3000x8192 (152x128) 538.0 / 534.9
# (584.0); 152x64 in six stages against 128 columns split in two: 300x4104x16384 650.9 /
# 521.0 (633.9), 300x3000x8192 438.9 / 397.9 (441.8), 260x4104x8192 (136x64) 503.1 / 413.6
# (399.1). Where the pairs round an odd count of M tiles up past the wave, they lost:
# 800x3000x4096 (160x128, 144 blocks) 313.3 / 554.5 (benchmarks/NOTES.md, session 33).
SWAP_CLUSTER_RATE = 1.15


def _swapped(case: Case, tall: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
    """The swapped configuration of :func:`_swap_configs` (slices of SWAP_MIN_SLICE_STEPS
    steps at least) computing SWAP_MAX_ROWS_SHARE of the ``tall`` tiles' rows at most (with
    no ``tall`` tile: 128 columns unsplit, fewer rows than tiles of SWAP_UNSPLIT_FEWER_THAN
    rows would compute), whose blocks (TALL_WAVE_FILL of one wave at least) spend the
    largest share of the SMs' time on the product (a one-warpgroup tile's share at
    SWAP_ONE_WARPGROUP_RATE, a cluster's at SWAP_CLUSTER_RATE); else None."""
    # The most rows of C the swapped tiles may compute.
    most_rows = SWAP_MAX_ROWS_SHARE * -(-case.M // tall["BM"]) * tall["BM"] \
        if tall is not None else -(-case.M // SWAP_UNSPLIT_FEWER_THAN) * \
        SWAP_UNSPLIT_FEWER_THAN - 1
    best, best_score = None, 0.0
    for config in _swap_configs(case, SWAP_MIN_SLICE_STEPS):
        splits = config.get("split_k", 1)
        if tall is None and (splits > 1 or config["BN"] != 128):
            continue
        rate = (1.0 if config["BN"] == 128 else SWAP_ONE_WARPGROUP_RATE) \
            * (SWAP_CLUSTER_RATE if config.get("cluster", 1) > 1 else 1.0)
        score = _useful_share(case, config, splits) * rate
        if -(-case.M // config["BM"]) * config["BM"] <= most_rows and \
                _tiles(case, config) * splits >= TALL_WAVE_FILL * ONE_WAVE and \
                score > best_score:
            best, best_score = config, score
    return best


def _swap_configs(case: Case, min_steps: int) -> Iterator[dict[str, Any]]:
    """The swapped tiles of SWAP_TILES, M in the fewest tiles of at most SWAP_MAX_ROWS rows
    (a multiple of 8) or one more, in up to SWAP_MAX_SPLIT slices of ``min_steps`` steps at
    least, or unsplit in clusters of 2 along M (an even count of M tiles: a pair past M
    would idle its SM), the blocks in one wave."""
    fewest = -(-case.M // SWAP_MAX_ROWS)
    for count in (fewest, fewest + 1):
        rows = (-(-case.M // count) + 7) // 8 * 8
        for tile in SWAP_TILES:
            config = dict(BM=rows, **tile, swap_product="always")
            steps = -(-case.K // tile["BK"])
            for splits in range(1, SWAP_MAX_SPLIT + 1):
                if _tiles(case, config) * splits > ONE_WAVE or \
                        splits > 1 and steps // splits < min_steps:
                    break
                yield dict(config, split_k=splits) if splits > 1 else config
            paired = dict(config, cluster=2)
            if _m_tiles_pair(case, config) and _tiles(case, paired) <= ONE_WAVE:
                yield paired


# 128x192 tiles (two warpgroups of m64n192, four stages; B's rows, 384 bytes, are whole 128-byte
# lines, where 128x144 or 192x176 rows were 32-byte slabs then and ran at 0.61-0.91 of the tuned
# tile; padded, 192x176 is a CLUSTER_TILES tile now) where they fill their rounds or their one wave
# better: 6144x2112 is 48 x 11 = 528 of them, 4 whole rounds. H200, one call, persistent raster 16,
# f16 TFLOP/s: 724.0 against 654.2 for 192x192 (3 rounds, the last 67% full) and 571.8 for 128x256
# (cuBLAS 705.9); over their own rounds' fill they ran at 0.95 (6144x2112x2048), 0.98 (5120^2 x
# 4096) and 1.01 (4096^3) of a 128x256 tile's rate. The rule's choices, one call, x the
# configuration before (x cuBLAS), f16 / bf16 (benchmarks/NOTES.md, session 25):
#   one wave   1024x3072x4096 1.19 / 1.22 (1.00 / 1.00), 1536x2048x4096 1.19 / 1.23 (1.00),
#              2048x1536x2048 1.18 / 1.19 (1.00), 1536x2112x4096 1.19 / 1.22 (1.01),
#              1024x2056x4096 1.25 / 1.25 (0.77 / 0.75)
#   rounds     1536x4096x4096 1.28 / 1.29 (1.01), 2048x3072x4096 1.29 (1.01), 1024x6144x4096
#              1.29 / 1.30 (1.02), 3072x2112x4096 1.29 / 1.30 (1.01), 1536x4104x4096 1.13
#              (0.78 / 0.76), 6144x2112x2048 1.11 / 1.12 (1.02 / 1.03)
#   clusters   3072x2056x4096 1.27 (1.00), 8200x4104x4096 1.05 (0.96 / 0.97), 6144x2056x4096
#              1.08 / 1.09 (1.00 / 1.01)
WIDE_ROW_TILE = dict(BM=128, BN=192, BK=64, stages=4)


# B's rows 16-byte aligned but not whole 128-byte lines apart (N = 4104 f16: rows 8208 bytes
# apart): every 128-byte row of a B box straddles two lines. ncu, H200, 128x128 persistent at
# 4096x4104x4096, locked clocks: 27.5M L2 read requests in place against 11.7M with B
# repacked, 278.3 against 237.7 us (and the repacking 19.3 us more). A cluster of 2 along M
# multicasts each B box to both blocks: 15.9M requests, 238.0 us, no repacking
# (packing.PITCH_MIN_ROWS doubles for a multicast B). H200, f16, one call, TFLOP/s: the
# tuned configuration before (128x256, or 128x128 persistent by the last-wave rule, B
# repacked from 4096 rows) / cluster 2 persistent raster 16 with 128x256, 256x128 in
# 128-row warpgroups, 128x128 (cuBLAS):
#   4096x4104x4096  623.2 / 608.9  675.7  677.5 (728.9)
#   2048x2056x2048  365.4 / 361.1  353.2  440.3 (550.5)
#   3072x3080x3072  484.6 / 543.1  515.1  600.9 (716.1)
#   6144x6152x4096  608.1 / 661.1  675.5  625.6 (703.5)
#   8192x8200x8192  651.5 / 662.4 (B repacked)  648.9  589.6 (651.1)
# The tile: the best rate (TILE_RATES, against 128x256's, fitted to those rows) times the
# share of its rounds the tiles fill, the M tiles counted in whole clusters; it picks the best
# or a tile within 1% of it on each row above (benchmarks/NOTES.md, session 19).
MULTICAST_TILES = (
    dict(BM=128, BN=256, BK=64, stages=3),
    dict(BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128),
    dict(BM=128, BN=128, BK=64, stages=4),
    # 128x192 (session 25, one call, f16 TFLOP/s, x the tile it replaces): 1536x3080x4096
    # 552.0 against 407.4 for 128x128 persistent without a cluster (M under the rule's
    # 2048 then), 4608x3080x4096 665.7 / 659.2 (128x128), 2048x6152x4096 724.0 / 688.6 and
    # 4096x6152x4096 724.7 / 678.4 (256x128), 5120x6152x4096 721.1 / 710.6 (192x192).
    WIDE_ROW_TILE,
)
MULTICAST = dict(persistent=True, raster_group=16, cluster=2)
# M and K at least these: the measured rows'. M from 1024 (session 25, H200, f16, one call,
# TFLOP/s, the cluster against the same tile without): 1536x4104x4096 128x192 persistent
# 710.6 / 547.8 (cuBLAS 709.0), 1536x2056x4096 128x192 one tile a block 656.7 / 527.7
# (654.6), 1024x2056x4096 473.2 / 465.4 (604.9). Shallower K unmeasured.
MULTICAST_MIN_M = 1024
MULTICAST_MIN_K = 2048


def _rows_aligned(case: Case) -> bool:
    """Whether A's rows (K elements) and B's (N elements) are whole 16-byte multiples, so
    that TMA reads them in place."""
    from tilec.launch.packing import VECTOR_BYTES
    itemsize = DType.parse(case.dtype).bytes
    return case.N * itemsize % VECTOR_BYTES == 0 and case.K * itemsize % VECTOR_BYTES == 0


def _b_rows_on_lines(case: Case) -> bool:
    """Whether B's rows (N elements) are whole 128-byte lines apart."""
    from tilec.launch.packing import ROW_ALIGN_BYTES
    return case.N * DType.parse(case.dtype).bytes % ROW_ALIGN_BYTES == 0


def _b_rows_off_lines(case: Case) -> bool:
    """Whether every row is 16-byte aligned (TMA reads them in place) but B's are off
    128-byte lines, so that a box of B straddles lines unless a cluster shares it."""
    return _rows_aligned(case) and not _b_rows_on_lines(case)


def _b_shared_in_clusters(case: Case) -> bool:
    """Whether a cluster of 2 should share B: :func:`_b_rows_off_lines`, M at least
    MULTICAST_MIN_M and K at least MULTICAST_MIN_K."""
    return _b_rows_off_lines(case) and case.M >= MULTICAST_MIN_M and \
        case.K >= MULTICAST_MIN_K


def _multicast_for_rows_off_lines(case: Case, config: dict[str, Any]) -> Optional[dict]:
    """A cluster-of-2 persistent configuration where B's rows are 16-byte aligned but off
    128-byte lines, the wide tiles make more than one wave and M and K are deep enough
    (:func:`_b_shared_in_clusters`), or None."""
    if case.batched or (config["BM"], config["BN"]) != (128, 256) or \
            not _b_shared_in_clusters(case) or _large_tiles(case) <= ONE_WAVE:
        return None

    def speed(tile: dict[str, Any]) -> float:
        return TILE_RATES[tile["BM"], tile["BN"]] * \
            Waves(_tiles(case, {**tile, **MULTICAST}), ONE_WAVE).fill

    return {**max(MULTICAST_TILES, key=speed), **MULTICAST}


# Half-width tiles where the 128x256 tiles' last wave would run nearly empty: 4096x4104x4096
# has 544 such tiles, 4 full waves of 132 and 16 tiles in a fifth, so the whole GPU waits
# on 12% of it; 128x128 tiles, 1056 of them, fill 8 waves. H200, f16, one call (TFLOP/s;
# benchmarks/NOTES.md, session 18): 4096x4104x4096 128x256 one tile a block 558.8,
# persistent 573.7, 128x128 persistent 616.9 (cuBLAS 729.9); 2048x2056x2048 (144 tiles: 2
# waves, the second 9% full) 329.4 / 327.0 / 367.1 (550.0). Where the last wave is fuller
# the wide tiles keep their lead: 3072x3080x3072 (312 tiles, the third wave 36% full) 484.2
# against 459.6, and 4104x4096x4096 (528 tiles: 4 whole waves) 745.4 against 676.6 -- a
# 128x128 tile runs at 0.91-0.95 of a 128x256 one's rate when both fill their waves
# (NARROW_TILE_RATE). Measured only with every row 16-byte aligned, so that TMA reads the
# operands in place (or repacked) and stores C.
NARROW_TILE = dict(BM=128, BN=128, BK=64, stages=4, raster_group=16, persistent=True)
NARROW_TILE_RATE = 0.93
LAST_WAVE_SHARE = 0.25  # the wide tiles' last wave holds at most this share of the SMs
NARROW_TILE_GAIN = 1.1  # and the narrow tiles' waves promise at least this speed-up


def _narrower_for_the_last_wave(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """``config``, or NARROW_TILE where ``config``'s 128x256 tiles leave their last wave
    nearly empty (at most LAST_WAVE_SHARE of the SMs) and 128x128 tiles, at
    NARROW_TILE_RATE of their rate, would take NARROW_TILE_GAIN less time over their own
    waves."""
    if case.batched or (config["BM"], config["BN"]) != (128, 256) or not _rows_aligned(case):
        return config
    wide = Waves(_tiles(case, config), ONE_WAVE)
    if wide.count < 2 or wide.last > LAST_WAVE_SHARE * ONE_WAVE:
        return config
    # Time in waves of 128x256 tiles: a narrow wave takes half of a wide one, at its rate.
    narrow = Waves(_tiles(case, NARROW_TILE), ONE_WAVE).count / 2 / NARROW_TILE_RATE
    return dict(NARROW_TILE) if wide.count >= NARROW_TILE_GAIN * narrow else config



# 192x192 tiles where they fill their rounds and the chosen tile does not: 2048x2056x2048 is
# 144 tiles of 128x256 (a second wave 9% full) or 272 of 128x128 (three rounds, the last 6%
# full), but 121 of 192x192, one wave. H200, f16, one call each (TFLOP/s; benchmarks/NOTES.md,
# session 20), the tuned tile before / 192x192 (cuBLAS):
#   2048x2056x2048   439.6 / 542.8 one tile a block, 530.0 persistent, 533.1 in clusters
#                    (547.2; cuBLAS's own tile there is 192x192)
#   2112x2112x2048   460.8 / 594.7, 591.7, 576.7 (591.7)
#   6144x6152x4096   670.5 / 685.5 persistent, 727.0 persistent in clusters (712.6): 1056
#                    tiles, 8 whole rounds
#   2304x4224x4096   577.8 / 756.8, 756.3 (755.4): 264 tiles, 2 whole rounds
#   3456x4224x4096   649.1 / 766.1, 766.6 (760.0): 396 tiles, 3 whole rounds
#   and the rule's own choices, x the tile before (x cuBLAS), f16: 5120x5120x4096 1.02
#   (0.94), 3072x3072x2048 1.12 (1.00), 8192x3080x4096 1.02 (0.90), 4104x4104x4096 1.10
#   (0.92), 6144x2112x2048 1.19 (0.92), 4608x4096x8192 1.09 (1.01)
# and ten more one-wave shapes 1.10-1.78x the tile before, f16 and bf16. Where 192x192 fills
# its rounds no better it loses: 2048^3 563.3 against 604.6 (128 tiles of 128x256),
# 3072x3080x3072 476.1-497.0 against 595.6, 4096x4104x4096 598.3-662.8 against 667.2. At
# one wave each, a 192x192 tile ran at 1.04 of a 128x256 one's rate a FLOP (TILE_RATES).
# Scored by the share of the SMs' time spent on the product's own elements: edge tiles'
# padding and empty SMs in the last round both count against a tile.
WIDE_SQUARE_TILE = dict(BM=192, BN=192, BK=64, stages=3)
# 128-row tiles whose B rows are not whole 128-byte lines (BN 144 to 240), B in 128-byte
# slabs the last padded (tma_boxes.operand_tma_layout), in persistent clusters of 2 sharing
# B, where N is whole tiles of them and they fill a round the others leave emptier:
# 1024x2304 is 128 tiles of 128x144 (97% of a wave) against 96 of 128x192. H200, f16, one
# call each, TFLOP/s, against the tuned tile (cuBLAS; benchmarks/NOTES.md, session 26):
#   128x144  1024x2304x8192  675.6 / 594.2 128x192 (670.7); alone 570.3, one tile a block
#            1024x2304x4096  604.6 / 538.8 128x192 (636.4)
#            2048x1152x8192  695.4 / 598.3 128x192 (673.7)
#            2048x1152x4096  598.6 / 536.9 128x192 (596.2); bf16 605.2 / 539.7 (605.2)
#            1024x4608x4096  641.2 / 546.1 128x128 persistent, 3 rounds the last 18% (666.6)
#            1024x4608x8192  671.3 / 564.3 128x128 persistent (699.3); bf16 670.2 / 574.0
#   128x160  1024x2560x8192  709.4 / 642.8 128x192, 85% of a wave (705.7)
#            2048x1280x4096  633.1 / 584.1 128x192 (649.7)
#            4096x1280x4096  702.7 / 584.3 128x128 persistent, 3 rounds the last 42% (712.8)
#            2048x2560x4096  701.2 / 594.1 128x128 persistent (712.4)
#            1024x5120x4096  700.5 / 597.9 128x128 persistent (711.7)
#            1280x3840x8192  683.1 / 582.9 128x128 persistent (716.8)
#   128x176  1024x2816x4096  637.5 / 626.7 128x192, 91% (624.0)
#   128x208  1024x3328x4096  641.0 / 603.7 128x256, 79% (602.9)
#   128x224  1024x3584x4096  671.1 / 636.1 128x256, 85% (640.9)
#   128x240  1024x3840x4096  667.5 / 665.3 128x256, 91% (673.3)
# With a ragged last N tile they lose or barely win (the edge tiles cost a whole tile's
# time for a part of its columns): 128x144 at 1536x1536x4096 520.2 / 537.8 (N 10.7 tiles),
# 1536x1536x8192 568.7 / 600.4, 2048x1024x4096 454.2 / 480.6 (7.1 tiles), 1024x2048x4096
# 493.9 / 481.5 (14.2 tiles); 128x160 at 1024x2816x4096 402.9 / 626.7 (17.6 tiles). At a
# fuller round: 2048x2304x4096 609.5 / 708.9 (192x192's one full wave); with B's rows off
# 128-byte lines, where a padded box reads across more lines: 1536x3080x4096 530.5 / 541.4
# (128x192, 2 rounds the last 55% full), 3072x3080x3072 569.8 / 600.3, 4104x4104x4096
# 536.8 / 667.1. So: whole N tiles, B's rows on lines, K from PADDED_TILE_MIN_K (measured
# 4096 and 8192), at the TILE_RATES fitted to the rows above (0.81-0.94 of a 128x256 tile's
# rate, the less padding the faster), a little under.
PADDED_TILES = tuple(dict(BM=128, BN=bn, BK=64, stages=4 if bn < 192 else 3)
                     for bn in (144, 160, 176, 208, 224, 240))
PADDED_TILE_MIN_K = 4096
# 256-row tiles of 144 to 176 columns in 128-row warpgroups (two m64 strips of accumulators
# a thread, up to 176 under setmaxnreg's 232 registers; C's slabs go out a strip at a time
# beside the ring), in persistent clusters of 2 sharing B where B's rows are off 128-byte
# lines: they fill whole rounds where the 128-row tiles leave the last one part empty, as
# cuBLAS's 288x128 (its M is our N) does. H200, f16, one call, TFLOP/s, against the tuned
# tile (cuBLAS; benchmarks/NOTES.md, session 27):
#   256x144  1536x3080x4096  678.1 / 551.3 128x192, 2 rounds the last 55% full (710.7):
#            132 tiles, one whole wave
#            1536x3168x4096  714.3 / 582.4 128x192 (741.9)
#            3072x3080x3072  653.0 / 606.0 128x128 persistent, 5 rounds (722.0): 264 tiles
#   256x160  1536x3080x4096  649.4 (persistent, no cluster), 1536x3168x4096 697.1
#   256x176  1536x3080x4096  608.6; 4096^3 728.3 / 764.6 128x256 (767.0)
# Where they fill no better they lose: 4104x4104x4096 545.6 / 678.3 192x192 (731.2),
# 1024x2056x4096 322.0 / 474.4 128x192 (612.5). TILE_RATES fitted to the rows above, a
# little under (0.9, 0.95, 0.98). And one tile a block where they make one wave, as
# ONE_WAVE_TILES (B's rows on lines; session 29, one call, x the tuned configuration before,
# TFLOP/s, cuBLAS): 256x160 at 512x10240x8192 740.5, 1.22 x 128x128 persistent (743.0),
# 512x10240x4096 1.23 (711.3), 256x20480x4096 1.27 (702.3), 768x6400x4096 1.23 (679.6),
# 1024x5120x8192 1.05 x 128x160 in clusters (753.8), 1024x5120x4096 1.02 (713.5).
STRIP_TILES = tuple(dict(BM=256, BN=bn, BK=64, stages=3, warpgroup_rows=128)
                    for bn in (144, 160, 176))
# Tiles taken in persistent clusters of 2 wherever they fill the rounds better (B's rows on
# 128-byte lines or off them alike), K from MULTICAST_MIN_K: 192x176 in four stages (B's
# rows padded to 192 in the ring; cuBLAS's own tile at 4104^2, whose M is our N: 528 tiles,
# 4 whole rounds, against 484 of 192x192, the last round 67% full), and 256x64 in 128-row
# warpgroups (cuBLAS's 64x256 in 1x2 clusters, in its column-major view) where the wider
# tiles leave a third of their one wave empty. H200, f16, one call each, TFLOP/s, x the
# tuned tile before (x cuBLAS now; benchmarks/NOTES.md, session 28):
#   192x176  4104x4104x4096 690.0 1.03 (0.95), 4104x4224x4096 1.04 (0.96), 4104x2056x4096
#            1.04 (0.95), 4096x3080x4096 1.03 (0.99), 4104x3136x2048 1.03 (1.03),
#            4104x6152x4096 1.03 (0.94), 8192x2056x4096 1.02 (0.98), 4096x3168x8192 1.04
#            (1.00), 4104x3000x4096 1.02 (0.94), 8192x3136x4096 1.03 (0.97); three stages
#            0.98-1.00 of four; not taken at 4096x4224x4096 (0.98 of 128x128's 8 rounds).
#   256x64   1024x2056x4096 533.6 1.12 (0.88), 512x4104x4096 1.10, 1024x2100x4096 1.14,
#            2048x1024x4096 1.10, 2048x1000x2048 1.11, 1024x2056x8192 1.12, 512x4096x2048
#            1.09 (0.85-0.87 where cuBLAS is not itself slow); five stages 0.99-1.20 of four;
#            where it fills no better it loses (4104^2: 0.59).
CLUSTER_TILES = (dict(BM=192, BN=176, BK=64, stages=4),
                 dict(BM=256, BN=64, BK=64, stages=4, warpgroup_rows=128))
# Tiles taken only where they make one wave, one tile a block, B's rows on 128-byte lines:
# 128x128 in six stages where it fills the wave better, unsplit, than the wide tiles do split
# along K (the slices' meeting costs them 17-20%). H200, f16, one call, TFLOP/s, x the tuned
# configuration before (x cuBLAS; benchmarks/NOTES.md, session 28): 512x4096x4096 (128
# tiles) 622.8, 1.19 x 256x64 in clusters and 1.29 x 128x192 (0.99); 512x4096x11008 732.0,
# 1.12 x 128x256 split 2 (0.99); 256x8192x8192 703.6, 1.17 x 128x256 split 2 (1.00); four
# stages 0.94-1.00 of six. Then on shapes it was not fitted to: 2048x1024x8192 1.16 x
# 128x256 split 2 (0.99), 1024x2048x4096 1.17 x 256x64 in clusters (0.99), 2048x1024x2048
# 1.13 (0.99), 512x4096x1024 1.18 x 128x192 (1.00), 1024x2048x1024 1.19 (0.99),
# 192x8192x4096 1.04 (0.81). B's rows off lines, one tile a block alone, it lost:
# 2048x1000x4096 0.86 x 256x64 in clusters. Measured from K = ONE_WAVE_MIN_K.
ONE_WAVE_TILES = (dict(BM=128, BN=128, BK=64, stages=6),)
ONE_WAVE_MIN_K = 1024
# The tiles that may fill the rounds better than the chosen one.
WHOLE_ROUND_TILES = (WIDE_SQUARE_TILE, WIDE_ROW_TILE, *PADDED_TILES, *STRIP_TILES,
                     *CLUSTER_TILES, *ONE_WAVE_TILES)
# Over more than one wave: persistent blocks walking raster groups, in clusters of 2 sharing B
# where B's rows are off 128-byte lines (as _multicast_for_rows_off_lines).
WHOLE_ROUNDS = dict(persistent=True, raster_group=16)
TILE_RATES = {(128, 256): 1.0, (192, 192): 1.04, (256, 128): 0.97,
              (128, 128): NARROW_TILE_RATE, (128, 192): 0.97, (128, 144): 0.8,
              (128, 160): 0.86, (128, 176): 0.88, (128, 208): 0.85, (128, 224): 0.9,
              (128, 240): 0.92, (256, 144): 0.89, (256, 160): 0.92, (256, 176): 0.95,
              (192, 176): 0.97, (256, 64): 0.7}
WHOLE_ROUND_GAIN = 1.05  # a WHOLE_ROUND_TILES tile taken where it scores this over the chosen
# Over more than one wave, only where K is at least this deep (measured at 2048 and deeper;
# shallower K, whose tiles' fixed costs weigh more, kept the tuned shallow tiles unmeasured).
WHOLE_ROUND_MIN_K = 2048


def _useful_share(case: Case, config: dict[str, Any], splits: int = 1) -> float:
    """The share of the SMs' time ``config``'s tiles, each cut into ``splits`` slices along
    K, spend on the product's elements: one round of ONE_WAVE blocks at a time."""
    return case.M * case.N * splits / (Waves(_tiles(case, config) * splits, ONE_WAVE).count
                                       * ONE_WAVE * config["BM"] * config["BN"])


# The tiles that run their one wave in clusters of 2 where B's rows are off 128-byte lines.
# H200, f16, one call each, TFLOP/s, one tile a block in clusters / alone (cuBLAS): 128x192
# at 1536x2056x4096 656.7 / 527.7 (654.6), 1024x2056x4096 473.2 / 465.4 (604.9); but
# 192x192 at 2048x2056x2048 536.8 / 542.2 (545.5), 2304x2056x4096 690.6 / 687.1 (693.4)
# (benchmarks/NOTES.md, session 25).
ONE_WAVE_CLUSTER_TILES = {(128, 192)}


def _scheduled(case: Case, tile: dict[str, Any]) -> Optional[dict[str, Any]]:
    """``tile`` with its schedule for the case: PADDED_TILES in MULTICAST where they pay
    (:func:`_padded_tile_pays`), STRIP_TILES in MULTICAST where B is shared in clusters;
    CLUSTER_TILES in MULTICAST (over more than one wave only with every row 16-byte
    aligned); ONE_WAVE_TILES and the other STRIP_TILES one tile a block where they make one
    wave, B's rows on lines and K from ONE_WAVE_MIN_K; one tile a block in one wave (in clusters of
    2 where B's rows are off 128-byte lines, for ONE_WAVE_CLUSTER_TILES); over more
    (measured only with every row 16-byte aligned and K from WHOLE_ROUND_MIN_K),
    WHOLE_ROUNDS, or MULTICAST where B's rows are off 128-byte lines; else None."""
    if tile in PADDED_TILES:
        return {**tile, **MULTICAST} if _padded_tile_pays(case, tile) else None
    if tile in STRIP_TILES and _b_shared_in_clusters(case):
        return {**tile, **MULTICAST}
    if tile in STRIP_TILES or tile in ONE_WAVE_TILES:
        return dict(tile) if _tiles(case, tile) <= ONE_WAVE and _b_rows_on_lines(case) and \
            case.K >= ONE_WAVE_MIN_K else None
    if tile in CLUSTER_TILES:
        clustered = {**tile, **MULTICAST}
        if case.K < MULTICAST_MIN_K or \
                (_tiles(case, clustered) > ONE_WAVE and not _rows_aligned(case)):
            return None
        return clustered
    shared = _b_shared_in_clusters(case)
    one_wave = {**tile, "cluster": 2} if shared and \
        (tile["BM"], tile["BN"]) in ONE_WAVE_CLUSTER_TILES else dict(tile)
    if _tiles(case, one_wave) <= ONE_WAVE:
        return one_wave
    if not _rows_aligned(case) or case.K < WHOLE_ROUND_MIN_K:
        return None
    return {**tile, **(MULTICAST if shared else WHOLE_ROUNDS)}


def _one_wave_tile(case: Case, config: dict[str, Any]) -> bool:
    """Whether ``config`` is one of ONE_WAVE_TILES or STRIP_TILES one tile a block in one
    wave, as :func:`_scheduled` gives them."""
    return not config.get("cluster") and \
        any(config == _scheduled(case, tile) for tile in (*ONE_WAVE_TILES, *STRIP_TILES))


def _padded_tile_pays(case: Case, tile: dict[str, Any]) -> bool:
    """Where PADDED_TILES were measured to pay: whole N tiles, every row 16-byte aligned,
    B's on 128-byte lines, M from MULTICAST_MIN_M and K from PADDED_TILE_MIN_K."""
    return case.N % tile["BN"] == 0 and _rows_aligned(case) and _b_rows_on_lines(case) \
        and case.M >= MULTICAST_MIN_M and case.K >= PADDED_TILE_MIN_K


def _tile_for_whole_waves(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """``config``, or the tile of WHOLE_ROUND_TILES (:func:`_scheduled`) that scores best at
    its TILE_RATES times its :func:`_useful_share`, where that is WHOLE_ROUND_GAIN over
    ``config``'s score. A tile the table does not rate is kept."""
    rate = TILE_RATES.get((config["BM"], config["BN"]))
    if case.batched or rate is None:
        return config

    def score(tile: dict[str, Any]) -> float:
        return TILE_RATES[tile["BM"], tile["BN"]] * _useful_share(case, tile)
    scheduled = (_scheduled(case, tile) for tile in WHOLE_ROUND_TILES)
    candidates = [tile for tile in scheduled if tile is not None]
    if not candidates:
        return config
    best = max(candidates, key=score)
    return best if score(best) >= WHOLE_ROUND_GAIN * rate * _useful_share(case, config) \
        else config


# Over more than one wave of 128x256 tiles with K under WHOLE_ROUND_MIN_K, a tile's K loop
# (8 to 31 steps) is short beside its ring's filling and its epilogue: persistent blocks
# overlap those with the next tile's loads, and 128x128 tiles fill the rounds better. So a
# 128-row tile gives way to SHALLOW_ROUND_TILE where that fills the rounds WHOLE_ROUND_GAIN
# better, or, as full, where it ran one tile a block over a K under SHALLOW_OVERLAP_MAX_K
# (every row 16-byte aligned, K from SHALLOW_ROUNDS_MIN_K). H200, f16, TFLOP/s, x the tuning
# before (cuBLAS; benchmarks/NOTES.md, session 34), one tile a block before, rounds fuller:
#   1752x3200x512   368.4 1.30 (408.7)   3797x2560x1024 570.2 1.23 (593.6)
#   2000x3000x512   295.8 1.09 (367.1)   5000x2000x768  466.9 1.18 (550.5)
#   6000x3000x1024  559.2 1.16 (606.3)   1352x4280x512  297.7 1.12 (334.8)
#   5712x792x768    280.6 1.15 (379.0)
# as full: 2635x4032x512 446.2 1.18 (454.5), 4032x2688x512 455.1 1.18 (419.4), 8000x1024x512
# 451.2 1.14 (436.9), 2500x2504x512 284.5 1.02 (343.0); but K 1024: 1792x4336x1024 0.91,
# 1224x5536x1024 1.02 (kept). Persistent 128x256 before, rounds fuller by 1.33:
# 1536x4096x1024 544.9 1.21 (536.9), 4096x1536x1024 1.22 (540.5); as full (kept): 0.99-1.03 on
# seven shapes from 2816x2816x512 to 8192x8192x1024. 192x192 persistent ran at 1.01-1.03 of
# 128x128's rate where their useful shares were near (SHALLOW_SQUARE_RATE), and is taken
# where it fills the rounds WHOLE_ROUND_GAIN better than the tile chosen: 3000x3000x1024, two
# rounds against five, 500.0, 1.32 x 128x128 persistent (544.4); 4800x2752x512 489.2, 1.29 x
# 128x256 (561.4); 3440x2504x512 359.4, 1.14 x 128x128 persistent (406.0).
SHALLOW_ROUND_TILE = NARROW_TILE
SHALLOW_SQUARE = {**WIDE_SQUARE_TILE, **WHOLE_ROUNDS}
SHALLOW_SQUARE_RATE = 1.03
SHALLOW_ROUNDS_MIN_K = 512
SHALLOW_OVERLAP_MAX_K = 1024


def _persistent_for_shallow_rounds(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """Where the 128x256 tiles make more than one wave over a K from SHALLOW_ROUNDS_MIN_K to
    under WHOLE_ROUND_MIN_K and ``config`` is a 128-row tile of 128 or 256 columns, unsplit
    and not in clusters: SHALLOW_ROUND_TILE where it fills the rounds better or ``config``
    runs one tile a block over a K under SHALLOW_OVERLAP_MAX_K, then SHALLOW_SQUARE where
    that fills them better still; else ``config``."""
    if case.batched or not SHALLOW_ROUNDS_MIN_K <= case.K < WHOLE_ROUND_MIN_K or \
            _large_tiles(case) <= ONE_WAVE or not _rows_aligned(case) or \
            (config["BM"], config["BN"]) not in ((128, 128), (128, 256)) or \
            any(key in config for key in ("split_k", "cluster", "warps", "consumers")):
        return config
    narrow = _useful_share(case, SHALLOW_ROUND_TILE)
    if narrow >= WHOLE_ROUND_GAIN * _useful_share(case, config) or \
            (not config.get("persistent") and case.K < SHALLOW_OVERLAP_MAX_K):
        config = dict(SHALLOW_ROUND_TILE)
    square = SHALLOW_SQUARE_RATE * _useful_share(case, SHALLOW_SQUARE)
    return dict(SHALLOW_SQUARE) if square >= WHOLE_ROUND_GAIN * _useful_share(case, config) \
        else config


# Split-K on sm_90a's wgmma kernels, for few tiles over a deep K: each tile's K loop is cut
# into slices, blocks of their own (one wave at most), where that spends more of the SMs'
# time on the product than the tiles alone by SPLIT_GAIN (the slices' meeting costs a
# partial tile's store and load each), a slice keeping at least MIN_SLICE_STEPS steps (or
# SHORT_SLICE_STEPS, below). The small class's 64x128 tiles (one
# consumer warpgroup) give way to SPLIT_TILE's two. At equal block counts the tiles run level
# with or without a split: 1024x1024x16384, 128 blocks of 64x128 590 TFLOP/s, 128x128 split 2
# 600.
# H100, f16, TFLOP/s (cuBLAS), two runs in two calls: 512x512x65536 64x128 st6 (32 blocks)
# 199 -> 128x128 split 8 515-519 (591-607), split 4 369-376; 512x1024x16384 346 -> split 4
# 473 (402-407); 768x768x32768 (72 blocks) 410 -> split 3 530 (597), split 2 424;
# 2048x1024x8192 128x256 (64 blocks) 420 -> split 2 585-588 (713-715); ragged 1000x1000x16384
# mma.sync 64x64x32 161 -> split 2 375 (561; the skinny tile's one wave in clusters since
# session 30, 1.02x split 2 on an H200); 500x600x30000 55 -> split 4 292 (466), split 6
# (this rule's) 274-277 (468-479).
# Kept: 1536x1024x8192 (192 blocks) 437 against split 2 431; 1024x1024x8192 544 against 494
# (benchmarks/NOTES.md, session 17).
SPLIT_TILE = dict(BM=128, BN=128, BK=64, stages=4)
MIN_SLICE_STEPS = 64
SPLIT_GAIN = 1.1
# The tiles the autotuner splits along K (_split_candidates): SPLIT_TILE, the short and
# skinny products' 64x128, TALL_TILE, 256x128 in 128-row warpgroups and 192x192 (300x3000x8192
# in 4 slices: 1.32 x the tuned configuration before, 1.10 x TALL_TILE's 2).
SPLIT_TILES = (SPLIT_TILE, SHORT_TILES[-1][1], TALL_TILE,
               dict(BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128), WIDE_SQUARE_TILE)
# Where the split tiles fill at most SHORT_SLICE_TILES of one wave, slices as short as
# SHORT_SLICE_STEPS: the meeting's cost (each block's partial tile, the last block's sum of
# them all) weighs less than the idle SMs; unless the tile would run in clusters of 2
# sharing B (:func:`_clusters_pay`) and K is too shallow for two long slices: clusters beat
# short slices at K 2048-4096. The gain is counted in useful share, against the skinny tile
# unsplit where there is one (300x2000x4096: 80 tiles of 64x128 fill as much as 128x128
# split 2 and ran 1.12x as fast). H200, one call, TFLOP/s, the rule's choice against the
# long-slice rule's (cuBLAS; benchmarks/NOTES.md, session 30):
#   128x1000x8192   64x128 split 8 119.8 / split 2 73.9 (147.9); bf16 121.1 / 73.5
#   128x1024x11008  64x128 split 8 167.3 / split 2 124.9 (188.7)
#   200x1024x11008  64x128 split 4 242.9 / split 2 192.0 (248.9)
#   384x1000x11008  128x128 split 5 307.2 / split 2 199.1 (334.0)
#   384x1024x8192   128x128 split 5 304.1 / 64x128 unsplit 236.0 (278.5)
#   500x1024x8192   128x128 split 4 358.1 / split 2 287.1 (369.7)
#   300x1000x4096   128x128 split 4 138.9 / 64x128 unsplit 94.5 (155.2)
#   128x2048x4096   64x128 split 4 152.9 / unsplit 127.6 (148.5)
#   64x1000x11008   64x128 split 10 81.1 / 16x64x128 mma.sync 38.7 (98.1)
#   64x3000x4096    64x128 split 4 100.7 / 16x64x128 59.5 (106.9)
# and level on 32-48 tiles (48x4096x11008 split 4 0.98 of split 2, 192x2000x2048 split 2
# 1.01 of unsplit). Against: the tiles alone filling half a wave (64x8192x4096 split 2 164.7
# against 190.1 unsplit), and clusters (256x1000x2048 split 2 79.0 against 86.0 for 64x128
# in clusters; 384x1000x2048 128x128 split 2 0.80, 1000x1000x4096 0.91, 500x1000x4096
# split 4 0.96). On 19 shapes it was not fitted to, f16, x the long-slice rule's choice:
# 0.97 (384x1024x4096) to 1.89 (48x1000x8192), 1.00-1.02 where it drops a long split for
# the skinny tile's one wave (1000x1024x16384, 1000x1000x16384 in clusters), 0.98 at
# 500x2048x16384.
SHORT_SLICE_STEPS = 16
SHORT_SLICE_TILES = 0.4
# But up to this M (the skinny products') the 64-row tiles are split themselves: B's bytes
# bound the product, and 128-row tiles would halve the blocks streaming them. H200, f16, one
# call: 128x4096x11008 64x128 st6 split 2 362.2 TFLOP/s against 301.3 unsplit (cuBLAS 365.8;
# benchmarks/NOTES.md, session 28); 192x4096x11008 64x128 unsplit (96 blocks) 434.9 against
# 379.4 for 128x128 split 2 (session 29).
M_KEEPS_TILE = SKINNY_M


def _sliced(case: Case, config: dict[str, Any], clusters: bool = False) -> dict[str, Any]:
    """``config`` (one tile a block), or a split-K configuration (in SPLIT_TILE where
    ``config``'s tile is smaller, but for M of at most M_KEEPS_TILE rows) whose blocks spend
    a larger share of the SMs' time on the product by SPLIT_GAIN, in slices of
    MIN_SLICE_STEPS steps at least; of SHORT_SLICE_STEPS where the split tiles fill at most
    SHORT_SLICE_TILES of a wave, unless ``config`` would run in clusters of 2 (``clusters``)
    and K is too shallow for two long slices."""
    if case.batched or config.get("persistent"):
        return config
    keep_tile = case.M <= M_KEEPS_TILE
    tile = SPLIT_TILE if config["BM"] * config["BN"] < 128 * 128 and not keep_tile else \
        {key: config[key] for key in ("BM", "BN", "BK", "stages")}
    short = _tiles(case, tile) <= SHORT_SLICE_TILES * ONE_WAVE and \
        (not clusters or case.K >= 2 * MIN_SLICE_STEPS * tile["BK"])
    splits = _splits(case, config, tile, SHORT_SLICE_STEPS if short else MIN_SLICE_STEPS)
    return dict(tile, split_k=splits) if splits > 1 else config


def _splits(case: Case, config: dict[str, Any], tile: dict[str, Any], min_steps: int) -> int:
    """The slices of ``tile`` (up to :func:`_most_slices`) that spend the largest share of
    the SMs' time on the product (:func:`_useful_share`), if larger by SPLIT_GAIN than
    ``config``'s tiles' unsplit; else 1."""
    best_share, best = _useful_share(case, config) * SPLIT_GAIN, 1
    for splits in range(2, _most_slices(case, tile, min_steps) + 1):
        share = _useful_share(case, tile, splits)
        if share > best_share:
            best_share, best = share, splits
    return best


def _most_slices(case: Case, tile: dict[str, Any], min_steps: int) -> int:
    """The most slices ``tile``'s K loop may be cut into: each of ``min_steps`` steps at
    least, all the blocks in one wave (slices in a second wave, 768x768x32768 split 4, 144
    blocks: 369, were not measured to pay)."""
    from tilec.options import MAX_SPLIT_K
    return min(MAX_SPLIT_K, -(-case.K // tile["BK"]) // min_steps,
               ONE_WAVE // _tiles(case, tile))


def _tiles(case: Case, config: dict[str, Any]) -> int:
    """Output tiles of ``config``'s BM x BN one product of the case has (ragged edges
    included), a cluster's M tiles counted whole: the tiles its blocks walk (as
    tilec.launch.binding.whole_cluster_tiles counts them at launch)."""
    cluster = config.get("cluster", 1)
    return -(-case.M // (config["BM"] * cluster)) * cluster * -(-case.N // config["BN"])


def _m_tiles_pair(case: Case, tile: dict[str, Any]) -> bool:
    """Whether ``tile``'s M tiles make whole pairs, so clusters of 2 along M leave no block
    past M idling its SM."""
    return -(-case.M // tile["BM"]) % 2 == 0


def _large_tiles(case: Case) -> int:
    """Output tiles of 128x256, the large tiles, the case has (ragged edges included)."""
    return _tiles(case, dict(BM=128, BN=256)) * case.batch
