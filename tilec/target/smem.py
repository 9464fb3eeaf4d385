"""The kernel's dynamic shared memory: where each shared buffer sits, the one computation the
backends bind buffers from, ``explain`` prints and the tma_store pass checks room with.

Three kinds of op allocate, each at its own alignment, in the order the kernel walks them
(the order the backends emit them in):

- ``smem.alloc``: an operand ring, ``stages`` stages of ``rows x cols`` elements;
- ``mbar.alloc``: a ring of 8-byte mbarriers (tilec.families.tma);
- a ``tile.store`` routed ``via`` tma or rows (passes/tma_store.py), or block_rows
  (passes/row_store.py): the staging tile its registers are written into before they go to
  global memory (``pitch`` bytes a row where the store says, else unpadded rows;
  ``staging_copies`` of it; or, with ``staging_buffers``, that many one-slab buffers the
  slabs take in turn).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tilec.ir.arith import cdiv
from tilec.ir.core import Kernel, Op
from tilec.ir.types import TileType
from tilec.target.layout import SmemLayout

SMEM_ALIGN = 128
# Slabbed layouts are written by TMA in its swizzles, which permute by address bits up to
# 1024 (the 128-byte span's; 512 and 256 for the 64- and 32-byte spans): their stages start
# on 1024-byte boundaries (so does the dynamic shared memory then, backend.ptx.render).
SWIZZLE_ATOM_ALIGN = 1024
STAGING_ALIGN = SWIZZLE_ATOM_ALIGN  # the staging tile is written in the same swizzle
BARRIER_BYTES = 8  # one .b64 mbarrier

# tile.store routes that go through a staging tile (tilec.families.staged_store's emitters).
STAGED_VIAS = ("tma", "rows", "block_rows")


def smem_align(layout) -> int:
    """The alignment of an operand ring's stages in ``layout``."""
    return SWIZZLE_ATOM_ALIGN if getattr(layout, "slab", 0) else SMEM_ALIGN


def is_staged_store(op: Op) -> bool:
    """A ``tile.store`` that writes its tile into a staging tile in shared memory."""
    return op.name == "tile.store" and op.attrs.get("via") in STAGED_VIAS


@dataclass(frozen=True)
class Placement:
    """One shared buffer: ``stages`` stages of ``stage_bytes`` from byte ``offset`` of the
    dynamic shared memory, which is a multiple of ``align``."""

    kind: str  # "ring", "barriers" or "staging"
    offset: int
    stage_bytes: int
    stages: int
    align: int

    @property
    def total_bytes(self) -> int:
        return self.stage_bytes * self.stages

    @property
    def end(self) -> int:
        return self.offset + self.total_bytes


@dataclass(frozen=True)
class SharedLayout:
    """Every shared buffer of a kernel by the op that allocates it, in placement order;
    ``total``: the bytes of dynamic shared memory the kernel needs."""

    buffers: dict[Op, Placement]
    total: int

    def of(self, op: Op) -> Placement:
        return self.buffers[op]

    @property
    def ring_align(self) -> int:
        """The alignment the dynamic shared memory is declared with: the operand rings'."""
        return max([SMEM_ALIGN] + [p.align for p in self.buffers.values() if p.kind == "ring"])


def stage_elements(ring: TileType) -> int:
    """The elements one stage of a shared ring (``[stages, rows, cols]``) stores: its
    layout's, a padded last slab (SmemLayout.size) included."""
    if isinstance(ring.layout, SmemLayout):
        return ring.layout.size
    return ring.shape[1] * ring.shape[2]


def _placement(op: Op) -> Optional[tuple[str, int, int, int]]:
    """(kind, stage bytes, stages, alignment) of what ``op`` allocates, None if nothing."""
    if op.name == "smem.alloc":
        rtype = op.result.type
        stage_bytes = stage_elements(rtype) * rtype.dtype.bytes
        return "ring", stage_bytes, rtype.shape[0], smem_align(rtype.layout)
    if op.name == "mbar.alloc":
        return "barriers", BARRIER_BYTES, op.result.type.shape[0], BARRIER_BYTES
    if is_staged_store(op):
        value = op.operands[-1].type
        rows, cols = value.shape
        if "staging_buffers" in op.attrs:
            # One slab (a box, of the inner extent) a buffer: the slabs go out in turn.
            slab = rows * op.attrs["box"][0] * value.dtype.bytes
            return "staging", slab, op.attrs["staging_buffers"], STAGING_ALIGN
        # A pingpong kernel's warpgroups stage their tiles apart (staging_copies = 2).
        pitch = op.attrs.get("pitch", cols * value.dtype.bytes)
        return ("staging", rows * pitch, op.attrs.get("staging_copies", 1), STAGING_ALIGN)
    return None


def _align_up(offset: int, align: int) -> int:
    return cdiv(offset, align) * align


def place(kernel: Kernel) -> SharedLayout:
    """Each shared buffer after the ones before it, at its alignment."""
    buffers: dict[Op, Placement] = {}
    end = 0
    for op in kernel.walk():
        found = _placement(op)
        if found is None:
            continue
        kind, stage_bytes, stages, align = found
        placement = Placement(kind, _align_up(end, align), stage_bytes, stages, align)
        buffers[op] = placement
        end = placement.end
    return SharedLayout(buffers, end)


def total_with_staging(layout: SharedLayout, staging_bytes: int) -> int:
    """The bytes ``layout`` would need with a staging tile of ``staging_bytes`` placed after
    its buffers (where a store the tma_store pass routes through one would put it)."""
    return _align_up(layout.total, STAGING_ALIGN) + staging_bytes


__all__ = ["SMEM_ALIGN", "SWIZZLE_ATOM_ALIGN", "STAGING_ALIGN", "BARRIER_BYTES", "STAGED_VIAS",
           "smem_align", "is_staged_store", "Placement", "SharedLayout", "place",
           "total_with_staging"]
