"""What the LLVM emitters share while rendering one kernel: the builder, the SSA value (or
values) of each IR value, tensor parameters, and per-thread indices computed once in the
entry block.

The integer helpers take the PTX backend's mnemonics (``int_op("add.s32", a, b)``) so that
the address arithmetic the families share with the PTX backend
(:func:`tilec.families.fragments_common.operand_offset`, the ldmatrix lane offsets,
:func:`tilec.backend.context.c_thread_coords`) is written once, from the layout facts, and
both backends compute the same offsets; :data:`INT_OPS` maps each mnemonic to its LLVM
instruction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from tilec.ir.core import Kernel, Value, computed_from
from tilec.options import Options
from tilec.target.layout import Swizzle
from tilec.target.smem import place

from ..context import SmemBuffer, ValueTable
from .builder import Block, Builder, Operand, Val, const

SHARED_MEMORY = "tilec_smem"
SMEM_PTR = "ptr addrspace(3)"
GLOBAL_PTR = "ptr addrspace(1)"

# PTX integer mnemonic -> LLVM binary opcode (i32 operands).
INT_OPS = {"add.s32": "add", "sub.s32": "sub", "mul.lo.s32": "mul", "and.b32": "and",
           "or.b32": "or", "xor.b32": "xor", "shl.b32": "shl", "shr.u32": "lshr",
           "shr.s32": "ashr", "div.s32": "sdiv", "rem.s32": "srem", "div.u32": "udiv",
           "rem.u32": "urem"}
# PTX min/max mnemonic -> the LLVM intrinsic.
INT_MINMAX = {"min.s32": "llvm.smin.i32", "max.s32": "llvm.smax.i32"}


@dataclass
class TensorVals:
    """A global tensor as SSA values: base pointer, stride and size per dim (a value or a
    Python int)."""

    ptr: Val
    strides: list[Val]
    dims: list[Union[Val, int]]
    elem_bytes: int

    def transposed(self) -> "TensorVals":
        return TensorVals(self.ptr, self.strides[::-1], self.dims[::-1], self.elem_bytes)


@dataclass
class SmemView:
    buffer: SmemBuffer
    address: Val  # i32 byte offset of the stage within the dynamic shared memory


class _Once:
    """``ctx.w.once(key, compute)``: run ``compute`` into the entry block the first time
    ``key`` is asked for (per-thread values every later block may use); the PTX writer's
    method of the same name, so the shared address helpers call either."""

    def __init__(self, ctx: "LlvmContext") -> None:
        self._ctx = ctx
        self._cache: dict[object, object] = {}

    def once(self, key: object, compute: Callable[[], object]) -> object:
        if key not in self._cache:
            b = self._ctx.b
            saved, saved_debug = b.block, b.debug
            b.position(self._ctx.entry)
            b.debug = ""
            try:
                self._cache[key] = compute()
            finally:
                b.position(saved)
                b.debug = saved_debug
        return self._cache[key]


class LlvmContext(ValueTable):
    MISSING = "llvm backend: {!r} has no value (op not lowered?)"

    def __init__(self, kernel: Kernel, options: Options):
        self.kernel = kernel
        self.options = options
        self.b = Builder()
        self.entry: Block = self.b.new_block("entry")
        self.w = _Once(self)
        self.values: dict[Value, object] = {}
        self.constants: dict[Value, Union[int, float]] = {}
        self.smem = place(kernel)  # every shared buffer's place, bound as emitted
        self.plan = kernel.schedule.tiling
        self.op_state: dict[object, dict] = {}
        # The epilogue is emitted a few registers at a time, as the PTX backend does it
        # (tilec.backend.llvm.emit_body): the registers of distributed tiles emitted now.
        self.active: Optional[range] = None
        self.workspace: dict[str, Val] = {}
        # The induction variables of the scf.for bodies being emitted, innermost last.
        self.loop_ivs: list[Value] = []
        # Set by render_ir: the op table, how a region's ops are emitted, and the !dbg
        # attachment of an op's DSL line (its DILocation's metadata number per line, col).
        self.table: dict = {}
        self.emit_block = None
        self.debug_location = lambda op: ""
        self.locations: dict[tuple[int, int], int] = {}
        self._count_uses(kernel)

    # -- values (the rest: ValueTable) ----------------------------------------------------
    def operand(self, value: Value) -> Val:
        return self.get(value)

    # -- special registers --------------------------------------------------------------
    def sreg(self, name: str) -> Val:
        return self.b.call(f"llvm.nvvm.read.ptx.sreg.{name}", "i32", [])

    def tid(self) -> Val:
        return self.w.once("tid", lambda: self.sreg("tid.x"))

    def lane_warp(self) -> tuple[Val, Val]:
        def compute() -> tuple[Val, Val]:
            return self.int_op("and.b32", self.tid(), 31), self.int_op("shr.u32", self.tid(), 5)
        return self.w.once("lane_warp", compute)

    # -- integer helpers ----------------------------------------------------------------
    def int_op(self, op: str, a: Operand, b: Operand) -> Val:
        if op in INT_MINMAX:
            x, y = self.b.value(a, "i32"), self.b.value(b, "i32")
            return self.b.call(INT_MINMAX[op], "i32", [x, y])
        return self.b.binop(INT_OPS[op], a, b, "i32")

    def mad(self, a: Operand, b: Operand, c: Operand) -> Val:
        return self.int_op("add.s32", self.int_op("mul.lo.s32", a, b), c)

    def and_pred(self, a: Optional[Val], b: Optional[Val]) -> Optional[Val]:
        """a AND b for i1 values, where None stands for "always true"."""
        if a is None or b is None:
            return a or b
        return self.b.binop("and", a, b, "i1")

    def div_const(self, x: Val, d: int, nonnegative: bool = False) -> Val:
        """``x // d`` (rounding toward minus infinity) for a constant d > 0; LLVM picks the
        shift or multiply-high itself."""
        if d == 1:
            return x
        if nonnegative:
            return self.b.binop("udiv", x, d, "i32")
        sign = self.b.binop("ashr", x, 31, "i32")  # ~x is non-negative for a negative x
        flipped = self.b.binop("xor", x, sign, "i32")
        return self.b.binop("xor", self.b.binop("udiv", flipped, d, "i32"), sign, "i32")

    def mod_const(self, x: Val, d: int, nonnegative: bool = False) -> Val:
        """``x % d`` (non-negative) for a constant d > 0."""
        if nonnegative:
            return self.b.binop("urem", x, d, "i32")
        return self.int_op("sub.s32", x, self.int_op("mul.lo.s32", self.div_const(x, d), d))

    def swizzle(self, offset: Val, swizzle: Swizzle) -> Val:
        if swizzle.bits == 0:
            return offset
        mask = ((1 << swizzle.bits) - 1) << (swizzle.base + swizzle.shift)
        moved = self.int_op("shr.u32", self.int_op("and.b32", offset, mask), swizzle.shift)
        return self.int_op("xor.b32", offset, moved)

    def varies_in_loop(self, value: Value) -> bool:
        """Whether ``value`` (tile IR) is computed from the induction variable of a loop
        being emitted: it changes from one iteration to the next."""
        return computed_from(value, self.loop_ivs)

    def wide(self, a: Val, b: Operand) -> Val:
        """``a * b`` as i64 from i32 operands (PTX's mul.wide.s32)."""
        x = self.b.cast("sext", a, "i64")
        y = self.b.cast("sext", b, "i64") if isinstance(b, Val) else b
        return self.b.binop("mul", x, y, "i64")

    def relative_address(self, view: "SmemView", relation, state: dict,
                         reference_offset: Callable[[], Val],
                         own_offset: Callable[[], Val]) -> Val:
        """The shared address (i32) of one fragment load of ``view``, as
        :func:`tilec.families.fragments_common.relative_address` makes it: the reference
        lane offset XOR a small constant plus an immediate where ``relation`` (from
        offset_relation) says the load's lanes follow the reference's, else its own lane
        offset. ``state`` keeps the view's base between the loads of one op."""
        if relation is None:
            return self.int_op("add.s32", view.address, own_offset())
        if "base" not in state:
            state["base"] = self.int_op("add.s32", view.address, reference_offset())
        flip, immediate = relation
        address = self.int_op("xor.b32", state["base"], flip) if flip else state["base"]
        return self.int_op("add.s32", address, immediate) if immediate else address

    # -- memory -------------------------------------------------------------------------
    def smem_pointer(self, offset: Operand) -> Val:
        """The shared-memory pointer ``offset`` bytes into the dynamic shared memory."""
        return self.b.gep(Val(f"@{SHARED_MEMORY}", SMEM_PTR), self.b.value(offset, "i32"))

    def if_then(self, cond: Optional[Val], body: Callable[[], None], hint: str = "then") -> None:
        """Run ``body``'s instructions only where ``cond`` holds (always when None)."""
        if cond is None:
            body()
            return
        then, join = self.b.new_block(hint), self.b.new_block("join")
        self.b.cbr(cond, then, join)
        self.b.position(then)
        body()
        self.b.br(join)
        self.b.position(join)

    def guarded_load(self, ty: str, pointer: Val, cond: Optional[Val], align: int,
                     zero: str) -> Val:
        """A load where ``cond`` holds, else the constant ``zero``."""
        if cond is None:
            return self.b.load(ty, pointer, align)
        before = self.b.block
        then, join = self.b.new_block("load"), self.b.new_block("join")
        self.b.cbr(cond, then, join)
        self.b.position(then)
        loaded = self.b.load(ty, pointer, align)
        self.b.br(join)
        self.b.position(join)
        result, line = self.b.phi(ty)
        self.b.close_phi(join, line, result, [(Val(zero, ty), before), (loaded, then)])
        return result


__all__ = ["LlvmContext", "TensorVals", "SmemBuffer", "SmemView", "const", "Val",
           "SHARED_MEMORY", "SMEM_PTR", "GLOBAL_PTR"]
