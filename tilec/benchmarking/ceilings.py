"""The reference figures measured before the sweep, which each case's roofline bound comes
from: the device-to-device copy bandwidth, and the mma.sync ceiling of a register-only loop
of ``mma.sync.m16n8k16`` in hand-written PTX."""
from __future__ import annotations

import math
import struct
from typing import Sequence

from tilec.benchmarking.array_libraries import Arrays
from tilec.benchmarking.results import References, first_line
from tilec.benchmarking.timing import Timer

# The copy-bandwidth buffer: 1 GiB each way, or 8x L2 if that is larger.
COPY_MIN_BYTES = 2**30
# The mma.sync ceiling: 8 warps a block, 4 blocks an SM, 8 independent accumulator chains a
# warp (mma.sync has ~30 cycles of latency; 8 chains x 8 warps keep each SM partition fed),
# unrolled twice; a loop of at least ~10 ms so launch and ramp-up costs vanish.
MMA_ENTRY = "tilec_mma_loop"
MMA_WARPS, MMA_BLOCKS_PER_SM = 8, 4
MMA_CHAINS, MMA_UNROLL = 8, 2
MMA_FLOP = 2 * 16 * 8 * 16  # one m16n8k16 of one warp
MMA_TRIPS = 4096
MMA_TARGET_MS = 10.0
MMA_SEED = 1.0 / 64  # operand values stay near 0.02-0.08: no overflow, no zeros
MMA_DTYPES = ("f16", "bf16")  # the inputs mma.sync m16n8k16 takes (f32 runs on FFMA)


def _f32_literal(value: float) -> str:
    return "0f" + struct.pack(">f", value).hex().upper()


def mma_loop_ptx(arch: str = "sm_80", dtype: str = "f16", chains: int = MMA_CHAINS,
                 unroll: int = MMA_UNROLL) -> str:
    """A kernel that runs nothing but ``mma.sync.aligned.m16n8k16.row.col.f32.<t>.<t>.f32``
    on registers: ``chains`` independent accumulators a warp, ``chains * unroll`` mmas a
    trip, then the accumulators' sum stored per thread so nothing is dead code. Operands
    come from the seed parameter and the thread index, and chain c starts at c, so no two
    chains compute the same thing. Parameters: out (f32 per thread), trips (>= 1), seed."""
    from tilec.options import ARCHS
    if dtype not in MMA_DTYPES:
        raise ValueError(f"mma_loop_ptx: dtype must be f16 or bf16, got {dtype!r}")
    accumulators = chains * 4
    # PTX ISA 9.7.14.5.14, mma.m16n8k16: A is 4 .b32 registers, B 2, C and D 4 .f32 each.
    mma = f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32"
    lines = [f".version {ARCHS[arch]['ptx_version']}", f".target {arch}", ".address_size 64",
             "", f"// {chains} accumulator chains x {unroll} per trip of {mma}",
             f".visible .entry {MMA_ENTRY}(",
             f"\t.param .u64 {MMA_ENTRY}_out,", f"\t.param .u32 {MMA_ENTRY}_trips,",
             f"\t.param .f32 {MMA_ENTRY}_seed", ")", "{",
             "\t.reg .pred %p;", "\t.reg .b32 %a<4>;", "\t.reg .b32 %b<2>;",
             f"\t.reg .f32 %acc<{accumulators}>;", "\t.reg .f32 %x<3>;", "\t.reg .b32 %r<6>;",
             "\t.reg .b64 %rd<4>;", "",
             f"\tld.param.u64 %rd0, [{MMA_ENTRY}_out];",
             f"\tld.param.u32 %r0, [{MMA_ENTRY}_trips];",
             f"\tld.param.f32 %x0, [{MMA_ENTRY}_seed];",
             "\tmov.u32 %r1, %tid.x;", "\tmov.u32 %r2, %ctaid.x;", "\tmov.u32 %r3, %ntid.x;",
             "\tmad.lo.s32 %r4, %r2, %r3, %r1;",
             "\tcvt.rn.f32.u32 %x1, %r1;",
             f"\tfma.rn.f32 %x1, %x1, {_f32_literal(2.0 ** -12)}, %x0;",  # seed + tid / 4096
             "\tadd.f32 %x2, %x1, %x0;",
             f"\tcvt.rn.{dtype}x2.f32 %a0, %x1, %x2;", f"\tcvt.rn.{dtype}x2.f32 %a1, %x2, %x1;",
             "\tmov.b32 %a2, %a1;", "\tmov.b32 %a3, %a0;",
             "\tmov.b32 %b0, %a1;", "\tmov.b32 %b1, %a0;"]
    lines += [f"\tmov.f32 %acc{i}, {_f32_literal(float(i // 4))};" for i in range(accumulators)]
    lines += ["\tmov.u32 %r5, 0;", "$L_trip:"]
    for _ in range(unroll):
        for chain in range(chains):
            acc = ", ".join(f"%acc{4 * chain + j}" for j in range(4))
            lines.append(f"\t{mma} {{{acc}}}, {{%a0, %a1, %a2, %a3}}, {{%b0, %b1}}, {{{acc}}};")
    lines += ["\tadd.u32 %r5, %r5, 1;", "\tsetp.lt.u32 %p, %r5, %r0;", "\t@%p bra $L_trip;"]
    lines += [f"\tadd.f32 %acc0, %acc0, %acc{i};" for i in range(1, accumulators)]
    lines += ["\tcvta.to.global.u64 %rd1, %rd0;", "\tmul.wide.u32 %rd2, %r4, 4;",
              "\tadd.s64 %rd3, %rd1, %rd2;", "\tst.global.f32 [%rd3], %acc0;", "\tret;", "}", ""]
    return "\n".join(lines)


