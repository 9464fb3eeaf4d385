"""Swap product: compute an 8-bit-weight product transposed, C.T = W @ A.T, so the weights
feed wgmma from registers.

Why: a weight-only-quantized product (``samples/w8a16.py``: ``A @ W.T[k : +BK, n : +BN]
.to(f16)``) converts its 8-bit operand B in registers, which only mma.sync can multiply:
wgmma reads B from shared memory as stored. wgmma takes A from registers, though (its
register form, the wgmma_rs family), so the program's transpose, where W is A, runs on
wgmma with W still read in 8 bits: 1.6-2x the mma.sync kernel at 128-1023 rows on an H200
(benchmarks/NOTES.md, session 22). This pass writes that transpose for the user.

Requires: the frontend's tile IR, after dequantize (a launch that converts W leaves no
conversion to move). Applies where all of these hold, else returns the kernel unchanged and
says why in ``kernel.schedule.swap`` (only where the product converts an 8-bit B, the only
case it is for):

- the target is sm_90a with a backend emitting wgmma, without clusters (they share B along
  the grid's m axis, which the swapped B, A.T, moves along);
- the product is ``A[m, k] @ W.T[k, n].to(dtype)``: A a 2-D tensor parameter, W a 2-D 8-bit
  one read through its transpose (k contiguous, an nn.Linear weight), the accumulator the
  loop's one carried tile, filled before it;
- after the loop, only ops it can transpose: elementwise ones, casts, broadcasts and
  reshapes, 1-D and 2-D loads and the stores;
- the wgmma_rs family takes the swapped block (BN x BM x BK: BK a multiple of 128, the
  tiles wgmma's, 16-byte aligned rows, the registers fit; the stages hold the same bytes).

Produces: the K loop's product ``W[n, k].to(dtype) @ A.T[k, m]`` into a BN x BM accumulator;
every 2-D tile after it transposed (shapes flipped, loads and stores through transposed
views with their offsets swapped, a vector broadcast along the other dim). The grid is
unchanged: block (m, n) computes the same elements of C, stored transposed.

Before::

    %4 = tile.load %A, %3, %k {shape = [128, 128]} : tile<f16,[128,128]>
    %W_T = tensor.transpose %W : tensor<i8,[K,N]>
    %6 = tile.load %W_T, %k, %5 {shape = [128, 64]} : tile<i8,[128,64]>
    %7 = tile.cast %6 {dtype = f16} : tile<f16,[128,64]>
    %acc.3 = tile.dot %4, %7, %acc.2 : tile<f32,[128,64]>
    ...
    %10 = tile.broadcast %9 : tile<f32,[128,64]>
    tile.store %C, %13, %14, %12
After::

    %6 = tile.load %W, %5, %k {shape = [64, 128]} : tile<i8,[64,128]>
    %7 = tile.cast %6 {dtype = f16} : tile<f16,[64,128]>
    %A_T = tensor.transpose %A : tensor<f16,[K,M]>
    %4 = tile.load %A_T, %k, %3 {shape = [128, 128]} : tile<f16,[128,128]>
    %acc.3 = tile.dot %7, %4, %acc.2 : tile<f32,[64,128]>
    ...
    %9.col = tile.reshape %9 : tile<f32,[64,1]>
    %10 = tile.broadcast %9.col : tile<f32,[64,128]>
    %C_T = tensor.transpose %C : tensor<f16,[N,M]>
    tile.store %C_T, %14, %13, %12
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from tilec.families.catalogue import op_definitions
from tilec.families.wgmma_rs import FAMILY as WGMMA_RS
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_kernel, defining_op
from tilec.ir.schedule import OperandPlan, SwapPlan
from tilec.ir.types import TensorType, TileType
from tilec.options import Options
from tilec.target.layout import SmemLayout

from .common import find_main_loop

NAME = "swap_product"
# Ops after the K loop whose 2-D tiles the pass knows how to transpose, beside the
# elementwise ones (the op definitions' ``elementwise``).
TRANSPOSABLE = ("tile.load", "tile.store", "tile.broadcast", "tile.reshape")
SCALAR_OPS = ("arith.", "tensor.transpose")


def _tile2d(value: Value) -> bool:
    return isinstance(value.type, TileType) and len(value.type.shape) == 2


def _flipped(t: TileType) -> TileType:
    return replace(t, shape=(t.shape[1], t.shape[0]))


class _Match:
    """The product's pieces: the loop, its dot, A's load, W's load and cast, the zero
    accumulator, the tensors A and W (parameter values)."""

    def __init__(self, loop: Op, dot: Op, load_a: Op, load_w: Op, cast: Op, init: Op,
                 a: Value, w: Value):
        self.loop, self.dot, self.load_a, self.load_w, self.cast, self.init = (
            loop, dot, load_a, load_w, cast, init)
        self.a, self.w = a, w


def _param(kernel: Kernel, value: Value) -> bool:
    return value in kernel.body.args


def _match(kernel: Kernel) -> tuple[Optional[_Match], str]:
    """The product's pieces, or None and why the program is not one this pass swaps ("" when
    its B is not an 8-bit operand converted in the loop: nothing to say)."""
    loop, dot = find_main_loop(kernel)
    a_val, b_val, acc = dot.operands
    cast = defining_op(b_val)
    load_w = defining_op(cast.operands[0]) if cast is not None and cast.name == "tile.cast" \
        else None
    if load_w is None or load_w.name != "tile.load" or load_w.result.type.dtype.bytes != 1:
        return None, ""
    view = defining_op(load_w.operands[0])
    if view is None or view.name != "tensor.transpose" or not _param(kernel, view.operands[0]):
        return None, "the weights are not read as W.T of a 2-D tensor parameter"
    load_a = defining_op(a_val)
    if load_a is None or load_a.name != "tile.load" or not _param(kernel, load_a.operands[0]):
        return None, "operand A is not a tile loaded from a 2-D tensor parameter"
    body = loop.regions[0]
    for value in (a_val, b_val, load_w.result):
        if sum(value in op.operands for op in body.ops) != 1:
            return None, "the product's operands have other uses in the loop"
    index = body.args.index(acc) - 1 if acc in body.args else -1
    init = defining_op(loop.operands[3 + index]) if index >= 0 else None
    if init is None or init.name != "tile.full" or len(loop.results) != 1:
        return None, "the accumulator is not the loop's one tile, filled before it"
    return _Match(loop, dot, load_a, load_w, cast, init, load_a.operands[0],
                  view.operands[0]), ""


def _cluster_problem(options: Options) -> Optional[str]:
    # A cluster pairs blocks along the grid's first axis (m) to share B; swapped, B is A.T,
    # whose tile moves along m.
    if options.cluster > 1:
        return (f"cluster={options.cluster} shares B between blocks along the grid's first "
                "axis (m), along which the swapped product's B (A.T) moves")
    return None


def _epilogue_problem(kernel: Kernel, match: _Match) -> Optional[str]:
    definitions = op_definitions()
    before = kernel.body.ops[:kernel.body.ops.index(match.loop)]
    if any(op is not match.init and any(_tile2d(r) for r in op.results) for op in before):
        return "a 2-D tile is computed before the K loop"
    for op in kernel.body.ops[kernel.body.ops.index(match.loop) + 1:]:
        if op.name.startswith(SCALAR_OPS):
            continue
        definition = definitions.get(op.name)
        if op.regions or not (op.name in TRANSPOSABLE or definition is not None
                              and definition.elementwise):
            return f"the epilogue's {op.name} cannot be transposed"
        if op.name == "tile.load" and _tile2d(op.result) and \
                len(op.operands[0].type.shape) != 2:
            return "the epilogue loads a tile of a batched tensor"
    return None


def _swapped_block_problem(match: _Match, kernel: Kernel, options: Options) -> Optional[str]:
    """Why wgmma's register form would not take the swapped block (None when it does): the
    family's own rule on the operands as tiling would plan them."""
    bm, bk = match.load_a.result.type.shape
    bn = match.load_w.result.type.shape[1]
    spec_w = options.spec.tensor(_name(kernel, match.w), 2, 1)
    spec_a = options.spec.tensor(_name(kernel, match.a), 2, match.a.type.dtype.bytes)
    if spec_w.contiguous_dim != 1 or spec_a.contiguous_dim != 1:
        return "W or A is not stored k-contiguous"
    source = match.load_w.result.type.dtype.short
    operands = (OperandPlan("A", _name(kernel, match.w), SmemLayout(bn, bk), spec_w.vec_elems,
                            source),
                OperandPlan("B", _name(kernel, match.a), SmemLayout(bm, bk, transposed=True),
                            spec_a.vec_elems))
    # Shared memory needs no check of its own: the swapped stages hold the same two tiles.
    why = WGMMA_RS.declined((bn, bm, bk), options, operands)
    return None if why is None else \
        f"the register form declines the swapped {bn}x{bm}x{bk} block: {why}"


