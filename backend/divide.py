"""Division of a 32-bit register by a constant, without PTX's ``div``/``rem``.

ptxas lowers ``div.s32``/``rem.s32`` by an immediate to the general sequence (a float
reciprocal through MUFU.RCP, then Newton steps and corrections: ~25 SASS instructions, two
long-latency), as the SASS of the sm_90a consumer loop showed for its ring stage and phase.
A constant divisor needs only a shift (a power of two) or a multiply-high by a magic
number, so the backend writes those itself.

The results are the IR's ``floordiv`` and ``mod`` (rounding toward minus infinity, a
non-negative remainder), for every int32 dividend: a negative ``x`` divides as
``~(~x // d)``, and ``~x`` is non-negative. :func:`model` runs the same instruction
sequence in Python, so the tests check it against ``//`` and ``%`` without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

MASK = (1 << 32) - 1


@dataclass(frozen=True)
class Divider:
    """How to divide by ``d`` > 0: ``shift`` alone when d is a power of two, else
    ``mulhi(y, magic) >> shift`` for a non-negative ``y`` below 2^31."""

    d: int
    magic: Optional[int]
    shift: int


def divider(d: int) -> Divider:
    if d <= 0:
        raise ValueError(f"divide by a constant: the divisor must be positive, not {d}")
    if d & (d - 1) == 0:
        return Divider(d, None, d.bit_length() - 1)
    # l = ceil(log2 d); magic = ceil(2^(31+l) / d) < 2^32, and y * magic >> (31 + l) is
    # y // d for every y < 2^31: the rounding error magic * d - 2^(31+l) is below d <= 2^l.
    l = (d - 1).bit_length()
    magic = -(-(1 << (31 + l)) // d)
    return Divider(d, magic, l - 1)


def model(x: int, d: int, nonnegative: bool = False) -> tuple[int, int]:
    """(x // d, x % d) as the emitted instructions compute them on 32-bit registers."""
    plan = divider(d)
    x &= MASK
    if plan.magic is None:
        signed = x - (1 << 32) if x >> 31 else x
        return signed >> plan.shift, x & (d - 1)
    sign = 0 if nonnegative else (MASK if x >> 31 else 0)
    y = x ^ sign
    q = (((y * plan.magic) >> 32) >> plan.shift) ^ sign
    r = (x - q * d) & MASK
    to_signed = (lambda v: v - (1 << 32) if v >> 31 else v)
    return to_signed(q & MASK), to_signed(r)


def emit(ctx, x: str, d: int, want: str, nonnegative: bool = False) -> str:
    """The register holding ``x // d`` (want="q") or ``x % d`` (want="r"). ``nonnegative``:
    the caller knows x >= 0 (thread and warp indices), which saves the sign handling."""
    plan = divider(d)
    if plan.magic is None:
        if want == "q":
            return x if d == 1 else ctx.int_op("shr.s32", x, plan.shift)
        return ctx.int_op("and.b32", x, d - 1)
    sign = None if nonnegative else ctx.int_op("shr.s32", x, 31)
    y = x if sign is None else ctx.int_op("xor.b32", x, sign)
    q = ctx.int_op("shr.u32", ctx.int_op("mul.hi.u32", y, plan.magic), plan.shift)
    if sign is not None:
        q = ctx.int_op("xor.b32", q, sign)
    if want == "q":
        return q
    return ctx.mad(q, -d, x)


# -- by a divisor fixed for a whole launch -------------------------------------------------------

def prepared(d: int) -> tuple[int, int]:
    """(magic, shift) for dividing by ``d`` (1 <= d <= 2^31; 0, which no loop divides by,
    as 1): ``(mulhi(x, magic) + x) >> shift`` is ``x // d`` for 0 <= x < 2^31 (Granlund
    and Montgomery's round-up method: shift = ceil(log2 d), magic = 2^32 (2^shift - d) / d
    + 1, below 2^32; the add cannot carry out of 32 bits for such x).

    Why: a persistent kernel's tile loop decoded every tile's batch and (m, n) with three
    ``div.u32``/``rem.u32`` by runtime tile counts, and ptxas recomputed each reciprocal
    (I2F, MUFU.RCP, F2I and ~20 corrections) every time round the loop, on the consumers'
    path between one tile's last product and the next's first (SASS of the sm_90a batched
    kernel, 128x128 st6: ~130 instructions a tile). The host computes these once a launch
    (:mod:`tilec.backend.tile_order`); computed in the kernel, they held registers across
    the K loop and the fused 128x256 epilogue spilled."""
    d = max(d, 1)
    shift = (d - 1).bit_length()
    return ((((1 << shift) - d) << 32) // d + 1) & MASK, shift


def divmod_prepared(ctx, x: str, d: str, magic: str, shift: str) -> tuple[str, str]:
    """(x // d, x % d) for 0 <= x < 2^31, with :func:`prepared`'s magic and shift: a
    multiply-high, an add, a shift and a multiply-add."""
    high = ctx.int_op("mul.hi.u32", x, magic)
    q = ctx.int_op("shr.u32", ctx.int_op("add.u32", high, x), shift)
    return q, ctx.int_op("sub.u32", x, ctx.int_op("mul.lo.u32", q, d))


def model_prepared(x: int, d: int) -> tuple[int, int]:
    """(x // d, x % d) as :func:`divmod_prepared` computes them on 32-bit registers."""
    magic, shift = prepared(d)
    d = max(d, 1)
    q = ((((x * magic) >> 32) + x) & MASK) >> shift
    return q, (x - q * d) & MASK
