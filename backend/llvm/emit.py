"""The LLVM backend's op table: lowered tile IR -> LLVM IR, one emitter per op name.

This walks the same lowered IR as :mod:`tilec.backend.ptx`, with the same op table shape:
the generic ops here (scalars, the grid, loops, shared buffers, the epilogue, elementwise
math), each family's ops from its ``llvm_emitters`` (``tilec/families/*_llvm.py``). Plain
LLVM IR for arithmetic, loops and predicates; NVVM intrinsics for thread ids, the barrier,
cp.async, ldmatrix and mma; LLVM does register allocation and the address arithmetic's
strength reduction, where the PTX backend does both by hand.

An op missing from the table is reported by name, never skipped:
:func:`tilec.backend.llvm.unsupported` checks a kernel before any IR is written.
"""
from __future__ import annotations

from typing import Callable

from tilec.ir.arith import wrap
from tilec.ir.core import Op
from tilec.ir.types import BF16, F16, F32, FP8_DTYPES, I8, I32, PRED, DType
from tilec.target.erfc import ERFC_P

from ..abi import PROGRAM_ROLES, BlobParam, PointerParam, bind_program_params
from ..context import flatten
from ..copies import bind_smem_buffer
from ..epilogue import AddressArithmetic, element_addresses
from ..grid import program_ids
from ..ptx import INT_BINARY, SCALAR_BINARY  # the PTX spelling LlvmContext.int_op reads
from . import fp8
from .builder import Val, const
from .context import LlvmContext, SmemBuffer, SmemView, TensorVals

# -- scalars ----------------------------------------------------------------------------
CONSTANT_DIVISION = {"arith.floordiv": LlvmContext.div_const,
                     "arith.mod": LlvmContext.mod_const}
# f32 scalars: the instruction, or the intrinsic (min/max as PTX's min.f32/max.f32: NaN
# ignored, LLVM's minnum/maxnum).
FLOAT_BINARY = {"arith.add": "fadd", "arith.sub": "fsub", "arith.mul": "fmul",
                "arith.div": "fdiv", "arith.min": "@llvm.minnum.f32",
                "arith.max": "@llvm.maxnum.f32"}


def float_binary(ctx: LlvmContext, how: str, a: Val, b: Val) -> Val:
    if how.startswith("@"):
        return ctx.b.call(how[1:], "float", [a, b])
    return ctx.b.binop(how, a, b, "float")


def _constant(ctx: LlvmContext, op: Op) -> None:
    value = op.attrs["value"]
    dtype = op.result.type.dtype
    if dtype == I32:
        ctx.constants[op.result] = int(value)
        ctx.bind(op.result, const(int(value), "i32"))
    elif dtype == PRED:
        ctx.bind(op.result, const(bool(value), "i1"))
    else:
        ctx.bind(op.result, const(float(value), "float"))


def _scalar_binary(ctx: LlvmContext, op: Op) -> None:
    a, b = op.operands
    is_int = op.result.type.dtype == I32
    divisor = ctx.const(b) if is_int else None
    if op.name == "arith.cdiv":
        bias = ctx.int_op("sub.s32", ctx.int_op("add.s32", ctx.get(a), ctx.get(b)), 1)
        ctx.bind(op.result, ctx.int_op("div.s32", bias, ctx.get(b)) if divisor is None
                 else ctx.div_const(bias, divisor))
        return
    if op.name in CONSTANT_DIVISION and isinstance(divisor, int) and divisor > 0:
        ctx.bind(op.result, CONSTANT_DIVISION[op.name](ctx, ctx.get(a), divisor))
        return
    if is_int:
        ctx.bind(op.result, ctx.int_op(INT_BINARY[op.name], ctx.get(a), ctx.get(b)))
    else:
        ctx.bind(op.result, float_binary(ctx, FLOAT_BINARY[op.name], ctx.get(a), ctx.get(b)))


def _wrap_inc(ctx: LlvmContext, op: Op) -> None:
    value = ctx.int_op("add.s32", ctx.get(op.operands[0]), 1)
    wrapped = ctx.b.icmp("eq", value, op.attrs["modulus"])
    ctx.bind(op.result, ctx.b.select(wrapped, 0, value))


def _select(ctx: LlvmContext, op: Op) -> None:
    flag, a, b = op.operands
    ctx.bind(op.result, ctx.b.select(ctx.get(flag), ctx.get(a), ctx.get(b)))


