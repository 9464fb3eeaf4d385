"""Double buffering: the K loop's copies become an N-stage pipeline of the data-movement
family :func:`tilec.families.movements.pipeline_family` picks (cp.async groups); the ops
below are named by their role, the family supplies their names (``family.pipeline``).

Requires: tiling's output (one-stage buffers filled by synchronous copies in the K loop).

Produces, for ``stages = S``:
- buffers of S stages;
- a prologue that issues the copies of the first S-1 iterations, one commit group each;
- in the loop: ``copy.wait {pending = S-2}`` then one barrier (the data of this iteration is
  in, and every thread is done reading the stage about to be refilled), the copy of
  iteration ``it + S - 1`` into stage ``(it + S - 1) % S`` (predicated on being inside the
  loop), a commit, and the dot on stage ``it % S``; a final ``copy.wait {pending = 0}``.
With S = 1 each iteration copies, waits for its own copy, and fences with barriers on both
sides of the dot. The family sets the copies' attributes: for cp.async, copies whose vectors
are 4, 8 or 16 bytes become ``mode = async``; narrower ones stay synchronous loads and
stores.

Schedule for S = 3 (iteration it reads stage it % 3)::

    prologue: copy(k0) -> s0, commit; copy(k0+BK) -> s1, commit
    loop:     wait(1); barrier; copy(k+2BK) -> s[(it+2)%3] if k+2BK < K; commit; dot(s[it%3])
"""
from __future__ import annotations

from tilec.families.movements import pipeline_family
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_kernel
from tilec.ir.schedule import PipelinePlan
from tilec.ir.types import PRED, ScalarType, TileType, i32
from tilec.errors import TileConfigError, located
from tilec.options import Options

from . import warp_specialize
from .common import clone_slice, constant, find_main_loop

NAME = "double_buffer"
# Movement families whose pipeline is not the cp.async shape below: their builder.
_BUILDERS = {"tma": warp_specialize.build}


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    stages = options.stages
    family = pipeline_family(kernel.schedule.tiling.kind)
    ops = family.pipeline
    loop, dot = find_main_loop(kernel)
    if family.name in _BUILDERS:
        return _BUILDERS[family.name](kernel, loop, dot, stages, options)
    if options.cluster > 1:
        raise located(TileConfigError, f"cluster={options.cluster} shares tiles between "
                      "the blocks of a warp-specialized sm_90a kernel (wgmma fed by TMA); this "
                      f"one copies with {family.name}", dot.loc, kernel.source_lines,
                      "compile for arch='sm_90a' with a tile wgmma takes (BM a multiple of "
                      "64, BK of 64), or leave cluster at 1")
    body = loop.regions[0]
    iv = body.args[0]
    lb, ub, step = loop.operands[:3]
    step_const = loop.attrs["step_const"]
    copies = [op for op in body.ops if op.name == ops.copy]
    views = [c.operands[-1] for c in copies]
    buffers = [v.owner.operands[0] for v in views]

    for buffer in buffers:
        old: TileType = buffer.type
        buffer.type = old.with_(shape=(stages, *old.shape[1:]))
        buffer.owner.attrs["stages"] = stages

    def emit_copies(b: Builder, k: Value, stage: Value, predicate: Value | None,
                    source_block: Block) -> None:
        for copy, view in zip(copies, views):
            with b.located(copy.loc):  # the load's place in the source, not the loop's
                emit_copy(b, copy, view, k, stage, predicate, source_block)

    def emit_copy(b: Builder, copy: Op, view: Value, k: Value, stage: Value,
                  predicate: Value | None, source_block: Block) -> None:
        rank = copy.operands[0].type.rank
        # The tensor may be a view made inside the loop (B.T): re-emit it with the offsets.
        tensor, *new_offsets = clone_slice(list(copy.operands[:1 + rank]), source_block, b,
                                           {iv: k})
        stage_view = b.value("smem.stage", [view.owner.operands[0], stage], view.type,
                             view.hint)
        attrs = family.pipelined_copy_attrs(copy)
        operands = [tensor, *new_offsets, stage_view]
        if predicate is not None:
            operands.append(predicate)
        b.op(ops.copy, operands, attrs=attrs)

    # Prologue, before the loop: iterations 0 .. S-2.
    pre = Builder(Block(), loop.loc)
    for s in range(stages - 1):
        k = pre.value("arith.add", [lb, constant(pre, s * step_const)], i32, f"k{s}")
        inside = pre.value("arith.lt", [k, ub], ScalarType(PRED), f"p{s}")
        emit_copies(pre, k, constant(pre, s), inside, body)
        pre.op(ops.commit)

    # Loop body: the dot reads stage it % S; the copy of it + S - 1 refills the stage read
    # in the previous iteration. Both indices are carried by the loop and advanced with a
    # wrap-around increment, so no division sits on the path to the next shared load.
    b = Builder(Block(), loop.loc)
    read_init = constant(pre, 0, "read_stage0")
    write_init = constant(pre, (stages - 1) % stages, "write_stage0")
    loop.operands.extend([read_init, write_init])
    read_stage = body.add_arg(i32, "read_stage")
    write_stage = body.add_arg(i32, "write_stage")
    loop.results.extend([Value(i32, "read_stage_end", loop), Value(i32, "write_stage_end", loop)])
    kept = [op for op in body.ops if op not in copies and op.name != "gpu.barrier"
            and not (op.name == "smem.stage" and op.results[0] in views)]
    before_dot = kept[:kept.index(dot)]
    after_dot = kept[kept.index(dot) + 1:]
    b.block.ops.extend(before_dot)
    if stages == 1:
        b.op("gpu.barrier")
        emit_copies(b, iv, read_stage, None, body)
        b.op(ops.commit)
        b.op(ops.wait, attrs={"pending": 0})
        b.op("gpu.barrier")
    else:
        b.op(ops.wait, attrs={"pending": stages - 2})
        b.op("gpu.barrier")
        ahead = b.value("arith.add", [iv, constant(b, (stages - 1) * step_const)], i32, "k_next")
        inside = b.value("arith.lt", [ahead, ub], ScalarType(PRED), "p_next")
        emit_copies(b, ahead, write_stage, inside, body)
        b.op(ops.commit)
    read_views = []
    for view in views:
        read_views.append(b.value("smem.stage", [view.owner.operands[0], read_stage], view.type,
                                  view.hint))
    dot.operands = [*read_views, dot.operands[2]]
    b.block.ops.append(dot)
    yield_op = after_dot[-1]
    b.block.ops.extend(after_dot[:-1])
    yield_op.operands.extend([
        b.value("arith.wrap_inc", [read_stage], i32, "next_read_stage", modulus=stages),
        b.value("arith.wrap_inc", [write_stage], i32, "next_write_stage", modulus=stages)])
    b.block.ops.append(yield_op)
    body.ops = b.block.ops

    top = kernel.body.ops
    index = top.index(loop)
    drain = Builder(Block(), loop.loc)
    drain.op(ops.wait, attrs={"pending": 0})
    kernel.body.ops = top[:index] + pre.block.ops + [loop] + drain.block.ops + top[index + 1:]
    kernel.schedule = kernel.schedule.with_(pipeline=PipelinePlan(stages))
    return kernel
