"""Fragment mapping: the dot becomes fragment loads and products over each warp's
fragments, and the accumulator and its epilogue live in the accumulator layout. The product
family (:mod:`tilec.families.products`) picks the ops: ldmatrix + mma.sync for f16/bf16
(shown below), 16-byte ``ld.shared`` (``frag.lds``) + ``fma.rn.f32`` (``frag.fma``) for f32,
k steps of 4; ``frag.ldtf32`` + ``frag.mma`` (m16n8k8) for f32 with f32_math="tf32".

Requires: the tiling plan and the dot reading shared views (tiling, double buffering).

Produces:
- the accumulator (its ``tile.full`` init, the loop's iter arg and result) typed
  ``tile<f32,[BM,BN],reg,mma_c(...)>``;
- for each k16 step of the block's BK: ``frag.ldmatrix`` of A and B (x4, ``.trans`` decided by
  the backend from the shared layout's orientation) and one ``frag.mma``; the loads of step
  s + 1 are issued before the mma of step s, so fragments are double-buffered in registers;
- epilogue values of the block's shape in the accumulator layout, so every thread computes
  and stores exactly the elements it holds: 2-D loads and broadcast 1-D loads (bias rows or
  columns) and [1, N] / [M, 1] slices of 2-D tensors become ``frag.load`` with a ``dims``
  map.

Before::

    %d = tile.dot %vA, %vB, %acc : tile<f32,[128,128]>
After (BK = 32)::

    %a0 = frag.ldmatrix %vA {k0 = 0, operand = A} : tile<f16,[128,16],reg,mma_a(...)>
    %b0 = frag.ldmatrix %vB {k0 = 0, operand = B} : tile<f16,[16,128],reg,mma_b(...)>
    %a1 = frag.ldmatrix %vA {k0 = 16, operand = A} ...
    %b1 = frag.ldmatrix %vB {k0 = 16, operand = B} ...
    %d0 = frag.mma %a0, %b0, %acc
    %d = frag.mma %a1, %b1, %d0
"""
from __future__ import annotations

from typing import Optional

from tilec.errors import TileConfigError, located
from tilec.families.catalogue import op_definitions
from tilec.families.products import LOAD_OPS, PRODUCT_OPS, family_of
from tilec.ir.core import (Block, Builder, Kernel, Op, Value, clone_kernel, constant_value,
                           defining_op)
from tilec.ir.ops import OpDef
from tilec.ir.schedule import TilingPlan
from tilec.ir.types import TileType
from tilec.target.layout import DistributedLayout
from tilec.options import Options

from . import coverage
from .common import drop_dead, find_main_loop, tile_in_bounds

NAME = "fragments"


def _expand_dot(dot: Op, plan: TilingPlan, acc_type: TileType) -> list[Op]:
    view_a, view_b, acc = dot.operands
    bm, bn, bk = plan.block
    dtype = view_a.type.dtype
    family = family_of(plan)
    if family.fused_k_steps:  # one product op reads the whole stage (wgmma)
        attrs = {"in_flight": dot.attrs["in_flight"]} if "in_flight" in dot.attrs else {}
        product = Op(family.product_op, [view_a, view_b, acc], [dot.result], attrs, [],
                     dot.loc)
        dot.result.owner = product
        dot.result.type = acc_type
        return [product]
    step_k = family.k_step
    dtype = dot.attrs.get("product_dtype", dtype)
    a_type = TileType(view_a.type.dtype, (bm, step_k), "reg",
                      family.layout("A", plan.warps, plan.warp_tile))
    b_type = TileType(view_b.type.dtype, (step_k, bn), "reg",
                      family.layout("B", plan.warps, plan.warp_tile))
    b = Builder(Block(), dot.loc)
    steps = bk // step_k

    def load_op(view: Value) -> str:
        # An 8-bit operand of a 16-bit product (w8a16) has its own fragment load.
        converted = view.type.dtype != dtype and view.type.dtype.bytes == 1
        return family.byte_load_op if converted else family.load_op

    def load(step: int) -> tuple[Value, Value]:
        fa = b.value(load_op(view_a), [view_a], a_type, f"a{step}", operand="A",
                     k0=step * step_k)
        fb = b.value(load_op(view_b), [view_b], b_type, f"b{step}", operand="B",
                     k0=step * step_k)
        # An operand stored in another dtype (tiling's OperandPlan.source) is converted in
        # its registers; the loads stay first, side by side, for the pipelining below.
        converted = [b.value("frag.cvt", [f], f.type.with_(dtype=dtype), f"{f.hint}_cvt",
                             dtype=dtype) if f.type.dtype != dtype else f for f in (fa, fb)]
        return converted[0], converted[1]

    fragments = [load(0)]
    value = acc
    for step in range(steps):
        if step + 1 < steps:
            fragments.append(load(step + 1))
        last = step + 1 == steps
        mma = b.op(family.product_op, [*fragments[step], value], [acc_type],
                   hints=[dot.result.hint])
        if last:
            mma.results[0] = dot.result
            dot.result.owner = mma
            dot.result.type = acc_type
        value = mma.result
    return b.block.ops