def _name(kernel: Kernel, value: Value) -> str:
    return kernel.params[kernel.body.args.index(value)].name


def run(kernel: Kernel, options: Options) -> Kernel:
    match, why = _match(kernel)
    if match is None:
        return _noted(kernel, why)
    why = (WGMMA_RS.target_problem(options.arch, options.backend)
           or _cluster_problem(options) or _epilogue_problem(kernel, match)
           or _swapped_block_problem(match, kernel, options))
    if why is not None:
        return _noted(kernel, why)
    kernel = clone_kernel(kernel)
    match, _ = _match(kernel)
    _swap_loop(match)
    _transpose_epilogue(kernel, match)
    rows, cols = match.init.attrs["shape"]  # C.T's tile, after the swap
    kernel.schedule = kernel.schedule.with_(swap=SwapPlan(
        True, f"C.T = W @ A.T: each block's {rows}x{cols} tile of C.T, the weights "
              f"{_name(kernel, match.w)} as wgmma's A, converted in registers"))
    return kernel


def _noted(kernel: Kernel, why: str) -> Kernel:
    if not why:
        return kernel
    kernel = clone_kernel(kernel)
    kernel.schedule = kernel.schedule.with_(swap=SwapPlan(False, why))
    return kernel


def _swap_loop(match: _Match) -> None:
    """The loop's product as W[n, k].to(dtype) @ A.T[k, m] into a flipped accumulator."""
    body = match.loop.regions[0]
    k_a, off_m = match.load_a.operands[2], match.load_a.operands[1]
    k_w, off_n = match.load_w.operands[1], match.load_w.operands[2]
    b = Builder(Block(), match.dot.loc)
    w_type = _flipped(match.load_w.result.type)
    with b.located(match.load_w.loc):
        w_tile = b.value("tile.load", [match.w, off_n, k_w], w_type, match.load_w.result.hint,
                         shape=list(w_type.shape))
    with b.located(match.cast.loc):
        w_cast = b.value("tile.cast", [w_tile], _flipped(match.cast.result.type),
                         match.cast.result.hint, dtype=match.cast.attrs["dtype"])
    with b.located(match.load_a.loc):
        a_t = _transposed_view(b, match.a)
        a_type = _flipped(match.load_a.result.type)
        a_tile = b.value("tile.load", [a_t, k_a, off_m], a_type, match.load_a.result.hint,
                         shape=list(a_type.shape))
    match.dot.operands = [w_cast, a_tile, match.dot.operands[2]]
    index = body.ops.index(match.dot)
    kept = [op for op in body.ops[:index] if op not in (match.load_a, match.load_w, match.cast)]
    body.ops = kept + b.block.ops + body.ops[index:]
    # The accumulator's values: its zero init, the loop's carried value and result, the dot.
    match.init.attrs["shape"] = list(reversed(match.init.attrs["shape"]))
    for value in (match.init.result, match.dot.result, match.loop.results[0],
                  *[arg for arg in body.args if _tile2d(arg)]):
        value.type = _flipped(value.type)


