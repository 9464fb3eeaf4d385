"""``tilec bench``: tilec's matmul against cuBLAS and Triton, timed in one process and run.

Contenders: tilec (``samples/matmul.py``, its A and B retyped for each dtype; C is f32),
cuBLAS through ``torch.matmul`` (else ``cupy.matmul``; C in the inputs' dtype, f32 products
with TF32 off) and a Triton matmul (when Triton is installed; C is f32). For every case each
contender is checked before it is timed: its outputs poisoned with NaN, one launch per input
set, then the relative Frobenius error against a float64 product of the same inputs (first
and last set; every other set must hold no NaN), within 2e-3 for f16, 1e-2 for bf16 and 1e-4
for f32. A contender that fails is reported as FAIL and never timed or compared. Times are
medians of device-event timings (``triton.testing.do_bench``, else CUDA events through torch
or cupy), warm-up excluded, inputs rotated among enough sets to exceed 3x the L2 cache.

Printed first, measured in the same run: the device-to-device copy bandwidth and the ceiling
of the mma.sync path (a register-only loop of ``mma.sync.m16n8k16``); each case is then set
against its roofline bound (the larger of the mma time and the memory time of A, B and C)::

    tilec bench                                  # the default sweep, f16 bf16 f32
    tilec bench --sizes 4096 16x8192x8192 --dtypes f16 --json out.json --plot out.png
    tilec bench --autotune --quick

Exit status: 0 when every contender passed its check, 1 when one failed or raised, 2 for a
bad command line or a machine that cannot run it (no GPU, neither torch nor cupy).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence, TextIO

DESCRIPTION = ("Time tilec's matmul against cuBLAS and Triton on this GPU: checked outputs, "
               "median device-event times over rotated inputs, and the copy bandwidth and "
               "mma.sync ceiling measured in the same run.")

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "matmul.py"
DTYPES = ("f16", "bf16", "f32")
TILEC_DTYPES = ("f16", "bf16")  # tilec has no f32 path yet: its column reads n/a
ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}
# The relative Frobenius error each dtype may reach against float64: f16 rounds at 2^-11,
# bf16 at 2^-8; f32 through cuBLAS with TF32 off stays near 1e-6 (TF32 would give ~3e-4).
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-4}
# (M, N, K): square, ragged (no tile divides them), skinny (memory-bound).
DEFAULT_SIZES = ((1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3,
                 (4095, 4097, 4093), (1000, 1003, 77),
                 (16, 8192, 8192), (8192, 8192, 256))
SKINNY_RATIO = 16  # a shape is skinny when its longest side is 16x its shortest or more

# Rotation: enough input sets to cover 3x the L2 cache, at least two, at most MAX_SETS.
L2_FACTOR = 3
FALLBACK_L2_BYTES = 64 * 2**20  # when the array library cannot say
MIN_SETS, MAX_SETS = 2, 512
# do_bench's warm-up and repetition budgets, in milliseconds: (default, --quick).
WARMUP_MS = (50, 10)
REP_MS = (300, 50)
EVENT_ESTIMATE_CALLS = 5  # the event timer sizes its loops from this many calls
EVENT_MIN_REPS, EVENT_MAX_REPS = 10, 10000

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

TRITON_CONFIG = {"f16": (128, 256, 64, 3, 8), "bf16": (128, 256, 64, 3, 8),
                 "f32": (128, 128, 32, 3, 8)}  # BM, BN, BK, stages, warps
MATPLOTLIB_MISSING = ("--plot needs matplotlib: python -m pip install matplotlib "
                      "(or pip install 'tilec[viz]'); no plot written")

Size = tuple[int, int, int]


# -------------------------------------------------------------------------------- cases

@dataclass(frozen=True)
class Case:
    """One product C[M, N] = A[M, K] @ B[K, N] in one dtype."""

    M: int  # noqa: N815  (the problem's own names)
    N: int  # noqa: N815
    K: int  # noqa: N815
    dtype: str

    @property
    def shape(self) -> str:
        if self.M == self.N == self.K:
            return str(self.M)
        return f"{self.M}x{self.N}x{self.K}"

    @property
    def kind(self) -> str:
        sides = (self.M, self.N, self.K)
        if min(sides) * SKINNY_RATIO <= max(sides):
            return "skinny"
        if self.M == self.N == self.K:
            return "square"
        return "ragged" if any(side % 16 for side in sides) else "rectangular"

    @property
    def flops(self) -> float:
        return 2.0 * self.M * self.N * self.K

    def nbytes(self, out_dtype: str) -> int:
        """The fewest bytes a product moves: A and B read once, C written once."""
        return ((self.M * self.K + self.K * self.N) * ITEMSIZE[self.dtype]
                + self.M * self.N * ITEMSIZE[out_dtype])


def parse_sizes(text: str) -> list[Size]:
    """``4096``, ``16x8192x8192`` (M x N x K) or a comma-separated list of them."""
    sizes: list[Size] = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            values = [int(part) for part in parts]
        except ValueError:
            values = []
        if len(values) not in (1, 3) or min(values, default=0) < 1:
            raise argparse.ArgumentTypeError(f"expected a size N or MxNxK, got {item!r}")
        sizes.append((values[0],) * 3 if len(values) == 1 else (values[0], values[1], values[2]))
    return sizes


def sweep(sizes: Optional[Sequence[Sequence[Size]]], dtypes: Optional[Sequence[str]]) \
        -> list[Case]:
    """The cases in order: each size in each dtype (defaults: the whole default sweep)."""
    flat = [size for group in sizes for size in group] if sizes else list(DEFAULT_SIZES)
    return [Case(*size, dtype) for size in flat for dtype in (dtypes or DTYPES)]


def rotation_sets(case: Case, l2_bytes: int) -> int:
    """Input sets to rotate among so that one pass over them covers 3x the L2 cache."""
    per_set = case.nbytes("f32")  # the largest output any contender writes
    return max(MIN_SETS, min(MAX_SETS, -(-L2_FACTOR * l2_bytes // per_set)))


# ------------------------------------------------------------------------------ results

@dataclass
class Measurement:
    """One contender on one case. ``status``: ok, FAIL (its check failed), n/a, error."""

    status: str
    ms: Optional[float] = None
    error: Optional[float] = None  # relative Frobenius error against float64
    tolerance: Optional[float] = None
    config: str = ""
    note: str = ""


@dataclass
class CaseResult:
    case: Case
    sets: int
    measurements: dict[str, Measurement]  # by contender name, in the contenders' order
    memory_bound_ms: Optional[float] = None  # tilec's bytes (C in f32) over the copy rate
    compute_bound_ms: Optional[float] = None  # the flops over the mma.sync ceiling
    seconds: float = 0.0

    def tflops(self, name: str) -> Optional[float]:
        measured = self.measurements.get(name)
        if measured is None or measured.status != "ok" or not measured.ms:
            return None
        return self.case.flops / measured.ms / 1e9

    def ratio(self, name: str, other: str) -> Optional[float]:
        mine, theirs = self.tflops(name), self.tflops(other)
        return mine / theirs if mine is not None and theirs else None

    def bound(self) -> Optional[tuple[float, str]]:
        """The roofline floor (ms, "mma" or "mem"): the larger of the two bounds."""
        if self.memory_bound_ms is None or self.compute_bound_ms is None:
            return None
        if self.memory_bound_ms > self.compute_bound_ms:
            return self.memory_bound_ms, "mem"
        return self.compute_bound_ms, "mma"

    def fraction_of_bound(self, name: str = "tilec") -> Optional[float]:
        measured, bound = self.measurements.get(name), self.bound()
        if measured is None or measured.status != "ok" or bound is None or not measured.ms:
            return None
        return bound[0] / measured.ms


@dataclass
class References:
    copy_gbps: Optional[float]  # device-to-device copy, bytes read + written: GB/s
    copy_bytes: int  # the size of the buffer copied
    mma_tflops: dict[str, float]  # the mma.sync ceiling by operand dtype
    mma_launch: str
    problems: list[str] = field(default_factory=list)  # figures that could not be measured


@dataclass
class Report:
    device: dict[str, Any]
    software: dict[str, Any]
    references: Optional[References]
    contenders: list[str]
    rows: list[CaseResult] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        if self.references is not None and self.references.problems:
            return False
        return all(m.status in ("ok", "n/a") for row in self.rows
                   for m in row.measurements.values())


# ---------------------------------------------------------------------- array libraries

class Arrays(Protocol):
    """What the benchmark needs from torch or cupy (tests give it a numpy fake)."""

    name: str
    version: str
    l2_bytes: int
    tf32: bool  # whether cuBLAS may round f32 products' inputs to TF32

    def unsupported(self, dtype: str) -> Optional[str]: ...
    def random(self, shape: tuple[int, ...], dtype: str) -> Any: ...
    def empty(self, shape: tuple[int, ...], dtype: str) -> Any: ...
    def poison(self, array: Any) -> None: ...
    def reference(self, a: Any, b: Any) -> Any: ...
    def rel_error(self, out: Any, ref: Any) -> float: ...
    def all_finite(self, array: Any) -> bool: ...
    def matmul(self, a: Any, b: Any, out: Any) -> None: ...
    def copy(self, dst: Any, src: Any) -> None: ...
    def synchronize(self) -> None: ...
    def event(self) -> Any: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...
    def release(self) -> None: ...


class TorchArrays:
    """Arrays and cuBLAS through PyTorch, on tilec's device."""

    name = "torch"

    def __init__(self, ordinal: int) -> None:
        import torch
        self.torch = torch
        self.device = torch.device("cuda", ordinal)
        torch.cuda.set_device(self.device)
        # cuBLAS f32 products in full f32, so the f32 rows show the target, not TF32's speed.
        torch.backends.cuda.matmul.allow_tf32 = False
        self.tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        self.version = torch.__version__
        self.l2_bytes = int(getattr(torch.cuda.get_device_properties(self.device),
                                    "L2_cache_size", 0) or FALLBACK_L2_BYTES)
        self.dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}

    def unsupported(self, dtype: str) -> Optional[str]:
        return None

    def random(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.randn(shape, dtype=self.dtypes[dtype], device=self.device)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self.dtypes[dtype], device=self.device)

    def poison(self, array: Any) -> None:
        array.fill_(float("nan"))

    def reference(self, a: Any, b: Any) -> Any:
        return a.double() @ b.double()

    def rel_error(self, out: Any, ref: Any) -> float:
        norm = self.torch.linalg.vector_norm
        diff = float(norm(out.double() - ref))  # NaN anywhere in out gives NaN
        scale = float(norm(ref))
        return diff / scale if scale > 0 else diff

    def all_finite(self, array: Any) -> bool:
        return bool(self.torch.isfinite(array).all())

    def matmul(self, a: Any, b: Any, out: Any) -> None:
        self.torch.matmul(a, b, out=out)

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(start.elapsed_time(end))

    def release(self) -> None:
        self.torch.cuda.empty_cache()