def _compare(ctx: LlvmContext, op: Op) -> None:
    a, b = op.operands
    ctx.bind(op.result, ctx.b.icmp("slt", ctx.get(a), ctx.get(b)))


# -- the grid ---------------------------------------------------------------------------
def _grid(ctx: LlvmContext, op: Op) -> None:
    """Program ids from %ctaid (backend/grid.py: the axes both backends read, so the launch
    grid is the same)."""
    for result, value in zip(op.results, program_ids(ctx, op, lambda axis: ctx.sreg(
            f"ctaid.{axis}"))):
        ctx.bind(result, value)


# -- structured control flow ------------------------------------------------------------
def _shaped_like(template, flat: list[Val]):
    """``flat`` regrouped as ``template`` (a value or nested lists of values) is."""
    if isinstance(template, list):
        out = []
        for item in template:
            out.append(_shaped_like(item, flat))
        return out
    return flat.pop(0)


def _for(ctx: LlvmContext, op: Op) -> None:
    """scf.for as header (phis, exit test), body, latch; carried tiles are one phi per
    register."""
    b = ctx.b
    lb, ub, step, *inits = op.operands
    body = op.regions[0]
    before = b.block
    head, loop, done = b.new_block("loop"), b.new_block("body"), b.new_block("done")
    b.br(head)
    b.position(head)
    iv, iv_line = b.phi("i32")
    init_vals = [ctx.get(v) for v in inits]
    phis = [(b.phi(v.ty), v) for v in flatten(init_vals)]
    carried = _shaped_like(init_vals, [phi for (phi, _), _ in phis])
    ctx.bind(body.args[0], iv)
    for arg, regs in zip(body.args[1:], carried):
        ctx.bind(arg, regs)
    b.cbr(b.icmp("sge", iv, ctx.get(ub)), done, loop)
    b.position(loop)
    ctx.loop_ivs.append(body.args[0])
    ctx.emit_block(ctx, body.ops[:-1])
    ctx.loop_ivs.pop()
    yielded = flatten([ctx.get(v) for v in body.ops[-1].operands])
    iv_next = ctx.int_op("add.s32", iv, ctx.get(step))
    latch = b.block
    b.br(head)
    b.close_phi(head, iv_line, iv, [(ctx.get(lb), before), (iv_next, latch)])
    for ((phi, line), init), value in zip(phis, yielded):
        b.close_phi(head, line, phi, [(init, before), (value, latch)])
    b.position(done)
    for result, regs in zip(op.results, carried):
        ctx.bind(result, regs)


def _no_code(ctx: LlvmContext, op: Op) -> None:
    if op.name == "tensor.transpose":
        ctx.bind(op.result, ctx.get(op.operands[0]).transposed())


def _batch_view(ctx: LlvmContext, op: Op) -> None:
    """One matrix of a 3-D tensor: the base pointer moved by ``b * stride0`` elements, in
    64 bits (backend/ptx.py's _batch_view: the batches of a large tensor span more than
    2**31 bytes)."""
    tensor: TensorVals = ctx.get(op.operands[0])
    offset = ctx.wide(ctx.get(op.operands[1]), tensor.strides[0])
    pointer = ctx.b.gep(tensor.ptr, ctx.b.binop("mul", offset, tensor.elem_bytes, "i64"))
    ctx.bind(op.result, TensorVals(pointer, tensor.strides[1:], tensor.dims[1:],
                                   tensor.elem_bytes))


# -- shared buffers and the barrier -----------------------------------------------------
def _smem_stage(ctx: LlvmContext, op: Op) -> None:
    buffer: SmemBuffer = ctx.get(op.operands[0])
    stage = op.operands[1]
    if ctx.const(stage) is not None:
        address = const(buffer.offset + ctx.const(stage) * buffer.stage_bytes, "i32")
    else:
        address = ctx.mad(ctx.get(stage), buffer.stage_bytes, buffer.offset)
    ctx.bind(op.result, SmemView(buffer, address))


def _barrier(ctx: LlvmContext, op: Op) -> None:
    ctx.b.call("llvm.nvvm.barrier.cta.sync.aligned.all", "void", [const(0, "i32")])


# -- the epilogue: each thread loads / stores the accumulator elements it holds ---------
# Element bytes -> the LLVM type of a 16-bit or 32-bit element in memory, and its zero.
ELEMENT_TYPES = {F16: ("half", "0xH0000"), BF16: ("bfloat", "0xR0000"),
                 F32: ("float", "0.0"), I32: ("i32", "0"), I8: ("i8", "0"),
                 **{dtype: ("i8", "0") for dtype in FP8_DTYPES}}


