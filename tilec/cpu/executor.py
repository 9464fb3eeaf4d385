"""A CPU executor of the IR after every pass: numpy semantics for the lowered ops.

:data:`SEMANTICS` gives each op the passes introduce (``smem.*``, ``copy.*``, ``gpu.barrier``,
``frag.*``) a meaning; the op catalogue (:mod:`tilec.families`) attaches it, with those of
:mod:`tilec.cpu.executor_simt` and :mod:`tilec.cpu.executor_tf32`, to the op definitions, so
:func:`tilec.cpu.interpreter.run_kernel` (re-exported here) runs the IR after tiling,
double_buffer, swizzle and fragments, with what the GPU would do rather than what the tile
program means: a wrong schedule, swizzle or fragment mapping gives a wrong result here too.
The helpers the FFMA and tf32 product kinds' semantics share with mma's are public here.

The model, one program at a time (one thread block):

- **Shared memory.** Each ``smem.alloc`` is one flat array of ``stages * rows * cols``
  elements in storage order, swizzle applied (:meth:`SmemLayout.offset`), filled with NaN as
  uninitialised memory. ``smem.stage`` is a view (buffer, stage index).
- **Copies.** ``copy.global_to_shared`` moves the tile as the threads of
  :func:`~tilec.target.layout.copy_map` do: vector ``i`` lands at the swizzled offset of its first
  element, its ``vec`` elements contiguous from there. Elements outside the tensor along a
  ``masked`` dim are 0; a false predicate writes zeros everywhere (cp.async with src-size 0,
  or the zeroed registers of a synchronous copy). Reading outside the tensor along a dim
  that is not masked is an error: the GPU would read whatever lies there.
- **Visibility.** ``mode = async`` writes wait in the open group; ``copy.commit`` closes it;
  ``copy.wait {pending = n}`` completes all but the newest ``n`` groups (cp.async.wait_group).
  Completed async writes and synchronous writes become visible to the block at the next
  ``gpu.barrier``: a thread's wait says nothing about the other threads' copies, only
  bar.sync orders them. Until then readers see the old contents, so a missing wait or
  barrier reads stale (or NaN) data. Races where a copy overwrites a stage still being read
  are not detected: reads happen in program order, before the copy's data lands.
- **ldmatrix.** For each warp and lane, the row address the lane gives
  (:func:`~tilec.target.layout.ldmatrix_lane_coord`, :func:`~tilec.target.layout.operand_storage_coord`,
  :meth:`SmemLayout.offset`), then the instruction's distribution (PTX ISA 9.7.14.5.15): lane
  ``l`` gets in register ``j`` elements ``2 * (l % 4) + {0, 1}`` of row ``l // 4`` of matrix
  ``j`` (the 8 rows lanes ``8j..8j+7`` point at), or with ``.trans`` (when k is not the
  contiguous storage dim) element ``l // 4`` of rows ``2 * (l % 4) + {0, 1}``. One x4 per
  16-wide piece of the warp tile, registers in the order the backend issues them.
- **mma.** Per warp, the fragments are unpacked with :func:`~tilec.target.layout.mma_a_coord` /
  ``mma_b_coord`` / ``mma_c_coord`` in the backend's register order (A: registers
  ``4 tm .. 4 tm + 3`` per m16 piece; B: ``2 tn, 2 tn + 1`` per n8 tile; C: ``4 (tn *
  tiles_m + tm) + r``) and ``D = f32(C + A @ B)`` with the products summed in float64: 16-bit
  products are exact, so this is one rounding per mma (per k16 step). mma.sync's internal
  accumulation is not specified bit for bit; this is at least as accurate. Fragments of the
  tf32 kind (:data:`MMA_FRAGMENTS`) hold one f32, already rounded to tf32 by
  ``frag.ldtf32`` (:mod:`tilec.cpu.executor_tf32`), at :func:`~tilec.target.layout.tf32_a_coord` /
  ``tf32_b_coord``, one m16n8k8 per k8 step; tf32 products are exact in float64 too.
- **Values.** The interpreter checks every tile result against its type's shape, so values
  keep their types' shapes:

  ============================  ==========================================================
  IR value                      run-time value
  ============================  ==========================================================
  ``smem.alloc``                the buffer's storage, reshaped to the type's shape
                                (contents in storage order)
  ``smem.stage``                the stage seen through the view's layout as a logical
                                ``[rows, cols]`` tile, updated in place when its visible
                                contents change (the frontend's ``tile.dot`` reads it)
  distributed tile (``mma_c``)  the logical tile. Its register file ``[warps, 32, regs]``
                                holds the same elements, permuted by
                                :meth:`MmaLayout.c_coord` (one register per element), so
                                elementwise ops and ``tile.store`` act as the threads do
  fragment (``mma_a/b``)        :class:`Fragment`: the logical tile plus ``lanes``, the
                                registers ``[warps, 32, regs, 2]`` each lane holds
  ============================  ==========================================================
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional, Sequence

import numpy as np

from tilec.cpu.interpreter import InterpState, SemanticsFn, TensorRef, run_kernel, storage_dtype
from tilec.ir.core import Op
from tilec.ir.types import TileType
from tilec.families.mma_sync import (MMA_K, MMA_M, MMA_N, MmaLayout, ldmatrix_lane_coord,
                                     mma_a_coord, mma_b_coord, mma_c_coord)
from tilec.families.tf32 import TF32_K, tf32_a_coord, tf32_b_coord
from tilec.target.layout import (WARP_SIZE, DistributedLayout, SmemLayout, copy_map,
                                 operand_k_major, operand_storage_coord)

__all__ = ["run_kernel", "SEMANTICS", "Fragment", "SharedBuffer", "BlockState", "block_state",
           "register_map", "checked_register_map", "ldmatrix_index", "read_fragment_lanes",
           "smem_itemsize"]

# ldmatrix moves 8x8 matrices of 16-bit elements: one row is 16 bytes, 8 elements.
LDMATRIX_ROW = 8


# ----------------------------------------------------------------------------------------
# values

class Fragment(np.ndarray):
    """An mma operand fragment: the logical tile (what its type describes) with ``lanes``,
    the registers ``[warps, 32, regs, 2]`` each lane of each warp holds (two 16-bit halves a
    register). The logical tile shows the first warp of each warp row (A) or column (B);
    ``frag.mma`` reads ``lanes``."""

    lanes: Optional[np.ndarray]

    def __array_finalize__(self, obj: Any) -> None:
        self.lanes = getattr(obj, "lanes", None)


class SharedBuffer:
    """One ``smem.alloc`` of one thread block, in storage order."""

    def __init__(self, ttype: TileType):
        stages, rows, cols = ttype.shape
        self.stages = stages
        self.stage_size = rows * cols
        self.storage = np.full(stages * self.stage_size, np.nan, storage_dtype(ttype.dtype))
        self.value = self.storage.reshape(ttype.shape)
        self._images: dict[tuple[int, SmemLayout, tuple[int, ...]], np.ndarray] = {}

    def image(self, stage: int, layout: SmemLayout, shape: tuple[int, ...]) -> np.ndarray:
        """Stage ``stage`` as a logical tile through ``layout``: one array per (stage,
        layout), kept current by :meth:`refresh`, so a view taken before a copy lands still
        shows the copy once it is visible."""
        key = (stage, layout, tuple(shape))
        if key not in self._images:
            self._images[key] = np.empty(shape, self.storage.dtype)
            self._refresh(key)
        return self._images[key]

    def refresh(self) -> None:
        """Bring every image up to date after writes to ``storage``."""
        for key in self._images:
            self._refresh(key)

    def _refresh(self, key: tuple[int, SmemLayout, tuple[int, ...]]) -> None:
        stage, layout, shape = key
        self._images[key][...] = self.storage[stage * self.stage_size
                                              + _logical_offsets(layout, shape)]


@dataclass
class _Write:
    """Elements a copy puts into a shared buffer, once visible."""

    buffer: SharedBuffer
    offsets: np.ndarray
    values: np.ndarray


class BlockState:
    """What one thread block holds besides its SSA values: shared buffers and copies that
    are not visible yet."""

    def __init__(self, program_id: tuple[int, ...]):
        self.program_id = program_id
        # id(run-time value) -> (the value, its buffer, its stage or None for the buffer)
        self._shared: dict[int, tuple[np.ndarray, SharedBuffer, Optional[int]]] = {}
        self.open_group: list[_Write] = []
        self.groups: list[list[_Write]] = []  # committed cp.async groups, oldest first
        self.unfenced: list[_Write] = []  # complete, visible after the next barrier

    def remember(self, value: np.ndarray, buffer: SharedBuffer, stage: Optional[int]) -> None:
        self._shared[id(value)] = (value, buffer, stage)

    def shared(self, state: InterpState, op: Op, value: Any, want_stage: bool
               ) -> tuple[SharedBuffer, int]:
        entry = self._shared.get(id(value))
        if entry is None or entry[0] is not value or (entry[2] is None) == want_stage:
            what = "smem.stage view" if want_stage else "smem.alloc buffer"
            raise state.error(op, f"operand is not an {what} of this program")
        return entry[1], entry[2] if entry[2] is not None else 0

    def fence(self) -> None:
        """bar.sync: every completed write becomes visible to the whole block."""
        touched = {}
        for write in self.unfenced:
            write.buffer.storage[write.offsets] = write.values
            touched[id(write.buffer)] = write.buffer
        for buffer in touched.values():
            buffer.refresh()
        self.unfenced = []


# One block state per interpreter run, replaced when the program id changes: programs run one
# after another, each with fresh shared memory.
_BLOCKS: "weakref.WeakKeyDictionary[InterpState, BlockState]" = weakref.WeakKeyDictionary()


def block_state(state: InterpState) -> BlockState:
    """The state of the thread block ``state`` is running."""
    block = _BLOCKS.get(state)
    if block is None or block.program_id != state.program_id:
        block = BlockState(state.program_id)
        _BLOCKS[state] = block
    return block


# ----------------------------------------------------------------------------------------
# index maps (cached: they depend only on layouts and shapes)

@lru_cache(maxsize=None)
def _logical_offsets(layout: SmemLayout, shape: tuple[int, ...]) -> np.ndarray:
    """Storage offset of each element (i, j) of a logical tile."""
    rows, cols = shape
    offsets = np.array([[layout.logical_offset(i, j) for j in range(cols)]
                        for i in range(rows)], dtype=np.int64)
    offsets.flags.writeable = False  # shared by every caller through the cache
    return offsets


@dataclass(frozen=True)
class _CopyPlan:
    offsets: np.ndarray  # storage offset of each element the copy writes, within a stage
    logical: tuple[np.ndarray, np.ndarray]  # its (i, j) in the tile
    vector_starts: np.ndarray  # storage offset of each vector's first element


@lru_cache(maxsize=None)
def _copy_plan(layout: SmemLayout, vec: int, threads: int) -> _CopyPlan:
    cmap = copy_map(layout.rows, layout.cols, vec, threads)
    starts, rows, cols = [], [], []
    for thread in range(threads):
        for i in range(cmap.per_thread):
            coord = cmap.coord(thread, i)
            if coord is not None:
                starts.append(layout.offset(*coord))
                rows.append(coord[0])
                cols.append(coord[1])
    starts_arr = np.array(starts, dtype=np.int64)
    element = np.arange(vec)
    # The hardware stores a vector's elements contiguously from its swizzled address.
    offsets = (starts_arr[:, None] + element).ravel()
    row = np.repeat(np.array(rows, dtype=np.int64), vec)
    col = (np.array(cols, dtype=np.int64)[:, None] + element).ravel()
    logical = (col, row) if layout.transposed else (row, col)
    for array in (offsets, starts_arr, *logical):
        array.flags.writeable = False  # shared by every caller through the cache
    return _CopyPlan(offsets, logical, starts_arr)


def register_map(layout: MmaLayout) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the tile of every accumulator register: two ``[warps, 32, regs]``
    arrays from :meth:`MmaLayout.c_coord`."""
    return _register_map(layout)


