"""The FFMA (simt) family's LLVM emitters (``frag.lds``, ``frag.fma``): the 16-byte shared
loads of :mod:`tilec.families.ffma` (the same SimtLoads and lane offsets) as ``load <4 x
float>`` from addrspace(3), and every product as ``llvm.fma.f32`` (fma.rn.f32), in the PTX
emitter's order (k outermost), so both backends round identically.
"""
from __future__ import annotations

from tilec.backend.llvm.builder import Val
from tilec.backend.llvm.context import LlvmContext, SmemView
from tilec.ir.core import Op
from tilec.target.layout import offset_relation, operand_k_major

from .ffma import SimtLayout, _all_lanes, _lane_offset, simt_loads


def _lds(ctx: LlvmContext, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    fragment: SimtLayout = op.result.type.layout
    k0 = op.attrs["k0"]
    loads = simt_loads(fragment, operand_k_major(fragment.operand, view.buffer.layout))
    reference = _all_lanes(view, fragment, loads[0], 0)
    vals: list = [None] * fragment.regs_per_thread
    state: dict = {}
    for load in loads:
        relation = offset_relation(reference, _all_lanes(view, fragment, load, k0))
        address = ctx.relative_address(
            view, relation, state,
            lambda: _lane_offset(ctx, view, fragment, loads[0].mn, loads[0].k),
            lambda load=load: _lane_offset(ctx, view, fragment, load.mn, k0 + load.k))
        width = len(load.registers)
        vector = ctx.b.load(f"<{width} x float>", ctx.smem_pointer(address), 4 * width)
        for lane_index, index in enumerate(load.registers):
            vals[index] = ctx.b.assign("float", f"extractelement {vector}, i32 {lane_index}")
    ctx.bind(op.result, vals)


def _fma(ctx: LlvmContext, op: Op) -> None:
    a_vals, b_vals, acc = (ctx.get(v) for v in op.operands)
    layout: SimtLayout = op.result.type.layout
    rows, cols = len(layout.lane_rows), len(layout.lane_cols)
    steps = len(a_vals) // rows
    current: list[Val] = list(acc)
    for k in range(steps):
        for i in range(rows):
            for j in range(cols):
                index = i * cols + j
                current[index] = ctx.b.call("llvm.fma.f32", "float", [
                    a_vals[i * steps + k], b_vals[k * cols + j], current[index]])
    ctx.bind(op.result, current)


EMITTERS = {"frag.lds": _lds, "frag.fma": _fma}
