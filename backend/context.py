"""What the emitters share while rendering one kernel: the writer, the register (or
registers) of each IR value, tensor parameters, shared buffers and per-thread indices."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from tilec.ir.core import Kernel, Value
from tilec.target.layout import DistributedLayout, SmemLayout, Swizzle
from tilec.target.smem import place
from tilec.options import Options

from . import divide
from .writer import PtxWriter


@dataclass
class TensorRegs:
    """A global tensor as registers: base address, stride and size per dim (a register or
    an immediate)."""

    ptr: str
    strides: list[str]
    dims: list[Union[str, int]]
    elem_bytes: int

    def transposed(self) -> "TensorRegs":
        return TensorRegs(self.ptr, self.strides[::-1], self.dims[::-1], self.elem_bytes)


def flatten(items) -> list:
    """The registers (or values) of nested lists of them, in order: a carried tile's."""
    out: list = []
    for item in items:
        out.extend(flatten(item) if isinstance(item, list) else [item])
    return out


@dataclass
class SmemBuffer:
    offset: int  # bytes from the start of the kernel's dynamic shared memory
    stage_bytes: int
    layout: SmemLayout
    elem_bytes: int


@dataclass
class SmemView:
    buffer: SmemBuffer
    address: str  # u32 shared-window address of the stage


class ValueTable:
    """What both backends' contexts keep per IR value: what was emitted for it (a register
    or an SSA value, a list of them for a distributed tile), its constant, how many ops
    read it, and which registers of distributed tiles are emitted now (``active``: the
    epilogue's chunk, ptx.epilogue_chunks). A subclass sets ``values``, ``constants`` and
    ``active``, and counts the uses with ``_count_uses``."""

    # The error for a value nothing was emitted for (a subclass names its backend).
    MISSING = "backend: {!r} has no register (op not lowered?)"
    values: dict
    constants: dict
    active: Optional[range]

    def _count_uses(self, kernel: Kernel) -> None:
        self._uses: dict[Value, int] = {}
        for op in kernel.walk():
            for v in op.operands:
                self._uses[v] = self._uses.get(v, 0) + 1

    def uses(self, value: Value) -> int:
        return self._uses.get(value, 0)

    def bind(self, value: Value, emitted: object) -> None:
        self.values[value] = emitted

    def get(self, value: Value):
        try:
            return self.values[value]
        except KeyError:
            raise ValueError(self.MISSING.format(value)) from None

    def indices(self, n: int) -> range:
        """The registers of an n-register distributed tile to emit now."""
        if self.active is None:
            return range(n)
        return range(self.active.start, min(self.active.stop, n))

    def bind_elements(self, value: Value, n: int, items: dict[int, object]) -> None:
        """Fill some registers of a distributed tile (the rest come in later chunks)."""
        emitted = self.values.get(value)
        if emitted is None:
            emitted = [None] * n
            self.values[value] = emitted
        for index, item in items.items():
            emitted[index] = item

    def const(self, value: Value) -> Optional[int]:
        return self.constants.get(value)


# The named barrier a warp-specialized kernel's consumer warpgroups meet on: barrier 0 is the
# whole block's, and the producer warpgroup has left.
CONSUMER_BARRIER = 1


