"""Tiling: block tile -> warp tiles -> mma instruction tiles, and the copies that feed them.

Requires: tile form (the frontend's output) with one ``tile.dot`` of two ``tile.load``s
directly inside a top-level K loop; a load may be converted first (``tile.cast`` between f16
and bf16, or of i8 weights, operand B stored k contiguous, to either; of f8e4m3 / f8e5m2
weights likewise, on sm_89 and later:
:data:`tilec.ir.ops.OPERAND_CONVERSIONS`), which is then done in registers.

Produces:
- ``kernel.schedule.tiling``: a :class:`~tilec.ir.schedule.TilingPlan` (block, warp and
  instruction tiles, threads, each operand's shared layout and copy vector width);
  under ``Options.misaligned_copy`` "vectors" or "words", 16-bit operands whose rows allow
  no cp.async copy 16-byte vectors (``vec``) read through registers (``global_vec``, the
  copy's ``misaligned`` attribute: how the loads are issued);
- a one-stage shared buffer per operand (``smem.alloc`` before the loop) filled in the loop
  by a synchronous ``copy.global_to_shared``, with ``gpu.barrier`` on both sides of the dot,
  which now reads the shared views;
- the grid's ``raster_group`` attribute (grouped block order, for L2 reuse); a batched
  program's 3-axis grid also gets ``batch_axis``, the axis of its batch index (the other
  two are folded and grouped, the batch launched on CUDA's y).
- for a converted operand: its buffer in the stored dtype, the cast dropped, the dot's
  ``product_dtype`` attribute and the operand plan's ``source`` (the fragments pass converts
  each fragment with ``frag.cvt``, after ``frag.ldbytes`` for an i8 one; wgmma declines the
  block).

Before::

    %a = tile.load %A, %i, %k {shape = [128, 32]} : tile<f16,[128,32]>
    %d = tile.dot %a, %b, %acc
After::

    %sA = smem.alloc {role = A, stages = 1} : tile<f16,[1,128,32],smem,linear>   (pre-loop)
    %vA = smem.stage %sA, %c0
    copy.global_to_shared %A, %i, %k, %vA {mode = sync, shape = [128, 32], vec = 8}
    gpu.barrier
    %d = tile.dot %vA, %vB, %acc
    gpu.barrier
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple, Optional

from tilec.errors import TileConfigError, located
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_kernel, defining_op
from tilec.ir.ops import OPERAND_CONVERSIONS
from tilec.ir.schedule import OperandPlan, TilingPlan
from tilec.ir.types import ACCUMULATOR_DTYPES, FP8_DTYPES, TileType
from tilec.ir.views import matrix_dim, view_source
from tilec.families.cp_async import ASYNC_COPY_BYTES
from tilec.families.fp8 import FP8_ARCHS
from tilec.families.product import ProductFamily
from tilec.families.products import FAMILIES, family_for, family_of, wgmma_declined
from tilec.families.wgmma_rs import FAMILY as WGMMA_RS
from tilec.target.layout import WARP_SIZE, SmemLayout
from tilec.options import MAX_REGISTERS_PER_THREAD, MAX_THREADS, Options

from . import coverage
from .common import batch_axis, constant, find_main_loop, tile_in_bounds

NAME = "tiling"
# Registers a thread needs beside accumulators and fragments (addresses, indices, masks);
# an estimate that ptxas's real report (tilec explain) refines.
REGISTER_OVERHEAD = 40


def registers_estimate(plan: TilingPlan) -> int:
    """Registers a thread of the plan needs, by the product family's estimate."""
    return family_of(plan).registers(plan.warp_tile, REGISTER_OVERHEAD)


