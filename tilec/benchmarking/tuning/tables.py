"""The tuned tables: the best measured configuration per product family and problem
class, before any rule (benchmarks/NOTES.md), and the bench's dtype families."""
from __future__ import annotations


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
C_DTYPES = ("inputs", "f32")
# The product family (tilec.families.products) each bench dtype runs on.
FAMILY = {"f16": "mma", "bf16": "mma", "f32": "simt", "tf32": "tf32", "i8": "int8",
          "f8e4m3": "fp8"}
# What tilec compiles each bench dtype as: the inputs' DSL dtype and the options it needs.
TILEC_AS = {"tf32": ("f32", {"f32_math": "tf32"})}