@lru_cache(maxsize=None)
def _register_map(layout: MmaLayout) -> tuple[np.ndarray, np.ndarray]:
    warps = layout.warps[0] * layout.warps[1]
    coords = np.array([[[layout.c_coord(w, lane, r) for r in range(layout.regs_per_thread)]
                        for lane in range(WARP_SIZE)] for w in range(warps)], dtype=np.int64)
    coords.flags.writeable = False  # shared by every caller through the cache
    return coords[..., 0], coords[..., 1]


def checked_register_map(state: InterpState, op: Op, layout: Any, shape: tuple[int, ...]
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The register map of a distributed tile, checked to hold each element exactly once."""
    if not isinstance(layout, DistributedLayout) or layout.operand != "C":
        raise state.error(op, f"expected a tile in an accumulator layout, got {layout}")
    if not _holds_each_element_once(layout, tuple(shape)):
        raise state.error(op, f"{layout} does not hold each element of a "
                              f"{shape[0]}x{shape[1]} tile exactly once")
    return _register_map(layout)


@lru_cache(maxsize=None)
def _holds_each_element_once(layout: MmaLayout, shape: tuple[int, ...]) -> bool:
    rows, cols = _register_map(layout)
    inside = bool(((rows < shape[0]) & (cols < shape[1])).all())
    return inside and len(np.unique(rows * shape[1] + cols)) == int(np.prod(shape))


@lru_cache(maxsize=None)
def ldmatrix_index(layout: SmemLayout, role: str, warps: tuple[int, int],
                   warp_tile: tuple[int, int], k0: int,
                   elem_bytes: int = 2) -> tuple[np.ndarray, bool]:
    """Storage offset (within a stage) of every element ``[warps, 32, regs, halves]`` the
    warps' ldmatrix.x4 instructions deliver for one k step (k16 of 16-bit elements, two
    halves a register; k8 of 32-bit ones, one), and whether every row address is 16-byte
    aligned, as ldmatrix requires. ldmatrix moves 32-bit words: lane ``l`` gets word
    ``l % 4`` of row ``l // 4`` whatever the elements are."""
    k_major = operand_k_major(role, layout)
    row_elems = 16 // elem_bytes  # one 16-byte row
    halves = 4 // elem_bytes  # elements per 32-bit word
    extent = warp_tile[0] if role == "A" else warp_tile[1]
    pieces = range(0, extent, 2 * LDMATRIX_ROW)
    count = warps[0] * warps[1]
    addresses = np.empty((count, len(pieces), WARP_SIZE), dtype=np.int64)
    for w in range(count):
        # A is shared along a warp row, B along a warp column.
        warp_index = w // warps[1] if role == "A" else w % warps[1]
        for p, mn0 in enumerate(pieces):
            for lane in range(WARP_SIZE):
                mn, k = ldmatrix_lane_coord(role, k_major, lane, row_elems)
                row, col = operand_storage_coord(k_major, warp_index * extent + mn0 + mn,
                                                 k0 + k)
                addresses[w, p, lane] = layout.offset(row, col)
    lane = np.arange(WARP_SIZE)[:, None, None]
    matrix = np.arange(4)[None, :, None]
    half = np.arange(halves)[None, None, :]
    if k_major:
        supplier, within = 8 * matrix + lane // 4, halves * (lane % 4) + half
    else:  # .trans, of 16-bit elements
        supplier, within = 8 * matrix + 2 * (lane % 4) + half, lane // 4
    index = addresses[:, :, supplier] + within  # [warps, pieces, 32, 4, halves]
    # Register 4 p + j holds matrix j of piece p: the backend's order.
    index = index.transpose(0, 2, 1, 3, 4).reshape(count, WARP_SIZE, 4 * len(pieces), halves)
    index.flags.writeable = False
    return index, not np.any(addresses % row_elems)


