"""Emitters for arithmetic on distributed tiles that every product family shares:
elementwise ops, casts, fills. The products themselves (mma.sync, fma) are their family's
(:mod:`tilec.families`).

A distributed tile is a list of per-thread registers in the layout's register order; a
tile made from one value (``tile.full``, ``tile.splat``) repeats one register.
"""
from __future__ import annotations

from tilec.ir.core import Op
from tilec.ir.arith import wrap
from tilec.ir.types import BF16, F16, F32, FP8_DTYPES, I8, I32, DType
from tilec.target.erfc import ERFC_P

from .context import Context
from .writer import f32_literal

# Elementwise ops on f32 registers: PTX ISA 9.7.3. max/min .NaN propagate NaN (sm_80+),
# as numpy's maximum/minimum do.
F32_BINARY = {"tile.add": "add.f32", "tile.sub": "sub.f32", "tile.mul": "mul.f32",
              "tile.div": "div.rn.f32", "tile.max": "max.NaN.f32", "tile.min": "min.NaN.f32"}
# One-operand ops: the instructions computing ``{d}`` from ``{a}``, with ``{t}`` a scratch f32
# register. The math functions use PTX's approximate forms (PTX ISA 9.7.3: ex2, lg2, rsqrt,
# rcp .approx.ftz; tanh.approx, sm_75+); .ftz flushes subnormal inputs and results to zero.
# exp(x) = ex2(x log2 e), log(x) = lg2(x) ln 2; sqrt is sqrt.rn (correctly rounded).
# sigmoid(x) = 1 / (1 + ex2(-x log2 e)) with rcp.approx rather than 0.5 tanh(x / 2) + 0.5:
# it keeps its relative accuracy where sigmoid is tiny (x << 0), as silu needs, while
# tanh.approx's 2^-11 relative error would leave nothing of 1 + tanh there.
# gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3),
# computed as x / (1 + ex2(-2 log2(e) sqrt(2/pi) x (1 + 0.044715 x^2))) for the same reason.
_LOG2E, _MINUS_LOG2E, _LN2, _ONE = "0f3FB8AA3B", "0fBFB8AA3B", "0f3F317218", "0f3F800000"
_SIGMOID_OF_T = ("ex2.approx.ftz.f32 {t}, {t};", f"add.f32 {{t}}, {{t}}, {_ONE};",
                 "rcp.approx.ftz.f32 {t}, {t};")  # t = 1 / (1 + 2^t)