def _pipeline_across_iterations(kernel: Kernel, loop: Op, plan: TilingPlan, stages: int,
                                acc_type: TileType) -> None:
    """Load the next iteration's first fragments during this one's last k-step.

    The loop then carries them (extra iter args), the top-of-loop wait and barrier move to
    just before that load, and a prologue loads stage 0's first fragments. Each iteration
    still has one barrier; it now also orders this iteration's reads of the stage that the
    next iteration's copy refills.

    An 8-bit operand's byte loads (w8a16's frag.ldbytes) are carried as ldmatrix fragments
    are, though LLVM folds the prologue's load and the carried one into one load at the top
    of the loop (48 fewer registers, 16 fewer loads in the kernel when done here too): on
    the H100 that cost 15% at 16x8192x8192 (46.0 against 39.2 TFLOP/s, two rounds of one
    call) and 2% at 4096^3, the loads' latency then exposed at each iteration's start.
    """
    body = loop.regions[0]
    ops = body.ops
    wait = next(op for op in ops if op.name == "copy.wait")
    barrier = next(op for op in ops if op.name == "gpu.barrier")
    first_ld = next(i for i, op in enumerate(ops) if op.name in LOAD_OPS)
    read_views = [ops[first_ld].operands[0], ops[first_ld + 1].operands[0]]
    read_stage = read_views[0].owner.operands[1]
    buffers = [v.owner.operands[0] for v in read_views]
    first = ops[first_ld:first_ld + 2]  # frags of k-step 0: now loop-carried
    a_type, b_type = first[0].result.type, first[1].result.type

    # Prologue: stage 0 is complete once at most S-2 groups are pending.
    pre = Builder(Block(), loop.loc)
    pre.op("copy.wait", attrs={"pending": stages - 2})
    pre.op("gpu.barrier")
    zero = pre.value("arith.constant", [], read_stage.type, "c0", value=0)
    inits = []
    for buffer, op in zip(buffers, first):
        view = pre.value("smem.stage", [buffer, zero], op.operands[0].type, "v0")
        inits.append(pre.value(op.name, [view], op.result.type, op.result.hint + "_first",
                               **op.attrs))
    top = kernel.body.ops
    top[top.index(loop):top.index(loop)] = pre.block.ops

    carried = [body.add_arg(a_type, "a0"), body.add_arg(b_type, "b0")]
    loop.operands.extend(inits)
    for op, arg in zip(first, carried):
        for user in body.ops:
            user.operands = [arg if v is op.result else v for v in user.operands]
    ops = [op for op in ops if op not in first and op is not wait and op is not barrier]

    # Before the last mma: wait, barrier, and load k-step 0 of the next stage.
    last_mma = max(i for i, op in enumerate(ops) if op.name in PRODUCT_OPS)
    b = Builder(Block(), loop.loc)
    b.block.ops.extend([wait, barrier])
    next_stage = b.value("arith.wrap_inc", [read_stage], read_stage.type, "next_stage",
                         modulus=stages)
    next_frags = []
    for buffer, op in zip(buffers, first):
        view = b.value("smem.stage", [buffer, next_stage], op.operands[0].type, "v_next")
        next_frags.append(b.value(op.name, [view], op.result.type,
                                  op.result.hint + "_next", **op.attrs))
    ops[last_mma:last_mma] = b.block.ops
    yield_op = ops[-1]
    yield_op.operands.extend(next_frags)
    body.ops = ops
    for hint, rtype in (("a0", a_type), ("b0", b_type)):
        loop.results.append(Value(rtype, hint + "_unused", loop))