class CupyArrays:
    """Arrays and cuBLAS through CuPy, on tilec's device (no bfloat16 there)."""

    name = "cupy"

    def __init__(self, ordinal: int) -> None:
        import cupy
        self.cupy = cupy
        cupy.cuda.Device(ordinal).use()
        # CuPy's cuBLAS calls use TF32 only when CUPY_TF32=1 is set (the f32 checks catch it).
        self.tf32 = os.environ.get("CUPY_TF32", "0") != "0"
        self.version = cupy.__version__
        properties = cupy.cuda.runtime.getDeviceProperties(ordinal)
        self.l2_bytes = int(properties.get("l2CacheSize", 0) or FALLBACK_L2_BYTES)
        self.dtypes = {"f16": cupy.float16, "f32": cupy.float32}

    def unsupported(self, dtype: str) -> Optional[str]:
        return None if dtype in self.dtypes else "cupy has no bfloat16 arrays"

    def random(self, shape: tuple[int, ...], dtype: str) -> Any:
        values = self.cupy.random.standard_normal(shape, dtype=self.cupy.float32)
        return values.astype(self.dtypes[dtype])

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.cupy.empty(shape, dtype=self.dtypes[dtype])

    def poison(self, array: Any) -> None:
        array.fill(float("nan"))

    def reference(self, a: Any, b: Any) -> Any:
        return a.astype(self.cupy.float64) @ b.astype(self.cupy.float64)

    def rel_error(self, out: Any, ref: Any) -> float:
        norm = self.cupy.linalg.norm
        diff = float(norm((out.astype(self.cupy.float64) - ref).ravel()))
        scale = float(norm(ref.ravel()))
        return diff / scale if scale > 0 else diff

    def all_finite(self, array: Any) -> bool:
        return bool(self.cupy.isfinite(array).all())

    def matmul(self, a: Any, b: Any, out: Any) -> None:
        self.cupy.matmul(a, b, out=out)

    def copy(self, dst: Any, src: Any) -> None:
        dst.data.copy_from_device_async(src.data, src.nbytes)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def event(self) -> Any:
        return self.cupy.cuda.Event()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(start, end))

    def release(self) -> None:
        self.cupy.get_default_memory_pool().free_all_blocks()


