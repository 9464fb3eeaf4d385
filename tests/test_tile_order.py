"""A persistent kernel's tile decode (backend/tile_order.py): launch-time magic numbers in
place of runtime divisions, checked in Python against the grouped order of
backend/grid.py (what one-tile-a-block kernels compute with ``div.u32``), and the hidden
parameters that carry them."""
from __future__ import annotations

import itertools
import random

import pytest

from tilec.backend import divide, tile_order
from tilec.launch.binding import grid_size

from tests.test_ptxas import load_sample

TILE = dict(BM=128, BN=128, BK=64)


def grouped_reference(pid: int, gm: int, gn: int, group: int) -> tuple[int, int]:
    """backend/grid.py's grouped_coords, in Python."""
    per_group = gn * group
    first_m = pid // per_group * group
    rows = min(gm - first_m, group)
    in_group = pid % per_group
    return first_m + in_group % rows, in_group // rows


def test_the_magic_division_is_exact_over_the_int32_range():
    rng = random.Random(11)
    divisors = [1, 2, 3, 7, 16, 17, 255, 4097, (1 << 30) + 1, (1 << 31) - 1, 1 << 31]
    divisors += [rng.randrange(1, 1 << 31) for _ in range(400)] + list(range(1, 400))
    for d in divisors:
        xs = [0, 1, d - 1, d, d + 1, (1 << 31) - 1] + [rng.randrange(1 << 31) for _ in range(40)]
        for x in (x for x in xs if 0 <= x < 1 << 31):
            assert divide.model_prepared(x, d) == (x // d, x % d), (x, d)
    # A magic number fits 32 bits, and a zero divisor (a grid without tiles) divides as 1.
    assert all(0 <= divide.prepared(d)[0] < 1 << 32 for d in divisors)
    assert divide.prepared(0) == divide.prepared(1)


@pytest.mark.parametrize("group", [1, 3, 8, 16])
def test_the_decode_walks_the_grouped_order_batch_by_batch(group):
    """Every tile of every batch once, in grouped_coords' order, for grids whose last
    group is whole, short or the only one."""
    for gm, gn, batches in itertools.product((1, 5, 16, 17, 33), (1, 4, 9), (1, 3)):
        tiles = gm * gn
        for t in range(tiles * batches):
            batch, m, n = tile_order.model_coords(t, gm, gn, group)
            assert batch == t // tiles
            assert (m, n) == grouped_reference(t % tiles, gm, gn, group), (t, gm, gn, group)


def test_only_persistent_kernels_take_the_divisors():
    sample = load_sample("matmul", "f16")
    one_tile = sample.compile(arch="sm_90a", stages=3, **TILE)
    assert not tile_order.kernel_params(one_tile.kernel)
    persistent = sample.compile(arch="sm_90a", stages=3, persistent=True, raster_group=8,
                                **TILE)
    names = [p.name for p in tile_order.kernel_params(persistent.kernel)]
    # A 2-D grid has no batch divisor.
    assert names == [f"tiles_{d}_{f}" for d in ("group", "last") for f in tile_order.FIELDS]
    assert all(f".param .u32 {name}" in persistent.ptx for name in names)


def test_the_launch_values_follow_the_grid_and_the_cluster():
    """1000 x 1003 with 128-row tiles: 8 x 8 tiles; a cluster of 2 walks 4 pairs of M tiles,
    raster group 8 counting rows of tiles (4 pairs a group)."""
    sample = load_sample("matmul", "f16")
    symbols = dict(M=1000, N=1003, K=77)
    for cluster, pairs, group in ((1, 8, 8), (2, 4, 4)):
        compiled = sample.compile(arch="sm_90a", stages=3, persistent=True, raster_group=8,
                                  cluster=cluster, **TILE)
        sizes = grid_size(compiled.kernel, symbols)
        values = tile_order.launch_values(compiled.kernel, sizes)
        assert tile_order.group_rows(compiled.kernel) == group
        d = values["$tiles.group.d"]
        assert d == 8 * group
        magic, shift = divide.prepared(d)
        assert values["$tiles.group.shift"] == shift
        assert values["$tiles.group.magic"] % (1 << 32) == magic
        assert values["$tiles.last.d"] == pairs - (pairs - 1) // group * group


def test_explain_says_where_the_tile_ids_come_from():
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("bmm", "f16").compile(arch="sm_90a", stages=4, persistent=True,
                                                 **TILE)
    text = render_explanation(explain(compiled, ptxas=False))
    line = next(line for line in text.splitlines() if line.strip().startswith("tile loop"))
    assert "tiles_batch_*, tiles_group_*, tiles_last_*" in line and "magic" in line


def test_every_launch_value_is_an_i32_the_launcher_can_pass():
    """Magic numbers of 2^31 and more (a divisor of 10 has 2576980378) go as the i32 of the
    same bits: the launcher's i32 arguments refuse anything outside the signed range."""
    compiled = load_sample("bmm", "f16").compile(arch="sm_90a", stages=4, persistent=True,
                                                 raster_group=16, **TILE)
    for sizes in ([3, 10, 10], [1, 1, 1], [7, 33, 5], [2, 1000, 3]):
        values = tile_order.launch_values(compiled.kernel, sizes)
        assert set(values) == {p.source for p in tile_order.kernel_params(compiled.kernel)}
        assert all(-(1 << 31) <= v < 1 << 31 for v in values.values())
    assert divide.prepared(10)[0] >= 1 << 31
