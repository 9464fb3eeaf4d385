"""Split-K on sm_90a's wgmma kernels: how many slices along K a case's tiles are cut into
where the tiles alone leave SMs idle."""
from __future__ import annotations

from typing import Any

from tilec.benchmarking.cases import Case

from .measure import ONE_WAVE, SKINNY_M, tile_count, useful_share


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
    short = tile_count(case, tile) <= SHORT_SLICE_TILES * ONE_WAVE and \
        (not clusters or case.K >= 2 * MIN_SLICE_STEPS * tile["BK"])
    splits = _splits(case, config, tile, SHORT_SLICE_STEPS if short else MIN_SLICE_STEPS)
    return dict(tile, split_k=splits) if splits > 1 else config


def _splits(case: Case, config: dict[str, Any], tile: dict[str, Any], min_steps: int) -> int:
    """The slices of ``tile`` (up to :func:`most_slices`) that spend the largest share of
    the SMs' time on the product (:func:`useful_share`), if larger by SPLIT_GAIN than
    ``config``'s tiles' unsplit; else 1."""
    best_share, best = useful_share(case, config) * SPLIT_GAIN, 1
    for splits in range(2, most_slices(case, tile, min_steps) + 1):
        share = useful_share(case, tile, splits)
        if share > best_share:
            best_share, best = share, splits
    return best


def most_slices(case: Case, tile: dict[str, Any], min_steps: int) -> int:
    """The most slices ``tile``'s K loop may be cut into: each of ``min_steps`` steps at
    least, all the blocks in one wave (slices in a second wave, 768x768x32768 split 4, 144
    blocks: 369, were not measured to pay)."""
    from tilec.options import MAX_SPLIT_K
    return min(MAX_SPLIT_K, -(-case.K // tile["BK"]) // min_steps,
               ONE_WAVE // tile_count(case, tile))