F32_UNARY: dict[str, tuple[str, ...]] = {
    "tile.neg": ("neg.f32 {d}, {a};",),
    "tile.relu": ("max.NaN.f32 {d}, {a}, 0f00000000;",),
    "tile.exp": (f"mul.f32 {{t}}, {{a}}, {_LOG2E};", "ex2.approx.ftz.f32 {d}, {t};"),
    "tile.exp2": ("ex2.approx.ftz.f32 {d}, {a};",),
    "tile.log": ("lg2.approx.ftz.f32 {t}, {a};", f"mul.f32 {{d}}, {{t}}, {_LN2};"),
    "tile.log2": ("lg2.approx.ftz.f32 {d}, {a};",),
    "tile.sqrt": ("sqrt.rn.f32 {d}, {a};",),
    "tile.rsqrt": ("rsqrt.approx.ftz.f32 {d}, {a};",),
    "tile.abs": ("abs.f32 {d}, {a};",),
    "tile.tanh": ("tanh.approx.f32 {d}, {a};",),
    "tile.sigmoid": (f"mul.f32 {{t}}, {{a}}, {_MINUS_LOG2E};", *_SIGMOID_OF_T[:2],
                     "rcp.approx.ftz.f32 {d}, {t};"),
    "tile.silu": (f"mul.f32 {{t}}, {{a}}, {_MINUS_LOG2E};", *_SIGMOID_OF_T,
                  "mul.f32 {d}, {a}, {t};"),
    "tile.gelu_tanh": ("mul.f32 {t}, {a}, {a};",
                       f"fma.rn.f32 {{t}}, {{t}}, 0f3D372713, {_ONE};",  # 1 + 0.044715 x^2
                       "mul.f32 {t}, {t}, {a};",
                       "mul.f32 {t}, {t}, 0fC0135761;",  # -2 log2(e) sqrt(2 / pi)
                       *_SIGMOID_OF_T, "mul.f32 {d}, {a}, {t};"),
    # gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) = x g, with h = erfc(z) / 2 at z = |x| / sqrt 2
    # (tilec/target/erfc.py: t = 1 / (1 + z/2), erfc(z) = t exp(P(t) - z^2)) and g = h for
    # x <= 0, 1 - h for x > 0 (erf is odd): no cancellation on either side, and x g rather
    # than x - x h keeps gelu(inf) = inf. P by Horner's rule in fma; P - z^2 is one fma, so
    # z^2 is not rounded on its own. NaN fails the setp and comes out of x h as NaN.
    "tile.gelu": ("abs.f32 {u}, {a};",
                  "mul.f32 {u}, {u}, 0f3F3504F3;",  # z = |x| / sqrt(2)
                  f"fma.rn.f32 {{t}}, {{u}}, 0f3F000000, {_ONE};",
                  "rcp.approx.ftz.f32 {t}, {t};",  # t = 1 / (1 + z / 2)
                  f"fma.rn.f32 {{v}}, {{t}}, {f32_literal(ERFC_P[9])}, {f32_literal(ERFC_P[8])};",
                  *(f"fma.rn.f32 {{v}}, {{v}}, {{t}}, {f32_literal(c)};"
                    for c in reversed(ERFC_P[:8])),
                  "neg.f32 {d}, {u};",
                  "fma.rn.f32 {v}, {d}, {u}, {v};",  # P(t) - z^2
                  f"mul.f32 {{v}}, {{v}}, {_LOG2E};",
                  "ex2.approx.ftz.f32 {v}, {v};",
                  "mul.f32 {t}, {t}, {v};",  # erfc(z)
                  "mul.f32 {t}, {t}, 0f3F000000;",  # h
                  f"sub.f32 {{u}}, {_ONE}, {{t}};",
                  "setp.gt.f32 {p}, {a}, 0f00000000;",
                  "selp.f32 {t}, {u}, {t}, {p};",
                  "mul.f32 {d}, {a}, {t};"),
}


def _names_in(lines: tuple[str, ...], names: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The (name, register class) of ``names`` that ``lines`` name, in ``names``' order."""
    return tuple((name, cls) for name, cls in names.items()
                 if any(f"{{{name}}}" in line for line in lines))


# The scratch registers a sequence of F32_UNARY may name, by kind, allocated only when named.
_SCRATCH = {"t": "f32", "u": "f32", "v": "f32", "p": "pred"}
# The scratch registers each unary op's lines name, in _SCRATCH's order: looked up per
# element of an epilogue (a 128x256 tile's GELU: 128 a thread), so found once per op.
UNARY_SCRATCH = {name: _names_in(lines, _SCRATCH) for name, lines in F32_UNARY.items()}
# And each op's lines as one template, formatted once per element (GELU's are 23 lines).
UNARY_TEMPLATE = {name: "\n".join(lines) for name, lines in F32_UNARY.items()}

# where(x compare y, a, b): setp then selp (PTX ISA 9.7.3 setp, selp). The comparisons are
# ordered (false when x or y is NaN) but for !=, which is the unordered neu (true with a
# NaN), as in Python and numpy.
SETP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "neu"}

# 16-bit floats go through f32: exact widening, one rounding back (PTX ISA 9.7.9.21, cvt).
# bf16 widens by placing its bits in the high half of an f32 (exact, any target).
# The 8-bit floats (a b16 register, the byte in its low half, the high one zero) have only
# pair forms (PTX ISA 9.7.9.21, PTX 7.8, sm_89+: the tiling pass refuses older targets):
# cvt.rn.f16x2.e4m3x2 widens the pair, exactly, into an f16 pair whose low half is ours;
# cvt.rn.satfinite.e4m3x2.f32 d, a, b rounds b into d's low byte (a, a zero, into the high
# one), to nearest even, sending out-of-range values and infinities to the largest finite
# value and NaN to NaN.
WIDEN = {F16: ("cvt.f32.f16 {d}, {a};",), BF16: ("mov.b32 {d}, {{{zero16}, {a}}};",),
         **{fp8: (f"cvt.rn.f16x2.{fp8.short[2:]}x2 {{pair}}, {{a}};",
                  "mov.b32 {{{half}, {high}}}, {pair};", "cvt.f32.f16 {d}, {half};")
            for fp8 in FP8_DTYPES}}