# Per mma fragment kind (a DistributedLayout's kind): the instruction's k, the elements a
# 32-bit register holds, and the (m, k) of A and (k, n) of B of each (lane, reg, half).
MMA_FRAGMENTS = {
    "mma": (MMA_K, 2, mma_a_coord, mma_b_coord),  # m16n8k16, PTX ISA 9.7.14.5.8
    "tf32": (TF32_K, 1, lambda lane, r, h: tf32_a_coord(lane, r),  # m16n8k8 .tf32
             lambda lane, r, h: tf32_b_coord(lane, r)),
}


@lru_cache(maxsize=None)
def _fragment_positions(kind: str = "mma") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat position in the 16 x k A, k x 8 B and 16x8 C tiles of one mma of each (lane,
    reg, half) or (lane, reg), in C order: the fragment layouts of :data:`MMA_FRAGMENTS`."""
    mma_k, halves, a_coord, b_coord = MMA_FRAGMENTS[kind]
    a = [m * mma_k + k for lane in range(WARP_SIZE) for r in range(4) for h in range(halves)
         for m, k in [a_coord(lane, r, h)]]
    b = [k * MMA_N + n for lane in range(WARP_SIZE) for r in range(2) for h in range(halves)
         for k, n in [b_coord(lane, r, h)]]
    c = [m * MMA_N + n for lane in range(WARP_SIZE) for r in range(4)
         for m, n in [mma_c_coord(lane, r)]]
    return np.array(a), np.array(b), np.array(c)


@lru_cache(maxsize=None)
def _fragment_tile_map(role: str, warps: tuple[int, int], warp_tile: tuple[int, int]
                       ) -> tuple[np.ndarray, ...]:
    """(warp, lane, reg, half) and the (row, col) they hold in the logical fragment tile, for
    the first warp of each warp row (A) or warp column (B)."""
    entries = []
    if role == "A":
        for wm in range(warps[0]):
            for tm in range(warp_tile[0] // MMA_M):
                for lane in range(WARP_SIZE):
                    for r in range(4):
                        for h in range(2):
                            m, k = mma_a_coord(lane, r, h)
                            entries.append((wm * warps[1], lane, 4 * tm + r, h,
                                            wm * warp_tile[0] + tm * MMA_M + m, k))
    else:
        for wn in range(warps[1]):
            for tn in range(warp_tile[1] // MMA_N):
                for lane in range(WARP_SIZE):
                    for r in range(2):
                        for h in range(2):
                            k, n = mma_b_coord(lane, r, h)
                            entries.append((wn, lane, 2 * tn + r, h, k,
                                            wn * warp_tile[1] + tn * MMA_N + n))
    return tuple(np.array(column, dtype=np.int64) for column in zip(*entries))


# ----------------------------------------------------------------------------------------
# global memory

def _read(state: InterpState, op: Op, tensor: TensorRef, indices: Sequence[np.ndarray],
          masked: Sequence[bool]) -> np.ndarray:
    """Tensor elements at ``indices`` (one index array per dim), 0 outside along masked
    dims; outside along an unmasked dim is an error (the GPU reads whatever lies there)."""
    inside = [(index >= 0) & (index < size) for index, size in zip(indices, tensor.array.shape)]
    read = np.ones(indices[0].shape, dtype=bool)
    for dim, ok in enumerate(inside):
        if masked[dim]:
            read &= ok
    for dim, ok in enumerate(inside):
        if not masked[dim] and np.any(read & ~ok):
            raise state.error(op, f"reads '{tensor.name}' outside its {tensor.array.shape[dim]} "
                                  f"elements along dim {dim}, which the op does not mask "
                                  "(it was compiled for sizes the tiles divide)")
    values = np.zeros(indices[0].shape, dtype=storage_dtype(tensor.dtype))
    values[read] = tensor.read(tuple(index[read] for index in indices))
    return values


# ----------------------------------------------------------------------------------------
# semantics

def _alloc(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    buffer = SharedBuffer(op.result.type)
    block_state(state).remember(buffer.value, buffer, None)
    return [buffer.value]


def _stage(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    block = block_state(state)
    buffer, _ = block.shared(state, op, operands[0], want_stage=False)
    stage = operands[1]
    if not 0 <= stage < buffer.stages:
        raise state.error(op, f"stage {stage} of a {buffer.stages}-stage buffer")
    rtype = op.result.type
    if not isinstance(rtype.layout, SmemLayout) or rtype.layout.size != buffer.stage_size \
            or _logical_offsets(rtype.layout, rtype.shape).max() >= buffer.stage_size:
        raise state.error(op, f"a view of type {rtype} does not fit one stage of the buffer")
    image = buffer.image(stage, rtype.layout, rtype.shape)
    block.remember(image, buffer, stage)
    return [image]


def _copy(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor: TensorRef = operands[0]
    rank = op.operands[0].type.rank
    offsets = operands[1:1 + rank]
    view_type: TileType = op.operands[1 + rank].type
    predicate = operands[2 + rank] if len(operands) > 2 + rank else True
    block = block_state(state)
    buffer, stage = block.shared(state, op, operands[1 + rank], want_stage=True)
    layout: SmemLayout = view_type.layout
    vec, threads = op.attrs["vec"], op.attrs["threads"]
    if rank != 2 or layout.size != int(np.prod(view_type.shape)):
        raise state.error(op, f"copies 2-D tiles into a layout of their size; got a {rank}-D "
                              f"tensor into {view_type}")
    plan = _copy_plan(layout, vec, threads)
    if op.attrs["mode"] == "async" and np.any(plan.vector_starts % vec):
        raise state.error(op, f"a {vec}-element cp.async lands at an offset that is not a "
                              f"multiple of {vec} under {layout}")
    destination = stage * buffer.stage_size + plan.offsets
    if destination.max(initial=0) >= buffer.storage.size:
        raise state.error(op, "writes past the end of the shared buffer")
    if predicate:
        masked = op.attrs.get("masked", [True] * rank)
        indices = [offset + coord for offset, coord in zip(offsets, plan.logical)]
        values = _read(state, op, tensor, indices, masked)
    else:  # no global read; zeros land (src-size 0, or the zeroed registers of a sync copy)
        values = np.zeros(plan.offsets.shape, dtype=buffer.storage.dtype)
    write = _Write(buffer, destination, values)
    if op.attrs["mode"] == "async":
        block.open_group.append(write)
    else:
        block.unfenced.append(write)
    return []


def _commit(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    block = block_state(state)
    block.groups.append(block.open_group)
    block.open_group = []
    return []


def _wait(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    pending = op.attrs["pending"]
    if not isinstance(pending, int) or pending < 0:
        raise state.error(op, f"pending must be a non-negative integer, got {pending!r}")
    block = block_state(state)
    done = max(0, len(block.groups) - pending)
    for group in block.groups[:done]:
        block.unfenced.extend(group)
    block.groups = block.groups[done:]
    return []


def _barrier(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    # The one place where other threads' writes become visible: a hook for anything that
    # models more of the memory model (per-thread visibility, race checks).
    block_state(state).fence()
    return []


def smem_itemsize(op: Op) -> int:
    """Bytes per element of the shared tile a fragment load reads, as the GPU stores it."""
    return op.operands[0].type.dtype.bytes


def read_fragment_lanes(state: InterpState, op: Op, view: Any, layout_type: type,
                        index: Callable[[SmemLayout, Any, int], tuple[np.ndarray, bool]],
                        misaligned: str) -> np.ndarray:
    """What a fragment load (``frag.ldmatrix``, ``frag.lds``, ``frag.ldtf32``) reads: the
    elements of its stage at ``index(shared layout, fragment layout, k0)``, the lanes'
    flat offsets into the stage and whether every access is aligned. Checks that the result
    layout is the load's operand of ``layout_type``, the alignment (``misaligned`` names
    the access) and that the stage holds every offset."""
    buffer, stage = block_state(state).shared(state, op, view, want_stage=True)
    smem: SmemLayout = op.operands[0].type.layout
    fragment = op.result.type.layout
    role, k0 = op.attrs["operand"], op.attrs["k0"]
    if not isinstance(fragment, layout_type) or fragment.operand != role:
        raise state.error(op, f"operand {role} loaded into a tile of layout {fragment}")
    offsets, aligned = index(smem, fragment, k0)
    if not aligned:
        raise state.error(op, f"{misaligned} under {smem}")
    if offsets.max() >= buffer.stage_size:
        raise state.error(op, f"k0 = {k0} reads past the end of the stage")
    return buffer.storage[stage * buffer.stage_size + offsets]


def _ldmatrix(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    rtype: TileType = op.result.type
    lanes = read_fragment_lanes(
        state, op, operands[0], MmaLayout,
        lambda smem, mma, k0: ldmatrix_index(smem, mma.operand, mma.warps, mma.warp_tile, k0),
        "an ldmatrix row address is not 16-byte aligned")
    mma = rtype.layout
    warp, lane, reg, half, row, col = _fragment_tile_map(mma.operand, mma.warps, mma.warp_tile)
    tile = np.full(rtype.shape, np.nan, dtype=lanes.dtype)
    if row.max() >= rtype.shape[0] or col.max() >= rtype.shape[1]:
        raise state.error(op, f"{mma} does not fit a {list(rtype.shape)} tile")
    tile[row, col] = lanes[warp, lane, reg, half]
    fragment = tile.view(Fragment)
    fragment.lanes = lanes
    return [fragment]


def _lanes(state: InterpState, op: Op, value: Any, which: str) -> np.ndarray:
    if not isinstance(value, Fragment) or value.lanes is None:
        raise state.error(op, f"operand {which} is not a fragment made by a fragment load")
    return value.lanes


def _mma(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    a_type, b_type, c_type = (v.type for v in op.operands)
    a_lanes = _lanes(state, op, operands[0], "A")
    b_lanes = _lanes(state, op, operands[1], "B")
    acc = operands[2]
    c_layout: MmaLayout = c_type.layout
    rows, cols = checked_register_map(state, op, c_layout, c_type.shape)
    for t in (a_type, b_type):
        if (t.layout.warps, t.layout.warp_tile, t.layout.kind) != (
                c_layout.warps, c_layout.warp_tile, c_layout.kind):
            raise state.error(op, f"fragment layout {t.layout} does not match the "
                                  f"accumulator's {c_layout}")
    if c_layout.kind not in MMA_FRAGMENTS:
        raise state.error(op, f"no mma fragments of kind {c_layout.kind!r}")
    mma_k, halves = MMA_FRAGMENTS[c_layout.kind][:2]
    tiles_m = c_layout.warp_tile[0] // MMA_M
    tiles_n = c_layout.warp_tile[1] // MMA_N
    warps = a_lanes.shape[0]
    if a_lanes.size != warps * WARP_SIZE * 4 * tiles_m * halves \
            or b_lanes.size != warps * WARP_SIZE * 2 * tiles_n * halves:
        raise state.error(op, "fragments hold the wrong number of registers for the warp tile")
    a_pos, b_pos, c_pos = _fragment_positions(c_layout.kind)
    # Per warp and m16 piece the 16 x k A tile, per n8 tile the k x 8 B tile; positions a
    # fragment does not fill stay NaN.
    a = np.full((warps, tiles_m, MMA_M * mma_k), np.nan)
    a[..., a_pos] = a_lanes.reshape(warps, WARP_SIZE, tiles_m, 4, halves).transpose(
        0, 2, 1, 3, 4).reshape(warps, tiles_m, -1)
    b = np.full((warps, tiles_n, mma_k * MMA_N), np.nan)
    b[..., b_pos] = b_lanes.reshape(warps, WARP_SIZE, tiles_n, 2, halves).transpose(
        0, 2, 1, 3, 4).reshape(warps, tiles_n, -1)
    # Accumulator registers 4 (tn * tiles_m + tm) + r of each lane.
    registers = acc[rows, cols].reshape(warps, WARP_SIZE, tiles_n, tiles_m, 4)
    c = np.empty((warps, tiles_m, tiles_n, MMA_M * MMA_N))
    c[..., c_pos] = registers.transpose(0, 3, 2, 1, 4).reshape(warps, tiles_m, tiles_n, -1)
    product = (a.reshape(warps, tiles_m, 1, MMA_M, mma_k)
               @ b.reshape(warps, 1, tiles_n, mma_k, MMA_N))
    d = (c + product.reshape(warps, tiles_m, tiles_n, -1)).astype(np.float32)
    d_registers = d[..., c_pos].reshape(warps, tiles_m, tiles_n, WARP_SIZE, 4).transpose(
        0, 3, 2, 1, 4).reshape(warps, WARP_SIZE, -1)
    result = np.empty(c_type.shape, dtype=np.float32)
    result[rows, cols] = d_registers
    return [result]


def _frag_load(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor, *offsets = operands
    rtype: TileType = op.result.type
    rows, cols = checked_register_map(state, op, rtype.layout, rtype.shape)
    coords = (rows, cols)
    indices: list[Any] = [None] * len(offsets)
    for tile_dim, tensor_dim in enumerate(op.attrs["dims"]):
        if tensor_dim >= 0:
            indices[tensor_dim] = offsets[tensor_dim] + coords[tile_dim]
    masked = op.attrs.get("masked", [True] * len(offsets))
    registers = _read(state, op, tensor, indices, masked)
    tile = np.empty(rtype.shape, dtype=registers.dtype)
    tile[rows, cols] = registers
    return [tile]


# The lowered ops' meaning, by name. The FFMA and tf32 product kinds' ops live beside, in
# executor_simt and executor_tf32, with their own tables.
SEMANTICS: dict[str, SemanticsFn] = {
    "smem.alloc": _alloc, "smem.stage": _stage,
    "copy.global_to_shared": _copy, "copy.commit": _commit, "copy.wait": _wait,
    "gpu.barrier": _barrier,
    "frag.ldmatrix": _ldmatrix, "frag.mma": _mma, "frag.load": _frag_load,
}
