"""Many tiles: the tile and schedule that fill the waves (rounds) of tiles best -- clusters
sharing B whose rows are off 128-byte lines, narrower tiles for a nearly empty last wave,
the whole-round tiles, and persistent tiles over a shallow K."""
from __future__ import annotations

from typing import Any, Optional

from tilec.benchmarking.cases import Case
from tilec.target.occupancy import Waves

from .measure import (ONE_WAVE, b_rows_off_lines, b_rows_on_lines, large_tiles, rows_aligned,
                      tile_count, useful_share)


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
# MULTICAST_TILES' tall tile, taken only in place of 128x128: TILE_RATES overrates it beside
# the wider tiles. Session 37, H200, one call each, TFLOP/s, 256x128 / the tile picked
# without it, x: against 128x256, 128x192 or 192x192 it lost on all 24 shapes measured, K
# 1664-7760 (6193x8120x1912 bf16 526.6 / 647.3 128x256, 1.23; 1138x5512x4832 430.1 / 552.6,
# 1.28, though 128x256 fills 83% of its rounds and 256x128 all; 7540x7736x2008 550.0 / 584.9
# 128x192, 1.06; 8055x5688x7760 bf16 630.5 / 682.3 192x192, 1.08; 1.05-1.31 on all, median
# 1.15); against 128x128 it won on 6 of 8 and tied on one (3844x4216x6184 540.4 / 458.1,
# 0.85; 6192x544x5648 bf16 0.80; 4812x1560x5032 0.86; 2911x1312x1536 0.95; 4096x4104x4096
# 667.3 / 669.3, 1.00; lost at 4261x848x1792, 473.3 / 500.2, 1.06). A wider tile here also
# raises the bar _tile_for_whole_waves' tiles must clear: 192x192 gave way to 128x256 or
# 128x192 at 1.01-1.08 (5 shapes), 192x176 to 128x192 1.08, 256x176 and 192x176 to 128x256
# 0.99 and 0.98 (benchmarks/NOTES.md, session 37).
TALL_MULTICAST_TILE = dict(BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128)
MULTICAST_TILES = (
    dict(BM=128, BN=256, BK=64, stages=3),
    TALL_MULTICAST_TILE,
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
# (654.6), 1024x2056x4096 473.2 / 465.4 (604.9). K from 1536 (session 36): what these rules
# and WHOLE_ROUND_MIN_K's give at K 2048, taken over K 1536-2040, against the tuning before
# (128x128 persistent, 192x192 persistent, 128x256 one a block): 0.94-1.43, median 1.145,
# on the 14 shapes it moves of 18 measured (benchmarks/NOTES.md, calls 5 and 6); but 256x64
# (in CLUSTER_TILES) 0.71-1.12, kept from CLUSTER_TILE_MIN_K. K 1024-1280: 0.97-1.06.
MULTICAST_MIN_M = 1024
MULTICAST_MIN_K = 1536


def b_shared_in_clusters(case: Case, min_k: int = MULTICAST_MIN_K) -> bool:
    """Whether a cluster of 2 should share B: :func:`b_rows_off_lines`, M at least
    MULTICAST_MIN_M and K at least ``min_k`` (MULTICAST_MIN_K, or a rule's own measured
    bound: ONE_WAVE_CLUSTER_MIN_K, the shallow rounds' K range)."""
    return b_rows_off_lines(case) and case.M >= MULTICAST_MIN_M and case.K >= min_k


def _multicast_for_rows_off_lines(case: Case, config: dict[str, Any]) -> Optional[dict]:
    """A cluster-of-2 persistent configuration where B's rows are 16-byte aligned but off
    128-byte lines, the wide tiles make more than one wave and M and K are deep enough
    (:func:`b_shared_in_clusters`), or None: the tile of the best TILE_RATES times the
    share of its rounds filled, TALL_MULTICAST_TILE only where that is 128x128 and it
    scores as well."""
    if case.batched or (config["BM"], config["BN"]) != (128, 256) or \
            not b_shared_in_clusters(case) or large_tiles(case) <= ONE_WAVE:
        return None

    def speed(tile: dict[str, Any]) -> float:
        return TILE_RATES[tile["BM"], tile["BN"]] * \
            Waves(tile_count(case, {**tile, **MULTICAST}), ONE_WAVE).fill
    best = max((tile for tile in MULTICAST_TILES if tile is not TALL_MULTICAST_TILE),
               key=speed)
    if (best["BM"], best["BN"]) == (128, 128) and speed(TALL_MULTICAST_TILE) >= speed(best):
        best = TALL_MULTICAST_TILE
    return {**best, **MULTICAST}


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
    if case.batched or (config["BM"], config["BN"]) != (128, 256) or not rows_aligned(case):
        return config
    wide = Waves(tile_count(case, config), ONE_WAVE)
    if wide.count < 2 or wide.last > LAST_WAVE_SHARE * ONE_WAVE:
        return config
    # Time in waves of 128x256 tiles: a narrow wave takes half of a wide one, at its rate.
    narrow = Waves(tile_count(case, NARROW_TILE), ONE_WAVE).count / 2 / NARROW_TILE_RATE
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
# 128-byte lines or off them alike), K from CLUSTER_TILE_MIN_K: 192x176 in four stages (B's
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
CLUSTER_TILE_MIN_K = 2048  # 256x64 under it (session 36): 0.71, 0.78, 0.99, 1.12
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
# Over more than one wave, only where K is at least this deep (measured at 2048 and deeper,
# then from 1536 as MULTICAST_MIN_K says; shallower K, whose tiles' fixed costs weigh more,
# keeps _persistent_for_shallow_rounds' tiles).
WHOLE_ROUND_MIN_K = 1536

# The tiles that run their one wave in clusters of 2 where B's rows are off 128-byte lines.
# H200, f16, one call each, TFLOP/s, one tile a block in clusters / alone (cuBLAS): 128x192
# at 1536x2056x4096 656.7 / 527.7 (654.6), 1024x2056x4096 473.2 / 465.4 (604.9); but
# 192x192 at 2048x2056x2048 536.8 / 542.2 (545.5), 2304x2056x4096 690.6 / 687.1 (693.4)
# (benchmarks/NOTES.md, session 25). Over K from ONE_WAVE_CLUSTER_MIN_K, shallower than
# MULTICAST_MIN_K (session 36, same measure, in clusters / alone): 4000x600x1024 278.8 /
# 253.9 (355.6), 3000x680x1536 335.3 / 296.7 (410.6), 2500x1000x1024 320.6 / 285.7 (353.2).
ONE_WAVE_CLUSTER_TILES = {(128, 192)}
ONE_WAVE_CLUSTER_MIN_K = 1024


def _scheduled(case: Case, tile: dict[str, Any]) -> Optional[dict[str, Any]]:
    """``tile`` with its schedule for the case: PADDED_TILES in MULTICAST where they pay
    (:func:`_padded_tile_pays`), STRIP_TILES in MULTICAST where B is shared in clusters;
    CLUSTER_TILES in MULTICAST (over more than one wave only with every row 16-byte
    aligned); ONE_WAVE_TILES and the other STRIP_TILES one tile a block where they make one
    wave, B's rows on lines and K from ONE_WAVE_MIN_K; one tile a block in one wave (in clusters of
    2 for ONE_WAVE_CLUSTER_TILES where :func:`b_shared_in_clusters` from
    ONE_WAVE_CLUSTER_MIN_K); over more
    (measured only with every row 16-byte aligned and K from WHOLE_ROUND_MIN_K),
    WHOLE_ROUNDS, or MULTICAST where B's rows are off 128-byte lines; else None."""
    if tile in PADDED_TILES:
        return {**tile, **MULTICAST} if _padded_tile_pays(case, tile) else None
    if tile in STRIP_TILES and b_shared_in_clusters(case):
        return {**tile, **MULTICAST}
    if tile in STRIP_TILES or tile in ONE_WAVE_TILES:
        return dict(tile) if tile_count(case, tile) <= ONE_WAVE and b_rows_on_lines(case) and \
            case.K >= ONE_WAVE_MIN_K else None
    if tile in CLUSTER_TILES:
        clustered = {**tile, **MULTICAST}
        if case.K < CLUSTER_TILE_MIN_K or \
                (tile_count(case, clustered) > ONE_WAVE and not rows_aligned(case)):
            return None
        return clustered
    one_wave = {**tile, "cluster": 2} if b_shared_in_clusters(case, ONE_WAVE_CLUSTER_MIN_K) and \
        (tile["BM"], tile["BN"]) in ONE_WAVE_CLUSTER_TILES else dict(tile)
    if tile_count(case, one_wave) <= ONE_WAVE:
        return one_wave
    if not rows_aligned(case) or case.K < WHOLE_ROUND_MIN_K:
        return None
    return {**tile, **(MULTICAST if b_shared_in_clusters(case) else WHOLE_ROUNDS)}


def one_wave_tile(case: Case, config: dict[str, Any]) -> bool:
    """Whether ``config`` is one of ONE_WAVE_TILES or STRIP_TILES one tile a block in one
    wave, as :func:`_scheduled` gives them."""
    return not config.get("cluster") and \
        any(config == _scheduled(case, tile) for tile in (*ONE_WAVE_TILES, *STRIP_TILES))


def _padded_tile_pays(case: Case, tile: dict[str, Any]) -> bool:
    """Where PADDED_TILES were measured to pay: whole N tiles, every row 16-byte aligned,
    B's on 128-byte lines, M from MULTICAST_MIN_M and K from PADDED_TILE_MIN_K."""
    return case.N % tile["BN"] == 0 and rows_aligned(case) and b_rows_on_lines(case) \
        and case.M >= MULTICAST_MIN_M and case.K >= PADDED_TILE_MIN_K


def _tile_for_whole_waves(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """``config``, or the tile of WHOLE_ROUND_TILES (:func:`_scheduled`) that scores best at
    its TILE_RATES times its :func:`useful_share`, where that is WHOLE_ROUND_GAIN over
    ``config``'s score. A tile the table does not rate is kept."""
    rate = TILE_RATES.get((config["BM"], config["BN"]))
    if case.batched or rate is None:
        return config

    def score(tile: dict[str, Any]) -> float:
        return TILE_RATES[tile["BM"], tile["BN"]] * useful_share(case, tile)
    scheduled = (_scheduled(case, tile) for tile in WHOLE_ROUND_TILES)
    candidates = [tile for tile in scheduled if tile is not None]
    if not candidates:
        return config
    best = max(candidates, key=score)
    return best if score(best) >= WHOLE_ROUND_GAIN * rate * useful_share(case, config) \
        else config


# Over more than one wave of 128x256 tiles with K under SHALLOW_ROUNDS_MAX_K, a tile's K loop
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
# In clusters of 2 sharing B where B's rows are off 128-byte lines (b_rows_off_lines, M from
# MULTICAST_MIN_M). Session 36, same measure, in clusters / alone (cuBLAS): 5712x792x768 336.1
# / 297.5 (380.3); then on seven fresh shapes of K 512-2040, 1.04-1.28 (NOTES.md, call 4).
SHALLOW_ROUND_CLUSTER = {**SHALLOW_ROUND_TILE, **MULTICAST}
SHALLOW_SQUARE = {**WIDE_SQUARE_TILE, **WHOLE_ROUNDS}
SHALLOW_SQUARE_RATE = 1.03
SHALLOW_ROUNDS_MIN_K = 512
# Up to this K (2048 = WHOLE_ROUND_MIN_K as it was): from 1536 the whole-round rules run
# first, and this one takes the 128-row tiles they leave one a block.
SHALLOW_ROUNDS_MAX_K = 2048
SHALLOW_OVERLAP_MAX_K = 1024


def _persistent_for_shallow_rounds(case: Case, config: dict[str, Any]) -> dict[str, Any]:
    """Where the 128x256 tiles make more than one wave over a K from SHALLOW_ROUNDS_MIN_K to
    under SHALLOW_ROUNDS_MAX_K and ``config`` is a 128-row tile of 128 or 256 columns, unsplit
    and not in clusters: SHALLOW_ROUND_TILE where it fills the rounds better or ``config``
    runs one tile a block over a K under SHALLOW_OVERLAP_MAX_K, then SHALLOW_SQUARE where
    that fills them better still, else SHALLOW_ROUND_TILE in clusters of 2
    (SHALLOW_ROUND_CLUSTER) where B's rows are off 128-byte lines and M is from
    MULTICAST_MIN_M; else ``config``."""
    if case.batched or not SHALLOW_ROUNDS_MIN_K <= case.K < SHALLOW_ROUNDS_MAX_K or \
            large_tiles(case) <= ONE_WAVE or not rows_aligned(case) or \
            (config["BM"], config["BN"]) not in ((128, 128), (128, 256)) or \
            any(key in config for key in ("split_k", "cluster", "warps", "consumers")):
        return config
    narrow = useful_share(case, SHALLOW_ROUND_TILE)
    if narrow >= WHOLE_ROUND_GAIN * useful_share(case, config) or \
            (not config.get("persistent") and case.K < SHALLOW_OVERLAP_MAX_K):
        config = dict(SHALLOW_ROUND_TILE)
    square = SHALLOW_SQUARE_RATE * useful_share(case, SHALLOW_SQUARE)
    if square >= WHOLE_ROUND_GAIN * useful_share(case, config):
        return dict(SHALLOW_SQUARE)
    if config == SHALLOW_ROUND_TILE and b_shared_in_clusters(case, SHALLOW_ROUNDS_MIN_K):
        return dict(SHALLOW_ROUND_CLUSTER)
    return config