NARROW = {F16: ("cvt.rn.f16.f32 {d}, {a};",), BF16: ("cvt.rn.bf16.f32 {d}, {a};",),
          **{fp8: (f"cvt.rn.satfinite.{fp8.short[2:]}x2.f32 {{d}}, {{zero32}}, {{a}};",)
             for fp8 in FP8_DTYPES}}
# The scratch registers WIDEN's and NARROW's sequences may name, by class, and the zeros
# they may name, by class, each made once per kernel.
_CONVERT_SCRATCH = {"pair": "b32", "half": "b16", "high": "b16"}
_CONVERT_ZEROS = {"zero16": "b16", "zero32": "f32"}
# The scratch registers and zeros each sequence names: looked up per element converted.
_CONVERSION_NAMES = {lines: (_names_in(lines, _CONVERT_SCRATCH),
                             _names_in(lines, _CONVERT_ZEROS))
                     for lines in (*WIDEN.values(), *NARROW.values())}


# Integer tiles (i32 accumulators, i8 data): the register class an element lives in and its
# PTX type (PTX ISA 5.2). Their arithmetic is conversions only (the frontend asks for .to()).
INT_REGISTERS = {I32: ("b32", "s32"), I8: ("b16", "s8")}


def convert(ctx: Context, reg: str, source: DType, target: DType) -> str:
    """One element converted from ``source`` to ``target`` (PTX ISA 9.7.9.21, cvt): floats
    through f32 as before; int -> float by cvt.rn.f32 (then one rounding to 16 bits);
    float -> int by cvt.rni, which saturates and sends NaN to 0; int -> int by cvt, which
    keeps the low bits (wraps). The CPU interpreter's _convert is the same."""
    if source.is_float and target.is_float:
        return _narrow(ctx, _widen(ctx, reg, source), target)
    if source == target:
        return reg
    if not source.is_float:
        if target.is_float:
            wide = ctx.w.reg("f32")
            ctx.w.emit(f"cvt.rn.f32.{INT_REGISTERS[source][1]} {wide}, {reg};")
            return _narrow(ctx, wide, target)
        cls, ptx_type = INT_REGISTERS[target]
        out = ctx.w.reg(cls)
        ctx.w.emit(f"cvt.{ptx_type}.{INT_REGISTERS[source][1]} {out}, {reg};")
        return out
    cls, ptx_type = INT_REGISTERS[target]
    out = ctx.w.reg(cls)
    ctx.w.emit(f"cvt.rni.{ptx_type}.f32 {out}, {_widen(ctx, reg, source)};")
    return out


def _widen(ctx: Context, reg: str, dtype: DType) -> str:
    if dtype == F32:
        return reg
    wide = ctx.w.reg("f32")
    _emit_conversion(ctx, WIDEN[dtype], wide, reg)
    return wide


def _narrow(ctx: Context, reg: str, dtype: DType) -> str:
    if dtype == F32:
        return reg
    out = ctx.w.reg("b16")
    _emit_conversion(ctx, NARROW[dtype], out, reg)
    return out


def _emit_conversion(ctx: Context, lines: tuple[str, ...], d: str, a: str) -> None:
    """One WIDEN or NARROW sequence, its scratch registers allocated where it names them."""
    scratch, zeros = _CONVERSION_NAMES[lines]
    named = {name: ctx.w.reg(cls) for name, cls in scratch}
    named.update((name, _zero(ctx, cls)) for name, cls in zeros)
    for line in lines:
        ctx.w.emit(line.format(d=d, a=a, **named))


def _zero(ctx: Context, cls: str) -> str:
    """A register of class ``cls`` holding zero, made once per kernel."""
    def compute() -> str:
        r = ctx.w.reg(cls)
        ctx.w.emit(f"mov.f32 {r}, 0f00000000;" if cls == "f32" else f"mov.{cls} {r}, 0;")
        return r
    return ctx.w.once(f"zero_{cls}", compute)