def _broadcast_load(kernel: Kernel, op: Op, layout: DistributedLayout) -> list[Op]:
    """``broadcast(load 1-D)``, through a reshape and a dtype conversion (an f16 bias added
    to f32 values), as one frag.load of the vector's own dtype, converted after the load
    when the broadcast converted it."""
    source = defining_op(op.operands[0])
    shape = op.operands[0].type.shape
    cast = None
    while source is not None and source.name in ("tile.reshape", "tile.cast"):
        if source.name == "tile.cast":
            if cast is not None:
                break
            cast = source
        source = defining_op(source.operands[0])
    loaded = source.result.type.shape if source is not None else ()
    if source is None or source.name != "tile.load" or not (
            len(loaded) == 1 or (len(loaded) == 2 and 1 in loaded)):
        raise located(TileConfigError, "only tiles loaded from 1-D tensors (bias rows or "
                      "columns) or [1, N] / [M, 1] slices of 2-D tensors, converted or not, "
                      "can be broadcast in an epilogue", op.loc, kernel.source_lines)
    if len(loaded) == 2:
        # A [1, n] / [n, 1] slice: its extent-1 dim is read at its offset alone (no tile dim
        # walks it, frag.load's rule), the other walks the block's columns / rows.
        block = op.result.type.shape
        dims = [d if loaded[d] == block[d] else -1 for d in range(2)]
    else:
        # numpy aligns shapes at the right: [n] and [1, n] walk columns, [n, 1] walks rows.
        dims = [-1, 0] if len(shape) == 1 or shape[0] == 1 else [0, -1]
    rtype = op.result.type.with_(layout=layout)
    if cast is None:
        new = Op("frag.load", list(source.operands), [op.result], {"dims": dims}, [], op.loc)
        op.result.owner = new
        op.result.type = rtype
        return [new]
    loaded = Value(rtype.with_(dtype=source.result.type.dtype), op.result.hint + "_loaded")
    load = Op("frag.load", list(source.operands), [loaded], {"dims": dims}, [], op.loc)
    loaded.owner = load
    widen = Op("tile.cast", [loaded], [op.result], dict(cast.attrs), [], op.loc)
    op.result.owner = widen
    op.result.type = rtype
    return [load, widen]


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    plan: TilingPlan = kernel.schedule.tiling
    loop, dot = find_main_loop(kernel)
    body = loop.regions[0]
    # Checked on the program as it comes, reported after this pass's own errors.
    uncovered = coverage.problem(kernel)
    layout = family_of(plan).layout("C", plan.warps, plan.warp_tile)
    acc_arg = dot.operands[2]
    if acc_arg not in body.args:
        raise located(TileConfigError, "the product must accumulate into a loop-carried "
                      "tile (`acc += a @ b`)", dot.loc, kernel.source_lines)
    index = body.args.index(acc_arg) - 1
    acc_type = acc_arg.type.with_(layout=layout)
    init = loop.operands[3 + index]
    init_op = defining_op(init)
    if init_op is None or init_op.name != "tile.full":
        raise located(TileConfigError, "the accumulator must start as zeros(...) or full(...)",
                      dot.loc, kernel.source_lines)
    _check_loop_body(kernel, loop, dot)
    _sink_epilogue_tiles(kernel, loop)
    for value in (init, acc_arg, loop.results[index]):
        value.type = acc_type
    position = body.ops.index(dot)
    body.ops[position:position + 1] = _expand_dot(dot, plan, acc_type)
    stages = kernel.schedule.stages
    if stages >= 2 and options.pipeline_fragments and family_of(plan).load_op is not None:
        _pipeline_across_iterations(kernel, loop, plan, stages, acc_type)

    block_shape = (plan.block[0], plan.block[1])
    catalogue = op_definitions()
    after = kernel.body.ops[kernel.body.ops.index(loop) + 1:]
    rewritten: list[Op] = []
    for op in after:
        result_type = op.results[0].type if len(op.results) == 1 else None
        is_block_tile = (isinstance(result_type, TileType) and result_type.space == "reg"
                         and tuple(result_type.shape) == block_shape)
        if is_block_tile and op.name == "tile.load":
            new = Op("frag.load", list(op.operands), [op.result], {"dims": [0, 1]}, [], op.loc)
            op.result.owner = new
            op.result.type = result_type.with_(layout=layout)
            op = new
        elif is_block_tile and op.name == "tile.broadcast":
            *loads, op = _broadcast_load(kernel, op, layout)
            rewritten.extend(loads)
        elif is_block_tile and _elementwise(catalogue.get(op.name)):
            # Elementwise ops compute in any layout: the result takes the accumulator's.
            op.result.type = result_type.with_(layout=layout)
        elif is_block_tile:
            raise located(TileConfigError, f"'{op.name}' is not supported in an epilogue",
                          op.loc, kernel.source_lines)
        rewritten.append(op)
    kernel.body.ops[kernel.body.ops.index(loop) + 1:] = rewritten
    for op in rewritten:
        if op.name in ("frag.load", "tile.store"):
            op.attrs["masked"] = _edge_masks(kernel, op, options)
    # Loads folded into frag.load and index computations the pipelining re-emitted.
    drop_dead(kernel.body, catalogue)
    _check_epilogue(kernel, loop, block_shape)
    if uncovered is not None:
        raise uncovered
    return kernel


