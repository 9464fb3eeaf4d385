"""The rules that may move a case off its table entry, in words, and the record of which
did: what `tilec explain --tuned` prints (:func:`tilec.benchmarking.tuning.tuned_rules`)."""
from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Optional

from .measure import ONE_STEP_K


# What each rule that may move a case off its table entry does, as
# :func:`tilec.benchmarking.tuning.tuned_rules` names it (the functions and constants are the
# tuning package's: each rule in the module of its kind).
RULES = {
    "_skinny": "the skinny tile whose one wave spends the most on the product "
               "(SKINNY_TILES), split along K or in clusters of 2 sharing B where that pays",
    "_swapped": "the product swapped, C.T = B.T @ A.T, where the tall tile would be taken "
                "or past SWAP_UNSPLIT_MIN_M rows: M in tiles of any multiple of 8 rows "
                "along wgmma's n (SWAP_TILES), split along K or paired in clusters of 2 "
                "sharing B's tile",
    "_swapped_pairs": "few ragged tiles over a deep K: the product swapped on C.T tiles 64 "
                      "columns wide, BM rows of C along wgmma's n, in clusters of 2 along M "
                      "sharing B's tile, where their one wave spends SWAP_PAIR_GAIN times "
                      "the share on the product, not in place of split-K nor past "
                      "SWAP_PAIR_WIDE_M rows and SWAP_PAIR_WIDE_N columns (SWAP_PAIR_TILE)",
    "_split_in_clusters": "few tiles over a deep K: a larger tile than the skinny one, "
                          "split along K into slices of SPLIT_CLUSTER_MIN_STEPS steps, "
                          "in clusters of 2 sharing B (SPLIT_CLUSTER_TILES)",
    "_tall": "a 192-row tile split along K, whose rows of tiles read B fewer times "
             "(TALL_TILE)",
    "one_step_k": f"all of a shallow K (at most ONE_STEP_K = {ONE_STEP_K}) in one step, "
                  "misaligned rows read as words and C stored by rows",
    "few_ragged_tiles": "mma.sync's 64x64x32 tiles, the operands read in place (no pack "
                        "launch): few ragged tiles over a K too shallow to split, rows "
                        "that TMA cannot read in place",
    "_short_tile": "one M tile as deep as M (SHORT_TILES), split along K where its tiles "
                   "fill under a wave",
    "unpacked_rows": "mma.sync, rows misaligned and too few elements for the launch to "
                     "pack (wgmma declines them): short M the short class's mma.sync tile, "
                     "all of a shallow K in one step, else 64x64x32 tiles reading them in "
                     "place (IN_PLACE_TILE)",
    "promoted": "fp8 summed promoted: room for the second accumulator set (PROMOTED_TILED)",
    "batched_persistent": "persistent blocks over batches x tiles (BATCHED_PERSISTENT)",
    "batched_unsplit": "the entry unsplit along K: a batched grid's third axis is the "
                       "batch, where split-K would add its slices",
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
                                      "the rounds better; in clusters of 2 sharing B where "
                                      "B's rows are off 128-byte lines) over several waves "
                                      "of a shallow K (SHALLOW_ROUND_TILE, SHALLOW_SQUARE, "
                                      "SHALLOW_ROUND_CLUSTER)",
    "_within_shared_memory": "a shallower ring: the tuned one does not fit this target's "
                             "shared memory",
}
TRACE: ContextVar[Optional[list[str]]] = ContextVar("tuning_trace", default=None)


def took(rule: str, config: Any = None) -> Any:
    """Record that RULES' ``rule`` chose (in tuned_rules); ``config`` back."""
    assert rule in RULES, rule
    trace = TRACE.get()
    if trace is not None:
        trace.append(rule)
    return config