def _map(ctx: Context, op: Op, combine) -> None:
    """Apply ``combine`` element by element, computing once per distinct register tuple
    (a splat operand repeats one register)."""
    dtype = op.result.type.dtype
    operand_regs = [ctx.get(v) for v in op.operands]
    cache = ctx.op_state.setdefault(op, {})
    n = len(operand_regs[0])
    out = {}
    for index in ctx.indices(n):
        regs = tuple(r[index] for r in operand_regs)
        if regs not in cache:
            wide = [_widen(ctx, r, v.type.dtype) for r, v in zip(regs, op.operands)]
            cache[regs] = _narrow(ctx, combine(wide), dtype)
        out[index] = cache[regs]
    ctx.bind_elements(op.result, n, out)


def _binary(ctx: Context, op: Op) -> None:
    def combine(wide: list[str]) -> str:
        d = ctx.w.reg("f32")
        ctx.w.emit(f"{F32_BINARY[op.name]} {d}, {wide[0]}, {wide[1]};")
        return d
    _map(ctx, op, combine)


def _unary(ctx: Context, op: Op) -> None:
    def combine(wide: list[str]) -> str:
        d = ctx.w.reg("f32")
        scratch = {name: ctx.w.reg(kind) for name, kind in UNARY_SCRATCH[op.name]}
        for line in UNARY_TEMPLATE[op.name].format(d=d, a=wide[0], **scratch).split("\n"):
            ctx.w.emit(line)
        return d
    _map(ctx, op, combine)


def _where(ctx: Context, op: Op) -> None:
    compare = SETP[op.attrs["compare"]]

    def combine(wide: list[str]) -> str:
        x, y, a, b = wide
        p, d = ctx.w.reg("pred"), ctx.w.reg("f32")
        ctx.w.emit(f"setp.{compare}.f32 {p}, {x}, {y};")
        ctx.w.emit(f"selp.f32 {d}, {a}, {b}, {p};")
        return d
    _map(ctx, op, combine)


def _cast(ctx: Context, op: Op) -> None:
    source = op.operands[0].type.dtype
    target = op.result.type.dtype
    cache = ctx.op_state.setdefault(op, {})
    regs = ctx.get(op.operands[0])
    out = {}
    for index in ctx.indices(len(regs)):
        reg = regs[index]
        if reg not in cache:
            cache[reg] = convert(ctx, reg, source, target)
        out[index] = cache[reg]
    ctx.bind_elements(op.result, len(regs), out)


def _full(ctx: Context, op: Op) -> None:
    if op.result in ctx.values:
        return  # bound by an earlier chunk of the epilogue
    rtype = op.result.type
    if rtype.dtype in INT_REGISTERS:
        cls, _ = INT_REGISTERS[rtype.dtype]
        reg = ctx.w.reg(cls)
        ctx.w.emit(f"mov.{cls} {reg}, {wrap(rtype.dtype, int(op.attrs['value']))};")
        ctx.bind(op.result, [reg] * _elements_per_thread(rtype))
        return
    reg = ctx.w.reg("f32")
    ctx.w.emit(f"mov.f32 {reg}, {f32_literal(op.attrs['value'])};")
    reg = _narrow(ctx, reg, rtype.dtype)
    ctx.bind(op.result, [reg] * _elements_per_thread(rtype))


def _splat(ctx: Context, op: Op) -> None:
    if op.result in ctx.values:
        return  # bound by an earlier chunk of the epilogue
    rtype = op.result.type
    # Scalars live in f32 registers whatever their IR dtype (a number next to an f16 tile is
    # an f16 constant, still emitted as mov.f32): a 16-bit tile's elements are b16.
    reg = ctx.get(op.operands[0])
    if rtype.dtype in NARROW:
        reg = _narrow(ctx, reg, rtype.dtype)
    ctx.bind(op.result, [reg] * _elements_per_thread(rtype))


def _elements_per_thread(rtype) -> int:
    layout = rtype.layout
    if layout is None:
        raise NotImplementedError(f"the PTX backend needs a layout for {rtype}")
    return layout.regs_per_thread


EMITTERS = {
    **{name: _binary for name in F32_BINARY},
    **{name: _unary for name in F32_UNARY},
    "tile.where": _where,
    "tile.cast": _cast,
    "tile.full": _full,
    "tile.splat": _splat,
}