class Context(ValueTable):
    def __init__(self, kernel: Kernel, options: Options):
        self.kernel = kernel
        self.options = options
        self.w = PtxWriter()
        self.values: dict[Value, object] = {}
        self.constants: dict[Value, Union[int, float]] = {}
        self.smem = place(kernel)  # every shared buffer's place, bound as emitted
        self.plan = kernel.schedule.tiling
        # The epilogue is emitted a few registers at a time (see ptx._emit_body): the
        # registers of distributed tiles being emitted now, and per-op state kept between
        # the chunks (addresses, predicates, values already loaded).
        self.active: Optional[range] = None
        self.op_state: dict[object, dict] = {}
        # Hidden parameters (the split-K workspace, what a movement family adds), by source
        # name: a register, or for a blob passed by value its parameter's name.
        self.workspace: dict[str, str] = {}
        # How a region's ops are emitted (backend.ptx.emit_block, set by render): ops with
        # regions that a family emits (a warp-specialized producer) call it; and a
        # persistent kernel's loop over its tiles (backend.ptx._tile_loop), the grid op it
        # numbers them by and the ring iterations of earlier tiles (ws.ring_base).
        self.emit_block = None
        self.tile_loop = None
        self.grid_op = None
        self.ring_base: Optional[str] = None
        # What a role emits once after a persistent kernel's tile loop (the TMA stores'
        # last wait): _tile_loop collects them per loop.
        self.after_tiles: list = []
        # A pingpong kernel's consumers (backend.ptx, after the producer's split): each
        # warpgroup computes a whole tile, so thread ids are its own (tid % 128); and the
        # registers of its tile loop that its mainloop's hand-over reads (ws.turn_wait /
        # ws.turn_pass), set per tile by _tile_loop.
        self.local_tid = False
        self.turn: Optional[dict] = None
        # A stream-K kernel's unit (tilec/families/stream_k.py), set per unit by
        # backend.ptx._stream_k_loop: the registers ws.k_begin / ws.k_end / ws.sk_fixup read.
        self.stream_k: Optional[dict] = None
        self._count_uses(kernel)

    # -- values (the rest: ValueTable) ----------------------------------------------------
    def operand(self, value: Value) -> str:
        """A scalar operand: its register, or the literal of a constant."""
        if value in self.constants:
            return str(self.constants[value])
        return self.get(value)

    def accumulators_barrier(self) -> str:
        """The barrier operands (``bar.sync`` / ``bar.red``) of all the threads holding a
        tile's accumulators: the block's, or a warp-specialized kernel's consumers'."""
        roles = self.kernel.schedule.roles
        return "0" if roles is None else f"{CONSUMER_BARRIER}, {roles.consumer_threads}"

    # -- per-thread indices, computed once at entry -------------------------------------
    def tid(self) -> str:
        """The thread's id: in the block, or within its warpgroup where ``local_tid``."""
        def compute() -> str:
            r = self.w.reg("b32")
            self.w.emit(f"mov.u32 {r}, %tid.x;")
            return r
        block_tid = self.w.once("tid", compute)
        if not self.local_tid:
            return block_tid
        return self.w.once("local_tid", lambda: self.int_op("and.b32", block_tid, 127))

    def block_tid(self) -> str:
        """The thread's id in the block, whatever ``local_tid`` says."""
        saved, self.local_tid = self.local_tid, False
        try:
            return self.tid()
        finally:
            self.local_tid = saved

    def thread_key(self, key: object) -> object:
        """A ``once`` key for a value computed from the thread id: its own where the ids are
        the warpgroup's."""
        return ("local", key) if self.local_tid else key

    def lane_warp(self) -> tuple[str, str]:
        def compute() -> tuple[str, str]:
            lane, warp = self.w.reg("b32"), self.w.reg("b32")
            self.w.emit(f"and.b32 {lane}, {self.tid()}, 31;")
            self.w.emit(f"shr.u32 {warp}, {self.tid()}, 5;")
            return lane, warp
        return self.w.once(self.thread_key("lane_warp"), compute)

    def warp_uniform(self, reg: str) -> str:
        """``reg``, which every lane of the warp holds the same, as lane 0's (shfl.sync.idx,
        PTX ISA 9.7.9.6): ptxas cannot tell that a value computed from %tid (a warpgroup
        index) is the warp's, but it can for a broadcast, and then keeps what follows from
        it (wgmma's descriptors) in uniform registers. The whole warp must run it."""
        r = self.w.reg("b32")
        self.w.emit(f"shfl.sync.idx.b32 {r}, {reg}, 0, 31, -1;")
        return r

    def smem_base(self) -> str:
        def compute() -> str:
            r = self.w.reg("b32")
            self.w.emit(f"mov.u32 {r}, tilec_smem;")
            return r
        return self.w.once("smem_base", compute)

    # -- integer helpers that emit into the current section ------------------------------
    def int_op(self, op: str, a: Union[str, int], b: Union[str, int]) -> str:
        r = self.w.reg("b32")
        self.w.emit(f"{op} {r}, {a}, {b};")
        return r

    def and_pred(self, a: Optional[str], b: Optional[str]) -> Optional[str]:
        """a AND b for predicate registers, where None stands for "always true"."""
        if a is None or b is None:
            return a or b
        r = self.w.reg("pred")
        self.w.emit(f"and.pred {r}, {a}, {b};")
        return r

    def div_const(self, x: str, d: int, nonnegative: bool = False) -> str:
        """``x // d`` for a constant d > 0 (shift or multiply-high: :mod:`.divide`)."""
        return divide.emit(self, x, d, "q", nonnegative)

    def mod_const(self, x: str, d: int, nonnegative: bool = False) -> str:
        """``x % d`` (non-negative) for a constant d > 0."""
        return divide.emit(self, x, d, "r", nonnegative)

    def mad(self, a: Union[str, int], b: Union[str, int], c: Union[str, int]) -> str:
        r = self.w.reg("b32")
        self.w.emit(f"mad.lo.s32 {r}, {a}, {b}, {c};")
        return r

    def swizzle(self, offset: str, swizzle: Swizzle) -> str:
        """The element offset after ``swizzle`` (layout.Swizzle.__call__, in PTX)."""
        if swizzle.bits == 0:
            return offset
        mask = ((1 << swizzle.bits) - 1) << (swizzle.base + swizzle.shift)
        high = self.int_op("and.b32", offset, mask)
        moved = self.int_op("shr.u32", high, swizzle.shift)
        return self.int_op("xor.b32", offset, moved)

    def wide(self, a: str, b: Union[str, int]) -> str:
        r = self.w.reg("b64")
        self.w.emit(f"mul.wide.s32 {r}, {a}, {b};")
        return r