class LlvmAddresses(AddressArithmetic):
    """The epilogue's address arithmetic as LLVM IR: byte offsets by ``getelementptr`` on
    i8 pointers, bounds by unsigned compares."""

    def __init__(self, ctx: LlvmContext) -> None:
        self.b = ctx.b

    def add(self, total: Val, term: Val) -> Val:
        return self.b.binop("add", total, term, "i64")

    def base(self, pointer: Val, offset: Val | None, eb: int) -> Val:
        return pointer if offset is None else self.b.gep(pointer,
                                                         self.b.binop("mul", offset, eb, "i64"))

    def step(self, address: Val, delta: Val) -> Val:
        return self.b.gep(address, delta)

    def below(self, coord: Val, size: Val) -> Val:
        return self.b.icmp("ult", coord, size)

    def at(self, address: Val, immediate: int) -> Val:
        return self.b.gep(address, const(immediate, "i64"))


def _frag_load(ctx: LlvmContext, op: Op) -> None:
    offsets = [ctx.get(v) for v in op.operands[1:]]
    rtype = op.result.type
    eb = rtype.dtype.bytes
    ty, zero = ELEMENT_TYPES[rtype.dtype]
    masked = op.attrs.get("masked", [True] * len(offsets))
    loaded = ctx.op_state.setdefault(("loaded", op), {})
    out = {}
    for index, pointer, inside, element in element_addresses(
            ctx, op, offsets, op.attrs["dims"], rtype.layout, eb, masked, LlvmAddresses(ctx)):
        if element not in loaded:
            loaded[element] = ctx.guarded_load(ty, pointer, inside, eb, zero)
        out[index] = loaded[element]
    ctx.bind_elements(op.result, rtype.layout.regs_per_thread, out)


def _pairs_contiguous(ctx: LlvmContext, tensor) -> bool:
    for param, arg in zip(ctx.kernel.params, ctx.kernel.body.args):
        if arg is tensor:
            spec = ctx.options.spec.tensor(param.name, param.type.rank, param.type.dtype.bytes)
            return param.type.rank == 2 and spec.contiguous_dim == 1 and spec.vec_elems >= 2
    return False


def _store(ctx: LlvmContext, op: Op) -> None:
    if "via" in op.attrs:
        raise NotImplementedError(f"the llvm backend does not store through '{op.attrs['via']}'")
    b = ctx.b
    offsets = [ctx.get(v) for v in op.operands[1:-1]]
    value = op.operands[-1]
    vtype = value.type
    eb = vtype.dtype.bytes
    vals = ctx.get(value)
    masked = op.attrs.get("masked", [True] * len(offsets))
    elements = element_addresses(ctx, op, offsets, list(range(len(offsets))), vtype.layout,
                                 eb, masked, LlvmAddresses(ctx))
    if not _pairs_contiguous(ctx, op.operands[0]):
        for index, pointer, inside, _ in elements:
            ctx.if_then(inside, lambda v=vals[index], p=pointer: b.store(v, p, eb), "store")
        return
    # Registers 2i and 2i+1 hold neighbouring columns: one 2-element store when both are
    # inside, the first alone at a ragged right edge.
    for position in range(0, len(elements), 2):
        (i, pointer, inside, _), (_, _, inside_next, _) = elements[position:position + 2]
        pair_ty = f"<2 x {vals[i].ty}>"
        pair = b.assign(pair_ty, f"insertelement {pair_ty} poison, {vals[i]}, i32 0")
        pair = b.assign(pair_ty, f"insertelement {pair}, {vals[i + 1]}, i32 1")
        if inside_next is None:
            b.store(pair, pointer, 2 * eb)
            continue
        both, other, join = b.new_block("pair"), b.new_block("edge"), b.new_block("stored")
        b.cbr(inside_next, both, other)
        b.position(both)
        b.store(pair, pointer, 2 * eb)
        b.br(join)
        b.position(other)
        ctx.if_then(inside, lambda p=pointer, v=vals[i]: b.store(v, p, eb), "alone")
        b.br(join)
        b.position(join)


# -- elementwise math on distributed tiles ----------------------------------------------
F32_BINARY = {"tile.add": "fadd", "tile.sub": "fsub", "tile.mul": "fmul", "tile.div": "fdiv",
              "tile.max": "@llvm.maximum.f32", "tile.min": "@llvm.minimum.f32"}