def _is_register_tile(value: Value) -> bool:
    return isinstance(value.type, TileType) and value.type.space == "reg"


def _check_loop_body(kernel: Kernel, loop: Op, dot: Op) -> None:
    """Inside the K loop the accumulator lives in registers the product updates in place, and
    the operands only in shared memory: no other tile (an elementwise op on ``acc``, a
    ``zeros``, a cast to store) has registers to live in there. Refused at its line."""
    for op in loop.regions[0].ops:
        if op is not dot and any(_is_register_tile(v) for v in op.results):
            kind = op.name.removeprefix("tile.")
            raise located(TileConfigError, "only `acc += a @ b` may compute a tile inside the "
                          f"K loop; this computes one ({kind})", op.loc, kernel.source_lines,
                          "compute on the accumulator (scale, cast, add, fill) after the "
                          "loop")


def _sink_epilogue_tiles(kernel: Kernel, loop: Op) -> None:
    """Tiles computed before the K loop for the epilogue only (``c = C[...]`` between
    ``acc = zeros(...)`` and the loop) move to just after it, where the epilogue's
    accumulator layout holds them. A loop that stores no tile leaves the tensors as they
    were, so the moved loads read what they would have read."""
    top = kernel.body.ops
    at = top.index(loop)
    needed = {v for op in loop.walk() for v in op.operands}
    # Values the loop reads, and what computes them before it, stay before it.
    for op in reversed(top[:at]):
        if any(v in needed for v in op.results):
            needed.update(op.operands)
    moved = [op for op in top[:at] if not any(v in needed for v in op.results)
             and any(_is_register_tile(v) for v in op.results)]
    if not moved:
        return
    store = next((op for op in loop.walk() if op.name == "tile.store"), None)
    loads = [op for op in moved if op.name == "tile.load"]
    if store is not None and loads:
        raise located(TileConfigError, "a tile loaded before a K loop that stores tiles: the "
                      "load would have to see the tensor before the loop's stores", loads[0].loc,
                      kernel.source_lines, "load it after the loop")
    kept = [op for op in top[:at] if op not in moved]
    kernel.body.ops = kept + [loop] + moved + top[at + 1:]


def _elementwise(opdef: Optional[OpDef]) -> bool:
    return opdef is not None and opdef.elementwise


def _check_epilogue(kernel: Kernel, loop: Op, block_shape: tuple[int, int]) -> None:
    """Every tile the epilogue still computes must be one the accumulator layout holds."""
    for op in kernel.body.ops[kernel.body.ops.index(loop) + 1:]:
        values = list(op.results) + ([op.operands[-1]] if op.name == "tile.store" else [])
        for value in values:
            vtype = value.type
            if isinstance(vtype, TileType) and vtype.space == "reg" and vtype.layout is None:
                shape = "x".join(str(d) for d in vtype.shape)
                raise located(TileConfigError, f"a {shape} tile in the epilogue: after the K "
                              f"loop, tiles must have the block's shape "
                              f"{block_shape[0]}x{block_shape[1]} (or be 1-D rows or columns "
                              "broadcast to it)", op.loc, kernel.source_lines)


def _edge_masks(kernel: Kernel, op: Op, options: Options) -> list[bool]:
    """Per tensor dim, whether the epilogue access needs an edge mask (tiling's analysis)."""
    tensor = op.operands[0]
    rank = tensor.type.rank
    offsets = op.operands[1:1 + rank]
    tile = op.result.type if op.results else op.operands[-1].type
    dims = op.attrs.get("dims", list(range(rank)))
    extents = {d: tile.shape[i] for i, d in enumerate(dims) if d >= 0}
    return [not (tile_in_bounds(kernel, offsets[d], extents[d], tensor.type.shape[d],
                                options.spec, options.cluster, options.cluster_n)
                 if d in extents
                 else _element_in_bounds(offsets[d], tensor.type.shape[d]))
            for d in range(rank)]


def _element_in_bounds(offset: Value, dim) -> bool:
    """A dim no tile dim walks is read at its offset alone: in bounds when both are known
    (``bias[0:1, ...]`` of an ``f16[1, N]`` tensor)."""
    value = constant_value(offset)
    return isinstance(dim, int) and value is not None and 0 <= value < dim
