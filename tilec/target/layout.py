"""Layout math: the one source of truth for where elements live.

Shared-memory swizzles, the global-to-shared copy mapping, ldmatrix lane addressing, mma
fragment ownership and bank-conflict counting are plain functions here. The passes choose
with them, the backend emits addresses from them, the tests and pictures check them.

Conventions: a shared tile is stored as ``rows x cols`` with ``cols`` contiguous; offsets
are in elements unless a name says bytes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Sequence

# mma.sync.aligned.m16n8k16: PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16".
MMA_M, MMA_N, MMA_K = 16, 8, 16
# mma.sync.aligned.m16n8k8 with .tf32 inputs: PTX ISA "Matrix Fragments for mma.m16n8k8"; one
# 32-bit element a register, so k 8 (32 bytes of f32, as k16 is 32 bytes of f16).
TF32_K = 8
WARP_SIZE = 32
BANKS = 32
BANK_BYTES = 4


@dataclass(frozen=True)
class Swizzle:
    """CUTLASS-style ``Swizzle<bits, base, shift>`` on element offsets.

    The ``bits`` bits at ``[base + shift, base + shift + bits)`` are XOR-ed into the bits at
    ``[base, base + bits)``: with 16-bit elements and base 3, 16-byte chunks are permuted
    within each 128-byte line by the line's row bits. ``bits = 0`` is the identity.
    """

    bits: int = 0
    base: int = 3
    shift: int = 3

    def __call__(self, offset: int) -> int:
        if self.bits == 0:
            return offset
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return offset ^ ((offset & mask) >> self.shift)

    @property
    def period(self) -> int:
        """Offsets that are multiples of this are moved by whole periods (additive)."""
        return 1 << (self.base + self.shift + self.bits) if self.bits else 1

    def __str__(self) -> str:
        return f"swizzle({self.bits},{self.base},{self.shift})" if self.bits else "linear"


@dataclass(frozen=True)
class SmemLayout:
    """A shared tile stored as ``rows x cols`` elements (``cols`` contiguous), swizzled.

    ``transposed``: the tile's logical (i, j) is stored at (j, i), so that the tile's
    contiguous global dimension stays contiguous in shared memory (16-byte copies).
    """

    rows: int
    cols: int
    swizzle: Swizzle = Swizzle()
    transposed: bool = False

    def offset(self, row: int, col: int) -> int:
        """Element offset of storage coordinate (row, col)."""
        return self.swizzle(row * self.cols + col)

    def logical_offset(self, i: int, j: int) -> int:
        return self.offset(j, i) if self.transposed else self.offset(i, j)

    @property
    def size(self) -> int:
        return self.rows * self.cols

    def with_swizzle(self, swizzle: Swizzle) -> "SmemLayout":
        return SmemLayout(self.rows, self.cols, swizzle, self.transposed)

    def __str__(self) -> str:
        return ("T," if self.transposed else "") + str(self.swizzle)


class DistributedLayout:
    """A tile spread over the warps of a block, each warp owning a ``warp_tile`` of it.

    Within a warp the lanes form a ``lane_grid`` (rows x cols of lanes, row-major in the lane
    index); lane (r, c) starts at ``(r * lane_step[0], c * lane_step[1])`` of its warp tile
    and holds the elements at :meth:`register_offsets` from there, in register order. The
    epilogue and the executor only need these three facts, whatever instruction made the
    tile.
    """

    operand: str
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    lane_grid: tuple[int, int]
    lane_step: tuple[int, int]
    kind: str

    def register_offsets(self) -> list[tuple[int, int]]:
        raise NotImplementedError

    def c_coord(self, warp: int, lane: int, reg: int) -> tuple[int, int]:
        """Tile coordinate of accumulator register ``reg`` of ``lane`` in ``warp``."""
        wm, wn = divmod(warp, self.warps[1])
        lr, lc = divmod(lane, self.lane_grid[1])
        row, col = self._offsets()[reg]
        return (wm * self.warp_tile[0] + lr * self.lane_step[0] + row,
                wn * self.warp_tile[1] + lc * self.lane_step[1] + col)

    def _offsets(self) -> list[tuple[int, int]]:
        return _cached_offsets(self)

    @property
    def regs_per_thread(self) -> int:
        return self.warp_tile[0] * self.warp_tile[1] // WARP_SIZE

    def __str__(self) -> str:
        return (f"{self.kind}_{self.operand.lower()}(warps={self.warps[0]}x{self.warps[1]},"
                f"warp_tile={self.warp_tile[0]}x{self.warp_tile[1]})")


@functools.lru_cache(maxsize=None)
def _cached_offsets(layout: DistributedLayout) -> list[tuple[int, int]]:
    return layout.register_offsets()


@dataclass(frozen=True)
class MmaLayout(DistributedLayout):
    """A tile distributed over warps as mma.m16n8k16 fragments.

    ``operand`` is A, B or C; ``warps`` the warp grid (along M, along N) and ``warp_tile`` the
    (rows, cols) of the C tile each warp owns. A fragments are shared by the warps of one
    warp row, B fragments by those of one warp column. C registers run over the warp's
    (m16, n8) tiles, m fastest, four per tile (PTX ISA 9.7.14.5.8).
    """

    operand: str
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    lane_grid = (8, 4)  # g = lane / 4 picks the row, t = lane % 4 the column pair
    lane_step = (1, 2)
    kind = "mma"

    def register_offsets(self) -> list[tuple[int, int]]:
        offsets = []
        tiles_m = self.warp_tile[0] // MMA_M
        for reg in range(self.regs_per_thread):
            tile, r = divmod(reg, 4)
            tn, tm = divmod(tile, tiles_m)
            offsets.append((tm * MMA_M + 8 * (r // 2), tn * MMA_N + r % 2))
        return offsets


@dataclass(frozen=True)
class Tf32Layout(MmaLayout):
    """A tile distributed over warps as mma.m16n8k8 .tf32 fragments: C exactly as
    :class:`MmaLayout`'s (the m16n8 accumulator fragment is the same); A and B hold one f32
    (rounded to tf32) per register, at :func:`tf32_a_coord` and :func:`tf32_b_coord`, four
    registers per m16 piece of A and two per n8 tile of B, in the mma kind's order."""

    kind = "tf32"


