"""What a TMA box is and where it lands (sm_90): the pieces the TMA loads
(:mod:`tilec.families.tma`) and the staged stores (:mod:`tilec.families.staged_store`) share.

A box is one ``cp.async.bulk.tensor`` transfer (PTX ISA 9.7.9.25.5): ``inner x outer``
elements of a tensor, ``inner`` one row of the map's swizzle span (CU_TENSOR_MAP_SWIZZLE_128B,
_64B or _32B: 128, 64 or 32 bytes), laid in shared memory as a slab swizzled by 8-row atom; a
tile is several slabs side by side. Here: that layout in each span, the box an op moves
(:class:`Box`) and the one the launcher encodes a tensor's map with (:func:`tensor_map_box`),
and the PTX operands every TMA instruction takes (the map's address, the box's coordinates,
the electing predicates).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tilec.backend.context import Context
from tilec.ir.core import Kernel, Op, Value, defining_op
from tilec.target.layout import SmemLayout, Swizzle, operand_k_major

LOAD, STORE = "tma.load", "tile.store"

SLAB_BYTES = 128  # the widest span, and the staged stores' (tma_store)
# TMA's swizzle spans, widest first: the inner extent in bytes of one box, and of one row of
# the 8-row atom its 16-byte chunks are permuted in (CU_TENSOR_MAP_SWIZZLE_{128B,64B,32B}).
SPANS = (128, 64, 32)
MAX_BOX = 256  # cuTensorMapEncodeTiled's limit on each box dim
CHUNK_BYTES = 16  # a swizzle's unit, and a row of wgmma's core matrices


# CU_TENSOR_MAP_SWIZZLE_128B on 16-bit elements: 16-byte chunk c of 128-byte row r lands at
# chunk c ^ (r % 8) (rows from a 1024-byte aligned start).
SWIZZLE_128B = Swizzle(3, 3, 3)


def tma_swizzle(span: int, elem_bytes: int) -> Swizzle:
    """CU_TENSOR_MAP_SWIZZLE_<span>B on elements of ``elem_bytes``: byte address bits 4 up
    (the 16-byte chunk) XOR-ed with bits 7 up, log2(span / 16) of them, whatever the
    elements (CUTLASS's Swizzle<3,4,3>, <2,4,3>, <1,4,3> on bytes); its base the elements of
    one chunk. With span-byte rows that XOR is the row within its 8-row atom, shifted."""
    return Swizzle((span // 16).bit_length() - 1, (16 // elem_bytes).bit_length() - 1, 3)


def swizzle_128b(elem_bytes: int) -> Swizzle:
    """CU_TENSOR_MAP_SWIZZLE_128B on elements of ``elem_bytes`` (SWIZZLE_128B for 16-bit
    elements; Swizzle(3, 4, 3) for 8-bit ones)."""
    return tma_swizzle(SLAB_BYTES, elem_bytes)


def spans_for(layout: SmemLayout, elem_bytes: int) -> tuple[int, ...]:
    """The swizzle spans a tile stored as ``layout`` can be loaded in, widest first: those
    that divide its rows' bytes (each box one span wide)."""
    return tuple(span for span in SPANS if layout.cols * elem_bytes % span == 0)


def tma_layout(layout: SmemLayout, elem_bytes: int, span: int) -> SmemLayout:
    """Where TMA's swizzle of ``span`` bytes puts a tile stored as ``layout``: slabs one span
    wide (a box each), swizzled by 8-row atom. Which span an operand takes:
    :func:`operand_tma_layout`."""
    return layout.with_swizzle(tma_swizzle(span, elem_bytes), slab=span // elem_bytes)


# Rows along mn (an N-major B) that are not whole 128-byte lines: stored in 128-byte slabs,
# the last padded, rather than in the narrower spans they are whole numbers of: the narrow
# slabs' wgmma kernels ran at 0.57-0.78 (32-byte) and 0.86-0.99 (64-byte) of the padded
# ones' rate. H200, f16, one call
# each, TFLOP/s, narrow / padded at the same schedule (benchmarks/NOTES.md, session 26):
# 128x144 (32-byte slabs) one tile a block 244.9 / 345.3 at 1024x2056x4096, 280.5 / 405.6
# at 1536x3080x4096, 389.8 / 570.3 at 1024x2304x8192; in persistent clusters of 2, 128x176
# (32-byte) 424.0 / 555.2 at 3072x3080x3072, 359.7 / 624.9 at 1024x2304x8192; 128x160
# (64-byte) 559.1 / 588.7 and 570.2 / 666.3; 128x224 (64-byte) 581.5 / 588.1, 661.3 / 671.9
# at 4096^3.
def operand_tma_layout(role: str, layout: SmemLayout, elem_bytes: int,
                       span: int = 0, pad: bool = True) -> SmemLayout:
    """:func:`tma_layout` of operand ``role`` stored as ``layout`` in ``span`` bytes. A span
    its rows are not a whole number of pads their last slab: TMA loads that box whole (the
    columns past the tile, or zeros past the tensor). 0 chooses: rows along mn not whole
    128-byte lines are padded to 128-byte slabs where ``pad`` allows, others take the
    widest whole span (K-major rows whole spans of BK: padding would load the next K
    step's columns). A ValueError naming the operand where its rows do not take the span
    (not whole 16-byte chunks: wgmma's core matrices' rows)."""
    spans = spans_for(layout, elem_bytes)
    row_bytes = layout.cols * elem_bytes
    if span and row_bytes % CHUNK_BYTES or not span and not spans:
        fits = f"spans that fit: {', '.join(map(str, spans))}" if spans else "none fits"
        raise ValueError(f"operand {role}: rows of {layout.cols} {8 * elem_bytes}-bit elements "
                         f"({row_bytes} bytes) are not a whole number of "
                         f"{CHUNK_BYTES if span else min(SPANS)}-byte "
                         f"{'chunks' if span else 'TMA swizzle spans'} ({fits})")
    if not span:
        padded = pad and spans[0] < SLAB_BYTES and not operand_k_major(role, layout)
        span = SLAB_BYTES if padded else spans[0]
    return tma_layout(layout, elem_bytes, span)


def staging_layout(rows: int, cols: int, elem_bytes: int, span: int = SLAB_BYTES
                   ) -> SmemLayout:
    """The TMA store's staging tile: ``rows x cols`` in slabs of one ``span``-byte swizzle
    row each, as TMA reads them."""
    return tma_layout(SmemLayout(rows, cols), elem_bytes, span)


def atom_row_shift(span: int) -> int:
    """How far a row's index in its 8-row atom is shifted right to give the 16-byte chunk
    XOR of TMA's ``span``-byte swizzle (:func:`tma_swizzle`: address bits 7 up of rows
    ``span`` bytes long): 0 for 128 bytes (row % 8), 1 for 64 ((row % 8) / 2, two bits), 2
    for 32 ((row % 8) / 4, one bit)."""
    return (SLAB_BYTES // span).bit_length() - 1


def swizzle_mode(layout: SmemLayout, elem_bytes: int) -> int:
    """The swizzle span in bytes of a stage stored as ``layout`` (the launcher's
    CU_TENSOR_MAP_SWIZZLE_*): one slab's row."""
    span = layout.slab * elem_bytes
    if span not in SPANS or layout != tma_layout(layout, elem_bytes, span):
        raise ValueError(f"TMA writes swizzled slabs 32, 64 or 128 bytes wide, not {layout}")
    return span


def restage_loads(kernel: Kernel, buffer: Value, layout: SmemLayout) -> None:
    """Point the ``tma.load`` ops filling stages of ``buffer`` at ``layout`` (one of TMA's
    layouts, :func:`tma_layout`): a box per slab of its span, as many as the rows hold. For
    the swizzle pass, which may choose another span than the one the loads were built in."""
    for op in kernel.walk():
        if op.name == LOAD:
            stage = defining_op(op.operands[3])
            if stage is not None and stage.operands[0] is buffer:
                op.attrs["box"] = [layout.slab, op.attrs["box"][1]]
                op.attrs["slabs"] = layout.slabs


@dataclass(frozen=True)
class Box:
    """What one ``tma.load`` moves, read off its attributes: per slab, a box of
    ``inner x outer`` elements in the tensor's storage order (inner contiguous), the slabs
    side by side along the inner dim; ``coords``: which of the op's tile offsets is the inner
    coordinate and which the outer."""

    inner: int
    outer: int
    slabs: int
    coords: tuple[int, int]
    # A store whose slabs take turns with 128-row warpgroups: its units are a slab of one of
    # this many m64 strips, a box of ``outer`` (64) rows per warpgroup (staged_store).
    strips: int = 1

    @classmethod
    def of(cls, op: Op) -> "Box":
        return cls(op.attrs["box"][0], op.attrs["box"][1], op.attrs["slabs"],
                   tuple(op.attrs["coords"]), op.attrs.get("strips", 1))

    def bytes(self, elem_bytes: int) -> int:
        return self.inner * self.outer * self.slabs * elem_bytes


def tensor_map_box(kernel: Kernel, tensor: str) -> tuple[int, int, int]:
    """The box (inner, outer elements) and swizzle span (bytes) the kernel's TMA loads of
    ``tensor`` use: what the launcher encodes the tensor's map with."""
    for op in kernel.walk():
        if op.name == LOAD and op.attrs["tensor"] == tensor:
            box = Box.of(op)
            view = op.operands[3].type
            # A multicast load's block moves its share of the box's rows.
            outer = box.outer // op.attrs.get("multicast", 1)
            return box.inner, outer, swizzle_mode(view.layout, view.dtype.bytes)
        if is_tma_store(op) and op.attrs["tensor"] == tensor:
            box = Box.of(op)  # a slab of the staging tile: one swizzle span wide
            return box.inner, box.outer, box.inner * op.operands[-1].type.dtype.bytes
    raise ValueError(f"kernel '{kernel.name}' moves no tile of '{tensor}' with TMA")


def is_tma_store(op: Op) -> bool:
    """A ``tile.store`` the tma_store pass routed through shared memory and TMA."""
    return op.name == STORE and op.attrs.get("via") == "tma"


def thread_is(ctx: Context, tid_mask: Optional[int], value: int) -> str:
    """A predicate: (tid & mask) == value, or tid == value without a mask; computed once."""
    def compute() -> str:
        tid = ctx.tid() if tid_mask is None else ctx.int_op("and.b32", ctx.tid(), tid_mask)
        reg = ctx.w.reg("pred")
        ctx.w.emit(f"setp.eq.u32 {reg}, {tid}, {value};")
        return reg
    return ctx.w.once(ctx.thread_key(("thread_is", tid_mask, value)), compute)


def block_warpgroup(ctx: Context) -> str:
    """The thread's warpgroup in the block (its %tid.x / 128), computed once at entry."""
    return ctx.w.once("block_warpgroup", lambda: ctx.int_op("shr.u32", ctx.block_tid(), 7))


def tensor_map_address(ctx: Context, tensor: str) -> str:
    """The generic address of the tensor's map, a kernel parameter passed by value."""
    def compute() -> str:
        reg = ctx.w.reg("b64")
        ctx.w.emit(f"mov.u64 {reg}, {ctx.workspace[tensor]};")
        ctx.w.emit(f"cvta.param.u64 {reg}, {reg};")
        return reg
    return ctx.w.once(("tensor_map", tensor), compute)


def box_coordinates(ctx: Context, tensor: Value, x: str, outer: str) -> tuple[str, str]:
    """The box's coordinates and the instruction's dimensionality: ``{x, outer}`` in a 2-D
    map; for a batch view (``tensor.batch``) ``{x, outer, b}`` in the 3-D map of the whole
    tensor (:mod:`tilec.launch.tensor_maps`), whose bounds clip ragged rows at the batch's
    own edge. A batch stride of 0 (one matrix shared by every batch) is mapped with one
    batch, which every program reads: its coordinate is 0."""
    view = defining_op(tensor)
    if view is None or view.name != "tensor.batch":
        return "2d", f"{{{x}, {outer}}}"
    # Computed where it is used: the producer and the consumers' epilogue run different
    # code, so a register kept from one is not set in the other.
    shared = ctx.w.reg("pred")
    ctx.w.emit(f"setp.eq.s32 {shared}, {ctx.get(view.operands[0]).strides[0]}, 0;")
    coordinate = ctx.w.reg("b32")
    ctx.w.emit(f"selp.b32 {coordinate}, 0, {ctx.operand(view.operands[1])}, {shared};")
    return "3d", f"{{{x}, {outer}, {coordinate}}}"
