"""The generic part of the CPU executor of lowered IR: numpy semantics of the ops every
lowered kernel uses, and the model the families' semantics build on.

:data:`SEMANTICS` gives the generic lowered ops (``smem.alloc``, ``smem.stage``,
``gpu.barrier``, ``frag.load``) a meaning; each instruction family (``frag.ldmatrix`` and
``frag.mma`` in :mod:`tilec.families.mma_sync`, ``frag.lds`` / ``frag.fma`` in
:mod:`tilec.families.ffma`, ``frag.ldtf32`` in :mod:`tilec.families.tf32`) and each
data-movement family (``copy.*`` in :mod:`tilec.families.cp_async`) defines its own ops'
semantics with the helpers here. The op catalogue (:mod:`tilec.families.catalogue`) joins
them all, so ``run_kernel(kernel, args, ops=op_catalogue())`` runs the IR after tiling,
double_buffer, swizzle and fragments with what the GPU would do rather than what the tile
program means: a wrong schedule, swizzle or fragment mapping gives a wrong result here too.
This module imports no family.

The model, one program at a time (one thread block):

- **Shared memory.** Each ``smem.alloc`` is one flat array of ``stages * rows * cols``
  elements in storage order, swizzle applied (:meth:`SmemLayout.offset`), filled with NaN as
  uninitialised memory. ``smem.stage`` is a view (buffer, stage index).
- **Visibility.** A data-movement family keeps its writes in flight as its own state on the
  :class:`BlockState` (:meth:`BlockState.movement_state`); the writes it has completed
  become visible to the block at the next ``gpu.barrier`` (:meth:`BlockState.fence` asks
  each family active in the block, its ``visible_at_barrier`` hook): bar.sync is what
  orders other threads' writes. Until then readers see the old contents, so a missing wait
  or barrier reads stale (or NaN) data.
- **Fragments.** A family's fragment load reads its lanes' elements through
  :func:`read_fragment_lanes` and returns a :class:`Fragment`; its product checks the
  accumulator with :func:`checked_register_map`.
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
  distributed tile (``C``)       the logical tile. Its register file ``[warps, 32, regs]``
                                holds the same elements, permuted by
                                :meth:`DistributedLayout.c_coord` (one register per element), so
                                elementwise ops and ``tile.store`` act as the threads do
  fragment (``A``, ``B``)       :class:`Fragment`: the logical tile plus ``lanes``, the
                                registers ``[warps, 32, regs, 2]`` each lane holds
  ============================  ==========================================================
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from tilec.cpu.interpreter import InterpState, SemanticsFn, TensorRef, storage_dtype
from tilec.ir.core import Op
from tilec.ir.types import TileType
from tilec.target.layout import WARP_SIZE, DistributedLayout, SmemLayout
from tilec.target.smem import stage_elements

__all__ = ["SEMANTICS", "Fragment", "SharedBuffer", "SharedWrite", "MovementFamily",
           "BlockState", "block_state", "share_block_state", "logical_offsets", "register_map",
           "checked_register_map", "read_global", "read_fragment_lanes", "smem_itemsize"]

# ----------------------------------------------------------------------------------------
# values

class Fragment(np.ndarray):
    """An operand fragment: the logical tile (what its type describes) with ``lanes``, the
    registers ``[warps, 32, regs, ...]`` each lane of each warp holds, as the family's load
    delivers them (mma: two 16-bit halves a register). The logical tile shows the first warp
    of each warp row (A) or column (B); the family's product reads ``lanes``."""

    lanes: Optional[np.ndarray]

    def __array_finalize__(self, obj: Any) -> None:
        self.lanes = getattr(obj, "lanes", None)


class SharedBuffer:
    """One ``smem.alloc`` of one thread block, in storage order."""

    def __init__(self, ttype: TileType):
        stages, rows, cols = ttype.shape
        self.stages = stages
        self.stage_size = stage_elements(ttype)  # TMA's padded slabs stored whole
        # NaN marks what no copy wrote yet; integer tiles (i8) have no NaN and start as 0.
        unwritten = np.nan if ttype.dtype.is_float else 0
        self.storage = np.full(stages * self.stage_size, unwritten, storage_dtype(ttype.dtype))
        # The op's value, of its type's shape (the stages go through :meth:`image`).
        self.value = self.storage[:stages * rows * cols].reshape(ttype.shape)
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
                                              + logical_offsets(layout, shape)]


@dataclass
class SharedWrite:
    """Elements a copy puts into a shared buffer, once visible to the block."""

    buffer: SharedBuffer
    offsets: np.ndarray
    values: np.ndarray


