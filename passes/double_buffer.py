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


class _Copier:
    """The K loop's copies into shared memory, issued again by the pipeline for other K
    offsets and stages (the loads' places in the source kept, not the loop's)."""

    def __init__(self, family, loop: Op) -> None:
        self.family = family
        self.iv = loop.regions[0].args[0]
        self.copies = [op for op in loop.regions[0].ops if op.name == family.pipeline.copy]
        self.views = [c.operands[-1] for c in self.copies]
        self.buffers = [v.owner.operands[0] for v in self.views]

    def emit(self, b: Builder, k: Value, stage: Value, predicate: Value | None,
             source_block: Block) -> None:
        """Every operand's copy of the K offset ``k`` into ``stage``, where ``predicate``
        (if any) holds."""
        for copy, view in zip(self.copies, self.views):
            with b.located(copy.loc):
                rank = copy.operands[0].type.rank
                # The tensor may be a view made inside the loop (B.T): re-emit it with the
                # offsets.
                tensor, *offsets = clone_slice(list(copy.operands[:1 + rank]), source_block,
                                               b, {self.iv: k})
                stage_view = b.value("smem.stage", [view.owner.operands[0], stage], view.type,
                                     view.hint)
                operands = [tensor, *offsets, stage_view]
                if predicate is not None:
                    operands.append(predicate)
                b.op(self.family.pipeline.copy, operands,
                     attrs=self.family.pipelined_copy_attrs(copy))


def _prologue(loop: Op, copier: _Copier, stages: int) -> Builder:
    """Before the loop: the copies of iterations 0 .. S-2, a commit group each."""
    lb, ub = loop.operands[:2]
    step = loop.attrs["step_const"]
    pre = Builder(Block(), loop.loc)
    for s in range(stages - 1):
        k = pre.value("arith.add", [lb, constant(pre, s * step)], i32, f"k{s}")
        inside = pre.value("arith.lt", [k, ub], ScalarType(PRED), f"p{s}")
        copier.emit(pre, k, constant(pre, s), inside, loop.regions[0])
        pre.op(copier.family.pipeline.commit)
    return pre


def _pipelined_body(loop: Op, dot: Op, copier: _Copier, stages: int, pre: Builder) -> None:
    """The loop body: the dot reads stage it % S; the copy of it + S - 1 refills the stage
    read in the previous iteration. Both indices are carried by the loop (their first
    values made in ``pre``) and advanced with a wrap-around increment, so no division sits
    on the path to the next shared load."""
    ops = copier.family.pipeline
    body = loop.regions[0]
    iv = body.args[0]
    ub = loop.operands[1]
    b = Builder(Block(), loop.loc)
    read_init = constant(pre, 0, "read_stage0")
    write_init = constant(pre, (stages - 1) % stages, "write_stage0")
    loop.operands.extend([read_init, write_init])
    read_stage = body.add_arg(i32, "read_stage")
    write_stage = body.add_arg(i32, "write_stage")
    loop.results.extend([Value(i32, "read_stage_end", loop), Value(i32, "write_stage_end", loop)])
    kept = [op for op in body.ops if op not in copier.copies and op.name != "gpu.barrier"
            and not (op.name == "smem.stage" and op.results[0] in copier.views)]
    before_dot = kept[:kept.index(dot)]
    after_dot = kept[kept.index(dot) + 1:]
    b.block.ops.extend(before_dot)
    if stages == 1:
        b.op("gpu.barrier")
        copier.emit(b, iv, read_stage, None, body)
        b.op(ops.commit)
        b.op(ops.wait, attrs={"pending": 0})
        b.op("gpu.barrier")
    else:
        b.op(ops.wait, attrs={"pending": stages - 2})
        b.op("gpu.barrier")
        ahead = b.value("arith.add", [iv, constant(b, (stages - 1) * loop.attrs["step_const"])],
                        i32, "k_next")
        inside = b.value("arith.lt", [ahead, ub], ScalarType(PRED), "p_next")
        copier.emit(b, ahead, write_stage, inside, body)
        b.op(ops.commit)
    read_views = [b.value("smem.stage", [view.owner.operands[0], read_stage], view.type,
                          view.hint) for view in copier.views]
    dot.operands = [*read_views, dot.operands[2]]
    b.block.ops.append(dot)
    yield_op = after_dot[-1]
    b.block.ops.extend(after_dot[:-1])
    yield_op.operands.extend([
        b.value("arith.wrap_inc", [read_stage], i32, "next_read_stage", modulus=stages),
        b.value("arith.wrap_inc", [write_stage], i32, "next_write_stage", modulus=stages)])
    b.block.ops.append(yield_op)
    body.ops = b.block.ops


def multistage(kernel: Kernel, loop: Op, dot: Op, stages: int, options: Options) -> Kernel:
    """The S-stage pipeline of commit groups (cp.async's shape; module docstring) for
    ``kernel`` (a clone the caller owns)."""
    family = pipeline_family(kernel.schedule.tiling.kind)
    copier = _Copier(family, loop)
    for buffer in copier.buffers:
        old: TileType = buffer.type
        buffer.type = old.with_(shape=(stages, *old.shape[1:]))
        buffer.owner.attrs["stages"] = stages
    pre = _prologue(loop, copier, stages)
    _pipelined_body(loop, dot, copier, stages, pre)
    top = kernel.body.ops
    index = top.index(loop)
    drain = Builder(Block(), loop.loc)
    drain.op(family.pipeline.wait, attrs={"pending": 0})
    kernel.body.ops = top[:index] + pre.block.ops + [loop] + drain.block.ops + top[index + 1:]
    kernel.schedule = kernel.schedule.with_(pipeline=PipelinePlan(stages))
    return kernel


# Each movement family's pipeline builder: TMA's is the warp-specialized ring.
_BUILDERS = {"tma": warp_specialize.build}


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    family = pipeline_family(kernel.schedule.tiling.kind)
    loop, dot = find_main_loop(kernel)
    if family.name not in _BUILDERS and options.cluster > 1:
        raise located(TileConfigError, f"cluster={options.cluster} shares tiles between "
                      "the blocks of a warp-specialized sm_90a kernel (wgmma fed by TMA); this "
                      f"one copies with {family.name}", dot.loc, kernel.source_lines,
                      "compile for arch='sm_90a' with a tile wgmma takes (BM a multiple of "
                      "64, BK of 64), or leave cluster at 1")
    return _BUILDERS.get(family.name, multistage)(kernel, loop, dot, options.stages, options)
