"""The llvm backend's emitters of 8-bit operands converted to a 16-bit product (w8a16:
:mod:`tilec.families.byte_operands`): ``frag.ldbytes`` and ``frag.cvt`` from i8, f8e4m3 or
f8e5m2, as plain LLVM IR and NVVM intrinsics (no inline asm).

The load is the PTX emitter's: each B register is one 16-bit shared load of two adjacent k
bytes, at the lane offsets :func:`~tilec.families.byte_operands._lane_offset` computes for
both backends (a register here is the ``i16`` pair itself). The conversions are the same
arithmetic as the PTX backend's CONVERT_PTX, so both give the same bits:

- i8 -> f16: the magic-number trick (xor 0x8080; the bytes under 0x64 by a v4i8
  shufflevector, which NVPTX selects as prmt, as ``llvm.nvvm.prmt`` would but without
  needing a recent LLVM) and one ``fsub <2 x half>`` of 0x6480 (1152): exact;
- i8 -> bf16: the same in f32 (0x4B000000 | byte, minus 2**23 + 128), then ``fptrunc`` to
  ``<2 x bfloat>`` (cvt.rn.bf16x2.f32): exact;
- f8e4m3 / f8e5m2 -> f16: ``llvm.nvvm.e4m3x2.to.f16x2.rn`` / ``e5m2x2``
  (cvt.rn.f16x2.e4m3x2, sm_89+: the tiling pass refuses fp8 weights before), exact;
- f8 -> bf16: that f16 pair ``fpext`` to f32 and ``fptrunc`` to bf16, exact.
"""
from __future__ import annotations

from tilec.backend.llvm import fp8
from tilec.backend.llvm.builder import Val
from tilec.backend.llvm.context import LlvmContext, SmemView
from tilec.ir.core import Op
from tilec.ir.types import BF16, F16, F8E4M3, F8E5M2, I8

from .byte_operands import LOAD_OP, PAIR_BYTES, _lane_offset, pair_relations


def _ldbytes(ctx: LlvmContext, op: Op) -> None:
    """One i16 shared load per B register, in the mma family's register order (2 tn + reg),
    addressed as the PTX emitter addresses them (a reference offset, XOR and immediate)."""
    view: SmemView = ctx.get(op.operands[0])
    k0 = op.attrs["k0"]
    state: dict = {}
    pairs = []
    for tn, reg, relation in pair_relations(ctx.plan, view.buffer.layout, k0):
        address = ctx.relative_address(
            view, relation, state, lambda: _lane_offset(ctx, view, 0, 0, 0),
            lambda tn=tn, reg=reg: _lane_offset(ctx, view, tn, reg, k0))
        pairs.append(ctx.b.load("i16", ctx.smem_pointer(address), PAIR_BYTES))
    ctx.bind(op.result, pairs)


def _i8_bytes(ctx: LlvmContext, pair: Val) -> Val:
    """The byte pair with each byte's sign bit flipped (s + 128, 0 .. 255), as <4 x i8>
    (bytes 2 and 3 zero)."""
    biased = ctx.b.binop("xor", ctx.b.cast("zext", pair, "i32"), 0x8080)
    return ctx.b.cast("bitcast", biased, "<4 x i8>")


def _permute(ctx: LlvmContext, data: Val, constant: int, selector: tuple[int, ...]) -> Val:
    """prmt.b32 as IR: bytes ``selector`` of (data, the bytes of ``constant``), a v4i8
    shufflevector, which LLVM's NVPTX target selects as one prmt."""
    pool = ", ".join(f"i8 {constant >> 8 * i & 0xFF}" for i in range(4))
    mask = ", ".join(f"i32 {i}" for i in selector)
    out = ctx.b.assign("<4 x i8>", f"shufflevector {data}, <4 x i8> <{pool}>, "
                                   f"<4 x i32> <{mask}>")
    return ctx.b.cast("bitcast", out, "i32")


def _i8_to_f16(ctx: LlvmContext, pair: Val) -> Val:
    b = ctx.b
    # Each byte under 0x64 (prmt selector 0x4140): the f16 1024 + byte, exactly.
    magic = _permute(ctx, _i8_bytes(ctx, pair), 0x64646464, (0, 4, 1, 4))
    halves = b.cast("bitcast", magic, "<2 x half>")
    # 0x6480 is 1152.0 in f16: subtracting it leaves s exactly.
    out = b.assign("<2 x half>", f"fsub <2 x half> {halves.ref}, "
                                 "<half 0xH6480, half 0xH6480>")
    return b.cast("bitcast", out, "i32")


def _i8_to_bf16(ctx: LlvmContext, pair: Val) -> Val:
    b = ctx.b
    data = _i8_bytes(ctx, pair)
    words = []
    for byte in (0, 1):  # prmt selectors 0x7540 and 0x7541: 0x4B000000 | byte = 2**23 + byte
        wide = b.cast("bitcast", _permute(ctx, data, 0x4B000000, (byte, 4, 5, 7)), "float")
        words.append(b.binop("fsub", wide, 8388736.0, "float"))  # - (2**23 + 128): s
    vector = b.assign("<2 x float>", f"insertelement <2 x float> poison, {words[0]}, i32 0")
    vector = b.assign("<2 x float>", f"insertelement {vector}, {words[1]}, i32 1")
    return b.cast("bitcast", b.cast("fptrunc", vector, "<2 x bfloat>"), "i32")


def _fp8_to_16(ctx: LlvmContext, pair: Val, source, target) -> Val:
    b = ctx.b
    halves = fp8.half_pair(b, pair, source)
    if target == BF16:
        halves = b.cast("fptrunc", b.cast("fpext", halves, "<2 x float>"), "<2 x bfloat>")
    return b.cast("bitcast", halves, "i32")


def convert_pair(ctx: LlvmContext, pair: Val, source, target) -> Val:
    """One frag.ldbytes register (an i16 byte pair) as the product's 16-bit pair (i32)."""
    if source == I8:
        return (_i8_to_f16 if target == F16 else _i8_to_bf16)(ctx, pair)
    return _fp8_to_16(ctx, pair, source, target)


# (stored, product) pairs convert_pair converts: every 8-bit conversion of CONVERT_PTX.
CONVERSIONS = frozenset((source, target) for source in (I8, F8E4M3, F8E5M2)
                        for target in (F16, BF16))
EMITTERS = {LOAD_OP: _ldbytes}
