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
from tilec.target.layout import operand_k_major

from tilec.backend.llvm.emit import ELEMENT_TYPES

from . import byte_operands_llvm
from .mma_sync import (CONVERT_PTX, _ldmatrix_lane_offsets, ldmatrix_pieces,
                       mma_issue_order)

QUAD = "{i32, i32, i32, i32}"
F32X4 = "{float, float, float, float}"
# Accumulator element type -> the intrinsic's result (four of them a tile).
RESULTS = {"float": F32X4, "i32": QUAD}


def ldmatrix_values(ctx: LlvmContext, view: SmemView, role: str, k0: int) -> list[Val]:
    """ldmatrix.x4 of every piece of this warp's slice of operand ``role`` at ``k0``, four
    i32 values a piece in the mma's order; a piece's address is the reference lane offset
    XOR a small constant plus an immediate where the layout allows (offset_relation)."""
    layout = view.buffer.layout
    eb = view.buffer.elem_bytes
    trans = "" if operand_k_major(role, layout) else ".trans"
    state: dict = {}
    out: list[Val] = []
    for mn0, relation in ldmatrix_pieces(ctx.plan, role, layout, k0, eb):
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
               a_per_tile: int, b_per_tile: int, accumulator: str = "float") -> None:
    """``frag.mma``: one mma per m16 x n8 tile of the warp tile, in the order the PTX
    backend issues them (``mma_order``); ``a_per_tile``/``b_per_tile`` fragment registers
    each, four ``accumulator`` elements (float or i32) a tile."""
    a_vals, b_vals, acc = (ctx.get(v) for v in op.operands)
    plan = ctx.plan
    tiles_m = plan.warp_tile[0] // plan.instruction[0]
    tiles_n = plan.warp_tile[1] // plan.instruction[1]
    out = list(acc)

    # Each fragment register feeds several mmas: one bitcast of it, not one per use (a
    # smaller module for LLVM to parse and simplify; the PTX is the same).
    typed: dict[Val, Val] = {}

    def operand(v: Val) -> Val:
        if operand_ty == "i32":
            return v
        if v not in typed:
            typed[v] = ctx.b.cast("bitcast", v, operand_ty)
        return typed[v]

    for a_slice, b_slice, first in mma_issue_order(tiles_m, tiles_n, ctx.options.mma_order,
                                                   a_per_tile, b_per_tile):
        a, b = a_vals[a_slice], b_vals[b_slice]
        d = ctx.b.call(intrinsic, RESULTS[accumulator], [*(operand(v) for v in (*a, *b)),
                                                         *acc[first:first + 4]])
        out[first:first + 4] = [ctx.b.extract(d, j, accumulator) for j in range(4)]
    ctx.bind(op.result, out)


def _mma(ctx: LlvmContext, op: Op) -> None:
    suffix, operand_ty = MMA_INTRINSICS[op.operands[0].type.dtype]
    shape = "m{}n{}k{}".format(*ctx.plan.instruction)
    mma_values(ctx, op, f"llvm.nvvm.mma.{shape}.row.col.{suffix}", operand_ty, 4, 2)


def _cvt(ctx: LlvmContext, op: Op) -> None:
    """``frag.cvt``: each fragment register (two 16-bit elements, element 0 in the low half)
    widened exactly to f32 and rounded once to the product's dtype, as the PTX emitter's
    CONVERT_PTX sequences do (cvt.rn.f16x2.f32 / .bf16x2.f32), written once for every pair
    of 16-bit float dtypes; the byte pairs of frag.ldbytes by :mod:`.byte_operands_llvm`."""
    stored, product = op.operands[0].type.dtype, op.result.type.dtype
    if (stored, product) in byte_operands_llvm.CONVERSIONS:
        ctx.bind(op.result, [byte_operands_llvm.convert_pair(ctx, pair, stored, product)
                             for pair in ctx.get(op.operands[0])])
        return
    source, target = (ELEMENT_TYPES[v.type.dtype][0] for v in (op.operands[0], op.result))
    b = ctx.b
    out = []
    for register in ctx.get(op.operands[0]):
        pair = b.cast("bitcast", register, f"<2 x {source}>")
        wide = b.cast("fpext", pair, "<2 x float>")
        out.append(b.cast("bitcast", b.cast("fptrunc", wide, f"<2 x {target}>"), "i32"))
    ctx.bind(op.result, out)


def convertible(source, target) -> bool:
    """Whether :func:`_cvt` converts ``source`` fragments to ``target`` (the pairs of
    CONVERT_PTX whose both dtypes are 16-bit floats, and the 8-bit sources of frag.ldbytes;
    others are refused by name)."""
    return (source, target) in CONVERT_PTX and (
        (source, target) in byte_operands_llvm.CONVERSIONS
        or (source in SIXTEEN_BIT_FLOATS and target in SIXTEEN_BIT_FLOATS))


SIXTEEN_BIT_FLOATS = (F16, BF16)
EMITTERS = {"frag.ldmatrix": _ldmatrix, "frag.mma": _mma, "frag.cvt": _cvt,
            **byte_operands_llvm.EMITTERS}
