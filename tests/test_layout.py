"""The layout functions against a simulation of what ldmatrix and mma do per lane."""
import itertools

import numpy as np
import pytest

from tilec.families import mma_sync as M
from tilec.target import layout as L


def simulate_ldmatrix_x4(smem: np.ndarray, row_addr: list[int], trans: bool) -> np.ndarray:
    """What each lane receives: [lane, reg, half]. ``smem`` is flat; ``row_addr[l]`` is the
    element offset of the 8-element row that lane l points at (PTX ISA: ldmatrix)."""
    out = np.zeros((32, 4, 2), smem.dtype)
    for lane, j, h in itertools.product(range(32), range(4), range(2)):
        g, t = divmod(lane, 4)
        if not trans:
            row, col = g, 2 * t + h
        else:
            row, col = 2 * t + h, g
        out[lane, j, h] = smem[row_addr[8 * j + row] + col]
    return out


@pytest.mark.parametrize("operand", ["A", "B"])
@pytest.mark.parametrize("k_major", [True, False])
@pytest.mark.parametrize("swz", [L.Swizzle(0), L.Swizzle(2, 3, 3), L.Swizzle(3, 3, 3)])
def test_ldmatrix_feeds_the_mma_fragment(operand, k_major, swz):
    rows, cols = (64, 64)
    layout = L.SmemLayout(rows, cols, swz)
    logical = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) * 3 + 1
    smem = np.zeros(rows * cols)
    for r, c in itertools.product(range(rows), range(cols)):
        smem[layout.offset(r, c)] = logical[r, c]
    mn0, k0 = 16, 32
    addr = []
    for lane in range(32):
        mn, k = M.ldmatrix_lane_coord(operand, k_major, lane)
        addr.append(layout.offset(*L.operand_storage_coord(k_major, mn0 + mn, k0 + k)))
    got = simulate_ldmatrix_x4(smem, addr, trans=not k_major)
    for lane, reg, h in itertools.product(range(32), range(4), range(2)):
        if operand == "A":
            m, k = M.mma_a_coord(lane, reg, h)
            mn, kk = m, k
        else:  # registers 2, 3 are the second n8 tile
            k, n = M.mma_b_coord(lane, reg % 2, h)
            mn, kk = n + 8 * (reg // 2), k
        expect = logical[L.operand_storage_coord(k_major, mn0 + mn, k0 + kk)]
        assert got[lane, reg, h] == expect


def test_mma_fragments_compute_a_product():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 8))
    c = np.zeros((16, 8))
    # D = A B summed per lane from the fragments each lane holds, gathered by coordinates.
    for lane, reg in itertools.product(range(32), range(4)):
        m, n = M.mma_c_coord(lane, reg)
        c[m, n] = a[m] @ b[:, n]
    np.testing.assert_allclose(c, a @ b)
    owners = {M.mma_c_coord(lane, reg) for lane in range(32) for reg in range(4)}
    assert len(owners) == 16 * 8


def test_swizzle_is_a_permutation_within_each_period():
    for swz in L.swizzle_candidates(2):
        offsets = [swz(o) for o in range(4096)]
        assert sorted(offsets) == list(range(4096))


def test_conflict_degree_counts_wavefronts():
    # 32 lanes reading consecutive words: free. All lanes reading one column of 32 rows of
    # 128 bytes: 32 distinct words in one bank.
    assert L.conflict_degree([4 * i for i in range(32)], 4) == 1
    assert L.conflict_degree([128 * i for i in range(32)], 4) == 32
    assert L.conflict_degree([0] * 32, 4) == 1  # broadcast


@pytest.mark.parametrize("slab", [0, 64])
@pytest.mark.parametrize("swz", [L.Swizzle(0), *L.swizzle_candidates(2, (16, 32))])
def test_offsets_is_offset_of_each_coordinate(swz, slab):
    layout = L.SmemLayout(32, 128, swz, slab=slab)
    coords = [(row, col) for row in range(32) for col in range(128)]
    assert layout.offsets(coords) == [layout.offset(row, col) for row, col in coords]


