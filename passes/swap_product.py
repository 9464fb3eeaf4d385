"""Swap product: compute a product transposed, C.T = B.T @ A.T, so that wgmma takes it in
a form the product as written cannot have.

Why, for two kinds of product:

- **8-bit weights converted in registers** (``samples/w8a16.py``: ``A @ W.T[k : +BK, n :
  +BN].to(f16)``). Only mma.sync can multiply a B converted in registers: wgmma reads B from
  shared memory as stored. wgmma takes A from registers, though (its register form, the
  wgmma_rs family), so the transpose, where W is A, runs on wgmma with W still read in 8
  bits: 1.6-2x the mma.sync kernel at 128-1023 rows on an H200 (benchmarks/NOTES.md,
  session 22). Always swapped where it applies (``Options.swap_product`` "auto").
- **Plain products** (``Options.swap_product`` "always", which the tuning asks for). wgmma's
  m is 64 a warpgroup and its n any multiple of 8 up to 256: swapped, the block's rows (BM)
  run along n, so a ragged M is covered with little padding (M = 300 in two tiles of 152
  rows, not five of 64 or two of 192): 1.07-1.22x on ragged products of 300-1000 rows on an
  H200 (benchmarks/NOTES.md, session 32).

Requires: the frontend's tile IR, after dequantize (a launch that converts W leaves no
conversion to move). Applies where all of these hold, else returns the kernel unchanged and
says why in ``kernel.schedule.swap`` (for the products it is asked to swap: 8-bit converted
ones, and plain ones under "always"):

- the target is sm_90a with a backend emitting wgmma (a cluster's blocks, paired along m,
  then share the swapped A, the program's B: passes/warp_specialize.py);
- the product is ``A[m, k] @ B[k, n]``, each operand a tile of a 2-D tensor parameter or
  of its transpose, B converted only from 8 bits and then read as W.T (k contiguous, an
  nn.Linear weight); the accumulator the loop's one carried tile, filled before it, and
  the loop's only 2-D tiles the operands and the product;
- after the loop, only ops it can transpose: elementwise ones, casts, broadcasts and
  reshapes, 1-D and 2-D loads and the stores;
- a wgmma family takes the swapped block (BN x BM x BK) with its operands as tiling will
  plan them: the register form (wgmma_rs) for converted weights, the shared-memory form
  of the product's dtype for plain products (the stages hold the same bytes).

Produces: the K loop's product ``B.T[n, k] @ A.T[k, m]`` (``W[n, k].to(dtype) @ A.T[k,
m]``) into a BN x BM accumulator; every 2-D tile after it transposed (shapes flipped, loads
and stores through transposed views with their offsets swapped, a vector broadcast along
the other dim). The grid is unchanged: block (m, n) computes the same elements of C, stored
transposed.

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
from tilec.families.products import FAMILIES
from tilec.families.wgmma_rs import FAMILY as WGMMA_RS
from tilec.ir.core import Block, Builder, Kernel, Op, Value, clone_kernel, defining_op
from tilec.ir.schedule import SwapPlan
from tilec.ir.types import TensorType, TileType
from tilec.options import Options

from .common import find_main_loop
from .tiling import operand_plan

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
    """The product's pieces: the loop, its dot, the loads of A and B, B's conversion from 8
    bits (None for a plain product), the zero accumulator."""

    def __init__(self, loop: Op, dot: Op, load_a: Op, load_b: Op, cast: Optional[Op],
                 init: Op):
        self.loop, self.dot, self.load_a, self.load_b, self.cast, self.init = (
            loop, dot, load_a, load_b, cast, init)


def _param(kernel: Kernel, value: Value) -> bool:
    return value in kernel.body.args


def _matrix(kernel: Kernel, view: Value) -> bool:
    """Whether ``view`` is a 2-D tensor parameter or its transpose."""
    tensor = _tensor(view)
    return _param(kernel, tensor) and len(tensor.type.shape) == 2


def _loaded(value: Value) -> Optional[Op]:
    op = defining_op(value)
    return op if op is not None and op.name == "tile.load" else None


def _match(kernel: Kernel, options: Options) -> tuple[Optional[_Match], str]:
    """The product's pieces, or None and why the program is not one this pass swaps ("" for
    a product it is not asked to swap: nothing to say)."""
    loop, dot = find_main_loop(kernel)
    a_val, b_val, acc = dot.operands
    cast = defining_op(b_val)
    if cast is None or cast.name != "tile.cast":
        cast = None
    load_b = _loaded(cast.operands[0] if cast is not None else b_val)
    converted = cast is not None and load_b is not None and \
        load_b.result.type.dtype.bytes == 1
    if not converted and options.swap_product != "always":
        return None, ""
    if cast is not None and not converted:
        return None, "operand B is converted in the K loop (wgmma reads it as stored)"
    if converted:
        view = defining_op(load_b.operands[0])
        if view is None or view.name != "tensor.transpose" or \
                not _matrix(kernel, load_b.operands[0]):
            return None, "the weights are not read as W.T of a 2-D tensor parameter"
    elif load_b is None or not _matrix(kernel, load_b.operands[0]):
        return None, "operand B is not a tile loaded from a 2-D tensor parameter"
    load_a = _loaded(a_val)
    if load_a is None or not _matrix(kernel, load_a.operands[0]):
        return None, "operand A is not a tile loaded from a 2-D tensor parameter"
    body = loop.regions[0]
    for value in [a_val, b_val] + ([load_b.result] if cast is not None else []):
        if sum(value in op.operands for op in body.ops) != 1:
            return None, "the product's operands have other uses in the loop"
    product = (load_a, load_b, cast, dot)
    other = next((op for op in body.ops if op not in product and
                  any(_tile2d(r) for r in op.results)), None)
    if other is not None:
        return None, f"the K loop computes other 2-D tiles ({other.name}) than the product's"
    index = body.args.index(acc) - 1 if acc in body.args else -1
    init = defining_op(loop.operands[3 + index]) if index >= 0 else None
    if init is None or init.name != "tile.full" or len(loop.results) != 1:
        return None, "the accumulator is not the loop's one tile, filled before it"
    return _Match(loop, dot, load_a, load_b, cast, init), ""


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


def _swapped_block_problem(kernel: Kernel, match: _Match, options: Options
                           ) -> Optional[str]:
    """Why wgmma would not take the swapped block (None when it does), ``match`` the swapped
    kernel's: the family's own rule on the operands as tiling will plan them. Shared memory
    needs no check of its own: the swapped stages hold the same two tiles."""
    bn, bk = match.load_b.result.type.shape  # after the swap: W's (B.T's) tile, A's role
    bm = match.load_a.result.type.shape[1]
    source = match.load_b.result.type.dtype.short if match.cast is not None else ""
    operands = (operand_plan(kernel, options, "A", match.load_b, source)[0],
                operand_plan(kernel, options, "B", match.load_a)[0])
    if match.cast is not None:
        family = WGMMA_RS
    else:
        dtype = match.load_b.result.type.dtype
        family = next((f for f in FAMILIES if f.movement == "tma" and f is not WGMMA_RS
                       and dtype.short in f.dtypes), None)
        if family is None:
            return f"wgmma has no {dtype} product in shared memory"
    why = family.declined((bn, bm, bk), options, operands)
    return None if why is None else \
        f"{family.name} declines the swapped {bn}x{bm}x{bk} block: {why}"


def _name(kernel: Kernel, value: Value) -> str:
    return kernel.params[kernel.body.args.index(value)].name


def run(kernel: Kernel, options: Options) -> Kernel:
    match, why = _match(kernel, options)
    if match is None:
        return _noted(kernel, why)
    why = (WGMMA_RS.target_problem(options.arch, options.backend)
           or _epilogue_problem(kernel, match))
    if why is not None:
        return _noted(kernel, why)
    swapped = clone_kernel(kernel)
    match, _ = _match(swapped, options)
    _swap_loop(match)
    why = _swapped_block_problem(swapped, match, options)
    if why is not None:
        return _noted(kernel, why)
    _transpose_epilogue(swapped, match)
    rows, cols = match.init.attrs["shape"]  # C.T's tile, after the swap
    if match.cast is not None:
        formula = "C.T = W @ A.T"
        role = (f"the weights {_name(swapped, _tensor(match.load_b.operands[0]))} as wgmma's "
                "A, converted in registers")
    else:
        formula, role = "C.T = B.T @ A.T", f"the block's {cols} rows of C along wgmma's n"
    swapped.schedule = swapped.schedule.with_(swap=SwapPlan(
        True, f"{formula}: each block's {rows}x{cols} tile of C.T, {role}", formula))
    return swapped


def _tensor(view: Value) -> Value:
    """The parameter a 2-D view reads (itself, or what it transposes)."""
    source = defining_op(view)
    return source.operands[0] if source is not None and source.name == "tensor.transpose" \
        else view


def _noted(kernel: Kernel, why: str) -> Kernel:
    if not why:
        return kernel
    kernel = clone_kernel(kernel)
    kernel.schedule = kernel.schedule.with_(swap=SwapPlan(False, why))
    return kernel


def _swap_loop(match: _Match) -> None:
    """The loop's product as B.T[n, k] @ A.T[k, m] (W[n, k].to(dtype) @ A.T[k, m]) into a
    flipped accumulator; ``match`` then names the new loads and cast."""
    body = match.loop.regions[0]
    b = Builder(Block(), match.dot.loc)
    old = (match.load_a, match.load_b, match.cast)
    with b.located(match.load_b.loc):
        match.load_b = _flipped_load(b, match.load_b)
    operand = match.load_b.result
    if match.cast is not None:
        with b.located(match.cast.loc):
            operand = b.value("tile.cast", [operand], _flipped(match.cast.result.type),
                              match.cast.result.hint, dtype=match.cast.attrs["dtype"])
        match.cast = defining_op(operand)
    with b.located(match.load_a.loc):
        match.load_a = _flipped_load(b, match.load_a)
    match.dot.operands = [operand, match.load_a.result, match.dot.operands[2]]
    index = body.ops.index(match.dot)
    kept = [op for op in body.ops[:index] if op not in old]
    body.ops = kept + b.block.ops + body.ops[index:]
    # The accumulator's values: its zero init, the loop's carried value and result, the dot.
    match.init.attrs["shape"] = list(reversed(match.init.attrs["shape"]))
    for value in (match.init.result, match.dot.result, match.loop.results[0],
                  *[arg for arg in body.args if _tile2d(arg)]):
        value.type = _flipped(value.type)


def _flipped_load(b: Builder, load: Op) -> Op:
    """``load``'s tile transposed: read through the transposed view, offsets swapped."""
    view = _transposed_view(b, load.operands[0])
    tile = _flipped(load.result.type)
    value = b.value("tile.load", [view, load.operands[2], load.operands[1]], tile,
                    load.result.hint, shape=list(tile.shape))
    return defining_op(value)


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
