"""The cp.async family's LLVM emitters (``copy.global_to_shared``, ``copy.commit``,
``copy.wait``): the per-thread copy plan of :mod:`tilec.families.cp_async` (the same copy
map, swizzled shared offsets and edge masks), issued through
``llvm.nvvm.cp.async.{ca,cg}.shared.global.N[.s]``, ``llvm.nvvm.cp.async.commit.group`` and
``llvm.nvvm.cp.async.wait.group``. Per-thread parts go to the entry block once; LLVM hoists
and strength-reduces the rest.
"""
from __future__ import annotations

from tilec.backend.llvm.builder import Val, const
from tilec.backend.llvm.context import LlvmContext, SmemView, TensorVals
from tilec.ir.core import Op

from .cp_async import copy_edge_mask, copy_operands, thread_accesses

# Synchronous copies: element bytes -> the integer type moved through a register.
SYNC_TYPES = {1: "i8", 2: "i16", 4: "i32"}


def _byte_step(ctx: LlvmContext, tensor: TensorVals, delta: tuple[int, int], eb: int) -> Val:
    step = ctx.wide(ctx.int_op("mul.lo.s32", tensor.strides[0], delta[0]), eb)
    if delta[1]:
        extra = ctx.wide(ctx.int_op("mul.lo.s32", tensor.strides[1], delta[1]), eb)
        step = ctx.b.binop("add", step, extra, "i64")
    return step


def _thread_part(ctx: LlvmContext, view: SmemView, tensor: TensorVals, vec: int,
                 threads: int, key: object) -> list[dict]:
    """Per access of this thread, as cp_async._copy_thread_part (the same plan,
    cp_async.copy_accesses): logical coordinates, shared offset (bytes, i32), global offset
    (bytes, i64), and the uniform step that chains an access to the previous one."""
    eb = view.buffer.elem_bytes

    def global_offset(coords: tuple[Val, Val]) -> Val:
        offset = ctx.b.binop("add", ctx.wide(coords[0], tensor.strides[0]),
                             ctx.wide(coords[1], tensor.strides[1]), "i64")
        return ctx.b.binop("mul", offset, eb, "i64")

    return thread_accesses(ctx, view.buffer.layout, vec, threads, eb, key,
                           lambda v, count: ctx.b.icmp("slt", v, count), global_offset,
                           lambda unit: _byte_step(ctx, tensor, unit, eb))


def _copy(ctx: LlvmContext, op: Op) -> None:
    b = ctx.b
    tensor, offsets, view, predicate, key = copy_operands(ctx, op)
    vec, threads, masked = op.attrs["vec"], op.attrs["threads"], op.attrs["masked"]
    eb = view.buffer.elem_bytes
    layout = view.buffer.layout
    accesses = _thread_part(ctx, view, tensor, vec, threads, key)
    varies = [ctx.varies_in_loop(v) for v in op.operands[1:1 + len(offsets)]]
    corner = b.binop("add", _wide_product(ctx, offsets[0], tensor.strides[0], varies[0]),
                     _wide_product(ctx, offsets[1], tensor.strides[1], varies[1]), "i64")
    tile = b.gep(tensor.ptr, b.binop("mul", corner, eb, "i64"))
    contiguous = 0 if layout.transposed else 1
    nbytes = vec * eb
    less_than, predicate = _edge_compare(ctx, predicate, masked, contiguous, vec)
    previous_src = None
    for access in accesses:
        if access.get("chained") and previous_src is not None:
            src = b.gep(previous_src, access["global_step"])
        else:
            src = b.gep(tile, access["global"])
        previous_src = src
        smem = access["smem"]
        if access["smem_xor"]:
            smem = ctx.int_op("xor.b32", smem, access["smem_xor"])
        dst = ctx.int_op("add.s32", view.address, smem)
        if access["smem_imm"]:
            dst = ctx.int_op("add.s32", dst, access["smem_imm"])
        # A thread without a vector in this access must not write at all (a cp.async of 0
        # source bytes still writes zeros): the access is skipped, not zero-filled.
        active = access["active"]
        inside, partial_bytes = copy_edge_mask(
            ctx, access, offsets, tensor, masked, contiguous, vec, eb,
            ctx.and_pred(predicate, active), less_than)
        if op.attrs["mode"] == "async":
            _issue_async(ctx, dst, src, nbytes, active, inside, partial_bytes)
        else:
            ctx.if_then(active, lambda s=src, d=dst, i=inside, p=partial_bytes:
                        _copy_sync(ctx, s, d, vec, eb, i, p), "sync")


