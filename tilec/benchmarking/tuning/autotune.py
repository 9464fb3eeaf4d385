"""The space ``tilec bench --autotune`` searches for a case (:func:`autotune_space`)."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from tilec.benchmarking.cases import Case

from .choose import on_wgmma, tuned_config
from .measure import SHORT_M, m_tiles_pair
from .rounds import WHOLE_ROUND_TILES, WIDE_SQUARE_TILE
from .skinny import SHORT_TILES, SKINNY_TILES
from .split import SHORT_SLICE_STEPS, SPLIT_TILE, most_slices
from .swap import TALL_TILE, swap_configs
from .tables import EIGHT_BIT_WGMMA, FAMILY


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
    SWAP_SEARCHED_MAX_M rows the swapped product's tiles (:func:`swap_configs`); every
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
            space += list(swap_configs(case, SHORT_SLICE_STEPS))
    # The tuned configuration first: autotuning never ends on one slower than the default
    # (the search's grid holds neither the split nor, at 4096^3, the persistent raster).
    space.insert(0, tuned_config(case, arch, backend, fixed.get("fp8_accumulation", "fast")))
    trimmed: list[dict[str, Any]] = []
    for config in space:
        config = {knob: value for knob, value in config.items() if knob not in fixed}
        if config not in trimmed:
            trimmed.append(config)
    return trimmed


# The most rows of C the autotuner tries the swapped product's tiles at (swap_configs): the
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
            if splits <= most_slices(case, tile, SHORT_SLICE_STEPS)
            for pair in ({}, {"cluster": 2}) if not pair or m_tiles_pair(case, tile)]


def _searched(tiles: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each of ``tiles`` in each raster group of the autotune space, as search_space writes
    a configuration, its other knobs kept."""
    from tilec.tools.autotune import search_space
    blocks = ("BM", "BN", "BK", "stages")
    return [{**config, **{knob: value for knob, value in tile.items() if knob not in blocks}}
            for tile in tiles
            for config in search_space(**{knob: (tile[knob],) for knob in blocks},
                                       raster_group=(8, 16))]


# The block schedules sm_90a's autotuning tries for each tile: one tile a block, persistent
# blocks, a cluster of two sharing B, and persistent clusters walking pairs of tiles.
SM90A_SCHEDULES = ({}, {"persistent": True}, {"cluster": 2}, {"persistent": True, "cluster": 2})
# And for 64-row tiles, pingpong consumers: two warpgroups a block, each on tiles of its own.
PINGPONG = {"persistent": True, "consumers": "pingpong"}
# And consumer warpgroups of 128 rows each (two m64 wgmmas a k step).
ROWS_128 = {"warpgroup_rows": 128}
# The tiles the autotuner splits along K (_split_candidates): SPLIT_TILE, the short and
# skinny products' 64x128, TALL_TILE, 256x128 in 128-row warpgroups and 192x192 (300x3000x8192
# in 4 slices: 1.32 x the tuned configuration before, 1.10 x TALL_TILE's 2).
SPLIT_TILES = (SPLIT_TILE, SHORT_TILES[-1][1], TALL_TILE,
               dict(BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128), WIDE_SQUARE_TILE)