def make_plan(block: tuple[int, int, int], dtype: str, operands: tuple[OperandPlan, OperandPlan],
              options: Options) -> TilingPlan:
    """The plan for a block tile of ``dtype`` operands: the product family the dtype takes
    and the warp grid (explicit, or :func:`_choose_warps`); ``options.f32_math`` picks the
    family of f32 tiles. Unknown dtypes get the first family (mma), for :func:`_check` to
    refuse with the source location."""
    bm, bn, _ = block
    try:
        family = family_for(dtype, options.f32_math, block, options, operands)
    except KeyError:
        family = FAMILIES[0]
    warps = family.choose_warps(bm, bn, options) or _choose_warps(bm, bn, family, options)
    return TilingPlan(block=block, warps=warps, warp_tile=(bm // warps[0], bn // warps[1]),
                      instruction=family.make_instruction(block),
                      threads=warps[0] * warps[1] * WARP_SIZE,
                      dtype=dtype, operands=operands, raster_group=options.raster_group,
                      kind=family.name)


# Bytes of the shared vector a thread stores per access of a widened misaligned copy (one
# st.shared.v4; the swizzle pass then picks the swizzle of 16-byte vectors).
WIDENED_BYTES = 16


def _widened(op_plan: OperandPlan, options: Options, product_bytes: int) -> OperandPlan:
    """``op_plan`` with 16-byte copy vectors loaded through registers, for 16-bit rows too
    misaligned for cp.async (Options.misaligned_copy other than "elements"); unchanged where
    the rows allow cp.async, the operand is converted, or the tile's contiguous extent is
    not a whole number of vectors."""
    eb = op_plan.stored_bytes(product_bytes)
    wide = WIDENED_BYTES // eb
    if (options.misaligned_copy == "elements" or op_plan.source or eb != 2
            or op_plan.vec * eb >= ASYNC_COPY_BYTES[0] or op_plan.layout.cols % wide):
        return op_plan
    return replace(op_plan, vec=wide, global_vec=op_plan.vec)


def _misaligned_attrs(op_plan: OperandPlan, options: Options) -> dict[str, Any]:
    """The copy's ``global_vec`` and ``misaligned`` (how it loads) when widened."""
    if not op_plan.global_vec:
        return {}
    return {"global_vec": op_plan.global_vec, "misaligned": options.misaligned_copy}


def _loaded(value: Value) -> Value:
    """The loaded tile behind an operand of `@`: itself, or what its conversion converts."""
    op = defining_op(value)
    return op.operands[0] if op is not None and op.name == "tile.cast" else value


def _source_tensor(kernel: Kernel, value: Value) -> tuple[str, bool]:
    """The parameter a tensor value views, and whether the view is transposed."""
    source = view_source(kernel, value)
    if source is None:
        raise ValueError("tensor value is neither a parameter nor a view of one")
    return source.name, source.transposed


def operand_plan(kernel: Kernel, options: Options, role: str, load: Op,
                 source: str = "") -> tuple[OperandPlan, bool]:
    """How operand ``role``, the tile ``load`` reads, is stored in shared memory, and
    whether its tensor has a unit-stride dim (the launch spec's). The tile dim contiguous in
    global memory stays contiguous in shared memory, so that copies move whole vectors."""
    name, transposed_view = _source_tensor(kernel, load.operands[0])
    param = next(p for p in kernel.params if p.name == name)
    spec = options.spec.tensor(name, param.type.rank, param.type.dtype.bytes)
    # A batch view reads the matrix dims of a 3-D parameter.
    contiguous_dim = matrix_dim(param.type.rank, spec.contiguous_dim)
    contiguous = contiguous_dim if contiguous_dim is not None else 1
    transposed = (1 - contiguous if transposed_view else contiguous) == 0
    rows, cols = load.result.type.shape
    layout = SmemLayout(cols, rows, transposed=True) if transposed else SmemLayout(rows, cols)
    vec = spec.vec_elems if contiguous_dim is not None else 1
    return OperandPlan(role, name, layout, vec, source), contiguous_dim is not None


def _choose_warps(bm: int, bn: int, family: ProductFamily,
                  options: Options) -> tuple[int, int]:
    """The warp grid: explicit, or the fewest warps (up to 8, then up to 16) whose warp tiles
    are whole instruction pieces and fit the registers, preferring square warp tiles
    (fragment reuse) -- 64x64 mma (and tf32 mma) tiles for the usual 128x128 or 128x256
    blocks, 32x64 FFMA tiles (8 x 8 elements per lane) for f32."""
    if options.warps is not None:
        return options.warps
    fitting = []
    gm, gn = family.granule
    for wm in (1, 2, 4, 8, 16):
        for wn in (1, 2, 4, 8, 16):
            tm, tn = bm // wm if bm % wm == 0 else 0, bn // wn if bn % wn == 0 else 0
            if not tm or not tn or tm % gm or tn % gn or wm * wn > 16:
                continue
            if family.auto_warp_tile_limit is not None and tm * tn > family.auto_warp_tile_limit:
                continue
            if family.registers((tm, tn), REGISTER_OVERHEAD) <= MAX_REGISTERS_PER_THREAD:
                fitting.append((wm * wn > 8, wm * wn, abs(tm - tn), (wm, wn)))
    if not fitting:  # nothing fits: let _check report the natural choice
        return max(1, bm // 64), max(1, bn // 64)
    return min(fitting)[3]


def _check(kernel: Kernel, dot: Op, plan: TilingPlan, options: Options) -> None:
    # A block chosen for the swapped product (BM any multiple of 8) fails here when the swap
    # was declined: say why beside the error.
    swap = kernel.schedule.swap
    declined = (f"swap_product='always' left the product as written: {swap.why}"
                if options.swap_product == "always" and swap is not None and not swap.swapped
                else "")

    def fail(message: str, hint: str = "") -> None:
        hint = "; ".join(part for part in (hint, declined, _fallback_why(plan, options))
                         if part)
        raise located(TileConfigError, message, dot.loc, kernel.source_lines, hint)

    bm, bn, bk = plan.block
    (wm, wn), (tm, tn) = plan.warps, plan.warp_tile
    try:
        family_for(plan.dtype, options.f32_math, plan.block, options, plan.operands)
    except KeyError as err:
        fail(err.args[0])
    family = family_of(plan)
    refusal = family.operand_refusal(plan.operands, options)
    if refusal is not None:
        fail(*refusal)
    refused = _wgmma_options_refused(plan, options)
    if refused is not None and family.movement != "tma":
        option, reason = refused
        fail(f"{option}={getattr(options, option)} {WGMMA_SHAPING[option].does}, but the "
             f"wgmma family declines this {bm}x{bn}x{bk} block with it: {reason}",
             hint=WGMMA_SHAPING[option].hint)
    if bk % family.k_step:
        fail(f"BK={bk} is not a multiple of the {family.name} k ({family.k_step})")
    if bm % wm or bn % wn:
        fail(f"the {bm}x{bn} block does not divide among {wm}x{wn} warps")
    gm, gn = family.granule
    if tm % gm or tn % gn:
        multiples = f"{gm}" if gm == gn else f"{gm} (BM) and {gn} (BN)"
        fail(f"each warp's {tm}x{tn} tile must be a multiple of {gm}x{gn}"
             f"{family.granule_why}",
             hint=f"use BM, BN multiples of {multiples} per warp row/column")
    if plan.threads > MAX_THREADS:
        fail(f"{wm}x{wn} warps make {plan.threads} threads, more than {MAX_THREADS}")
    regs = registers_estimate(plan)
    if regs > MAX_REGISTERS_PER_THREAD:
        fail(f"a {tm}x{tn} warp tile needs about {regs} registers per thread, more than "
             f"{MAX_REGISTERS_PER_THREAD}", hint="use more warps or a smaller block tile")
    # An operand converted in registers is stored in its own dtype (w8a16: i8 weights).
    a_bytes, b_bytes = (op.stored_bytes(plan.elem_bytes) for op in plan.operands)
    ring = ring_bytes(plan.block, a_bytes, b_bytes, options.stages)
    if ring > options.smem_limit:
        fail(f"{options.stages} stages of {bm}x{bk} and {bk}x{bn} tiles need "
             f"{ring} bytes of shared memory; {options.arch} allows "
             f"{options.smem_limit}", hint="use fewer stages or smaller tiles")


def _fallback_why(plan: TilingPlan, options: Options) -> str:
    """Where a block on a wgmma target fell back to mma.sync, why wgmma declined it: said
    beside the fallback's own error, since the block was likely chosen for wgmma (64x200
    fails mma.sync's warp grid because wgmma wants BN=200 a multiple of 16)."""
    reason = wgmma_declined(plan, options)
    bm, bn, bk = plan.block
    return f"wgmma declined the {bm}x{bn}x{bk} block ({reason}), so it fell back to " \
        "mma.sync" if reason else ""


def ring_bytes(block: tuple[int, int, int], a_bytes: int, b_bytes: int, stages: int) -> int:
    """The shared memory of a cp.async ring (the mma.sync and FFMA kernels'): ``stages``
    stages of a BM x BK tile of A and a BK x BN one of B, of those element bytes."""
    bm, bn, bk = block
    return (bm * bk * a_bytes + bk * bn * b_bytes) * stages


class Shaping(NamedTuple):
    """An option that shapes wgmma's consumers: the value that takes the most blocks, what
    the option does, and the hint of its refusal."""

    usual: Any
    does: str
    hint: str


# Set away from their usual value on a block the wgmma family takes only at that value,
# these options are refused at the product rather than the kernel falling back to mma.sync,
# where they mean nothing.
WGMMA_SHAPING = {
    "warpgroup_rows": Shaping(64, "sets the rows of a wgmma consumer warpgroup",
                              "use warpgroup_rows=64, or a BM that is a multiple of the rows "
                              "with a BN whose accumulators fit (BN <= 192 with two"
                              " consumer warpgroups)"),
    "blocks_per_sm": Shaping(1, "halves a wgmma block's registers and shared memory",
                             "use blocks_per_sm=1, or a tile whose accumulators fit half the "
                             "registers (64x128 on one consumer warpgroup)"),
}


def _wgmma_options_refused(plan: TilingPlan, options: Options
                           ) -> Optional[tuple[str, str]]:
    """The first option of WGMMA_SHAPING for whose value alone the wgmma family of the
    plan's dtype declines the block (it takes it at the option's usual value: a tile or
    register budget that 128-row warpgroups or two blocks an SM do not fit), and why; None
    otherwise. Where wgmma declines the block anyway (the arch, unaligned operands), the
    kernel falls back to mma.sync and these options have nothing to apply to, like
    consumers='pingpong'."""
    for option, shaping in WGMMA_SHAPING.items():
        usual = shaping.usual
        if getattr(options, option) == usual:
            continue
        for family in FAMILIES:
            if family.movement == "tma" and plan.dtype in family.dtypes and \
                    family.applies(plan.block, replace(options, **{option: usual}),
                                   plan.operands):
                return option, family.declined(plan.block, options, plan.operands)
    return None


def _check_fp8_casts(kernel: Kernel, operand_casts, options: Options) -> None:
    """Conversions from and to 8-bit floats outside the K loop's `@` (an epilogue reading
    an fp8 tensor, an fp8 output) are cvt's e4m3x2 / e5m2x2 forms, which sm_89 brought:
    refused at the ``.to`` on older targets, naming the arch."""
    if options.arch in FP8_ARCHS:
        return
    for op in kernel.walk():
        if op.name != "tile.cast" or op in operand_casts:
            continue
        source, target = op.operands[0].type.dtype, op.result.type.dtype
        fp8 = source if source in FP8_DTYPES else target if target in FP8_DTYPES else None
        if fp8 is not None:
            raise located(TileConfigError, f"converting {source} to {target} (cvt with "
                          f"{fp8.short[2:]}x2) needs sm_89 or later; the target is "
                          f"{options.arch}", op.loc, kernel.source_lines,
                          f"compile for {' or '.join(FP8_ARCHS)}, or pass and store the "
                          "tensor in f16 or f32")


def _refuse_converted_a(kernel: Kernel, cast: Op, plan: TilingPlan, options: Options) -> None:
    """An 8-bit A converted in the K loop is wgmma's register form (sm_90a) or nothing: the
    mma families convert only B. The error says why wgmma_rs declined the block."""
    stored, product = cast.operands[0].type.dtype, cast.result.type.dtype
    why = WGMMA_RS.declined(plan.block, options, plan.operands)
    raise located(TileConfigError, f"operand A of `@` is stored in {stored} and converted to "
                  f"{product} in the K loop, which only wgmma's register form does (sm_90a), "
                  f"and it declines this block: {why}", cast.loc, kernel.source_lines,
                  f"a launch converts A to {product} first (calls, prepare and `tilec run`; "
                  "not with pack='off'); to keep 8 bits elsewhere, quantize the weights, B "
                  "(stored [N, K], read as W.T[k : +BK, n : +BN].to(f16)), and pass the "
                  "activations A in f16 or bf16 (samples/w8a16.py)")


def _product_loads(kernel: Kernel, loop: Op, dot: Op, options: Options
                   ) -> tuple[list[Op], dict[str, Op]]:
    """The K loop's tile loads of the product's operands (A's, then B's), and the
    operands converted in registers after their load (``tile.cast``), by role; an operand
    that is neither, or a conversion no family makes, is refused at its line."""
    body = loop.regions[0]
    loads = []
    casts: dict[str, Op] = {}
    for role, value in zip("AB", dot.operands[:2]):
        load = defining_op(value)
        cast = load if load is not None and load.name == "tile.cast" else None
        source = defining_op(cast.operands[0]) if cast is not None else None
        if cast is not None and source is not None and source.name == "tile.load" \
                and source in body.ops:
            _check_conversion(kernel, body, dot, role, cast, source, options)
            casts[role] = cast
            load = source
        if load is None or load.name != "tile.load" or load not in body.ops:
            raise located(TileConfigError, f"operand {role} of `@` must be a tile loaded "
                          "from a tensor inside the K loop", dot.loc, kernel.source_lines)
        loads.append(load)
    return loads, casts


def _check_conversion(kernel: Kernel, body: Block, dot: Op, role: str, cast: Op, source: Op,
                      options: Options) -> None:
    """An operand converted in the K loop: a conversion the families make, on a target that
    has it, used only by the product."""
    stored, product = source.result.type.dtype, cast.result.type.dtype
    if (stored, product) not in OPERAND_CONVERSIONS:
        supported = ", ".join(f"{s} to {p}" for s, p in sorted(OPERAND_CONVERSIONS, key=str))
        raise located(TileConfigError, f"operand {role} of `@` is converted in the K "
                      f"loop from {stored} to {product}, which is not supported "
                      f"(converted operands: {supported})", cast.loc,
                      kernel.source_lines, f"pass {role} in {product} (convert the "
                      "array before the launch), or compute in the operand's dtype")
    if stored in FP8_DTYPES and options.arch not in FP8_ARCHS:
        raise located(TileConfigError, f"operand {role} of `@` is stored in {stored} "
                      f"and converted to {product} in registers (cvt.rn.f16x2."
                      f"{stored.short[2:]}x2), which needs sm_89 or later; the "
                      f"target is {options.arch}", cast.loc, kernel.source_lines,
                      f"compile for {' or '.join(FP8_ARCHS)}, or quantize the "
                      "weights to i8 (samples/w8a16.py)")
    if any(cast.result in op.operands for op in body.ops if op is not dot):
        raise located(TileConfigError, f"operand {role} of `@` is converted in the K "
                      "loop and used there again: the conversion happens in the "
                      "product's registers", cast.loc, kernel.source_lines,
                      "use the converted tile only in `@`")


def _operand_plans(kernel: Kernel, options: Options, loads: list[Op], casts: dict[str, Op]
                   ) -> tuple[list[OperandPlan], list[bool]]:
    """Each operand's plan, and whether its rows' elements are adjacent (a dim of unit
    stride: its vectors may widen)."""
    operands = []
    unit_stride = []
    for role, load in zip("AB", loads):
        source = load.result.type.dtype.short if role in casts else ""
        op_plan, adjacent = operand_plan(kernel, options, role, load, source)
        name = op_plan.tensor
        if role in casts and load.result.type.dtype.bytes == 1 and not op_plan.k_major:
            raise located(TileConfigError, f"operand {role} of `@` is stored in "
                          f"{load.result.type.dtype} with n contiguous ('{name}' [K, N]): an "
                          "8-bit operand converted in registers is read two adjacent k "
                          "elements a register, so k must be contiguous",
                          casts[role].loc, kernel.source_lines,
                          f"a launch converts '{name}' to {casts[role].result.type.dtype} "
                          "first (calls, prepare and `tilec run`; not with pack='off'); to "
                          f"read it in 8 bits, store '{name}' as [N, K] (an nn.Linear weight) "
                          f"and read {name}.T[k : +BK, n : +BN] (samples/w8a16.py)")
        operands.append(op_plan)
        unit_stride.append(adjacent)
    return operands, unit_stride


def _tiling_plan(kernel: Kernel, dot: Op, loads: list[Op], casts: dict[str, Op],
                 options: Options) -> TilingPlan:
    """The block's plan: its family (checked), the cp.async operands' vectors widened, and
    the converted operands' family and accumulator checked."""
    a_type, b_type, acc_type = (value.type for value in dot.operands)
    bm, bk = a_type.shape
    bn = b_type.shape[1]
    operands, unit_stride = _operand_plans(kernel, options, loads, casts)
    plan = make_plan((bm, bn, bk), a_type.dtype.short, tuple(operands), options)
    _check(kernel, dot, plan, options)
    family = family_of(plan)
    if family.movement == "cp.async":  # TMA boxes have no per-thread vectors to widen
        operands = [_widened(op_plan, options, a_type.dtype.bytes) if adjacent else op_plan
                    for op_plan, adjacent in zip(operands, unit_stride)]
        plan = replace(plan, operands=tuple(operands))
    for op_plan in plan.operands:
        if op_plan.byte_loaded and not family.converts(op_plan.role):
            cast = casts[op_plan.role]
            if op_plan.role == "A":
                _refuse_converted_a(kernel, cast, plan, options)
            raise located(TileConfigError, f"operand {op_plan.role} is stored in "
                          f"{op_plan.source} and converted in registers, which the "
                          f"{family.name} family does not do", cast.loc,
                          kernel.source_lines, "let mma.sync take the block (the default)")
    accumulator = ACCUMULATOR_DTYPES[a_type.dtype]
    if acc_type.dtype != accumulator:
        raise located(TileConfigError, f"the accumulator of {a_type.dtype} products must be "
                      f"{accumulator}", dot.loc, kernel.source_lines)
    return plan


def _copies_in_place(kernel: Kernel, loop: Op, dot: Op, loads: list[Op],
                     casts: dict[str, Op], plan: TilingPlan, options: Options) -> None:
    """A one-stage buffer per operand right before the loop, and in the loop a copy into it
    in place of each load, the product reading the buffers between two barriers."""
    body = loop.regions[0]
    a_val, b_val, acc = dot.operands
    operands = plan.operands
    pre = Builder(Block(), loop.loc)
    zero = constant(pre, 0)
    buffers = []
    for op_plan, load in zip(operands, loads):
        ltype: TileType = load.result.type
        btype = TileType(ltype.dtype, (1, *ltype.shape), "smem", op_plan.layout)
        buffers.append(pre.value("smem.alloc", [], btype, f"s{op_plan.role}", stages=1,
                                 role=op_plan.role))
    index = kernel.body.ops.index(loop)
    kernel.body.ops[index:index] = pre.block.ops

    b = Builder(Block())
    views: dict[Value, Value] = {}
    for op in body.ops:
        with b.located(op.loc):
            if op in loads:
                role_index = loads.index(op)
                buffer = buffers[role_index]
                view_type = TileType(buffer.type.dtype, buffer.type.shape[1:], "smem",
                                     buffer.type.layout)
                view = b.value("smem.stage", [buffer, zero], view_type,
                               f"v{operands[role_index].role}")
                masked = [not tile_in_bounds(kernel, offset, extent, dim, options.spec,
                                                  options.cluster, options.cluster_n)
                          for offset, extent, dim in zip(op.operands[1:], op.attrs["shape"],
                                                         op.operands[0].type.shape)]
                b.op("copy.global_to_shared", [*op.operands, view],
                     attrs={"shape": list(op.attrs["shape"]), "vec": operands[role_index].vec,
                            "mode": "sync", "threads": plan.threads, "masked": masked,
                            **_misaligned_attrs(operands[role_index], options)})
                views[op.result] = view
            elif op in casts.values():
                continue  # done in registers after the fragment load (fragments pass)
            elif op is dot:
                b.op("gpu.barrier")
                if casts:
                    op.attrs["product_dtype"] = a_val.type.dtype
                op.operands = [views[_loaded(v)] for v in (a_val, b_val)] + [acc]
                b.block.ops.append(op)
                b.op("gpu.barrier")
            else:
                b.block.ops.append(op)
    body.ops = b.block.ops


def _raster_grid(kernel: Kernel, options: Options) -> None:
    """The grid's raster group: a 2-D grid's, or a batched one's whose other two axes fold
    as a 2-D grid's do."""
    for op in kernel.body.ops:
        if op.name == "tile.grid" and len(op.operands) == 2:
            op.attrs["raster_group"] = options.raster_group
        elif op.name == "tile.grid" and len(op.operands) == 3:
            batch = batch_axis(kernel, op)
            if batch is not None:
                op.attrs.update(raster_group=options.raster_group, batch_axis=batch)


def run(kernel: Kernel, options: Options) -> Kernel:
    kernel = clone_kernel(kernel)
    loop, dot = find_main_loop(kernel)
    loads, casts = _product_loads(kernel, loop, dot, options)
    _check_fp8_casts(kernel, casts.values(), options)
    coverage.check_k_loop(kernel, loop, loads)
    plan = _tiling_plan(kernel, dot, loads, casts, options)
    _copies_in_place(kernel, loop, dot, loads, casts, plan, options)
    _raster_grid(kernel, options)
    kernel.schedule = kernel.schedule.with_(tiling=plan)
    return kernel