# The PTX backend's instruction sequences (backend/compute.py) in NVVM intrinsics, so both
# backends compute the same approximations: step = (how, operand names) -> "t" or "d".
_LOG2E, _MINUS_LOG2E, _LN2 = 1.4426950216293335, -1.4426950216293335, 0.6931471824645996


def _ex2(ctx, x):
    return ctx.b.call("llvm.nvvm.ex2.approx.ftz.f", "float", [x])


def _rcp(ctx, x):
    return ctx.b.call("llvm.nvvm.rcp.approx.ftz.f", "float", [x])


def _lg2(ctx, x):
    return ctx.b.call("llvm.nvvm.lg2.approx.ftz.f", "float", [x])


def _mul(ctx, x, y):
    return ctx.b.binop("fmul", x, y, "float")


def _sigmoid_of(ctx, t):
    """1 / (1 + 2^t)."""
    return _rcp(ctx, ctx.b.binop("fadd", _ex2(ctx, t), 1.0, "float"))


def _gelu_tanh(ctx, a):
    t = ctx.b.call("llvm.fma.f32", "float",
                   [_mul(ctx, a, a), const(0.044715, "float"), const(1.0, "float")])
    t = _mul(ctx, _mul(ctx, t, a), -2.302208198144325)  # -2 log2(e) sqrt(2 / pi)
    return _mul(ctx, a, _sigmoid_of(ctx, t))


def _fma(ctx, a, b, c):
    return ctx.b.call("llvm.fma.f32", "float", [ctx.b.value(v, "float") for v in (a, b, c)])


def _gelu(ctx, a):
    """gelu's erf form as backend/compute.py writes it (its comment says why): z = |x| /
    sqrt 2, t = 1 / (1 + z/2), erfc(z) = t 2^((P(t) - z^2) log2 e) with P by Horner's rule
    in fma (tilec/target/erfc.py), h = erfc(z) / 2, x (x > 0 ? 1 - h : h)."""
    b = ctx.b
    z = _mul(ctx, ctx.b.call("llvm.fabs.f32", "float", [a]), 0.7071067690849304)
    t = _rcp(ctx, _fma(ctx, z, 0.5, 1.0))
    v = _fma(ctx, t, ERFC_P[9], ERFC_P[8])
    for c in reversed(ERFC_P[:8]):
        v = _fma(ctx, v, t, c)
    v = _fma(ctx, b.assign("float", f"fneg {z}"), z, v)  # P(t) - z^2
    h = _mul(ctx, _mul(ctx, t, _ex2(ctx, _mul(ctx, v, _LOG2E))), 0.5)
    positive = b.assign("i1", f"fcmp ogt {a}, {const(0.0, 'float').ref}")
    g = b.select(positive, b.binop("fsub", 1.0, h, "float"), h)
    return _mul(ctx, a, g)


F32_UNARY: dict[str, Callable] = {
    "tile.neg": lambda ctx, a: ctx.b.assign("float", f"fneg {a}"),
    "tile.relu": lambda ctx, a: ctx.b.call("llvm.maximum.f32", "float",
                                           [a, const(0.0, "float")]),
    "tile.exp": lambda ctx, a: _ex2(ctx, _mul(ctx, a, _LOG2E)),
    "tile.exp2": _ex2,
    "tile.log": lambda ctx, a: _mul(ctx, _lg2(ctx, a), _LN2),
    "tile.log2": _lg2,
    "tile.sqrt": lambda ctx, a: ctx.b.call("llvm.nvvm.sqrt.rn.f", "float", [a]),
    "tile.rsqrt": lambda ctx, a: ctx.b.call("llvm.nvvm.rsqrt.approx.ftz.f", "float", [a]),
    "tile.abs": lambda ctx, a: ctx.b.call("llvm.fabs.f32", "float", [a]),
    "tile.tanh": lambda ctx, a: ctx.b.call("llvm.nvvm.tanh.approx.f32", "float", [a]),
    "tile.sigmoid": lambda ctx, a: _sigmoid_of(ctx, _mul(ctx, a, _MINUS_LOG2E)),
    "tile.silu": lambda ctx, a: _mul(ctx, a, _sigmoid_of(ctx, _mul(ctx, a, _MINUS_LOG2E))),
    "tile.gelu_tanh": _gelu_tanh,
    "tile.gelu": _gelu,
}
# where(x compare y, a, b): the ordered comparisons but for !=, unordered (backend/compute.py
# SETP: as Python and numpy, a NaN compares unequal).
FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}


