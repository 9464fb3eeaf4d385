"""wgmma with A from registers (sm_90a): ``wgmma.mma_async`` m64nNk16 on f16/bf16 whose A
operand is stored in 8 bits (i8, e4m3, e5m2) and converted to the product's dtype in the
consumers' registers, B read by the tensor cores from shared memory through descriptors.

This is the weight-only quantized product (w8a16) with the weights as A: ``C.T = W @ A.T``
(``samples/w8a16_swapped.py``). TMA brings W's 8-bit tile in at half the bytes of f16; each
consumer thread reads the bytes of its A fragment with ``ld.shared.u16`` (two adjacent k a
register, as the mma family's ``frag.ldbytes`` does for B), converts them with the mma
family's exact conversions (:data:`.mma_sync.CONVERT_PTX`: prmt and one subtraction for i8,
``cvt.rn.f16x2.e4m3x2`` for fp8) and issues the register form of wgmma (PTX ISA 9.7.15.5.2:
``wgmma.mma_async ... d, a-regs, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b``).
The converted weight never goes back to shared memory, which wgmma's shared-memory form would
need (and its bandwidth could not spare: the tile written and read again each stage).

The A fragment of m64nNk16 is, per warp, mma.sync's m16n8k16 A fragment (PTX ISA 9.7.15.5.1,
"Register fragment layout for matrix A"): warp ``w % 4`` of a warpgroup holds rows ``16 w``
to ``16 w + 15`` of the m64 strip; lane ``l`` holds in register ``i`` row ``l / 4 + 8 (i % 2)``
and k ``2 (l % 4) + 8 (i / 2) + {0, 1}``.

Registers are written while earlier wgmmas may still read theirs: each k16 step is its own
commit group and converts into one of :data:`REGISTER_SETS` register sets, after
``wgmma.wait_group REGISTER_SETS - 1`` has retired the group that last read that set, so the
conversion of step j + 1 runs while step j's product does. A ``wgmma.fence`` orders the
conversion's register writes before the wgmma reading them.

Requires A stored K-major ([M, K], k contiguous: a register's two bytes are adjacent) in one
of TMA's swizzles (BK a multiple of 32: 32 bytes, the narrowest span, which is also an even
number of k16 steps for the register sets); B as the wgmma family takes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OpDef, require
from tilec.ir.schedule import WARPGROUP, OperandPlan
from tilec.ir.types import DType, TileType
from tilec.options import Options
from tilec.target.layout import WARP_SIZE, conflict_degree, operand_k_major

from .byte_operands import PAIR_BYTES
from .mma_sync import convert_registers
from .product import ExplainShape
from .tma_boxes import swizzle_mode
from .wgmma import (CONSUMER_OVERHEAD, MIN_SPAN_BYTES, WGMMA_K, WGMMA_K_BYTES, WGMMA_M,
                    WGMMA_TYPES, WGMMA_WAIT, Wgmma, WgmmaLayout, descriptor_fields,
                    descriptor_offsets, emit_wait, operand_descriptor, predicate_register,
                    read_address, registers_at_entry, warpgroup_index, warpgroup_strips)

if TYPE_CHECKING:
    from tilec.cpu.interpreter import InterpState

PRODUCT_OP = "wgmma.mma_rs"
A_REGISTERS = 4  # .b32 registers of one m64k16 A fragment a thread (8 halves)
# Register sets of A fragments: step j converts into set j % REGISTER_SETS while the wgmma of
# step j - 1 runs. Divides a stage's k16 steps (BK / 16, a multiple of 2), so the sets follow
# each other across stages too.
REGISTER_SETS = 2
SOURCE_DTYPES = ("i8", "f8e4m3", "f8e5m2")


@dataclass(frozen=True)
class WgmmaRsLayout(WgmmaLayout):
    """The m64nN accumulator of the register-A form: the wgmma family's layout."""

    kind = "wgmma_rs"


# -- the emitter ---------------------------------------------------------------------------