def _transposed_view(b: Builder, tensor: Value) -> Value:
    """``tensor``'s transpose: the view it was taken through, or a new one."""
    source = defining_op(tensor)
    if source is not None and source.name == "tensor.transpose":
        return source.operands[0]
    t: TensorType = tensor.type
    return b.value("tensor.transpose", [tensor], replace(t, shape=tuple(reversed(t.shape))),
                   f"{tensor.hint}_T")


def _transpose_epilogue(kernel: Kernel, match: _Match) -> None:
    """Every op after the loop, its 2-D tiles transposed."""
    start = kernel.body.ops.index(match.loop) + 1
    out: list[Op] = []
    b = Builder(Block())
    for op in kernel.body.ops[start:]:
        b.block.ops = []
        with b.located(op.loc):
            if op.name == "tile.load" and _tile2d(op.result):
                view = _transposed_view(b, op.operands[0])
                op.operands = [view, op.operands[2], op.operands[1]]
                op.attrs["shape"] = list(reversed(op.attrs["shape"]))
            elif op.name == "tile.store" and _tile2d(op.operands[-1]):
                view = _transposed_view(b, op.operands[0])
                op.operands = [view, op.operands[2], op.operands[1], op.operands[3]]
            elif op.name == "tile.broadcast" and len(op.operands[0].type.shape) == 1:
                # A vector along the tile's columns runs along its rows once transposed.
                vector = op.operands[0]
                length = vector.type.shape[0]
                column = b.value("tile.reshape", [vector], replace(vector.type, shape=(length, 1)),
                                 f"{vector.hint or 'v'}_col")
                op.operands = [column]
            elif op.name in ("tile.full", "tile.splat") and "shape" in op.attrs and \
                    len(op.attrs["shape"]) == 2:
                op.attrs["shape"] = list(reversed(op.attrs["shape"]))
        for result in op.results:
            if _tile2d(result):
                result.type = _flipped(result.type)
        out += b.block.ops + [op]
    kernel.body.ops[start:] = out
