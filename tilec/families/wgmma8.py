"""The 8-bit wgmma family (sm_90a): ``wgmma.mma_async`` m64nNk32 on i8 (``.s32.s8.s8``, exact
i32 accumulation) and on e4m3 / e5m2 (``.f32.e4m3.e4m3``, f32 accumulation) tiles, both
operands read from shared memory through descriptors, fed by TMA, in the warp-specialized
pipeline of the wgmma family.

Everything but the instruction is the wgmma family's (:mod:`.wgmma`): the accumulator
layout (m64nN's is the same for k32), the descriptors of TMA's swizzles (a k32 step of
8-bit elements is 32 bytes of a row, as a k16 step of f16), the warpgroups and registers.
What differs:

- 8-bit wgmma has no transpose bits (PTX ISA 9.7.15.5, "wgmma.mma_async": ``imm-trans-a``
  and ``imm-trans-b`` exist for .f16/.bf16 only), so both operands must be stored K-major:
  A as [M, K] and B as [N, K] (``B.T``). Otherwise, and where the wgmma family declines the
  block, the mma.sync families take it (:mod:`.int8`, :mod:`.fp8`);
- BK is a multiple of 32 (one k32 step: 32 bytes, TMA's narrowest swizzle span);
- the CPU semantics: integers summed exactly and wrapped to int32 (no ``.satfinite``), fp8
  products summed in float64 with one f32 rounding per instruction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from tilec.backend.context import Context, SmemView
from tilec.ir.core import Op
from tilec.ir.ops import OpDef
from tilec.ir.schedule import OperandPlan
from tilec.ir.types import F8E4M3, F8E5M2, I8
from tilec.options import Options
from tilec.target.layout import operand_k_major

from .product import ExplainShape
from .wgmma import (MIN_SPAN_BYTES, WGMMA_K_BYTES, WGMMA_M, WGMMA_MMA, WGMMA_WAIT, Wgmma,
                    WgmmaLayout, descriptor_offsets, emit_wait, fresh_or_given,
                    strip_products, warpgroup_tile_text)

if TYPE_CHECKING:
    from tilec.cpu.interpreter import InterpState

WGMMA8_K = WGMMA_K_BYTES  # m64nNk32: 32 one-byte elements


@dataclass(frozen=True)
class Wgmma8Layout(WgmmaLayout):
    """The m64nN accumulator of 8-bit wgmma: the wgmma family's layout (i32 or f32)."""

    kind = "wgmma8"


# Per input dtype: the instruction's type suffix and the operands after scale-d (8-bit
# wgmma takes imm-scale-a/b only for floats, and no transpose bits at all).
WGMMA8_TYPES = {I8: ("s32.s8.s8", ""), F8E4M3: ("f32.e4m3.e4m3", ", 1, 1"),
                F8E5M2: ("f32.e5m2.e5m2", ", 1, 1")}


def _wgmma8(ctx: Context, op: Op) -> None:
    """``wgmma.mma`` on 8-bit operands: one wgmma.mma_async m64nNk32 per k32 step of the
    stage, accumulators in place (PTX ISA 9.7.15.5.2)."""
    view_a: SmemView = ctx.get(op.operands[0])
    view_b: SmemView = ctx.get(op.operands[1])
    acc = ctx.get(op.operands[2])
    bn, bk = ctx.plan.block[1], ctx.plan.block[2]
    for role, view in (("A", view_a), ("B", view_b)):
        if not operand_k_major(role, view.buffer.layout):
            raise ValueError(f"8-bit wgmma reads K-major operands only; {role} is MN-major")
    types, scales = WGMMA8_TYPES[op.operands[0].type.dtype]
    w = ctx.w
    strip_products(ctx, view_a, view_b, acc, bk, WGMMA8_K,
                   lambda registers, desc_a, desc_b, scale_d: (
                       f"wgmma.mma_async.sync.aligned.m{WGMMA_M}n{bn}k{WGMMA8_K}.{types} "
                       f"{{{registers}}}, {desc_a}, {desc_b}, {scale_d}{scales};"),
                   fresh=op.attrs.get("fresh", False))
    w.emit(f"wgmma.wait_group.sync.aligned {op.attrs.get('in_flight', 0)};")
    ctx.bind(op.result, list(acc))