class MmaLoop:
    """The mma.sync loop loaded on this GPU: ``launch(trips)`` runs it on every SM,
    ``flops(trips)`` counts what that launch computes, ``check()`` reads its sums back."""

    def __init__(self, dtype: str) -> None:
        from tilec.options import target_arch
        from tilec.runtime import DeviceBuffer, current_device, load_module
        device = current_device()
        self.function = load_module(mma_loop_ptx(target_arch(device.compute_capability), dtype),
                                    name=f"mma_loop_{dtype}").function(MMA_ENTRY)
        self.dtype = dtype
        self.blocks, self.threads = device.multiprocessor_count * MMA_BLOCKS_PER_SM, MMA_WARPS * 32
        self.out = DeviceBuffer(self.blocks * self.threads * 4)

    def launch(self, trips: int) -> None:
        from tilec.runtime import F32Arg, I32Arg, PtrArg, launch
        launch(self.function, (self.blocks, 1, 1), (self.threads, 1, 1), 0, None,
               [PtrArg(self.out.ptr), I32Arg(trips), F32Arg(MMA_SEED)])

    def flops(self, trips: int) -> int:
        return self.blocks * MMA_WARPS * trips * MMA_CHAINS * MMA_UNROLL * MMA_FLOP

    def check(self) -> None:
        import numpy as np
        sums = np.empty(self.blocks * self.threads, dtype=np.float32)
        self.out.copy_to_host(sums)
        if not (np.isfinite(sums).all() and np.any(sums != 0)):
            raise RuntimeError(f"the mma.sync loop ({self.dtype}) wrote non-finite or zero sums")

    def describe(self, trips: int) -> str:
        return (f"{self.blocks} blocks x {MMA_WARPS} warps, {MMA_CHAINS} chains, "
                f"{trips * MMA_UNROLL} mmas per chain")


def mma_ceiling(timer: Timer, dtype: str) -> tuple[float, str]:
    """The TFLOP/s of the mma.sync loop on the whole GPU, and how it was launched."""
    loop = MmaLoop(dtype)
    trips = MMA_TRIPS
    ms = timer(lambda: loop.launch(trips))
    if ms < MMA_TARGET_MS:  # too short to time well: lengthen the loop and time again
        trips = min(2**30, math.ceil(trips * MMA_TARGET_MS / max(ms, 1e-3)))
        ms = timer(lambda: loop.launch(trips))
    loop.check()
    return loop.flops(trips) / ms / 1e9, loop.describe(trips)


def copy_bandwidth(arrays: Arrays, timer: Timer, nbytes: int) -> float:
    """GB/s of a device-to-device copy of ``nbytes``, counting bytes read plus written."""
    count = nbytes // 4
    src, dst = arrays.random((count,), "f32"), arrays.empty((count,), "f32")
    arrays.poison(dst)
    ms = timer(lambda: arrays.copy(dst, src))
    arrays.synchronize()
    if not arrays.all_finite(dst):
        raise RuntimeError("the bandwidth copy left NaN in its destination")
    return 2 * count * 4 / ms / 1e6


def measure_references(arrays: Arrays, timer: Timer, dtypes: Sequence[str]) -> References:
    """The copy bandwidth and the mma.sync ceilings (f16, and bf16 when it is benchmarked);
    a figure that cannot be measured is left out and named in ``problems``."""
    nbytes = max(COPY_MIN_BYTES, 8 * arrays.l2_bytes)
    references = References(None, nbytes, {}, "")
    try:
        references.copy_gbps = copy_bandwidth(arrays, timer, nbytes)
    except Exception as err:  # noqa: BLE001 - the sweep still runs, without memory bounds
        references.problems.append(f"copy bandwidth: {first_line(err)}")
    arrays.release()
    for dtype in [d for d in MMA_DTYPES if d == "f16" or d in dtypes]:
        try:
            references.mma_tflops[dtype], references.mma_launch = mma_ceiling(timer, dtype)
        except Exception as err:  # noqa: BLE001 - the sweep still runs, without this bound
            references.problems.append(f"mma.sync ceiling {dtype}: {first_line(err)}")
    return references
