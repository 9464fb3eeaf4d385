"""Ragged M over a deep K: tall 192-row tiles split along K, and the swapped product
(C.T = B.T @ A.T) whose rows of C run along wgmma's n in any multiple of 8."""
from __future__ import annotations

from typing import Any, Iterator, Optional

from tilec.benchmarking.cases import Case

from .measure import ONE_WAVE, SKINNY_M, large_tiles, m_tiles_pair, tile_count, useful_share
from .skinny import skinny_tile
from .split import SHORT_SLICE_STEPS, most_slices


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
    TALL_TWO_ROWS_MIN_K; in the most slices (:func:`most_slices`, SHORT_SLICE_STEPS steps
    at least) up to TALL_MAX_SPLIT, the blocks filling TALL_WAVE_FILL of a wave; else
    None."""
    if case.batched or not SKINNY_M < case.M <= TALL_MAX_M or large_tiles(case) > ONE_WAVE:
        return None
    rows = -(-case.M // TALL_TILE["BM"])
    covers = case.K >= TALL_FIT_MIN_K and case.M >= TALL_M_FILL * rows * TALL_TILE["BM"]
    two_rows = case.K >= TALL_TWO_ROWS_MIN_K and rows <= 2 and \
        case.K * case.N >= TALL_B_ELEMENTS and \
        (skinny_tile(case) or TALL_TILE)["BN"] <= TALL_TILE["BN"]
    splits = min(TALL_MAX_SPLIT, most_slices(case, TALL_TILE, SHORT_SLICE_STEPS))
    if not (covers or two_rows) or splits < 2 or \
            tile_count(case, TALL_TILE) * splits < TALL_WAVE_FILL * ONE_WAVE:
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
    """The swapped configuration of :func:`swap_configs` (slices of SWAP_MIN_SLICE_STEPS
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
    for config in swap_configs(case, SWAP_MIN_SLICE_STEPS):
        splits = config.get("split_k", 1)
        if tall is None and (splits > 1 or config["BN"] != 128):
            continue
        rate = (1.0 if config["BN"] == 128 else SWAP_ONE_WARPGROUP_RATE) \
            * (SWAP_CLUSTER_RATE if config.get("cluster", 1) > 1 else 1.0)
        score = useful_share(case, config, splits) * rate
        if -(-case.M // config["BM"]) * config["BM"] <= most_rows and \
                tile_count(case, config) * splits >= TALL_WAVE_FILL * ONE_WAVE and \
                score > best_score:
            best, best_score = config, score
    return best


def swap_configs(case: Case, min_steps: int) -> Iterator[dict[str, Any]]:
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
                if tile_count(case, config) * splits > ONE_WAVE or \
                        splits > 1 and steps // splits < min_steps:
                    break
                yield dict(config, split_k=splits) if splits > 1 else config
            paired = dict(config, cluster=2)
            if m_tiles_pair(case, config) and tile_count(case, paired) <= ONE_WAVE:
                yield paired


# Few ragged tiles over K from SWAP_PAIR_MIN_K: the product swapped on C.T tiles 64 columns
# wide (wgmma's m64 on one consumer warpgroup) and BM rows of C deep along wgmma's n (any
# multiple of 8 up to 256), in clusters of 2 along M sharing B's tile: cuBLAS's kernels for
# these shapes, read transposed (900x1200x4096 runs nvjet's 64x152 in clusters of 8; its
# 152 rows go along M, the operand whose rows wgmma takes any multiple of 8 of). BM is the
# one whose pairs of M tiles, one block a tile in one wave, spend the largest share of the
# SMs' time on the product (:func:`useful_share`), the ring as deep as SWAP_PAIR_RING_BYTES
# holds (cuBLAS's depths: 7 stages of 152 rows, 9 of 112, 5 of 224). Taken where that share
# is SWAP_PAIR_GAIN times the configuration's it replaces, unless that one is split along K
# or M is past SWAP_PAIR_WIDE_M rows and N past SWAP_PAIR_WIDE_N columns (where it lost, as
# below). H200, f16, one call each, TFLOP/s, the rule's tile / the tuning before (cuBLAS;
# benchmarks/NOTES.md, session 38):
#   900x1200x4096  152x64 st7 456.2 / 334.7 128x128 in clusters of 2 (472.6); alone 381.9
#   2000x392x4096  112x64 st9 265.1 / 232.8 64x128 in clusters of 2 (276.1)
#   3936x392x768   224x64 st5 195.4 / 180.2 128x128 (232.2); alone 189.4
# and on 14 random shapes the rule then changed (N and K multiples of 8): 293x312x2048 1.30,
# 397x1960x7928 1.19, 3480x248x5440 1.19, 404x2336x8064 1.17, 2572x392x2784 1.11,
# 3676x312x4328 1.06, 336x1560x5840 1.03, 2569x552x1528 1.00, 1516x288x2600 0.98; against
# it, past 1024 rows and 640 columns 1225x1200x5224 0.78, 1293x1072x5608 0.82,
# 1237x1024x4200 0.90, and in place of split-K 1578x128x8048 (7 slices) 0.81,
# 320x1376x5320 (4) 0.89. Where its share is the tuning's, it lost too: 1000x1000x4096
# 144x64 311.4 alone / 352.1.
SWAP_PAIR_TILE = dict(BN=64, BK=64, swap_product="always", cluster=2)
SWAP_PAIR_MIN_K = 768
SWAP_PAIR_GAIN = 1.1
SWAP_PAIR_WIDE_M = 1024
SWAP_PAIR_WIDE_N = 640
SWAP_PAIR_RING_BYTES = 200 * 1024
SWAP_PAIR_MAX_STAGES = 9


def _swapped_pairs(case: Case, config: dict[str, Any]) -> Optional[dict[str, Any]]:
    """SWAP_PAIR_TILE at the BM (a multiple of 8 up to SWAP_MAX_ROWS) whose whole pairs of
    M tiles make one wave with the largest useful share, where that share is SWAP_PAIR_GAIN
    times ``config``'s, ``config`` is not split along K, K is SWAP_PAIR_MIN_K at least and
    M and N are not both wide (SWAP_PAIR_WIDE_M, SWAP_PAIR_WIDE_N); else None."""
    if case.K < SWAP_PAIR_MIN_K or config.get("split_k", 1) > 1 or \
            case.M > SWAP_PAIR_WIDE_M and case.N > SWAP_PAIR_WIDE_N:
        return None
    best, best_share = None, 0.0
    for rows in range(8, SWAP_MAX_ROWS + 1, 8):
        tile = dict(BM=rows, **SWAP_PAIR_TILE)
        if not m_tiles_pair(case, tile) or tile_count(case, tile) > ONE_WAVE:
            continue
        share = useful_share(case, tile)
        if share > best_share:
            best, best_share = tile, share
    if best is None or best_share < SWAP_PAIR_GAIN * useful_share(case, config):
        return None
    stage_bytes = (best["BM"] + best["BN"]) * best["BK"] * 2
    return dict(best, stages=min(SWAP_PAIR_MAX_STAGES, SWAP_PAIR_RING_BYTES // stage_bytes))