# FFMA ("simt") tiles: a warp is 4 x 8 lanes; a lane owns runs of SIMT_VEC consecutive rows
# (and columns), the runs one lane-grid span apart (16 rows, 32 columns). Runs of 4 make
# every shared-memory fragment read a 16-byte vector, and the spacing makes the 8 lanes of
# a lane row read one whole 128-byte line of B.
SIMT_LANES = (4, 8)
SIMT_VEC = 4
SIMT_K = 4  # k values per fragment load: one 16-byte vector along k


@dataclass(frozen=True)
class SimtLayout(DistributedLayout):
    """A tile distributed over warps for FFMA (fma.rn.f32) products.

    C: lane (r, c) holds rows ``r * 4 + 16 * i + {0..3}`` and columns
    ``c * 4 + 32 * j + {0..3}`` of its warp tile, registers row-major (column fastest).
    A (``[BM, SIMT_K]`` per k step): the lane's rows, register ``row * SIMT_K + k``.
    B (``[SIMT_K, BN]``): the lane's columns, register ``k * cols + col``.
    """

    operand: str
    warps: tuple[int, int]
    warp_tile: tuple[int, int]
    lane_grid = SIMT_LANES
    lane_step = (SIMT_VEC, SIMT_VEC)
    kind = "simt"

    @property
    def lane_rows(self) -> list[int]:
        """Rows of a lane's C (and A) elements, relative to its first row."""
        return _runs(self.warp_tile[0] // SIMT_LANES[0], SIMT_LANES[0] * SIMT_VEC)

    @property
    def lane_cols(self) -> list[int]:
        return _runs(self.warp_tile[1] // SIMT_LANES[1], SIMT_LANES[1] * SIMT_VEC)

    def register_offsets(self) -> list[tuple[int, int]]:
        if self.operand == "A":
            return [(row, k) for row in self.lane_rows for k in range(SIMT_K)]
        if self.operand == "B":
            return [(k, col) for k in range(SIMT_K) for col in self.lane_cols]
        return [(row, col) for row in self.lane_rows for col in self.lane_cols]

    @property
    def regs_per_thread(self) -> int:
        return len(self._offsets())


def _runs(count: int, spacing: int) -> list[int]:
    return [run * spacing + i for run in range(count // SIMT_VEC) for i in range(SIMT_VEC)]


@dataclass(frozen=True)
class SimtLoad:
    """One 16-byte shared load of an FFMA operand's k step, for one lane: the (mn, k) of its
    first element relative to the lane's first (mn, k), the storage dim it runs along, and
    the registers its 4 elements fill."""

    mn: int
    k: int
    along_k: bool
    registers: tuple[int, ...]


def simt_loads(layout: SimtLayout, k_major: bool) -> list[SimtLoad]:
    """The loads of one k step of operand ``layout.operand`` (A or B). With k contiguous in
    shared memory a load covers the SIMT_K values of one row (column); otherwise it covers
    one run of 4 rows (columns) at one k."""
    role = layout.operand
    mns = layout.lane_rows if role == "A" else layout.lane_cols

    def register(i: int, k: int) -> int:
        return i * SIMT_K + k if role == "A" else k * len(mns) + i

    if k_major:
        return [SimtLoad(mn, 0, True, tuple(register(i, k) for k in range(SIMT_K)))
                for i, mn in enumerate(mns)]
    return [SimtLoad(mns[i], k, False, tuple(register(i + q, k) for q in range(SIMT_VEC)))
            for k in range(SIMT_K) for i in range(0, len(mns), SIMT_VEC)]


def simt_lane_mn(role: str, lane: int) -> int:
    """The first row (A) or column (B) of a lane's elements within its warp tile."""
    lane_row, lane_col = divmod(lane, SIMT_LANES[1])
    return (lane_row if role == "A" else lane_col) * SIMT_VEC


# ---------------------------------------------------------------------------------------
# Global-to-shared copies: each thread moves `vec` contiguous elements per access; threads
# walk the tile in storage order so that a warp reads whole contiguous rows (coalesced).


@dataclass(frozen=True)
class CopyMap:
    rows: int
    cols: int
    vec: int  # elements per access
    threads: int

    @property
    def vectors(self) -> int:
        return self.rows * self.cols // self.vec

    @property
    def per_thread(self) -> int:
        return -(-self.vectors // self.threads)

    def coord(self, thread: int, i: int) -> tuple[int, int] | None:
        """(row, col) of the first element of access ``i`` of ``thread``; None when idle."""
        v = thread + i * self.threads
        if v >= self.vectors:
            return None
        per_row = self.cols // self.vec
        return v // per_row, (v % per_row) * self.vec


def copy_map(rows: int, cols: int, vec: int, threads: int) -> CopyMap:
    if cols % vec:
        raise ValueError(f"a row of {cols} elements is not a whole number of {vec}-vectors")
    return CopyMap(rows, cols, vec, threads)


# ---------------------------------------------------------------------------------------
# mma.m16n8k16 fragments. g = lane / 4 (the "group"), t = lane % 4 (thread in group).

def mma_a_coord(lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row m, col k) of A element ``half`` (0/1) of 32-bit register ``reg`` (0..3)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg % 2), 2 * t + half + 8 * (reg // 2)


def mma_b_coord(lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row k, col n) of B element ``half`` of register ``reg`` (0..1)."""
    g, t = divmod(lane, 4)
    return 2 * t + half + 8 * reg, g


def mma_c_coord(lane: int, reg: int) -> tuple[int, int]:
    """(row m, col n) of accumulator register ``reg`` (0..3)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg // 2), 2 * t + reg % 2


# mma.m16n8k8 .tf32 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8"): one f32 per
# 32-bit register; g = lane / 4, t = lane % 4 as for m16n8k16.

def tf32_a_coord(lane: int, reg: int) -> tuple[int, int]:
    """(row m, col k) of A register ``reg`` (0..3) of an m16 x k8 piece: (g, t),
    (g + 8, t), (g, t + 4), (g + 8, t + 4)."""
    g, t = divmod(lane, 4)
    return g + 8 * (reg % 2), t + 4 * (reg // 2)


def tf32_b_coord(lane: int, reg: int) -> tuple[int, int]:
    """(row k, col n) of B register ``reg`` (0..1) of a k8 x n8 tile: (t, g), (t + 4, g)."""
    g, t = divmod(lane, 4)
    return t + 4 * reg, g


def tf32_operand_coord(role: str, lane: int, reg: int) -> tuple[int, int]:
    """(mn, k) of fragment register ``reg`` of ``lane``: register ``4 p + r`` of A is
    register r of m16 piece p, register ``2 p + r`` of B register r of n8 tile p."""
    if role == "A":
        piece, r = divmod(reg, 4)
        m, k = tf32_a_coord(lane, r)
        return piece * MMA_M + m, k
    piece, r = divmod(reg, 2)
    k, n = tf32_b_coord(lane, r)
    return piece * MMA_N + n, k


def tf32_registers(role: str, warp_tile: tuple[int, int]) -> int:
    """Fragment registers one k8 step of operand ``role`` takes per lane."""
    return warp_tile[0] // MMA_M * 4 if role == "A" else warp_tile[1] // MMA_N * 2


def tf32_word_addresses(layout: SmemLayout, role: str, warp_tile: tuple[int, int],
                        warp_index: int, reg: int, k0: int, elem_bytes: int) -> list[int]:
    """Byte addresses the 32 lanes read in the ``ld.shared.b32`` of fragment register
    ``reg`` (warp ``warp_index`` along the operand's mn dim, k step at ``k0``): how operands
    whose mn dim is contiguous in shared memory are loaded (ldmatrix cannot transpose
    32-bit elements)."""
    extent = warp_tile[0] if role == "A" else warp_tile[1]
    k_major = operand_k_major(role, layout)
    result = []
    for lane in range(WARP_SIZE):
        mn, k = tf32_operand_coord(role, lane, reg)
        row, col = operand_storage_coord(k_major, warp_index * extent + mn, k0 + k)
        result.append(layout.offset(row, col) * elem_bytes)
    return result


# ldmatrix.x4: lanes 8j..8j+7 give the row addresses of 8x8 matrix j, and matrix j fills
# destination register j. Per operand, which (mn block, k block) of the 16x16 piece each
# matrix holds, so that register j is the mma's fragment register j:
LDMATRIX_ORDER = {
    "A": ((0, 0), (1, 0), (0, 1), (1, 1)),  # a0..a3 of one m16 x k16 tile
    "B": ((0, 0), (0, 1), (1, 0), (1, 1)),  # b0, b1 of n-tile 0, then of n-tile 1
}


def ldmatrix_lane_coord(operand: str, k_major: bool, lane: int,
                        row_elems: int = 8) -> tuple[int, int]:
    """(mn, k) within an operand piece (16 mn x two 16-byte rows of k, or the transpose)
    whose row address lane ``lane`` supplies; ``row_elems`` elements make one 16-byte
    ldmatrix row (8 of f16, 4 of f32).

    ``k_major``: the shared tile stores k contiguously (A row-major, or B given as B.T);
    then plain ldmatrix gives the fragment: 16x16 of f16, or 16 x 8 of f32, whose 32-bit
    words are exactly the tf32 mma's fragment registers. Otherwise mn is contiguous and
    ``.trans`` does (16-bit elements only).
    """
    mn_block, k_block = LDMATRIX_ORDER[operand][lane // 8]
    r = lane % 8
    if k_major:
        return mn_block * 8 + r, k_block * row_elems
    return mn_block * row_elems, k_block * 8 + r


def operand_storage_coord(k_major: bool, mn: int, k: int) -> tuple[int, int]:
    """(row, col) in the shared tile of operand element (mn, k)."""
    return (mn, k) if k_major else (k, mn)


# ---------------------------------------------------------------------------------------
# Bank conflicts: computed from byte addresses, the way the hardware splits a warp request.

def conflict_degree(addresses: Sequence[int], width: int) -> int:
    """The number of shared-memory wavefronts one warp access needs, divided by the minimum:
    1 means conflict-free. ``addresses`` are the byte addresses of the 32 lanes (None for an
    idle lane), ``width`` the bytes each lane accesses (4, 8 or 16)."""
    # A 128-byte wavefront serves 32 banks: 16-byte accesses go 8 lanes a phase, 8-byte 16.
    lanes_per_phase = min(WARP_SIZE, 128 // width)
    worst = 1
    for start in range(0, len(addresses), lanes_per_phase):
        phase = [a for a in addresses[start:start + lanes_per_phase] if a is not None]
        words_per_bank: dict[int, set[int]] = {}
        for address in phase:
            # Every 4-byte word the access touches, a 2-byte access included.
            for word in range(address // BANK_BYTES, -(-(address + width) // BANK_BYTES)):
                words_per_bank.setdefault(word % BANKS, set()).add(word)
        if words_per_bank:
            worst = max(worst, max(len(words) for words in words_per_bank.values()))
    return worst


def broadcast_conflict_degree(addresses: Sequence[int], width: int) -> int:
    """Like :func:`conflict_degree` for a warp access whose lanes share addresses: lanes
    reading one address are served together, so only distinct addresses compete for banks
    (an FFMA operand read, where 8 lanes want the same row). Wavefronts over the minimum
    for the distinct bytes: 1 means conflict-free."""
    distinct = {a for a in addresses if a is not None}
    words_per_bank: dict[int, set[int]] = {}
    for address in distinct:
        for word in range(address // BANK_BYTES, -(-(address + width) // BANK_BYTES)):
            words_per_bank.setdefault(word % BANKS, set()).add(word)
    if not words_per_bank:
        return 1
    minimum = -(-len(distinct) * width // (BANKS * BANK_BYTES))
    return -(-max(len(words) for words in words_per_bank.values()) // minimum)


def simt_load_addresses(smem: SmemLayout, fragment: SimtLayout, load: SimtLoad,
                        warp_index: int, k0: int, elem_bytes: int) -> list[int]:
    """Byte addresses the 32 lanes read in one FFMA operand load (warp ``warp_index`` along
    the operand's mn dim)."""
    role = fragment.operand
    extent = fragment.warp_tile[0] if role == "A" else fragment.warp_tile[1]
    k_major = operand_k_major(role, smem)
    result = []
    for lane in range(WARP_SIZE):
        mn = warp_index * extent + simt_lane_mn(role, lane) + load.mn
        row, col = operand_storage_coord(k_major, mn, k0 + load.k)
        result.append(smem.offset(row, col) * elem_bytes)
    return result


def ldmatrix_addresses(layout: SmemLayout, operand: str, k_major: bool, mn0: int, k0: int,
                       elem_bytes: int) -> list[int]:
    """Byte addresses the 32 lanes give one ldmatrix.x4 at operand position (mn0, k0)."""
    result = []
    for lane in range(WARP_SIZE):
        mn, k = ldmatrix_lane_coord(operand, k_major, lane, 16 // elem_bytes)
        row, col = operand_storage_coord(k_major, mn0 + mn, k0 + k)
        result.append(layout.offset(row, col) * elem_bytes)
    return result


def operand_k_major(operand: str, layout: SmemLayout) -> bool:
    """Whether k is the contiguous storage dim: A is [m, k] logically, B is [k, n]."""
    return layout.transposed == (operand == "B")


def copy_store_addresses(layout: SmemLayout, cmap: CopyMap, warp: int, i: int,
                         elem_bytes: int) -> list[int | None]:
    """Byte addresses warp ``warp``'s lanes write in access ``i`` of a copy."""
    result: list[int | None] = []
    for lane in range(WARP_SIZE):
        coord = cmap.coord(warp * WARP_SIZE + lane, i)
        result.append(None if coord is None else layout.offset(*coord) * elem_bytes)
    return result


def worst_conflicts(degrees: Iterable[int]) -> int:
    return max(degrees, default=1)


def swizzle_candidates(elem_bytes: int, unit_bytes: tuple[int, ...] = (16,)) -> list[Swizzle]:
    """Swizzles that permute 16-byte chunks: base = log2(elements per 16 bytes); with
    ``unit_bytes`` (16, 32) also those that permute 32-byte pairs of chunks. 32-bit reads
    of 4 rows x 8 consecutive words (tf32 fragments of an mn-contiguous operand) need each
    row's XOR to move its 8 words by whole 32-byte units: two XOR bits of 32-byte units from
    the row index do it at any row width, where 16-byte chunks need three bits, one of them
    from the column, and no candidate at all for 128-byte rows."""
    candidates = [Swizzle(0, {1: 4, 2: 3, 4: 2}[elem_bytes], 3)]
    line = (128 // elem_bytes).bit_length() - 1  # log2(elements per 128-byte line)
    for unit in unit_bytes:
        base = (unit // elem_bytes).bit_length() - 1
        # XOR sources from the 128-byte line index up (shift 3 for 16-byte units).
        candidates += [Swizzle(bits, base, shift) for bits in (1, 2, 3)
                       for shift in range(line - base, line - base + 5)]
    return candidates


# Stage addresses are multiples of this, so XOR-ing a smaller constant into an offset commutes
# with adding the stage address.
XOR_SAFE_BELOW = 128


def offset_relation(reference: list[int], piece: list[int]) -> tuple[int, int] | None:
    """(x, a) such that every lane's byte offset in ``piece`` is (its offset in ``reference``
    XOR x) + a, or None: how the backend derives one access's addresses from another's.
    x < XOR_SAFE_BELOW moves a lane between 16-byte chunks of one 128-byte line (the
    swizzle's doing), a moves whole lines (the tile's rows)."""
    for x in range(0, XOR_SAFE_BELOW, 16):
        adds = {p - (r ^ x) for p, r in zip(piece, reference)}
        if len(adds) == 1:
            return x, adds.pop()
    return None
