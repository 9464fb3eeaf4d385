"""Promoted accumulation of fp8 products on wgmma (``Options.fp8_accumulation = "promoted"``).

wgmma's e4m3 / e5m2 products sum into the tensor cores' accumulator with less than f32's
precision, so over a long K loop the error grows with K (4096^3 on an H100: 1.35e-3 relative
against float64, cuBLAS's ``use_fast_accum=True`` alike). cuBLAS's default, and CUTLASS's
promotion, keep that accumulator to a few products and add it into an f32 one: here each K
step's wgmma group (BK / 32 instructions a strip) starts from zero and, once complete, is
added into the main accumulator with f32 adds.

Requires: fragments (the consumers' K loop of ``wgmma.mma`` on fp8 shared views, the wgmma8
family's). Other kernels are left as they are: mma.sync's fp8 products and the 16-bit ones
are not promoted.

Produces: every loop whose body multiplies with ``wgmma.mma`` into a loop-carried
accumulator carries a second one, the partial; the product becomes
``wgmma.mma {fresh = true, in_flight = 0}`` on the partial (each strip's first instruction
with scale-d false: D = A B), and ``tile.add`` adds it into the main accumulator, which the
loop yields as before. The wait for the step's group (``in_flight = 0``) is what lets f32
adds read the partial: ptxas refuses to let other instructions touch accumulators in flight.
Twice the accumulator registers: a tile whose doubled accumulators would not fit a consumer
thread's registers is refused at the ``@``.

Before / after::

    %acc.3 = wgmma.mma %vA, %vB, %acc.2 {in_flight = 1}
    scf.yield %acc.3, ...

    %partial.1 = wgmma.mma %vA, %vB, %partial {fresh = true, in_flight = 0}
    %acc.3 = tile.add %acc.2, %partial.1
    scf.yield %acc.3, ..., %partial.1
"""
from __future__ import annotations

from tilec.errors import TileConfigError, located
from tilec.families.products import family_of
from tilec.families.wgmma import CONSUMER_OVERHEAD
from tilec.ir.core import Kernel, Op, Value, clone_kernel
from tilec.ir.types import FP8_DTYPES
from tilec.options import Options

NAME = "promote_accumulation"

PRODUCT = "wgmma.mma"


def run(kernel: Kernel, options: Options) -> Kernel:
    plan = kernel.schedule.tiling
    if options.fp8_accumulation != "promoted" or plan is None or plan.kind != "wgmma8":
        return kernel
    kernel = clone_kernel(kernel)
    for loop in [op for op in kernel.walk() if op.name == "scf.for"]:
        for product in [op for op in loop.regions[0].ops if op.name == PRODUCT]:
            if product.operands[0].type.dtype in FP8_DTYPES \
                    and product.operands[2] in loop.regions[0].args:
                _check_registers(kernel, product, options)
                _promote(loop, product)
    return kernel


def partial_registers(kernel: Kernel) -> int:
    """The f32 registers a consumer thread holds for the partial sums (0: not promoted)."""
    fresh = next((op for op in kernel.walk() if op.name == PRODUCT and op.attrs.get("fresh")),
                 None)
    return 0 if fresh is None else fresh.result.type.layout.regs_per_thread


def _check_registers(kernel: Kernel, product: Op, options: Options) -> None:
    accumulators = product.result.type.layout.regs_per_thread
    roles = kernel.schedule.roles
    family = family_of(kernel.schedule.tiling)
    budget = family.consumer_registers(roles.consumer_warpgroups, roles.blocks_per_sm)
    if 2 * accumulators + CONSUMER_OVERHEAD > budget:
        bm, bn, _ = kernel.schedule.tiling.block
        raise located(TileConfigError, f"promoted fp8 accumulation keeps a second accumulator "
                      f"set: at {bm}x{bn} a consumer thread would need 2 x {accumulators} f32 "
                      f"accumulators and about {CONSUMER_OVERHEAD} other registers, more "
                      f"than the {budget} it may hold", product.loc,
                      kernel.source_lines, "a tile with fewer columns a warpgroup (BN=128: "
                      "64 accumulators a thread), or fp8_accumulation='fast'")


def _promote(loop: Op, product: Op) -> None:
    body = loop.regions[0]
    main = product.operands[2]
    index = body.args.index(main) - 1  # the iter args follow the induction variable
    partial = body.add_arg(main.type, "partial")
    loop.operands.append(loop.operands[3 + index])  # any value: the first step starts afresh
    product.operands[2] = partial
    product.attrs.update(fresh=True, in_flight=0)
    summed = product.result
    add = Op("tile.add", [main, summed], [], {}, [], product.loc, origin=NAME)
    total = Value(main.type, main.hint, add)
    add.results.append(total)
    position = body.ops.index(product) + 1
    for op in body.ops[position:]:
        op.operands = [total if v is summed else v for v in op.operands]
    body.ops.insert(position, add)
    body.ops[-1].operands.append(summed)  # the partial's registers, carried to the next step
    loop.results.append(Value(main.type, "partial_unused", loop))
