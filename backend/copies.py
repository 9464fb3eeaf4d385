"""Emitters for what every data-movement family shares: shared buffers (bound at their place
in the kernel's dynamic shared memory, :func:`tilec.target.smem.place`, and a stage's
address) and the CTA barrier. The op table also takes in each registered movement family's
emitters (``tilec/families/movements.py``); the cp.async copies, commits and waits live in
``tilec/families/cp_async.py``.
"""
from __future__ import annotations

from tilec.families.movements import MOVEMENT_FAMILIES
from tilec.ir.core import Op

from .context import Context, SmemBuffer, SmemView


def bind_smem_buffer(ctx, op: Op) -> None:
    """smem.alloc: the buffer at its place (either backend's context: nothing is emitted)."""
    rtype = op.result.type
    placed = ctx.smem.of(op)
    ctx.bind(op.result, SmemBuffer(placed.offset, placed.stage_bytes, rtype.layout,
                                   rtype.dtype.bytes))


def _smem_stage(ctx: Context, op: Op) -> None:
    buffer: SmemBuffer = ctx.get(op.operands[0])
    stage = op.operands[1]
    base = ctx.smem_base()
    if ctx.const(stage) is not None:
        address = ctx.int_op("add.s32", base, buffer.offset + ctx.const(stage) * buffer.stage_bytes)
    else:
        start = ctx.int_op("add.s32", base, buffer.offset)
        address = ctx.mad(ctx.get(stage), buffer.stage_bytes, start)
    ctx.bind(op.result, SmemView(buffer, address))


def _barrier(ctx: Context, op: Op) -> None:
    ctx.w.emit("bar.sync 0;")


EMITTERS = {
    "smem.alloc": bind_smem_buffer,
    "smem.stage": _smem_stage,
    "gpu.barrier": _barrier,
    **{name: emitter for family in MOVEMENT_FAMILIES.values()
       for name, emitter in family.emitters().items()},
}

# tile.store ops a pass routed through a movement family (attribute ``via``).
STORE_VIAS = {via: emitter for family in MOVEMENT_FAMILIES.values()
              for via, emitter in family.store_emitters().items()}
