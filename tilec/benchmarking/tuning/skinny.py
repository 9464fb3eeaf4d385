"""Few rows or few tiles: one M tile as deep as a short M, the skinny tile whose one wave
spends the most on the product, and larger tiles split along K in clusters of 2."""
from __future__ import annotations

from typing import Any, Optional

from tilec.benchmarking.cases import Case

from .measure import (ONE_STEP_K, ONE_WAVE, SHORT_M, b_rows_off_lines, b_rows_on_lines,
                      m_tiles_pair, tile_count, useful_share)
from .rounds import ONE_WAVE_MIN_K
from .split import most_slices, _sliced


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
    return tile if tile_count(case, tile) * tile.get("split_k", 1) >= least else config


# Skinny products (M from SHORT_M to SKINNY_M rows, and the ragged small class whatever its
# sizes), K from ONE_WAVE_MIN_K: B streams through once and bounds them, so what counts is
# keeping as much of one wave busy as the tiles allow. The tile is the one of SKINNY_TILES
# whose tiles, one a block in one wave, spend the largest share of the SMs' time on the
# product's own elements (:func:`useful_share`; the first on a tie), split along K by
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
# The ragged small class's few tiles over a shallower K, every row 16-byte aligned (nothing to
# pack, so TMA reads the operands where they lie): the skinny tile too, not mma.sync's 64x64
# tiles reading them in place, for every K past ONE_STEP_K (one_step_k's single step keeps
# those). H200, f16, one call, TFLOP/s, against mma.sync 64x64x32 (cuBLAS;
# benchmarks/NOTES.md, sessions 34 and 35): 1685x320x512 64x128 71.0 / 48.9 (76.0),
# 803x320x512 64x128 35.1 / 25.1 (38.4); both in four stages, and at 2368x512x512 (148 tiles
# of 64x128: two waves) 128x128 138.6, 64x128 111.8 / 98.7 (149.8). Under K 512, the rule's
# tile in six stages: 1685x320x448 65.1 / 45.1 (67.1), 1500x512x384 80.1 / 58.1 (81.6),
# 1000x640x384 68.0 / 48.6 (69.5), 2000x384x320 68.6 / 51.5 (69.2), 640x640x256 31.4 / 26.2
# (32.1), 1200x768x256 66.7 / 52.1 (67.0); 64x192 in four stages at 2368x512x256 82.9 / 62.6
# (81.2) and 2368x512x192 64.7 / 50.5 (63.5). Four stages of 64x128 ran 0.97-1.03 of six.
SKINNY_ALIGNED_MIN_K = ONE_STEP_K + 1
LINE_ROWS_TILES = {(64, 192)}  # skinny tiles taken only with B's rows on 128-byte lines


def skinny_tile(case: Case, min_k: Optional[int] = None) -> Optional[dict[str, Any]]:
    """The tile of SKINNY_TILES that makes one wave, one tile a block, with the largest
    :func:`useful_share` (K from ``min_k``, by default ONE_WAVE_MIN_K), or None."""
    if case.K < (ONE_WAVE_MIN_K if min_k is None else min_k):
        return None
    fitting = [tile for tile in SKINNY_TILES if tile_count(case, tile) <= ONE_WAVE and
               ((tile["BM"], tile["BN"]) not in LINE_ROWS_TILES or b_rows_on_lines(case))]
    return dict(max(fitting, key=lambda tile: useful_share(case, tile))) if fitting else None


# Where B's rows are off 128-byte lines, the skinny tile in clusters of 2 sharing B, if its M
# tiles pair up and the pairs make one wave. H200, f16, one call, x the tile alone (session
# 29): 1000x1000x4096 64x128 1.36 (336.4 TFLOP/s; cuBLAS 416.3), 200x3000x2048 64x128
# 1.15, 1500x1200x4096 128x128 1.08; against it, 640x2000x4096 (5 M tiles of 128: the last
# pair half empty) 0.89 and 300x3000x8192 (64x128: 6 M tiles in pairs, 144 blocks) 0.84.
def _skinny(case: Case, min_k: Optional[int] = None) -> Optional[dict[str, Any]]:
    """:func:`skinny_tile`'s tile (K from ``min_k``) split along K by :func:`_sliced`, or
    unsplit in clusters of 2 sharing B where :func:`_clusters_pay`; None for batched rows
    (not measured) or where no skinny tile makes one wave."""
    tile = None if case.batched else skinny_tile(case, min_k)
    if tile is None:
        return None
    clusters = _clusters_pay(case, tile)
    config = _sliced(case, tile, clusters)
    return {**config, "cluster": 2} if clusters and "split_k" not in config else config


def _clusters_pay(case: Case, tile: dict[str, Any]) -> bool:
    """Whether the skinny ``tile`` runs in clusters of 2 sharing B, unsplit: B's rows off
    lines, its M tiles paired, the pairs in one wave."""
    return b_rows_off_lines(case) and m_tiles_pair(case, tile) and \
        tile_count(case, {**tile, "cluster": 2}) <= ONE_WAVE


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
    share = useful_share(case, skinny)
    for tile in SPLIT_CLUSTER_TILES:
        if not m_tiles_pair(case, tile):
            continue
        paired = dict(tile, cluster=2)  # whole pairs: as many tiles as alone
        for splits in range(most_slices(case, tile, SPLIT_CLUSTER_MIN_STEPS), 1, -1):
            if useful_share(case, paired, splits) >= share * (1 - 1e-9):
                return dict(paired, split_k=splits)
    return None