def open_arrays(ordinal: int) -> Arrays:
    """torch if it imports, else cupy; raises ImportError saying how to get one."""
    try:
        return TorchArrays(ordinal)
    except ImportError:
        pass
    try:
        return CupyArrays(ordinal)
    except ImportError:
        raise ImportError("tilec bench needs torch or cupy for the inputs and cuBLAS: "
                          "python -m pip install torch") from None


# ------------------------------------------------------------------------------- timing

Timer = Callable[[Callable[[], None]], float]  # the median ms of one call of its argument


def do_bench_timer(warmup_ms: float, rep_ms: float) -> Timer:
    from triton.testing import do_bench

    def timer(step: Callable[[], None]) -> float:
        return float(do_bench(step, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    return timer


def event_timer(arrays: Arrays, warmup_ms: float, rep_ms: float) -> Timer:
    """do_bench's method without Triton: a first call, a few to size the loops, warm-up
    calls for ``warmup_ms``, then each of ``rep_ms`` worth of calls between two events."""
    def timer(step: Callable[[], None]) -> float:
        step()  # module loads, allocations, handle creation: never timed
        start, end = arrays.event(), arrays.event()
        start.record()
        for _ in range(EVENT_ESTIMATE_CALLS):
            step()
        end.record()
        estimate = max(arrays.elapsed_ms(start, end) / EVENT_ESTIMATE_CALLS, 1e-4)
        for _ in range(max(1, round(warmup_ms / estimate))):
            step()
        reps = min(EVENT_MAX_REPS, max(EVENT_MIN_REPS, round(rep_ms / estimate)))
        pairs = [(arrays.event(), arrays.event()) for _ in range(reps)]
        for begin, finish in pairs:
            begin.record()
            step()
            finish.record()
        return statistics.median(arrays.elapsed_ms(begin, finish) for begin, finish in pairs)
    return timer


def make_timer(arrays: Arrays, quick: bool) -> tuple[Timer, str]:
    """do_bench when Triton and torch are there, else the event timer; and its name."""
    warmup, rep = WARMUP_MS[quick], REP_MS[quick]
    if arrays.name == "torch":
        try:
            return do_bench_timer(warmup, rep), "triton.testing.do_bench (median)"
        except ImportError:
            pass
    return event_timer(arrays, warmup, rep), f"{arrays.name} CUDA events (median)"


def rotating(run: Callable[[int], None], count: int) -> Callable[[], None]:
    """A step that runs on input set 0, 1, ..., count - 1, 0, ... on successive calls."""
    state = {"next": 0}

    def step() -> None:
        run(state["next"])
        state["next"] = (state["next"] + 1) % count
    return step


# ---------------------------------------------------------------------- reference figures

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
    if dtype not in TILEC_DTYPES:
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


def mma_ceiling(timer: Timer, dtype: str) -> tuple[float, str]:
    """The TFLOP/s of the mma.sync loop on the whole GPU, and how it was launched."""
    import numpy as np

    from tilec.options import target_arch
    from tilec.runtime import F32, I32, DeviceBuffer, Ptr, current_device, load_module
    device = current_device()
    function = load_module(mma_loop_ptx(target_arch(device.compute_capability), dtype),
                           name=f"mma_loop_{dtype}").function(MMA_ENTRY)
    blocks, threads = device.multiprocessor_count * MMA_BLOCKS_PER_SM, MMA_WARPS * 32
    out = DeviceBuffer(blocks * threads * 4)
    trips = MMA_TRIPS

    def launch() -> None:
        function.launch((blocks, 1, 1), (threads, 1, 1), 0,
                        [Ptr(out.ptr), I32(trips), F32(MMA_SEED)])
    ms = timer(launch)
    if ms < MMA_TARGET_MS:  # too short to time well: lengthen the loop and time again
        trips = min(2**30, math.ceil(trips * MMA_TARGET_MS / max(ms, 1e-3)))
        ms = timer(launch)
    sums = np.empty(blocks * threads, dtype=np.float32)
    out.copy_to_host(sums)
    if not (np.isfinite(sums).all() and np.any(sums != 0)):
        raise RuntimeError(f"the mma.sync loop ({dtype}) wrote non-finite or zero sums")
    flops = blocks * MMA_WARPS * trips * MMA_CHAINS * MMA_UNROLL * MMA_FLOP
    return (flops / ms / 1e9, f"{blocks} blocks x {MMA_WARPS} warps, {MMA_CHAINS} chains, "
            f"{trips * MMA_UNROLL} mmas per chain")


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
        references.problems.append(f"copy bandwidth: {_first_line(err)}")
    arrays.release()
    for dtype in [d for d in TILEC_DTYPES if d == "f16" or d in dtypes]:
        try:
            references.mma_tflops[dtype], references.mma_launch = mma_ceiling(timer, dtype)
        except Exception as err:  # noqa: BLE001 - the sweep still runs, without this bound
            references.problems.append(f"mma.sync ceiling {dtype}: {_first_line(err)}")
    return references


# ---------------------------------------------------------------------------- contenders

Run = Callable[[int], None]  # runs the product on input set i


class Contender:
    """A matmul implementation: which cases it takes, what C it writes, how it runs."""

    name = ""

    def unsupported(self, case: Case) -> Optional[str]:
        return None

    def out_dtype(self, case: Case) -> str:
        return "f32"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        """A function running set i (inputs[i] into outputs[i]), and the config it uses."""
        raise NotImplementedError


def autotune_space(case: Case, fixed: dict[str, Any]) -> list[dict[str, Any]]:
    """A small space for ``tilec bench --autotune``, without the knobs fixed on the command
    line (the autotuner takes those beside the space). Short M gets short block tiles."""
    from tilec.autotune import search_space
    if case.M <= 64:
        fitting = max(16, 1 << (case.M - 1).bit_length())
        space = search_space(BM=tuple(bm for bm in (16, 32, 64) if bm <= fitting),
                             BN=(64, 128, 256), BK=(32, 64), stages=(3, 4))
    else:
        space = search_space(BM=(64, 128), BN=(128, 256), BK=(32, 64), stages=(3, 4))
    trimmed: list[dict[str, Any]] = []
    for config in space:
        config = {knob: value for knob, value in config.items() if knob not in fixed}
        if config not in trimmed:
            trimmed.append(config)
    return trimmed


def describe_compiled(compiled: Any) -> str:
    """``128x128x32 warps 2x4 stages 3``: the tiling the compiler chose."""
    plan = compiled.kernel.meta.get("tiling")
    stages = compiled.kernel.meta.get("stages", compiled.options.stages)
    text = f"stages {stages}"
    if plan is not None:
        text = (f"{'x'.join(map(str, plan.block))} warps {plan.warps[0]}x{plan.warps[1]} "
                + text)
    if compiled.options.swizzle == "off":
        text += " swizzle off"
    return text


def sample_kernel(dtype: str) -> Any:
    """samples/matmul.py's tile function with A and B read as ``dtype`` (C stays f32)."""
    from tilec.kernel import load_file
    text = SAMPLE.read_text(encoding="utf-8")
    retyped = text.replace("A: f16[", f"A: {dtype}[").replace("B: f16[", f"B: {dtype}[")
    if f"A: {dtype}[" not in retyped or f"B: {dtype}[" not in retyped:
        raise RuntimeError(f"{SAMPLE} no longer declares A: f16[...] and B: f16[...]")
    return load_file(SAMPLE, text=retyped)["matmul"]


class TilecContender(Contender):
    name = "tilec"

    def __init__(self, consts: dict[str, Any], options: dict[str, Any], autotune: bool = False,
                 progress: bool = True) -> None:
        self.consts, self.options = dict(consts), dict(options)
        self.autotune, self.progress = autotune, progress
        self._kernels: dict[str, Any] = {}

    def kernel(self, dtype: str) -> Any:
        if dtype not in self._kernels:
            self._kernels[dtype] = sample_kernel(dtype)
        return self._kernels[dtype]

    def unsupported(self, case: Case) -> Optional[str]:
        return None if case.dtype in TILEC_DTYPES else f"tilec has no {case.dtype} path yet"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        kernel = self.kernel(case.dtype)
        kwargs = {**self.consts, **self.options}
        if self.autotune:
            from tilec.autotune import autotune
            best = autotune(kernel, (*inputs[0], outputs[0]), autotune_space(case, kwargs),
                            kwargs=kwargs, progress=self.progress)
            kwargs.update(best)
        launches = [kernel.prepare(a, b, c, **kwargs) for (a, b), c in zip(inputs, outputs)]
        return (lambda i: launches[i]()), describe_compiled(launches[0].compiled)


class CublasContender(Contender):
    name = "cuBLAS"

    def __init__(self, arrays: Arrays) -> None:
        self.arrays = arrays

    def out_dtype(self, case: Case) -> str:
        return case.dtype

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        def run(i: int) -> None:
            self.arrays.matmul(*inputs[i], outputs[i])
        tf32 = ", TF32 off" if case.dtype == "f32" else ""
        return run, f"{self.arrays.name}.matmul, C {case.dtype}{tf32}"


class TritonContender(Contender):
    name = "Triton"

    def __init__(self, arrays: Arrays) -> None:
        self.arrays = arrays

    def unsupported(self, case: Case) -> Optional[str]:
        return None if self.arrays.name == "torch" else "the Triton kernel runs on torch tensors"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        config = TRITON_CONFIG[case.dtype]
        ieee = case.dtype == "f32"

        def run(i: int) -> None:
            triton_matmul(*inputs[i], outputs[i], config, ieee=ieee)
        bm, bn, bk, stages, warps = config
        precision = ", ieee f32 dot" if ieee else ""
        return run, f"{bm}x{bn}x{bk} warps {warps} stages {stages}{precision}"


# triton.language once _triton_kernel() has imported it: the kernel's body reads this global
# when Triton compiles it, and importing Triton is left until a Triton kernel is wanted.
tl: Any = None
_TRITON_KERNEL: Any = None


def _triton_matmul_kernel(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,  # noqa: N803
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          GROUP: tl.constexpr, IEEE: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per_group = GROUP * grid_n
    first_m = (pid // per_group) * GROUP
    rows = min(grid_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        x = tl.load(a + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if IEEE:  # a constexpr: Triton compiles one branch
            acc += tl.dot(x, y, input_precision="ieee")
        else:
            acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _triton_kernel() -> Any:
    global tl, _TRITON_KERNEL
    if _TRITON_KERNEL is None:
        import triton
        import triton.language
        tl = triton.language
        _TRITON_KERNEL = triton.jit(_triton_matmul_kernel)
    return _TRITON_KERNEL


def triton_matmul(a: Any, b: Any, c: Any, config: Sequence[int] = TRITON_CONFIG["f16"],
                  ieee: bool = False) -> None:
    """C = A @ B with Triton (torch tensors); ``config`` is (BM, BN, BK, stages, warps);
    ``ieee`` makes f32 dots exact f32 instead of TF32."""
    kernel = _triton_kernel()
    bm, bn, bk, stages, warps = config
    M, K = a.shape  # noqa: N806
    N = b.shape[1]  # noqa: N806
    grid = (-(-M // bm) * -(-N // bn),)
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, GROUP=8, IEEE=ieee,
                 num_stages=stages, num_warps=warps)


# --------------------------------------------------------------------------- the sweep

def _worst(errors: Sequence[float]) -> float:
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def measure(contender: Contender, case: Case, arrays: Arrays,
            inputs: Sequence[tuple[Any, Any]], references: dict[int, Any],
            timer: Timer) -> Measurement:
    """Check one contender on every input set, then time it rotating among them."""
    reason = contender.unsupported(case)
    if reason is not None:
        return Measurement("n/a", note=reason)
    tolerance, config = TOLERANCE[case.dtype], ""
    try:
        outputs = [arrays.empty((case.M, case.N), contender.out_dtype(case)) for _ in inputs]
        run, config = contender.prepare(case, inputs, outputs)
        for out in outputs:
            arrays.poison(out)
        for i in range(len(inputs)):
            run(i)
        arrays.synchronize()
        error = _worst([arrays.rel_error(outputs[i], ref) for i, ref in references.items()])
        unwritten = [i for i in range(len(outputs))
                     if i not in references and not arrays.all_finite(outputs[i])]
        if not error <= tolerance or unwritten:  # NaN fails
            note = f"NaN or inf in the outputs of input sets {unwritten}" if unwritten else ""
            return Measurement("FAIL", error=error, tolerance=tolerance, config=config,
                               note=note)
        ms = timer(rotating(run, len(inputs)))
    except Exception as err:  # noqa: BLE001 - one contender's failure must not end the sweep
        return Measurement("error", config=config, note=_first_line(err))
    return Measurement("ok", ms=ms, error=error, tolerance=tolerance, config=config)


def run_case(case: Case, arrays: Arrays, contenders: Sequence[Contender], timer: Timer,
             references: Optional[References]) -> CaseResult:
    start = time.perf_counter()
    reason = arrays.unsupported(case.dtype)
    if reason is not None:
        return CaseResult(case, 0, {c.name: Measurement("n/a", note=reason) for c in contenders})
    sets = rotation_sets(case, arrays.l2_bytes)
    inputs = [(arrays.random((case.M, case.K), case.dtype),
               arrays.random((case.K, case.N), case.dtype)) for _ in range(sets)]
    # Checked in full against float64: the first and the last set (the others for NaN).
    checked = {i: arrays.reference(*inputs[i]) for i in sorted({0, sets - 1})}
    measured = {c.name: measure(c, case, arrays, inputs, checked, timer) for c in contenders}
    result = CaseResult(case, sets, measured)
    if references is not None and references.copy_gbps:
        result.memory_bound_ms = case.nbytes("f32") / (references.copy_gbps * 1e6)
        ceiling = references.mma_tflops.get(case.dtype)
        if ceiling:
            result.compute_bound_ms = case.flops / (ceiling * 1e9)
    del inputs, checked
    arrays.release()
    result.seconds = time.perf_counter() - start
    return result


def progress_line(index: int, total: int, result: CaseResult) -> str:
    parts = []
    for name, measured in result.measurements.items():
        tflops = result.tflops(name)
        parts.append(f"{name} {tflops:.1f}" if tflops is not None else f"{name} {measured.status}")
    return (f"[{index}/{total}] {result.case.shape} {result.case.dtype}: {', '.join(parts)} "
            f"TFLOP/s ({result.seconds:.1f} s)")


def run_sweep(cases: Sequence[Case], arrays: Arrays, contenders: Sequence[Contender],
              timer: Timer, references: Optional[References],
              progress: Optional[TextIO] = None) -> list[CaseResult]:
    rows = []
    for index, case in enumerate(cases, 1):
        try:
            rows.append(run_case(case, arrays, contenders, timer, references))
        except Exception as err:  # noqa: BLE001 - e.g. out of memory for the inputs: go on
            failed = Measurement("error", note=f"the case failed: {_first_line(err)}")
            rows.append(CaseResult(case, 0, {c.name: failed for c in contenders}))
        if progress is not None:
            print(progress_line(index, len(cases), rows[-1]), file=progress, flush=True)
    return rows


# ------------------------------------------------------------------------------ output

def _cell(row: CaseResult, name: str) -> str:
    tflops = row.tflops(name)
    return f"{tflops:.1f}" if tflops is not None else row.measurements[name].status


def _number(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_references(report: Report) -> str:
    device = report.device
    lines = [f"tilec bench on {device['name']} ({device['arch']}, {device['sms']} SMs, "
             f"{device['l2_bytes'] / 2**20:g} MiB L2); "
             + ", ".join(f"{k} {v}" for k, v in report.software.items())]
    refs = report.references
    if refs is not None:
        if refs.copy_gbps:
            lines.append(f"  device copy bandwidth  {refs.copy_gbps:8.0f} GB/s     ("
                         f"{refs.copy_bytes / 2**30:g} GiB copied device to device, bytes read "
                         "+ written over time)")
        for dtype, tflops in refs.mma_tflops.items():
            lines.append(f"  mma.sync ceiling {dtype:<5} {tflops:8.1f} TFLOP/s  "
                         f"(m16n8k16 loop on registers: {refs.mma_launch})")
        lines += [f"  not measured: {problem}" for problem in refs.problems]
    return "\n".join(lines)


def format_table(report: Report) -> str:
    """The results, one line per case, then the skinny cases' memory bounds and notes."""
    names = report.contenders
    others = [name for name in names if name != "tilec"]
    head = (f"{'shape':<14} {'dtype':<5} " + " ".join(f"{n:>8}" for n in names)
            + "".join(f" {'tilec/' + n:>12}" for n in others)
            + f" {'tilec/bound':>12} {'tilec err':>9}  tilec config")
    lines = [f"{'':<20} " + " ".join(f"{'TFLOP/s':>8}" for _ in names), head]
    for row in report.rows:
        ratios = "".join(f" {_number(row.ratio('tilec', n), '.2f'):>12}" for n in others)
        fraction, bound = row.fraction_of_bound(), row.bound()
        vs_bound = f"{fraction:.2f} {bound[1]}" if fraction is not None and bound else "-"
        tilec = row.measurements.get("tilec")
        error = tilec.error if tilec is not None else None
        lines.append(f"{row.case.shape:<14} {row.case.dtype:<5} "
                     + " ".join(f"{_cell(row, n):>8}" for n in names) + ratios
                     + f" {vs_bound:>12} {_number(error, '.2e'):>9}  "
                     f"{tilec.config if tilec else ''}".rstrip())
    refs = report.references
    skinny = [row for row in report.rows
              if row.case.kind == "skinny" and row.memory_bound_ms is not None]
    if skinny and refs is not None and refs.copy_gbps:
        lines += ["", "memory bounds of the skinny shapes (A, B and an f32 C over the copy "
                  "bandwidth):"]
        for row in skinny:
            bound_ms = row.memory_bound_ms or 0.0
            line = (f"  {row.case.shape} {row.case.dtype}: {row.case.nbytes('f32') / 1e6:.1f} "
                    f"MB at {refs.copy_gbps:.0f} GB/s = {bound_ms * 1e3:.1f} us")
            tilec = row.measurements.get("tilec")
            if tilec is not None and tilec.status == "ok" and tilec.ms:
                line += f"; tilec {tilec.ms * 1e3:.1f} us, {bound_ms / tilec.ms:.2f} of the bound"
            lines.append(line)
    notes = format_notes(report)
    return "\n".join(lines + ([""] + notes if notes else []))


def format_notes(report: Report) -> list[str]:
    """A line for each failed check and each error; one per distinct reason for n/a."""
    notes: list[str] = []
    unavailable: dict[tuple[str, str], list[str]] = {}
    for row in report.rows:
        for name, measured in row.measurements.items():
            where = f"{row.case.shape} {row.case.dtype} {name}"
            if measured.status == "FAIL":
                detail = f"; {measured.note}" if measured.note else ""
                notes.append(f"FAIL {where}: error {_number(measured.error, '.2e')} against "
                             f"a tolerance of {measured.tolerance:g}{detail} (not timed)")
            elif measured.status == "error":
                notes.append(f"error {where}: {measured.note}")
            elif measured.status == "n/a":
                unavailable.setdefault((name, measured.note), []).append(row.case.dtype)
    for (name, note), dtypes in unavailable.items():
        notes.append(f"n/a {name} ({', '.join(dict.fromkeys(dtypes))}): {note}")
    return notes


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def report_json(report: Report) -> dict[str, Any]:
    rows = []
    for row in report.rows:
        case = row.case
        bound = row.bound()
        rows.append({
            "M": case.M, "N": case.N, "K": case.K, "dtype": case.dtype, "kind": case.kind,
            "shape": case.shape, "flops": case.flops, "input_sets": row.sets,
            "tilec_bytes": case.nbytes("f32"), "memory_bound_ms": row.memory_bound_ms,
            "compute_bound_ms": row.compute_bound_ms, "bound": bound[1] if bound else None,
            "tilec_fraction_of_bound": row.fraction_of_bound(),
            "tilec_vs_cublas": row.ratio("tilec", "cuBLAS"),
            "tilec_vs_triton": row.ratio("tilec", "Triton"), "seconds": row.seconds,
            "contenders": {name: {"status": m.status, "ms": m.ms, "tflops": row.tflops(name),
                                  "error": m.error, "tolerance": m.tolerance,
                                  "config": m.config, "note": m.note}
                           for name, m in row.measurements.items()}})
    refs = report.references
    references = None if refs is None else {
        "copy_bandwidth_gbps": refs.copy_gbps, "copy_bytes": refs.copy_bytes,
        "mma_sync_tflops": refs.mma_tflops, "mma_launch": refs.mma_launch,
        "problems": refs.problems}
    return _clean({"device": report.device, "software": report.software,
                   "settings": report.settings, "references": references,
                   "contenders": report.contenders, "rows": rows})


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError(MATPLOTLIB_MISSING) from err


CONTENDER_COLORS = {"tilec": "tab:blue", "cuBLAS": "tab:green", "Triton": "tab:orange"}
DTYPE_STYLES = {"f16": "-", "bf16": "--", "f32": ":"}


def write_plot(report: Report, path: Path) -> None:
    """TFLOP/s against size, a line per contender and dtype: square sizes on a log axis,
    the other shapes side by side; the mma.sync ceilings as grey lines."""
    require_matplotlib()
    from matplotlib.figure import Figure

    square = [row for row in report.rows if row.case.kind == "square"]
    other = [row for row in report.rows if row.case.kind != "square"]
    panels = [(title, rows, is_square) for title, rows, is_square in (
        ("square sizes (N = M = K)", square, True), ("other shapes (M x N x K)", other, False))
        if rows]
    figure = Figure(figsize=(6.5 * max(1, len(panels)), 4.8), layout="constrained")
    axes = figure.subplots(1, max(1, len(panels)), squeeze=False)[0]
    dtypes = list(dict.fromkeys(row.case.dtype for row in report.rows))
    for axis, (title, rows, is_square) in zip(axes, panels):
        labels = list(dict.fromkeys(row.case.shape for row in rows))
        # Square sizes sit at their size on a log axis; other shapes side by side.
        positions = {label: int(label) if is_square else index
                     for index, label in enumerate(labels)}
        for name in report.contenders:
            for dtype in dtypes:
                points = [(positions[row.case.shape], row.tflops(name)) for row in rows
                          if row.case.dtype == dtype and row.tflops(name) is not None]
                if points:
                    axis.plot(*zip(*sorted(points)), marker="o",
                              color=CONTENDER_COLORS.get(name), label=f"{name} {dtype}",
                              linestyle=DTYPE_STYLES.get(dtype, "-"))
        if report.references is not None:
            for dtype, tflops in report.references.mma_tflops.items():
                axis.axhline(tflops, color="grey", linewidth=0.8,
                             linestyle=DTYPE_STYLES.get(dtype, "-"),
                             label=f"mma.sync ceiling {dtype}")
        if is_square:
            axis.set_xscale("log", base=2)
        axis.set_xticks(list(positions.values()))
        axis.set_xticklabels(labels, rotation=0 if is_square else 20,
                             ha="center" if is_square else "right")
        axis.set_title(title)
        axis.set_ylabel("TFLOP/s")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    figure.suptitle(f"matmul on {report.device.get('name', 'GPU')}")
    figure.savefig(path, dpi=120)


# ---------------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser, default_sizes: Optional[Sequence[str]] = None,
                  default_dtypes: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The ``tilec bench`` arguments, on ``parser`` (a subcommand's, or :func:`main`'s).
    ``default_sizes`` and ``default_dtypes`` replace the default sweep."""
    from tilec.cli import _assignments, _positive, _warps
    shown_sizes = default_sizes or ["x".join(map(str, s)) if len(set(s)) > 1 else str(s[0])
                                    for s in DEFAULT_SIZES]
    parser.add_argument("--sizes", nargs="+", type=parse_sizes, metavar="SIZE",
                        help="N for N^3, or MxNxK; commas or spaces between (default: "
                        f"{', '.join(shown_sizes)})")
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, metavar="DTYPE",
                        help=f"operand dtypes among {', '.join(DTYPES)} (default: "
                        f"{', '.join(default_dtypes or DTYPES)})")
    parser.add_argument("--const", nargs="+", action="extend", default=[], metavar="NAME=VALUE",
                        type=_assignments("constant"),
                        help="tilec constants, e.g. --const BM=128 BN=64 (or BM=128,BN=64)")
    parser.add_argument("--stages", type=_positive, metavar="N",
                        help="tilec's shared-memory pipeline stages")
    parser.add_argument("--warps", type=_warps, metavar="MxN", help="tilec's warp grid, e.g. 2x4")
    parser.add_argument("--swizzle", choices=("auto", "off"), help="tilec's shared swizzle")
    parser.add_argument("--autotune", action="store_true",
                        help="autotune tilec over a small space per shape (cached on disk)")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every number here")
    parser.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="draw TFLOP/s against size (needs matplotlib)")
    parser.set_defaults(handler=run)
    if default_sizes is not None:
        parser.set_defaults(sizes=[parse_sizes(size) for size in default_sizes])
    if default_dtypes is not None:
        parser.set_defaults(dtypes=list(default_dtypes))
    return parser


def main(argv: Optional[Sequence[str]] = None, *, prog: str = "tilec bench",
         default_sizes: Optional[Sequence[str]] = None,
         default_dtypes: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and run (benchmarks/bench_matmul.py keeps its 4096 f16 default through
    ``default_sizes`` and ``default_dtypes``)."""
    from tilec.cli import CommandError, _runtime_errors
    from tilec.errors import TileError
    parser = add_arguments(argparse.ArgumentParser(prog=prog, description=DESCRIPTION),
                           default_sizes, default_dtypes)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse has printed the message or the help
        return int(exit_.code or 0)
    try:
        return args.handler(args)
    except TileError as err:
        print(err.render(), file=sys.stderr)
    except CommandError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
    except _runtime_errors() as err:
        print(f"{prog}: {type(err).__name__}: {err}", file=sys.stderr)
    return 1


def _tilec_settings(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The constants and options for tilec; unknown constants are a CommandError."""
    from tilec.cli import CommandError, _merged
    consts = _merged(args.const)
    known = sample_kernel("f16").signature.consts
    unknown = [name for name in consts if name not in known]
    if unknown:
        raise CommandError(f"the matmul sample has no constant {', '.join(unknown)} "
                           f"(its constants: {', '.join(known)})")
    options = {name: value for name, value in (("stages", args.stages), ("warps", args.warps),
                                               ("swizzle", args.swizzle)) if value is not None}
    return consts, options


def _software(arrays: Arrays, timer_name: str) -> dict[str, str]:
    software = {arrays.name: arrays.version}
    try:
        import triton
        software["triton"] = triton.__version__
    except ImportError:
        software["triton"] = "not installed"
    software["timer"] = timer_name
    return software


def run(args: argparse.Namespace) -> int:
    from tilec.runtime.driver import gpu_unavailable_reason, has_gpu
    if not has_gpu():
        print(f"tilec bench: no GPU ({gpu_unavailable_reason()})", file=sys.stderr)
        return 2
    cases = sweep(args.sizes, args.dtypes)
    consts, options = _tilec_settings(args)
    plot = args.plot
    if plot is not None:
        try:
            require_matplotlib()
        except ImportError as err:
            print(f"tilec bench: {err}", file=sys.stderr)
            plot = None
    from tilec.runtime import configured_device_ordinal, current_device
    try:
        arrays = open_arrays(configured_device_ordinal())
    except ImportError as err:
        print(f"tilec bench: {err}", file=sys.stderr)
        return 2
    timer, timer_name = make_timer(arrays, args.quick)
    device = current_device()
    contenders: list[Contender] = [TilecContender(consts, options, args.autotune),
                                   CublasContender(arrays)]
    try:
        import triton  # noqa: F401
        contenders.append(TritonContender(arrays))
    except ImportError:
        print("tilec bench: Triton is not installed; timing tilec and cuBLAS only",
              file=sys.stderr)
    report = Report(
        device={"name": device.name, "arch": device.arch, "sms": device.multiprocessor_count,
                "l2_bytes": arrays.l2_bytes},
        software=_software(arrays, timer_name), references=None,
        contenders=[c.name for c in contenders],
        settings={"dtypes": list(dict.fromkeys(c.dtype for c in cases)), "consts": consts,
                  "options": {k: str(v) for k, v in options.items()},
                  "autotune": args.autotune, "quick": args.quick,
                  "warmup_ms": WARMUP_MS[args.quick], "rep_ms": REP_MS[args.quick],
                  "tolerance": TOLERANCE, "l2_factor": L2_FACTOR,
                  "cublas_f32_tf32": arrays.tf32})
    report.references = measure_references(arrays, timer, report.settings["dtypes"])
    print(format_references(report), flush=True)
    report.rows = run_sweep(cases, arrays, contenders, timer, report.references,
                            progress=sys.stderr)
    print()
    print(format_table(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report_json(report), indent=2, allow_nan=False) + "\n")
        print(f"wrote {args.json}")
    if plot is not None:
        write_plot(report, plot)
        print(f"wrote {plot}")
    elif args.plot is not None:
        print(f"tilec bench: {MATPLOTLIB_MISSING}", file=sys.stderr)
    return 0 if report.ok else 1
