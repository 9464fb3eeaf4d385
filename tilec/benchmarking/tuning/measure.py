"""What the tuning rules measure a case by: its problem class, how many tiles of a
shape it makes, how much of the SMs' time one wave of them spends on the product, and
whether its rows suit TMA."""
from __future__ import annotations

from typing import Any

from tilec.benchmarking.cases import Case
from tilec.ir.types import DType
from tilec.target.occupancy import SM_LIMITS, Waves


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


# Skinny products: M of SHORT_M to this many rows (tuning.skinny); also the M up to which
# split-K keeps a small tile rather than taking SPLIT_TILE (tuning.split).
SKINNY_M = 256


def rows_aligned(case: Case) -> bool:
    """Whether A's rows (K elements) and B's (N elements) are whole 16-byte multiples, so
    that TMA reads them in place."""
    from tilec.launch.packing import VECTOR_BYTES
    itemsize = DType.parse(case.dtype).bytes
    return case.N * itemsize % VECTOR_BYTES == 0 and case.K * itemsize % VECTOR_BYTES == 0


def rows_aligned_at_launch(case: Case) -> bool:
    """Whether A's and B's rows reach the kernel 16-byte aligned, laid out as the bench lays
    them (contiguous, B k contiguous for 8-bit inputs: Case.b_strides): as they are, or
    packed by the launch (tilec.launch.packing.rows_aligned_at_launch under "auto": a
    misaligned operand of at least PACK_MIN_ELEMENTS elements, a batch's matrices counted
    together where they pack as one). wgmma's TMA loads read no other rows."""
    from tilec.launch import packing
    from tilec.runtime.arrays import ArrayArg, c_strides
    from .tables import TILEC_AS
    dtype = TILEC_AS.get(case.dtype, (case.dtype,))[0]  # tf32: f32 operands
    operands = (("A", case.a_shape, c_strides(case.a_shape)),
                ("B", case.b_shape, case.b_strides))
    return all(packing.rows_aligned_at_launch(
        ArrayArg(name, LAUNCH_BASE, dtype, shape, strides, device=0), "auto")
        for name, shape, strides in operands)


LAUNCH_BASE = 1 << 40  # a fresh tensor's address as far as alignment goes: 256-byte lines


def b_rows_on_lines(case: Case) -> bool:
    """Whether B's rows (N elements) are whole 128-byte lines apart."""
    from tilec.launch.packing import ROW_ALIGN_BYTES
    return case.N * DType.parse(case.dtype).bytes % ROW_ALIGN_BYTES == 0


def b_rows_off_lines(case: Case) -> bool:
    """Whether every row is 16-byte aligned (TMA reads them in place) but B's are off
    128-byte lines, so that a box of B straddles lines unless a cluster shares it."""
    return rows_aligned(case) and not b_rows_on_lines(case)


def useful_share(case: Case, config: dict[str, Any], splits: int = 1) -> float:
    """The share of the SMs' time ``config``'s tiles, each cut into ``splits`` slices along
    K, spend on the product's elements: one round of ONE_WAVE blocks at a time."""
    return case.M * case.N * splits / (Waves(tile_count(case, config) * splits, ONE_WAVE).count
                                       * ONE_WAVE * config["BM"] * config["BN"])


def tile_count(case: Case, config: dict[str, Any]) -> int:
    """Output tiles of ``config``'s BM x BN one product of the case has (ragged edges
    included), a cluster's M tiles counted whole: the tiles its blocks walk (as
    tilec.launch.binding.whole_cluster_tiles counts them at launch)."""
    cluster = config.get("cluster", 1)
    return -(-case.M // (config["BM"] * cluster)) * cluster * -(-case.N // config["BN"])


def m_tiles_pair(case: Case, tile: dict[str, Any]) -> bool:
    """Whether ``tile``'s M tiles make whole pairs, so clusters of 2 along M leave no block
    past M idling its SM."""
    return -(-case.M // tile["BM"]) % 2 == 0


def large_tiles(case: Case) -> int:
    """Output tiles of 128x256, the large tiles, the case has (ragged edges included)."""
    return tile_count(case, dict(BM=128, BN=256)) * case.batch
