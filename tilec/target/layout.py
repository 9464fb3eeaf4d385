"""Layout math every instruction family shares: the one source of truth for where elements
live in shared memory.

Shared-memory swizzles, the global-to-shared copy mapping, the distributed-layout base class,
an operand's storage orientation and bank-conflict counting are plain functions here. What
one instruction family adds (its fragment layout, the shared-memory addresses its loads read)
lives in its module under :mod:`tilec.families`. The passes choose with these functions, the
backend emits addresses from them, the tests and pictures check them.

Conventions: a shared tile is stored as ``rows x cols`` with ``cols`` contiguous; offsets
are in elements unless a name says bytes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Sequence

WARP_SIZE = 32
BANKS = 32
BANK_BYTES = 4
LINE_BYTES = BANKS * BANK_BYTES  # what one wavefront serves


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

    ``slab``: when not 0, the columns are stored in slabs of ``slab`` columns, one slab after
    the other (``rows x slab`` each): TMA's swizzles take boxes at most one span (128, 64 or
    32 bytes) wide, and wgmma's shared-memory descriptors step from one such slab to the
    next. Slabs are stored whole: where ``cols`` is not a multiple of ``slab`` the last one
    is padded (a TMA box fills it whole; the tile's columns are its first ones).
    """

    rows: int
    cols: int
    swizzle: Swizzle = Swizzle()
    transposed: bool = False
    slab: int = 0

    def offset(self, row: int, col: int) -> int:
        """Element offset of storage coordinate (row, col)."""
        if self.slab:
            slab, col = divmod(col, self.slab)
            return self.swizzle((slab * self.rows + row) * self.slab + col)
        return self.swizzle(row * self.cols + col)

    def offsets(self, coords: Iterable[tuple[int, int]]) -> list[int]:
        """:meth:`offset` of each storage coordinate: the same arithmetic, without two calls
        an element (the swizzle pass scores tens of thousands of addresses per compile)."""
        swizzle = self.swizzle
        if self.slab:
            return [self.offset(row, col) for row, col in coords]
        cols = self.cols
        if not swizzle.bits:
            return [row * cols + col for row, col in coords]
        mask = ((1 << swizzle.bits) - 1) << (swizzle.base + swizzle.shift)
        shift = swizzle.shift
        return [linear ^ ((linear & mask) >> shift)
                for linear in [row * cols + col for row, col in coords]]

    def logical_offset(self, i: int, j: int) -> int:
        return self.offset(j, i) if self.transposed else self.offset(i, j)

    @property
    def stored_cols(self) -> int:
        """The columns storage holds: ``cols``, up to whole slabs."""
        return -(-self.cols // self.slab) * self.slab if self.slab else self.cols

    @property
    def slabs(self) -> int:
        """How many slabs the columns take, the last maybe padded (1 without slabs)."""
        return self.stored_cols // self.slab if self.slab else 1

    @property
    def padded(self) -> bool:
        return self.stored_cols != self.cols

    @property
    def size(self) -> int:
        """Elements of storage, padding included."""
        return self.rows * self.stored_cols

    def bank_class(self, row: int, col: int, elem_bytes: int) -> int | None:
        """The class of storage (row, col) as the anchor of an access pattern: patterns of
        the same shape whose anchors share a class hit the same banks in the same way (their
        offsets differ by a multiple of a whole number of 128-byte lines and of the
        swizzle's period, so every address moves by the same whole lines). None where
        offsets are not linear in (row, col) (slabs): no two anchors are known alike."""
        if self.slab:
            return None
        period = max(self.swizzle.period, LINE_BYTES // elem_bytes)
        return (row * self.cols + col) % period

    def with_swizzle(self, swizzle: Swizzle, slab: int | None = None) -> "SmemLayout":
        return SmemLayout(self.rows, self.cols, swizzle, self.transposed,
                          self.slab if slab is None else slab)

    def __str__(self) -> str:
        pad = f"pad{self.stored_cols - self.cols}," if self.padded else ""
        return (("T," if self.transposed else "") + (f"slab{self.slab}," if self.slab else "")
                + pad + str(self.swizzle))


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

    def warp_rows(self) -> tuple[int, int, int]:
        """Where warp row ``wm`` starts, as (``group``, ``group_rows``, ``step``): at
        ``(wm // group) * group_rows + (wm % group) * step``. A plain grid is (1, the warp
        tile's rows, 0): each warp's rows follow the previous warp's. A layout whose warps
        interleave (wgmma with 128-row warpgroups: a warp's two 16-row strips lie 64 rows
        apart) groups them, and its :meth:`register_offsets` reach across the group."""
        return 1, self.warp_tile[0], 0

    def warp_origin(self, warp: int) -> tuple[int, int]:
        """The tile coordinate of ``warp``'s first element (its lane 0, register 0)."""
        wm, wn = divmod(warp, self.warps[1])
        group, group_rows, step = self.warp_rows()
        return (wm // group * group_rows + wm % group * step, wn * self.warp_tile[1])

    def c_coord(self, warp: int, lane: int, reg: int) -> tuple[int, int]:
        """Tile coordinate of accumulator register ``reg`` of ``lane`` in ``warp``."""
        row0, col0 = self.warp_origin(warp)
        lr, lc = divmod(lane, self.lane_grid[1])
        row, col = self.cached_offsets()[reg]
        return (row0 + lr * self.lane_step[0] + row, col0 + lc * self.lane_step[1] + col)

    def cached_offsets(self) -> tuple[tuple[int, int], ...]:
        """:meth:`register_offsets`, computed once per layout: the backend reads them for
        every chunk of an epilogue's registers."""
        return _cached_offsets(self)

    @property
    def regs_per_thread(self) -> int:
        return self.warp_tile[0] * self.warp_tile[1] // WARP_SIZE

    def __str__(self) -> str:
        return (f"{self.kind}_{self.operand.lower()}(warps={self.warps[0]}x{self.warps[1]},"
                f"warp_tile={self.warp_tile[0]}x{self.warp_tile[1]})")


@functools.lru_cache(maxsize=None)
def _cached_offsets(layout: DistributedLayout) -> tuple[tuple[int, int], ...]:
    return tuple(layout.register_offsets())


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

    def coords(self, i: int, first: int = 0, count: int | None = None
               ) -> list[tuple[int, int] | None]:
        """:meth:`coord` of access ``i`` of threads ``first``, ``first + 1``... (``count`` of
        them, else to the last thread), in one pass: the swizzle pass and the copy emitter
        ask for tens of thousands."""
        per_row, vec, vectors = self.cols // self.vec, self.vec, self.vectors
        start = first + i * self.threads
        stop = start + (self.threads - first if count is None else count)
        return [(v // per_row, (v % per_row) * vec) if v < vectors else None
                for v in range(start, stop)]


def copy_map(rows: int, cols: int, vec: int, threads: int) -> CopyMap:
    if cols % vec:
        raise ValueError(f"a row of {cols} elements is not a whole number of {vec}-vectors")
    return CopyMap(rows, cols, vec, threads)


# ---------------------------------------------------------------------------------------
# Operands of a product: A is [m, k] logically, B is [k, n]; "mn" is A's m or B's n.

def operand_storage_coord(k_major: bool, mn: int, k: int) -> tuple[int, int]:
    """(row, col) in the shared tile of operand element (mn, k)."""
    return (mn, k) if k_major else (k, mn)


def operand_extent(role: str, warp_tile: tuple[int, int]) -> int:
    """The mn extent of one warp's slice of operand ``role``: the warp tile's rows (A) or
    columns (B)."""
    return warp_tile[0] if role == "A" else warp_tile[1]


def warps_along(role: str, warps: tuple[int, int]) -> int:
    """How many warps split operand ``role`` along mn: the warp grid's rows (A) or columns
    (B); the warps of one warp row share their A slice, those of one column their B slice."""
    return warps[0] if role == "A" else warps[1]


# ---------------------------------------------------------------------------------------
# Bank conflicts: computed from byte addresses, the way the hardware splits a warp request.

def conflict_degree(addresses: Sequence[int], width: int) -> int:
    """The number of shared-memory wavefronts one warp access needs, divided by the minimum:
    1 means conflict-free. ``addresses`` are the byte addresses of the 32 lanes (None for an
    idle lane), ``width`` the bytes each lane accesses (4, 8 or 16)."""
    # Moving every address by whole 128-byte lines moves every word by a multiple of the 32
    # banks, which changes no degree: each pattern is counted once, from its first line (the
    # swizzle pass scores a few dozen patterns hundreds of times per compile).
    busy = [address for address in addresses if address is not None]
    if not busy:
        return 1
    line = min(busy) // LINE_BYTES * LINE_BYTES
    return _pattern_degree(
        tuple(None if address is None else address - line for address in addresses), width)


@functools.lru_cache(maxsize=4096)
def _pattern_degree(addresses: tuple[int | None, ...], width: int) -> int:
    """:func:`conflict_degree` of one pattern."""
    # A 128-byte wavefront serves 32 banks: 16-byte accesses go 8 lanes a phase, 8-byte 16.
    lanes_per_phase = min(WARP_SIZE, 128 // width)
    worst = 1
    for start in range(0, len(addresses), lanes_per_phase):
        # Every distinct 4-byte word the phase touches (a 2-byte access included), counted
        # per bank: a bank serves one word a wavefront.
        words = {word for address in addresses[start:start + lanes_per_phase]
                 if address is not None
                 for word in range(address // BANK_BYTES, -(-(address + width) // BANK_BYTES))}
        per_bank = [0] * BANKS
        for word in words:
            per_bank[word % BANKS] += 1
        worst = max(worst, max(per_bank))
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


def operand_k_major(operand: str, layout: SmemLayout) -> bool:
    """Whether k is the contiguous storage dim: A is [m, k] logically, B is [k, n]."""
    return layout.transposed == (operand == "B")


def copy_store_addresses(layout: SmemLayout, cmap: CopyMap, warp: int, i: int,
                         elem_bytes: int) -> list[int | None]:
    """Byte addresses warp ``warp``'s lanes write in access ``i`` of a copy."""
    coords = cmap.coords(i, warp * WARP_SIZE, WARP_SIZE)
    offsets = iter(layout.offsets([coord for coord in coords if coord is not None]))
    return [None if coord is None else next(offsets) * elem_bytes for coord in coords]


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