@pytest.mark.parametrize("rows, cols, vec, threads", [(128, 32, 8, 128), (32, 128, 8, 256),
                                                     (24, 40, 4, 128), (3, 8, 2, 32)])
def test_coords_is_coord_of_each_thread(rows, cols, vec, threads):
    cmap = L.copy_map(rows, cols, vec, threads)
    for i in range(cmap.per_thread + 1):
        every = [cmap.coord(t, i) for t in range(threads)]
        assert cmap.coords(i) == every
        quarter = threads // 4
        assert cmap.coords(i, quarter, quarter) == every[quarter:2 * quarter]


def test_conflict_degree_is_the_same_a_whole_line_away_and_with_idle_lanes():
    # The degree is counted once per pattern, from its first 128-byte line: moving every
    # address by whole lines (or idling lanes) must give what counting each access gives.
    rng = np.random.default_rng(0)
    for width in (2, 4, 8, 16):
        for _ in range(200):
            addresses = [int(a) * width for a in rng.integers(0, 512 // width, 32)]
            if rng.random() < 0.3:
                addresses[int(rng.integers(32))] = None
            lines = int(rng.integers(1, 9))
            moved = [a if a is None else a + 128 * lines for a in addresses]
            assert L.conflict_degree(moved, width) == L.conflict_degree(addresses, width) \
                == _wavefronts(addresses, width)


def _wavefronts(addresses, width):
    """conflict_degree's definition, counted per access: the most distinct 4-byte words one
    bank serves in a phase (8 lanes of 16 bytes, 16 of 8, 32 of 4 or 2)."""
    per_phase = min(32, 128 // width)
    worst = 1
    for start in range(0, 32, per_phase):
        words = {word for a in addresses[start:start + per_phase] if a is not None
                 for word in range(a // 4, -(-(a + width) // 4))}
        for bank in range(32):
            worst = max(worst, sum(1 for word in words if word % 32 == bank))
    return worst


def test_swizzle_removes_ldmatrix_conflicts_on_a_64_wide_tile():
    linear = L.SmemLayout(128, 64, L.Swizzle(0))
    swizzled = L.SmemLayout(128, 64, L.Swizzle(3, 3, 3))
    args = ("A", True, 0, 0, 2)
    assert L.conflict_degree(M.ldmatrix_addresses(linear, *args), 16) == 8
    assert L.conflict_degree(M.ldmatrix_addresses(swizzled, *args), 16) == 1


@pytest.mark.parametrize("elem_bytes", [1, 2, 4])
@pytest.mark.parametrize("cols", [16, 32, 64, 128, 256])
def test_anchors_of_one_bank_class_move_a_pattern_by_whole_lines(elem_bytes, cols):
    """SmemLayout.bank_class's contract, the swizzle pass's pruning rests on it: a pattern
    of coordinates anchored at any two points of one class has its element offsets moved
    by one constant, a whole number of 128-byte lines, under every swizzle candidate."""
    rows = 64
    pattern = [(r, c) for r in range(8) for c in range(0, min(cols, 16 // elem_bytes * 2), 4)]
    for swizzle in L.swizzle_candidates(elem_bytes, (16, 32)):
        layout = L.SmemLayout(rows, cols, swizzle)
        if swizzle.bits and swizzle.period > layout.size:
            continue
        by_class: dict[int, tuple[int, int]] = {}
        for row, col in itertools.product(range(0, rows - 8, 4), range(0, cols, 8)):
            if col + max(c for _, c in pattern) >= cols:
                continue
            anchor = layout.bank_class(row, col, elem_bytes)
            first = by_class.setdefault(anchor, (row, col))
            moved = [layout.offset(row + r, col + c) - layout.offset(first[0] + r, first[1] + c)
                     for r, c in pattern]
            assert len(set(moved)) == 1, (str(swizzle), first, (row, col))
            assert moved[0] * elem_bytes % 128 == 0
    assert L.SmemLayout(rows, cols, slab=8).bank_class(0, 0, elem_bytes) is None