def widen(ctx: LlvmContext, value: Val) -> Val:
    return value if value.ty == "float" else ctx.b.cast("fpext", value, "float")


def narrow(ctx: LlvmContext, value: Val, dtype) -> Val:
    ty = ELEMENT_TYPES[dtype][0]
    return value if ty == "float" else ctx.b.cast("fptrunc", value, ty)


def _map(ctx: LlvmContext, op: Op, combine) -> None:
    """``combine`` element by element, once per distinct tuple of operand values (a splat
    repeats one value)."""
    operand_vals = [ctx.get(v) for v in op.operands]
    cache = ctx.op_state.setdefault(op, {})
    n = len(operand_vals[0])
    out = {}
    for index in ctx.indices(n):
        vals = tuple(v[index] for v in operand_vals)
        if vals not in cache:
            cache[vals] = narrow(ctx, combine([widen(ctx, v) for v in vals]),
                                 op.result.type.dtype)
        out[index] = cache[vals]
    ctx.bind_elements(op.result, n, out)


def _binary(ctx: LlvmContext, op: Op) -> None:
    _map(ctx, op, lambda wide: float_binary(ctx, F32_BINARY[op.name], *wide))


def _unary(ctx: LlvmContext, op: Op) -> None:
    _map(ctx, op, lambda wide: F32_UNARY[op.name](ctx, wide[0]))


def _where(ctx: LlvmContext, op: Op) -> None:
    compare = FCMP[op.attrs["compare"]]

    def combine(wide: list[Val]) -> Val:
        x, y, a, b = wide
        holds = ctx.b.assign("i1", f"fcmp {compare} {x}, {y.ref}")
        return ctx.b.select(holds, a, b)
    _map(ctx, op, combine)


def _saturate_to_i8(ctx: LlvmContext, value: Val) -> Val:
    """cvt.rni.s8.f32: round to nearest even and saturate (NaN to 0), as f2i.rn (which
    does both for s32) clamped to the s8 range."""
    wide = ctx.b.call("llvm.nvvm.f2i.rn", "i32", [value])
    clamped = ctx.int_op("min.s32", ctx.int_op("max.s32", wide, -128), 127)
    return ctx.b.cast("trunc", clamped, "i8")


# Integer conversions (backend/compute.py convert, PTX ISA 9.7.9.21 cvt): int -> f32 by
# cvt.rn.f32.s32 (sitofp), f32 -> int by cvt.rni with saturation, int -> int keeping the low
# bits (trunc) or the sign (sext).
FLOAT_TO_INT = {I32: lambda ctx, v: ctx.b.call("llvm.nvvm.f2i.rn", "i32", [v]),
                I8: _saturate_to_i8}


def convert(ctx: LlvmContext, value: Val, source: DType, target: DType) -> Val:
    if source == target:
        return value
    # The 8-bit floats (i8 values) through f32, both ways exact but for one rounding.
    if source in FP8_DTYPES:
        return convert(ctx, fp8.to_float(ctx.b, value, source), F32, target)
    if target in FP8_DTYPES:
        return fp8.from_float(ctx.b, convert(ctx, value, source, F32), target)
    if source.is_float and target.is_float:
        return narrow(ctx, widen(ctx, value), target)
    if not source.is_float and target.is_float:
        return narrow(ctx, ctx.b.cast("sitofp", value, "float"), target)
    if source.is_float:
        return FLOAT_TO_INT[target](ctx, widen(ctx, value))
    how = "trunc" if target.bytes < source.bytes else "sext"
    return ctx.b.cast(how, value, ELEMENT_TYPES[target][0])


def _cast(ctx: LlvmContext, op: Op) -> None:
    source, target = op.operands[0].type.dtype, op.result.type.dtype
    vals = ctx.get(op.operands[0])
    cache = ctx.op_state.setdefault(op, {})
    out = {}
    indices = ctx.indices(len(vals))
    if source == F32 and target in PAIR_CONVERSIONS:
        _convert_pairs(ctx, vals, indices, target, cache)
    for index in indices:
        if vals[index] not in cache:
            cache[vals[index]] = convert(ctx, vals[index], source, target)
        out[index] = cache[vals[index]]
    ctx.bind_elements(op.result, len(vals), out)


# f32 -> f16/bf16 two registers at a time (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32, sm_80+): the
# rounding of fptrunc, in one instruction per pair as ptxas packs the PTX backend's cvt pairs.
PAIR_CONVERSIONS = {F16: "llvm.nvvm.ff2f16x2.rn", BF16: "llvm.nvvm.ff2bf16x2.rn"}


