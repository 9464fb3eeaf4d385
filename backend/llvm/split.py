"""``split.reduce`` in LLVM IR: the "last block" meeting of :mod:`tilec.backend.split` (same
workspace layout, same handshake, same slice order of the sum, so both backends add the
partials identically).

Every thread stores its partial; ``fence syncscope("device") acq_rel`` (fence.acq_rel.gpu)
and the block barrier; thread 0's ``atomicrmw add ... syncscope("device") acq_rel``
(atom.acq_rel.gpu) on the tile's counter; the last block learns it in every thread through
``llvm.nvvm.barrier.cta.red.or.aligned.all`` (bar.red.or.pred), the others return; then a
fence and the partials read back with device-scope monotonic loads (ld.relaxed.gpu). An
i32 accumulator's partials are stored, loaded and added as i32 (``add``, wrapping as the PTX
emitter's add.s32 does).
"""
from __future__ import annotations

from tilec.ir.core import Op, require_grid
from tilec.ir.types import F32, I32

from ..abi import WORKSPACE_SOURCES, cuda_tile_axes
from ..split import PARTIAL_BYTES, OnDemand
from .builder import Val, const
from .context import LlvmContext

# Accumulator dtype -> the LLVM type of its partials and the instruction adding two.
SUMS = {F32: ("float", "fadd"), I32: ("i32", "add")}


def _tile_index(ctx: LlvmContext) -> Val:
    grid = require_grid(ctx.kernel)
    x = ctx.sreg("ctaid.x")
    if cuda_tile_axes(grid) == 1:
        return x
    return ctx.mad(ctx.sreg("ctaid.y"), ctx.sreg("nctaid.x"), x)


def _wide_unsigned(ctx: LlvmContext, a: Val, b: int) -> Val:
    return ctx.b.binop("mul", ctx.b.cast("zext", a, "i64"), b, "i64")


def _split_reduce(ctx: LlvmContext, op: Op) -> None:
    b = ctx.b
    partial_value, slice_value = op.operands
    splits = op.attrs["splits"]
    partial = ctx.get(partial_value)
    llvm_type, add_instruction = SUMS[partial_value.type.dtype]
    register_stride = ctx.plan.threads * PARTIAL_BYTES
    slice_bytes = len(partial) * register_stride
    partials, counters = (ctx.workspace[source] for source in WORKSPACE_SOURCES)
    tid = ctx.tid()
    tile = _tile_index(ctx)
    tile_offset = b.binop("add", _wide_unsigned(ctx, ctx.int_op("mul.lo.s32", tile, splits),
                                                slice_bytes),
                          _wide_unsigned(ctx, tid, PARTIAL_BYTES), "i64")
    tile_base = b.gep(partials, tile_offset)
    own = b.gep(tile_base, _wide_unsigned(ctx, ctx.get(slice_value), slice_bytes))
    for index, value in enumerate(partial):
        b.store(value, b.gep(own, const(index * register_stride, "i64")), 4)
    b.line('fence syncscope("device") acq_rel')
    b.call("llvm.nvvm.barrier.cta.sync.aligned.all", "void", [const(0, "i32")])
    counter = b.gep(counters, _wide_unsigned(ctx, tile, 4))
    first = b.icmp("eq", tid, 0)
    before = b.block
    add, joined = b.new_block("count"), b.new_block("counted")
    b.cbr(first, add, joined)
    b.position(add)
    # LLVM 22's NVPTX target drops an atomicrmw's ordering (it writes a relaxed
    # atom.global.add): the release is this fence, thread 0's after the barrier, so it
    # covers every thread's partial (the PTX backend's atom.acq_rel.gpu); the acquire is
    # the fence every thread of the last block makes after bar.red.
    b.line('fence syncscope("device") acq_rel')
    arrived = b.assign("i32", f'atomicrmw add {counter}, i32 1 syncscope("device") acq_rel, '
                              'align 4')
    b.br(joined)
    b.position(joined)
    seen, line = b.phi("i32")
    b.close_phi(joined, line, seen, [(const(0, "i32"), before), (arrived, add)])
    last_here = ctx.and_pred(b.icmp("eq", seen, splits - 1), first)
    ctx.if_then(last_here, lambda: b.line(
        f'store atomic i32 0, {counter} syncscope("device") monotonic, align 4'), "reset")
    last = b.call("llvm.nvvm.barrier.cta.red.or.aligned.all", "i1",
                  [const(0, "i32"), last_here])
    leave, stay = b.new_block("leave"), b.new_block("last")
    b.cbr(last, stay, leave)
    b.position(leave)
    b.ret()
    b.position(stay)
    b.line('fence syncscope("device") acq_rel')

    def total(index: int) -> Val:
        acc = None
        for slice_index in range(splits):
            offset = const(slice_index * slice_bytes + index * register_stride, "i64")
            loaded = b.assign(llvm_type, f"load atomic {llvm_type}, "
                                         f"{b.gep(tile_base, offset)} "
                                         'syncscope("device") monotonic, align 4')
            acc = loaded if acc is None else b.binop(add_instruction, acc, loaded, llvm_type)
        return acc
    ctx.bind(op.result, OnDemand(len(partial), total))


EMITTERS = {"split.reduce": _split_reduce}