def _fragment_base(ctx: Context, view: SmemView, span: int) -> tuple[str, str]:
    """This lane's byte address of its first A byte pair in the stage (row ``l / 4`` of its
    warp's 16, k ``2 (l % 4)``, unswizzled, rows ``span`` bytes apart) and the swizzle's XOR
    of its row: the 16-byte chunk a k16 step reads is XOR-ed by the row's address bits from
    7 up (:func:`.wgmma.swizzle_bytes`), the same for rows 8 apart, so ``((l / 4) * span / 8)
    & (span - 16)`` XOR the step's chunk."""
    def lane_parts() -> tuple[str, str]:
        lane, warp = ctx.lane_warp()
        g = ctx.int_op("shr.u32", lane, 2)
        t2 = ctx.int_op("shl.b32", ctx.int_op("and.b32", lane, 3), 1)
        # Rows of this warp in its warpgroup's strip 0, then the warpgroup's rows.
        row = ctx.mad(ctx.int_op("and.b32", warp, 3), 16, g)
        row = ctx.mad(warpgroup_index(ctx), WGMMA_M * warpgroup_strips(ctx), row)
        offset = ctx.mad(row, span, t2)
        chunk = ctx.int_op("shl.b32", g, span.bit_length() - 4)
        if span < 128:  # g < 8: g * 16 needs no mask
            chunk = ctx.int_op("and.b32", chunk, span - 16)
        return offset, chunk
    offset, chunk = ctx.w.once(ctx.thread_key(("wgmma_rs_lane", span)), lane_parts)
    return ctx.int_op("add.s32", view.address, offset), chunk


def _register_set(ctx: Context, index: int, strip: int) -> list[str]:
    """The PTX registers of A fragment set ``index`` for m64 ``strip``: the same names every
    stage, so the wait before a conversion retires exactly the wgmma that read them."""
    return ctx.w.once(("wgmma_rs_set", index, strip),
                      lambda: [ctx.w.reg("b32") for _ in range(A_REGISTERS)])