# -- the accumulator layout's thread coordinates (epilogue, TMA store) ----------------
def c_thread_coords(ctx: "Context", layout: DistributedLayout,
                    keep: bool = True) -> tuple[str, str]:
    """This thread's (row, col) base in a distributed layout: its warp's tile corner plus its
    place in the lane grid. ``keep``: computed once at the kernel's entry and kept; else
    computed here from a fresh %tid (for code late in a register-bound kernel, where two
    registers held from the entry make ptxas spill)."""
    def compute() -> tuple[str, str]:
        if keep:
            lane, warp = ctx.lane_warp()
        else:
            tid = ctx.w.reg("b32")
            ctx.w.emit(f"mov.u32 {tid}, %tid.x;")
            if local:
                tid = ctx.int_op("and.b32", tid, 127)
            lane, warp = ctx.int_op("and.b32", tid, 31), ctx.int_op("shr.u32", tid, 5)
        lane_cols = layout.lane_grid[1]
        wm = ctx.div_const(warp, layout.warps[1], nonnegative=True)
        wn = ctx.mod_const(warp, layout.warps[1], nonnegative=True)
        lane_row = ctx.int_op("shr.u32", lane, lane_cols.bit_length() - 1)
        lane_col = ctx.int_op("and.b32", lane, lane_cols - 1)
        group, group_rows, step = layout.warp_rows()
        lane_rows = _scaled(ctx, lane_row, layout.lane_step[0])
        if group == 1:
            row = ctx.mad(wm, layout.warp_tile[0], lane_rows)
        else:
            # Interleaved warps (DistributedLayout.warp_rows): the group's origin, then the
            # warp's place in it.
            within = ctx.mad(ctx.mod_const(wm, group, nonnegative=True), step, lane_rows)
            row = ctx.mad(ctx.div_const(wm, group, nonnegative=True), group_rows, within)
        col = ctx.mad(wn, layout.warp_tile[1], _scaled(ctx, lane_col, layout.lane_step[1]))
        return row, col
    # Thread ids within the warpgroup: the PTX backend's pingpong consumers (Context.local_tid;
    # the llvm backend has none).
    local = getattr(ctx, "local_tid", False)
    key = ("local", ("c_coords", layout)) if local else ("c_coords", layout)
    return ctx.w.once(key, compute) if keep else compute()


def _scaled(ctx: "Context", reg: str, power_of_two: int) -> str:
    shift = power_of_two.bit_length() - 1
    return ctx.int_op("shl.b32", reg, shift) if shift else reg
