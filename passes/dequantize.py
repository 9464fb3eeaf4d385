"""Dequantize: read 8-bit weights that the launch converted to 16 bits as the 16-bit tensor.

Why: a weight-only-quantized product (``samples/w8a16.py``: ``W: i8[N, K]`` read as
``W.T[...].to(f16)`` in the K loop) keeps W in 8 bits in shared memory and converts each
fragment in registers, which only the mma.sync family does, one ``ld.shared.u16`` per B
register. When many row blocks re-read W (a large M), converting W once at launch is
cheaper: the pack kernel (``backend/pack.py``) writes it to f16 scratch, and the product
then runs as an f16 one (wgmma on sm_90a). ``tilec/launch/packing.py`` decides when, and
names such a tensor in the launch spec (``TensorSpec.dtype``); an 8-bit weight stored
``[K, N]`` (n contiguous), which the registers cannot convert, is always converted so.

Requires: the frontend's tile IR; every tensor the spec converts is one that
:func:`converted_weights` lists, with the dtype it lists (else ValueError: the launch and
this pass disagree, a compiler bug, not a user error).

Produces: each such parameter typed as the converted dtype (the parameter, its views and
the tiles loaded from it), and its ``tile.cast`` ops gone, their uses reading the load.
Without converted tensors in the spec the kernel is returned as it is. The pass cannot be
disabled (``tilec.pipeline``): the launch hands the kernel the converted scratch.

Before (spec: W in f16)::

    %W_T = tensor.transpose %W : tensor<i8,[K,N]>
    %6 = tile.load %W_T, %k, %5 {shape = [64, 128]} : tile<i8,[64,128]>
    %7 = tile.cast %6 {dtype = f16} : tile<f16,[64,128]>
    %acc.3 = tile.dot %4, %7, %acc.2
After::

    %W_T = tensor.transpose %W : tensor<f16,[K,N]>
    %6 = tile.load %W_T, %k, %5 {shape = [64, 128]} : tile<f16,[64,128]>
    %acc.3 = tile.dot %4, %6, %acc.2
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

from tilec.ir.core import Kernel, Op, Value, clone_kernel, replace_uses
from tilec.ir.types import MMA_INPUT_DTYPES, DType, TensorType
from tilec.options import Options

NAME = "dequantize"
VIEW_OPS = ("tensor.transpose", "tensor.batch")


def _uses(kernel: Kernel) -> dict[Value, list[Op]]:
    uses: dict[Value, list[Op]] = {}
    for op in kernel.walk():
        for value in op.operands:
            uses.setdefault(value, []).append(op)
    return uses


def _reads(value: Value, uses: dict[Value, list[Op]]) -> Optional[list[Op]]:
    """The ``tile.load`` ops reading tensor ``value`` through any views, or None when
    something else uses it (a store, a load feeding the epilogue is still a load)."""
    loads = []
    for op in uses.get(value, []):
        if op.name in VIEW_OPS and op.operands[0] is value:
            inner = _reads(op.result, uses)
            if inner is None:
                return None
            loads += inner
        elif op.name == "tile.load" and op.operands[0] is value:
            loads.append(op)
        else:
            return None
    return loads


def _product_casts(load: Op, uses: dict[Value, list[Op]]) -> Optional[list[Op]]:
    """The casts of one load, when the load is used only by casts that only feed ``@``."""
    casts = uses.get(load.result, [])
    if not casts or any(op.name != "tile.cast" for op in casts):
        return None
    if any(use.name != "tile.dot" or use.operands[2] is cast.result
           for cast in casts for use in uses.get(cast.result, [])):
        return None
    return casts


def converted_weights(kernel: Kernel) -> dict[str, DType]:
    """The 8-bit tensor parameters the kernel reads only as operands of ``@`` converted to
    one 16-bit dtype (``W.T[...].to(f16)``), each with that dtype: what a launch may
    convert before the kernel runs, with the same products. Takes the frontend's tile IR."""
    uses = _uses(kernel)
    found = {}
    for param, value in zip(kernel.params, kernel.body.args):
        if not isinstance(param.type, TensorType) or param.type.dtype.bytes != 1:
            continue
        loads = _reads(value, uses)
        if not loads:
            continue
        casts = [_product_casts(load, uses) for load in loads]
        if any(c is None for c in casts):
            continue
        dtypes = {cast.result.type.dtype for group in casts for cast in group}
        if len(dtypes) == 1 and next(iter(dtypes)) in MMA_INPUT_DTYPES:
            found[param.name] = dtypes.pop()
    return found


def run(kernel: Kernel, options: Options) -> Kernel:
    converted = {name: spec.dtype for name, spec in options.spec.tensors
                 if spec.dtype is not None}
    if not converted:
        return kernel
    allowed = converted_weights(kernel)
    for name, dtype in converted.items():
        if allowed.get(name) is None or allowed[name].short != dtype:
            raise ValueError(f"the launch converts {name} to {dtype}, which the kernel does "
                             f"not read as converted weights ({allowed or 'none'})")
    kernel = clone_kernel(kernel)
    uses = _uses(kernel)
    params = []
    for param, value in zip(kernel.params, kernel.body.args):
        if param.name in converted:
            dtype = DType.parse(converted[param.name])
            param = replace(param, type=replace(param.type, dtype=dtype))
            for load in _retype(value, dtype, uses):
                for cast in uses[load.result]:
                    _bypass(kernel, cast)
        params.append(param)
    kernel.params = params
    return kernel


def _retype(value: Value, dtype: DType, uses: dict[Value, list[Op]]) -> list[Op]:
    """``value`` (a tensor or one of its views) and the tiles loaded from it, in ``dtype``;
    returns the loads."""
    value.type = replace(value.type, dtype=dtype)
    loads = []
    for op in uses.get(value, []):
        if op.name in VIEW_OPS:
            loads += _retype(op.result, dtype, uses)
        elif op.name == "tile.load":
            op.result.type = replace(op.result.type, dtype=dtype)
            loads.append(op)
    return loads


def _bypass(kernel: Kernel, cast: Op) -> None:
    """Remove a cast of a retyped load (now to the dtype it has): its uses read the load."""
    replace_uses(kernel.body, cast.result, cast.operands[0])
    for block in [kernel.body, *(region for op in kernel.walk() for region in op.regions)]:
        if cast in block.ops:
            block.ops.remove(cast)