def _wide_product(ctx: LlvmContext, coord, stride: Val, varies: bool) -> Val:
    """``coord * stride`` as i64 from i32 values, for a tile corner's coordinate.

    Why inline PTX where the coordinate changes each iteration (the K offset): NVPTX
    selects mul.wide.s32 only when both sign extensions sit in the multiply's block, and
    LICM hoists the stride's out of the loop, so the product became a 64 x 64-bit
    mad.lo.s64 (five SASS instructions a copy operand per K step instead of one). The PTX
    backend's mul.wide.s32 in the ragged 4K f16 matmul's K loop (sm_90, one H100, kernel
    alone, median of 12 interleaved rounds): 384 us against 406, the PTX backend's 371.
    A coordinate fixed for the loop keeps LLVM's form: hoisted, merged with the
    prologue's (where NVPTX selects mul.wide.s32 itself) or folded when constant."""
    if not varies or not isinstance(coord, Val):
        return ctx.wide(ctx.b.value(coord, "i32"), stride)
    return ctx.b.asm("mul.wide.s32 $0, $1, $2;", "=l,r,r", "i64", [coord, stride], pure=True)


def _edge_compare(ctx: LlvmContext, predicate, masked: list[bool], contiguous: int,
                  vec: int) -> tuple:
    """The copy's ``less_than(coord, size)`` for copy_edge_mask (unsigned), and the
    predicate left to and into each access's mask. Where some dim is checked that way, a
    pipelined copy's predicate (this K step is inside the loop) goes into the bound
    instead, ``coord < (predicate ? size : 0)`` (unsigned: nothing is below 0).

    Why: written as ``select(predicate and coord < size, 16, 0)``, LLVM hoists the
    loop-invariant row checks out of the K loop and its instruction selection nests two
    selp (``select(q, select(p, 16, 0), 0)``), which ptxas cannot fold into the predicate
    of the zero-filling LDGSTS: on sm_90, SEL + two ISETP per access where the PTX
    backend's and.pred + selp give one ISETP (tilec bench's ragged 4K matmul, 128x128x64
    tiles: a K loop of 305 SASS instructions against the PTX backend's 292; 284 with the
    bound; tests/test_llvm_backend.py)."""
    b = ctx.b

    def less_than(coord: Val, size) -> Val:
        return b.icmp("ult", coord, size)
    checked = any(masked[dim] and not (dim == contiguous and vec > 1)
                  for dim in range(len(masked)))
    if predicate is None or not checked:
        return less_than, predicate
    bounds: dict = {}

    def less_than_bound(coord: Val, size) -> Val:
        key = size.ref if isinstance(size, Val) else size
        if key not in bounds:
            bounds[key] = b.select(predicate, b.value(size, "i32"), 0)
        return less_than(coord, bounds[key])
    return less_than_bound, None


def _issue_async(ctx: LlvmContext, dst: Val, src: Val, nbytes: int, active, inside,
                 partial_bytes) -> None:
    cache = "cg" if nbytes == 16 else "ca"
    name = f"llvm.nvvm.cp.async.{cache}.shared.global.{nbytes}"
    pointers = [ctx.smem_pointer(dst), src]
    if partial_bytes is None and inside is None:
        call = lambda: ctx.b.call(name, "void", pointers)  # noqa: E731
    else:
        size = partial_bytes if partial_bytes is not None else const(nbytes, "i32")
        if inside is not None:
            size = ctx.b.select(inside, size, 0)
        call = lambda: ctx.b.call(name + ".s", "void", [*pointers, size])  # noqa: E731
    ctx.if_then(active, call, "copy")


def _copy_sync(ctx: LlvmContext, src: Val, dst: Val, vec: int, eb: int, inside,
               partial) -> None:
    """Element by element through registers (vectors cp.async cannot move); elements
    outside the tensor or past the predicate are stored as zeros."""
    ty = SYNC_TYPES[eb]
    values = []
    for e in range(vec):
        ok = inside
        if partial is not None:
            ok = ctx.and_pred(ok, ctx.b.icmp("sgt", partial, e * eb))
        values.append(ctx.guarded_load(ty, ctx.b.gep(src, const(e * eb, "i64")), ok, eb, "0"))
    for e, value in enumerate(values):
        ctx.b.store(value, ctx.smem_pointer(ctx.int_op("add.s32", dst, e * eb)), eb)


def _commit(ctx: LlvmContext, op: Op) -> None:
    ctx.b.call("llvm.nvvm.cp.async.commit.group", "void", [])


def _wait(ctx: LlvmContext, op: Op) -> None:
    ctx.b.call("llvm.nvvm.cp.async.wait.group", "void", [const(op.attrs["pending"], "i32")])


EMITTERS = {"copy.global_to_shared": _copy, "copy.commit": _commit, "copy.wait": _wait}