def _execute_wgmma8(state: InterpState, op: Op, operands: list[Any]) -> list[Any]:
    """Per warpgroup and k32 step, A (64 x 32) and B (32 x BN) read where the descriptors
    point: i8 summed in int64 and wrapped to int32; fp8 (shared tiles hold the decoded
    values) summed in float64, one f32 rounding per wgmma."""
    import numpy as np

    from tilec.cpu.executor import block_state, checked_register_map
    block = block_state(state)
    (buffer_a, stage_a), (buffer_b, stage_b) = (
        block.shared(state, op, value, want_stage=True) for value in operands[:2])
    a_type, b_type, c_type = (v.type for v in op.operands)
    checked_register_map(state, op, c_type.layout, c_type.shape)
    for role, t in (("A", a_type), ("B", b_type)):
        if not operand_k_major(role, t.layout):
            raise state.error(op, f"8-bit wgmma reads K-major operands; {role} is stored "
                                  f"{t.layout}")
    integer = not a_type.dtype.is_float
    work = np.int64 if integer else np.float64
    bm, bk = a_type.shape
    bn = b_type.shape[1]
    a_storage = buffer_a.storage[stage_a * buffer_a.stage_size:][:buffer_a.stage_size]
    b_storage = buffer_b.storage[stage_b * buffer_b.stage_size:][:buffer_b.stage_size]
    acc = fresh_or_given(op, operands[2], work)
    for k0 in range(0, bk, WGMMA8_K):
        b = b_storage[descriptor_offsets(b_type.layout, "B", 0, k0, bn, 1)].astype(work)
        for m0 in range(0, bm, WGMMA_M):
            a = a_storage[descriptor_offsets(a_type.layout, "A", m0, k0, WGMMA_M, 1)]
            rows = slice(m0, m0 + WGMMA_M)
            d = acc[rows] + a.astype(work) @ b
            acc[rows] = ((d + 2 ** 31) % 2 ** 32 - 2 ** 31) if integer \
                else d.astype(np.float32)
    return [acc.astype(np.int32 if integer else np.float32)]


class Wgmma8(Wgmma):
    """wgmma.mma_async m64nNk32 on i8 / e4m3 / e5m2, K-major operands in shared memory."""

    name = "wgmma8"
    dtypes = ("i8", "f8e4m3", "f8e5m2")
    k_step = WGMMA8_K
    granule_why = " (wgmma m64nNk32: 16 rows a warp, N a multiple of 8)"
    instruction = (WGMMA_M, 0, WGMMA8_K)
    layout = Wgmma8Layout
    emitters = {"wgmma.mma": _wgmma8, "wgmma.wait": emit_wait}
    bk_unit = MIN_SPAN_BYTES  # one-byte elements
    preferred_min_bk = None

    def op_defs(self) -> tuple[OpDef, ...]:
        from dataclasses import replace
        return (replace(WGMMA_MMA, evaluate=_execute_wgmma8), WGMMA_WAIT)

    def declined(self, block: tuple[int, int, int], options: Options,
                 operands: Sequence[OperandPlan] = ()) -> Optional[str]:
        mn_major = [op.role for op in operands if not op.k_major]
        # The target first: off sm_90a or under a backend without wgmma, the layout is moot.
        if mn_major and self.target_problem(options.arch, options.backend) is None:
            return (f"operand{'s' if len(mn_major) > 1 else ''} {', '.join(mn_major)} stored "
                    "MN-major (8-bit wgmma has no transpose: both operands K-major)")
        return super().declined(block, options, operands)

    def instruction_text(self, h: ExplainShape) -> tuple[str, str]:
        label, text = super().instruction_text(h)
        return label, text + " (8-bit inputs: .s8 into i32, or .e4m3/.e5m2 into f32)"

    def warp_tile_text(self, h: ExplainShape) -> str:
        return warpgroup_tile_text(h, "k32", " (K-major)")


FAMILY = Wgmma8()