def _load_fragments(ctx: Context, view: SmemView, base: str, chunk: str, k0: int, span: int,
                    sets: Sequence[list[str]], source: DType, product: DType) -> None:
    """Each strip's A fragment at ``k0``: four ``ld.shared.u16`` (rows g and g + 8, k 2t and
    2t + 8), each pair converted into the strip's register set. The lane's swizzled chunk
    is computed once for the step; the rest is an immediate: where the descriptor of the
    step's slab and rows would start (:class:`.wgmma.Descriptor`)."""
    slab_k, within = divmod(k0, span)  # 8-bit elements: one byte each
    swizzled = ctx.int_op("xor.b32", chunk, within // 16 * 16) if within else chunk
    address = ctx.int_op("add.s32", base, swizzled)
    fields = descriptor_fields(view.buffer.layout, "A", 1)
    for strip, out in enumerate(sets):
        raw = []
        for register in range(A_REGISTERS):
            rows = WGMMA_M * strip + 8 * (register % 2)
            immediate = fields.start(rows, slab_k * span, 1) + 8 * (register // 2)
            reg = ctx.w.reg("b32")
            ctx.w.emit(f"ld.shared.u16 {reg}, [{address}+{immediate}];")
            raw.append(reg)
        convert_registers(ctx, raw, source, product, out)


def _wgmma_rs(ctx: Context, op: Op) -> None:
    """``wgmma.mma_rs``: acc + convert(A) @ B over one stage of BK: per k16 step, wait until
    the step that last used this step's register set has retired, load and convert the A
    fragments, fence, one wgmma.mma_async per m64 strip, commit (PTX ISA 9.7.15.5.2)."""
    view_a: SmemView = ctx.get(op.operands[0])
    view_b: SmemView = ctx.get(op.operands[1])
    acc = ctx.get(op.operands[2])
    source, product = op.operands[0].type.dtype, op.operands[1].type.dtype
    bn, bk = ctx.plan.block[1], ctx.plan.block[2]
    trans_b = 0 if operand_k_major("B", view_b.buffer.layout) else 1
    w = ctx.w
    strips = warpgroup_strips(ctx)
    per_strip = len(acc) // strips
    accumulate = w.once("wgmma_scale_d", lambda: predicate_register(ctx, True))
    span = swizzle_mode(view_a.buffer.layout, 1)
    base, chunk = _fragment_base(ctx, view_a, span)
    for step, k0 in enumerate(range(0, bk, WGMMA_K)):
        index = step % REGISTER_SETS
        w.emit(f"wgmma.wait_group.sync.aligned {REGISTER_SETS - 1};")
        sets = [_register_set(ctx, index, strip) for strip in range(strips)]
        _load_fragments(ctx, view_a, base, chunk, k0, span, sets, source, product)
        w.emit("wgmma.fence.sync.aligned;")
        desc_b = operand_descriptor(ctx, view_b, "B", k0)
        for strip in range(strips):
            registers = ", ".join(acc[strip * per_strip:(strip + 1) * per_strip])
            w.emit(f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{bn}k{WGMMA_K}.f32."
                   f"{WGMMA_TYPES[product]}.{WGMMA_TYPES[product]} {{{registers}}}, "
                   f"{{{', '.join(sets[strip])}}}, {desc_b}, {accumulate}, 1, 1, {trans_b};")
        w.emit("wgmma.commit_group.sync.aligned;")
    # in_flight = 1: the previous stage's groups (and their reads of shared memory) have
    # completed, this stage's last may run on.
    w.emit(f"wgmma.wait_group.sync.aligned {op.attrs.get('in_flight', 0)};")
    ctx.bind(op.result, list(acc))


# -- the op and its CPU semantics ------------------------------------------------------------

def _check(op: Op) -> None:
    a, b, acc = (v.type for v in op.operands)
    require(all(isinstance(t, TileType) and t.space == "smem" for t in (a, b)),
            "wgmma.mma_rs reads both operands from shared memory")
    require(a.dtype.short in SOURCE_DTYPES, "wgmma.mma_rs converts an 8-bit A (i8, e4m3, e5m2)")
    require(b.dtype.short in Wgmma.dtypes, "wgmma.mma_rs multiplies f16 or bf16")
    require(acc == op.result.type, "wgmma.mma_rs returns the accumulator type")
    require(a.shape[1] == b.shape[0] and tuple(acc.shape) == (a.shape[0], b.shape[1]),
            "wgmma.mma_rs operand shapes do not chain")
    require(isinstance(acc.layout, WgmmaLayout), "the accumulator is in the wgmma layout")


def a_offsets(layout, m0: int, k0: int) -> Any:
    """Element offsets (from the stage start) of the 64 x 16 piece of an 8-bit K-major A at
    (m0, k0) in TMA's swizzle: where the descriptor of a 32-byte k step would point
    (:func:`.wgmma.descriptor_offsets`), the half of it this k16 step reads."""
    within = k0 % WGMMA_K_BYTES
    return descriptor_offsets(layout, "A", m0, k0 - within, WGMMA_M, 1)[:, within:within + WGMMA_K]


def _execute(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    """Per warpgroup strip and k16 step, A (64 x 16, converted exactly: every i8 and fp8
    value is an f16 and a bf16) and B (16 x BN) read where the layout puts them, D =
    f32(C + A @ B), products summed in float64 (one rounding per wgmma, as the wgmma
    family's)."""
    import numpy as np

    from tilec.cpu.executor import block_state, checked_register_map
    block = block_state(state)
    (buffer_a, stage_a), (buffer_b, stage_b) = (
        block.shared(state, op, value, want_stage=True) for value in operands[:2])
    a_type, b_type, c_type = (v.type for v in op.operands)
    checked_register_map(state, op, c_type.layout, c_type.shape)
    if not operand_k_major("A", a_type.layout):
        raise state.error(op, f"wgmma.mma_rs reads a K-major A; A is stored {a_type.layout}")
    bm, bk = a_type.shape
    bn = b_type.shape[1]
    a_storage = buffer_a.storage[stage_a * buffer_a.stage_size:][:buffer_a.stage_size]
    b_storage = buffer_b.storage[stage_b * buffer_b.stage_size:][:buffer_b.stage_size]
    acc = np.array(operands[2], dtype=np.float32)
    for k0 in range(0, bk, WGMMA_K):
        b = b_storage[descriptor_offsets(b_type.layout, "B", 0, k0, bn, 2)].astype(np.float64)
        for m0 in range(0, bm, WGMMA_M):
            a = a_storage[a_offsets(a_type.layout, m0, k0)].astype(np.float64)
            rows = slice(m0, m0 + WGMMA_M)
            acc[rows] = (acc[rows] + a @ b).astype(np.float32)
    return [acc]


WGMMA_MMA_RS = OpDef(PRODUCT_OP, "acc + a @ b over one shared stage, a stored in 8 bits: per "
                     "k16 step, each consumer thread loads and converts its A fragment "
                     "(wgmma's register form), B read through a shared-memory descriptor",
                     3, 1, attrs=(), check=_check, pure=True, evaluate=_execute)


class WgmmaRs(Wgmma):
    """wgmma.mma_async m64nNk16, A converted from 8 bits in registers, B in shared memory."""

    name = "wgmma_rs"
    layout = WgmmaRsLayout
    product_op = PRODUCT_OP
    emitters = {PRODUCT_OP: _wgmma_rs, "wgmma.wait": emit_wait}
    bk_unit = MIN_SPAN_BYTES  # A's one-byte elements (and an even number of k16 steps)
    preferred_min_bk = None
    granule_why = " (wgmma m64nNk16 with A in registers: 16 rows a warp, N a multiple of 8)"

    def op_defs(self) -> tuple[OpDef, ...]:
        return (WGMMA_MMA_RS, WGMMA_WAIT)

    def converts(self, role: str) -> bool:
        return role == "A"

    def declined(self, block: tuple[int, int, int], options: Options,
                 operands: Sequence[OperandPlan] = ()) -> Optional[str]:
        problem = self.target_problem(options.arch, options.backend)
        if problem is not None:
            return problem
        by_role = {op.role: op for op in operands}
        a, b = by_role.get("A"), by_role.get("B")
        if a is None or a.source not in SOURCE_DTYPES:
            return "operand A is not stored in 8 bits and converted in the K loop"
        if b is not None and b.source:
            return (f"operand B is converted from {b.source} in registers too (wgmma reads "
                    "B from shared memory as stored)")
        if not a.k_major:
            return ("operand A is stored with m contiguous: its 8-bit fragments are read two "
                    "adjacent k a register, so k must be contiguous ([M, K])")
        return (self.shaping_problem(block, options) or self.alignment_problem(operands)
                or self.n_major_problem(block, operands))

    def block_problem(self, block: tuple[int, int, int], options: Options) -> Optional[str]:
        problem = super().block_problem(block, options)
        if problem is not None or options.consumers == "pingpong":
            return problem
        # The A fragment sets beside the accumulators (Wgmma.block_problem counts those).
        bm, bn, _ = block
        rows = options.warpgroup_rows
        warpgroups = bm // rows
        needed = (bn * rows // WARPGROUP + CONSUMER_OVERHEAD
                  + REGISTER_SETS * A_REGISTERS * rows // WGMMA_M)
        given = min(registers_at_entry(WARPGROUP * (warpgroups + 1), options.blocks_per_sm),
                    self.consumer_registers(warpgroups, options.blocks_per_sm))
        if needed > given:
            return (f"{bm}x{bn} with A's fragments in registers needs about {needed} "
                    f"registers a consumer thread, more than the {given} it gets")
        return None

    def read_access(self, role: str, layout) -> str:
        if role == "A":
            return "ld.shared.u16 (A's byte pairs)"
        return super().read_access(role, layout)

    def read_addresses(self, plan, op_plan, layout, warp_index, k0, elem_bytes):
        """B: the wgmma family's core matrices. A: the byte pairs one warp's ld.shared.u16
        reads at ``k0``, one access per register (32 lanes' 2-byte addresses)."""
        if op_plan.role == "B":
            yield from super().read_addresses(plan, op_plan, layout, warp_index, k0, elem_bytes)
            return
        if warp_index:
            return
        # a_offsets' elements (bytes: A is 8-bit), on ints: compiling needs no numpy.
        d = descriptor_fields(layout, "A", 1)
        within = k0 % WGMMA_K_BYTES
        start, swizzled = d.start(0, k0 - within, 1), bool(layout.swizzle.bits)
        for register in range(A_REGISTERS):
            yield [read_address(d, start, lane // 4 + 8 * (register % 2),
                                within + 2 * (lane % 4) + 8 * (register // 2), 1, swizzled)
                   for lane in range(WARP_SIZE)]

    def read_degree(self, k_major: bool, addresses: Sequence[int]) -> int:
        # A warp's 32 two-byte pairs of A (read_addresses), or the 8 sixteen-byte rows of one
        # of B's core matrices.
        width = PAIR_BYTES if len(addresses) == WARP_SIZE else 16
        return conflict_degree(addresses, width)

    def warp_tile_text(self, h: ExplainShape) -> str:
        tm, tn = h.warp_tile
        strips = tm // 16
        return (f"{tm} x {tn} per warp: a warpgroup's {WGMMA_M * strips} x {tn} from "
                f"{strips} wgmma.mma_async m64n{tn}k16 per k-step with A from registers "
                f"({A_REGISTERS * strips} ld.shared.u16 of A's 8-bit pairs, converted), B "
                "from shared memory")

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        label, text = super().instruction_text(h)
        return label, text + " (A in registers, converted from 8 bits)"


FAMILY = WgmmaRs()