def _convert_pairs(ctx: LlvmContext, vals: list[Val], indices: range, target: DType,
                   cache: dict) -> None:
    """Convert registers 2i and 2i+1 of ``indices`` together into ``cache``.

    Why not fptrunc: InstCombine folds an fptrunc of the K loop's accumulator phi (zero when
    the loop does not run) into the phi, so every conversion moves up into the loop's exit,
    before cp.async.wait_group, and the skip path holds 64 f16 zeros; the epilogue then issues
    its 2-byte stores back to back. On the ragged 4K f16 matmul (sm_90, ncu, one H100) that
    epilogue stalled on the LSU queue (lg throttle) four times as often as the PTX backend's,
    whose conversions sit between its stores, and the blocks starting beside it stalled on
    their first copies. LLVM does not fold the intrinsic into the phi: the conversions stay
    with the stores. Measured alone this did not shorten that kernel (406 against 399 us,
    within the run's noise); the K loop's copy offsets (cp_async_llvm._wide_product) did."""
    b = ctx.b
    ty = ELEMENT_TYPES[target][0]
    for index in indices:
        if index % 2 or index + 1 not in indices:
            continue
        low, high = vals[index], vals[index + 1]
        if low in cache or high in cache or low is high:
            continue
        pair = b.call(PAIR_CONVERSIONS[target], f"<2 x {ty}>", [high, low])  # high half first
        cache[low] = b.assign(ty, f"extractelement {pair}, i32 0")
        cache[high] = b.assign(ty, f"extractelement {pair}, i32 1")


def _elements(rtype) -> int:
    if rtype.layout is None:
        raise NotImplementedError(f"the llvm backend needs a layout for {rtype}")
    return rtype.layout.regs_per_thread


def _full(ctx: LlvmContext, op: Op) -> None:
    if op.result in ctx.values:
        return  # bound by an earlier chunk of the epilogue
    dtype = op.result.type.dtype
    if dtype.is_float:
        value = narrow(ctx, const(float(op.attrs["value"]), "float"), dtype)
    else:
        value = const(wrap(dtype, int(op.attrs["value"])), ELEMENT_TYPES[dtype][0])
    ctx.bind(op.result, [value] * _elements(op.result.type))


def _splat(ctx: LlvmContext, op: Op) -> None:
    if op.result in ctx.values:
        return  # bound by an earlier chunk of the epilogue
    value = narrow(ctx, ctx.get(op.operands[0]), op.result.type.dtype)
    ctx.bind(op.result, [value] * _elements(op.result.type))


GENERIC_EMITTERS: dict[str, Callable[[LlvmContext, Op], None]] = {
    "arith.constant": _constant,
    **{name: _scalar_binary for name in SCALAR_BINARY},
    "arith.lt": _compare,
    "arith.wrap_inc": _wrap_inc,
    "arith.select": _select,
    "tile.grid": _grid,
    "scf.for": _for,
    "tensor.transpose": _no_code,
    "tensor.batch": _batch_view,
    "smem.alloc": bind_smem_buffer,
    "smem.stage": _smem_stage,
    "gpu.barrier": _barrier,
    "frag.load": _frag_load,
    "tile.store": _store,
    **{name: _binary for name in F32_BINARY},
    **{name: _unary for name in F32_UNARY},
    "tile.where": _where,
    "tile.cast": _cast,
    "tile.full": _full,
    "tile.splat": _splat,
}


def bind_params(ctx: LlvmContext, abi) -> list[str]:
    """The function's parameter list (LLVM text), binding each program parameter's values
    (tensors as :class:`TensorVals`)."""
    by_source: dict[str, dict] = {}
    declared = []
    for index, p in enumerate(abi):
        if isinstance(p.type, BlobParam):
            raise NotImplementedError("the llvm backend passes no blob parameters")
        ty = "ptr addrspace(1)" if isinstance(p.type, PointerParam) else {
            "i32": "i32", "i64": "i64", "f32": "float"}[p.type.dtype]
        val = Val(f"%p{index}", ty)
        declared.append(f"{ty} %p{index}")
        if p.role not in PROGRAM_ROLES:
            ctx.workspace[p.source] = val
        by_source.setdefault(p.source, {})[(p.role, p.dim)] = val
    bind_program_params(ctx, by_source, TensorVals)
    return declared


__all__ = ["GENERIC_EMITTERS", "bind_params", "widen", "narrow", "float_binary", "convert"]