class MovementFamily(Protocol):
    """What the block state needs of a data-movement family
    (:class:`tilec.families.movement.MovementFamily`, which this module does not import)."""

    name: str

    def visible_at_barrier(self, state: Any) -> list[SharedWrite]: ...


class BlockState:
    """What one thread block holds besides its SSA values: shared buffers, and each
    data-movement family's state (its writes not yet visible to the block)."""

    def __init__(self, program_id: tuple[int, ...]):
        self.program_id = program_id
        # id(run-time value) -> (the value, its buffer, its stage or None for the buffer)
        self._shared: dict[int, tuple[np.ndarray, SharedBuffer, Optional[int]]] = {}
        # family name -> (the family, its state in this block), made on the first use
        self.movement: dict[str, tuple[MovementFamily, Any]] = {}

    def movement_state(self, family: MovementFamily, new: Callable[[], Any]) -> Any:
        """The state of a data-movement family in this block, made by ``new`` on first use."""
        entry = self.movement.get(family.name)
        if entry is None:
            entry = self.movement[family.name] = (family, new())
        return entry[1]

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
        """bar.sync: every write a movement family has completed becomes visible to the
        whole block."""
        touched = {}
        for family, state in self.movement.values():
            for write in family.visible_at_barrier(state):
                write.buffer.storage[write.offsets] = write.values
                touched[id(write.buffer)] = write.buffer
        for buffer in touched.values():
            buffer.refresh()


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


def share_block_state(state: InterpState, other: InterpState) -> None:
    """Let ``other`` (a fork of ``state`` running a region beside it) see the same block."""
    _BLOCKS[other] = block_state(state)


# ----------------------------------------------------------------------------------------
# index maps (cached: they depend only on layouts and shapes)

@lru_cache(maxsize=None)
def logical_offsets(layout: SmemLayout, shape: tuple[int, ...]) -> np.ndarray:
    """Storage offset of each element (i, j) of a logical tile."""
    rows, cols = shape
    offsets = np.array([[layout.logical_offset(i, j) for j in range(cols)]
                        for i in range(rows)], dtype=np.int64)
    offsets.flags.writeable = False  # shared by every caller through the cache
    return offsets


def register_map(layout: DistributedLayout) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) in the tile of every accumulator register: two ``[warps, 32, regs]``
    arrays from :meth:`DistributedLayout.c_coord`."""
    return _register_map(layout)


@lru_cache(maxsize=None)
def _register_map(layout: DistributedLayout) -> tuple[np.ndarray, np.ndarray]:
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
def _holds_each_element_once(layout: DistributedLayout, shape: tuple[int, ...]) -> bool:
    rows, cols = _register_map(layout)
    inside = bool(((rows < shape[0]) & (cols < shape[1])).all())
    return inside and len(np.unique(rows * shape[1] + cols)) == int(np.prod(shape))


# ----------------------------------------------------------------------------------------
# global memory

def read_global(state: InterpState, op: Op, tensor: TensorRef, indices: Sequence[np.ndarray],
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
            or logical_offsets(rtype.layout, rtype.shape).max() >= buffer.stage_size:
        raise state.error(op, f"a view of type {rtype} does not fit one stage of the buffer")
    image = buffer.image(stage, rtype.layout, rtype.shape)
    block.remember(image, buffer, stage)
    return [image]


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


def _frag_load(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    tensor, *offsets = operands
    rtype: TileType = op.result.type
    rows, cols = checked_register_map(state, op, rtype.layout, rtype.shape)
    coords = (rows, cols)
    indices: list[Any] = [None] * len(offsets)
    for tile_dim, tensor_dim in enumerate(op.attrs["dims"]):
        if tensor_dim >= 0:
            indices[tensor_dim] = offsets[tensor_dim] + coords[tile_dim]
    for tensor_dim, index in enumerate(indices):  # walked by no tile dim: its offset alone
        if index is None:
            indices[tensor_dim] = np.full_like(rows, offsets[tensor_dim])
    masked = op.attrs.get("masked", [True] * len(offsets))
    registers = read_global(state, op, tensor, indices, masked)
    tile = np.empty(rtype.shape, dtype=registers.dtype)
    tile[rows, cols] = registers
    return [tile]


# The generic lowered ops' meaning, by name; the families' ops are defined with their own.
SEMANTICS: dict[str, SemanticsFn] = {
    "smem.alloc": _alloc, "smem.stage": _stage, "gpu.barrier": _barrier,
    "frag.load": _frag_load,
}
