"""The mma.sync family's LLVM emitters (``frag.ldmatrix``, ``frag.mma``): the same fragment
loads and products as :mod:`tilec.families.mma_sync`'s PTX emitters, as NVVM intrinsics.

The lane offsets come from the functions the PTX emitters use
(:func:`~tilec.families.mma_sync._ldmatrix_lane_offsets`, written over the context's integer
helpers), so both backends read the addresses the CPU executor checks; what differs is only
how an instruction is spelled: ``llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4[.trans].b16`` and
``llvm.nvvm.mma.m16n8k16.row.col.{f32.f32,bf16}`` (f16 operands as ``<2 x half>``).
"""
from __future__ import annotations

from tilec.backend.llvm.builder import Val
from tilec.backend.llvm.context import LlvmContext, SmemView
from tilec.ir.core import Op
from tilec.ir.types import BF16, F16
from tilec.target.layout import offset_relation, operand_extent, operand_k_major

from .mma_sync import LDMATRIX_PIECE, _ldmatrix_lane_offsets, _piece_offsets

QUAD = "{i32, i32, i32, i32}"
F32X4 = "{float, float, float, float}"


def ldmatrix_values(ctx: LlvmContext, view: SmemView, role: str, k0: int) -> list[Val]:
    """ldmatrix.x4 of every piece of this warp's slice of operand ``role`` at ``k0``, four
    i32 values a piece in the mma's order; a piece's address is the reference lane offset
    XOR a small constant plus an immediate where the layout allows (offset_relation)."""
    layout = view.buffer.layout
    eb = view.buffer.elem_bytes
    trans = "" if operand_k_major(role, layout) else ".trans"
    reference = _piece_offsets(ctx.plan, role, layout, 0, 0, eb)
    state: dict = {}
    out: list[Val] = []
    for mn0 in range(0, operand_extent(role, ctx.plan.warp_tile), LDMATRIX_PIECE):
        relation = offset_relation(reference, _piece_offsets(ctx.plan, role, layout, mn0, k0,
                                                             eb))
        address = ctx.relative_address(
            view, relation, state,
            lambda: _ldmatrix_lane_offsets(ctx, view, role, 0, 0),
            lambda mn0=mn0: _ldmatrix_lane_offsets(ctx, view, role, mn0, k0))
        quad = ctx.b.call(f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4{trans}.b16", QUAD,
                          [ctx.smem_pointer(address)])
        out.extend(ctx.b.extract(quad, j, "i32") for j in range(4))
    return out


def _ldmatrix(ctx: LlvmContext, op: Op) -> None:
    view: SmemView = ctx.get(op.operands[0])
    ctx.bind(op.result, ldmatrix_values(ctx, view, op.attrs["operand"], op.attrs["k0"]))


# Input dtype -> (intrinsic suffix, how a 32-bit fragment register is passed to it).
MMA_INTRINSICS = {F16: ("f32.f32", "<2 x half>"), BF16: ("bf16", "i32")}


def mma_values(ctx: LlvmContext, op: Op, intrinsic: str, operand_ty: str,
               a_per_tile: int, b_per_tile: int) -> None:
    """``frag.mma``: one mma per m16 x n8 tile of the warp tile, in the order the PTX
    backend issues them (``mma_order``); ``a_per_tile``/``b_per_tile`` fragment registers
    each."""
    a_vals, b_vals, acc = (ctx.get(v) for v in op.operands)
    plan = ctx.plan
    tiles_m = plan.warp_tile[0] // plan.instruction[0]
    tiles_n = plan.warp_tile[1] // plan.instruction[1]
    out = list(acc)
    order = [(tn, tm) for tn in range(tiles_n) for tm in range(tiles_m)]
    if ctx.options.mma_order == "m":
        order = [(tn, tm) for tm in range(tiles_m) for tn in range(tiles_n)]

    def operand(v: Val) -> Val:
        return v if operand_ty == "i32" else ctx.b.cast("bitcast", v, operand_ty)

    for tn, tm in order:
        a = a_vals[tm * a_per_tile:(tm + 1) * a_per_tile]
        # B was loaded two n8 tiles per ldmatrix.x4: (b0, b1) of tile 2p, then of 2p+1.
        start = (tn // 2) * 2 * b_per_tile + (tn % 2) * b_per_tile
        b = b_vals[start:start + b_per_tile]
        first = (tn * tiles_m + tm) * 4
        d = ctx.b.call(intrinsic, F32X4, [*(operand(v) for v in (*a, *b)),
                                          *acc[first:first + 4]])
        out[first:first + 4] = [ctx.b.extract(d, j, "float") for j in range(4)]
    ctx.bind(op.result, out)


def _mma(ctx: LlvmContext, op: Op) -> None:
    suffix, operand_ty = MMA_INTRINSICS[op.operands[0].type.dtype]
    shape = "m{}n{}k{}".format(*ctx.plan.instruction)
    mma_values(ctx, op, f"llvm.nvvm.mma.{shape}.row.col.{suffix}", operand_ty, 4, 2)


EMITTERS = {"frag.ldmatrix": _ldmatrix, "frag.mma": _mma}
