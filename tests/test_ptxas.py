"""Every sample, in f16, bf16 and f32 (FFMA, and TF32 with f32_math="tf32"), for every target
and a spread of configurations, assembled by ptxas: it must accept the PTX, and the main
matmul configurations must not spill.

The combinations are chosen, not a cartesian product, to stay well under a minute on two cores:
ptxas runs in a pool of two while the next kernels compile.
"""
from __future__ import annotations

import errno
import functools
import re
import shutil
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tilec.kernel import TileFunction, load_file
from tilec.options import Spec, TensorSpec

PTXAS = shutil.which("ptxas")
pytestmark = pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ARCHS = ("sm_80", "sm_86", "sm_90")
DIVISIBLE = (("M", 4096), ("N", 4096), ("K", 4096))
RAGGED = (("M", 1000), ("N", 1003), ("K", 77))
MISALIGNED = Spec(tensors=(("A", TensorSpec(1, 1)), ("B", TensorSpec(1, 1))))


@functools.lru_cache(maxsize=None)
def load_sample(name: str, dtype: str) -> TileFunction:
    """A sample's tile function; ``bf16`` or ``f32`` reads f16 inputs A and B as that."""
    path = SAMPLES / f"{name}.py"
    text = path.read_text(encoding="utf-8")
    if dtype == "f8e5m2":  # the fp8 samples in their other format (wfp8a16: the weights)
        text = text.replace("f8e4m3", "f8e5m2")
    if dtype != "f16" and f"A: {dtype}[" not in text and f"W: {dtype}[" not in text:
        text = text.replace("A: f16[", f"A: {dtype}[").replace("B: f16[", f"B: {dtype}[")
        assert f"A: {dtype}[" in text and f"B: {dtype}[" in text, f"{path}: no f16 A, B"
    functions = load_file(path, text=text)
    (function,) = functions.values()
    return function


@dataclass(frozen=True)
class Case:
    sample: str
    dtype: str
    arch: str
    options: tuple[tuple[str, Any], ...] = ()  # keyword arguments of TileFunction.ptx

    @property
    def id(self) -> str:
        def text(value: Any) -> str:
            if isinstance(value, Spec):
                return "+".join(f"{name}:{t.contiguous_dim}/{t.vec_elems}"
                                for name, t in value.tensors)
            return "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
        settings = ",".join(f"{k}={text(v)}" for k, v in self.options) or "defaults"
        return f"{self.sample}-{self.dtype}-{self.arch}-{settings}"

    def ptx(self) -> str:
        # verify: the IR's invariants after every pass (a staged store's boxes in strips once
        # broke one that only the fuzzer's verified compiles caught).
        return load_sample(self.sample, self.dtype).ptx(arch=self.arch, verify=True,
                                                        **dict(self.options))


def case(sample: str, dtype: str, arch: str, *shapes: tuple[tuple[str, int], ...],
         **options: Any) -> Case:
    items = tuple(options.items()) + tuple(item for group in shapes for item in group)
    return Case(sample, dtype, arch, items)


def main_matmul_cases() -> Iterator[Case]:
    """The configurations the matmul sample is tuned for: these must not spill."""
    for dtype in ("f16", "bf16"):
        for arch in ARCHS:
            yield case("matmul", dtype, arch)  # 128x128x32, 3 stages, 2x2 warps
            yield case("matmul", dtype, arch, stages=2)
            yield case("matmul", dtype, arch, stages=4)
            yield case("matmul", dtype, arch, BM=64, BN=64, BK=32, warps=(2, 2))
            # 3 stages of 128x64 and 64x256 need 147456 bytes: more than sm_86 has.
            yield case("matmul", dtype, arch, DIVISIBLE, BM=128, BN=256, BK=64, warps=(2, 4),
                       stages=2 if arch == "sm_86" else 3)


def main_sgemm_cases() -> Iterator[Case]:
    """The f32 (FFMA) sample's tuned configurations: 8 warps of 32x64, no spills."""
    for arch in ARCHS:
        yield case("sgemm", "f32", arch)  # 128x128x16, 3 stages
        yield case("sgemm", "f32", arch, DIVISIBLE, BK=32, stages=2)


def main_tf32_cases() -> Iterator[Case]:
    """f32 on tensor cores (f32_math="tf32"), both operand orientations: row-major B read
    with ld.shared.b32 (sgemm) and B given transposed, read with ldmatrix (matmul_bt)."""
    for arch in ARCHS:
        yield case("sgemm", "f32", arch, f32_math="tf32")  # 128x128x16, 2x2 warps of 64x64
        yield case("matmul_bt", "f32", arch, f32_math="tf32")  # 128x128x32
        yield case("sgemm", "f32", arch, DIVISIBLE, BK=32, f32_math="tf32")


def main_int8_cases() -> Iterator[Case]:
    """i8 operands on mma.sync m16n8k32 .s8 (the int8 family): the sample's default tile and
    the 128x256 one the benchmark runs; no spills."""
    for arch in ARCHS:
        yield case("int8_gemm", "i8", arch)  # 128x128x64, 3 stages, 2x2 warps
        yield case("int8_gemm", "i8", arch, DIVISIBLE, BM=128, BN=256, BK=64, warps=(2, 4),
                   stages=2 if arch == "sm_86" else 3)


def main_fp8_cases() -> Iterator[Case]:
    """fp8 products (mma.sync m16n8k32 .e4m3 / .e5m2): the sample's default tile, whose auto
    warp grid stops at 64x32 warp tiles (64x64 ones spilled 80 bytes); no spills."""
    for arch in ("sm_90", "sm_90a"):
        yield case("fp8_gemm", "f8e4m3", arch)  # 128x128x64, 3 stages, 2x4 warps


def main_wfp8a16_cases() -> Iterator[Case]:
    """fp8 weights converted to f16 in registers (ld.shared.u16 + cvt.rn.f16x2.e4m3x2, then
    mma.sync m16n8k16): the sample's default tile, where its conversion runs (sm_89+); no
    spills."""
    for arch in ("sm_90", "sm_90a"):
        yield case("wfp8a16", "f16", arch)  # 128x128x64, 3 stages, 2x2 warps


def main_w8a16_swapped_cases() -> Iterator[Case]:
    """int8 weights as A converted in registers for wgmma's register form (the wgmma_rs
    family, sm_90a only): the sample's default tile and 128x256; no spills."""
    yield case("w8a16_swapped", "f16", "sm_90a")  # 128x128x128, 3 stages
    yield case("w8a16_swapped", "f16", "sm_90a", DIVISIBLE, BA=256, stages=2)


MAIN = (list(main_matmul_cases()) + list(main_sgemm_cases()) + list(main_tf32_cases())
        + list(main_int8_cases()) + list(main_fp8_cases()) + list(main_wfp8a16_cases())
        + list(main_w8a16_swapped_cases()))

OTHERS = [
    case("matmul", "f16", "sm_80", stages=1),
    case("matmul", "bf16", "sm_90", stages=1),
    case("matmul", "f16", "sm_86", swizzle="off"),
    case("matmul", "bf16", "sm_80", swizzle="off"),
    case("matmul", "f16", "sm_90", RAGGED),
    case("matmul", "bf16", "sm_86", RAGGED, stages=4),
    case("matmul", "f16", "sm_80", BM=64, BN=64, BK=32),  # auto warps: one
    case("matmul", "f16", "sm_90", BM=256, BN=128, BK=32, warps=(4, 2)),
    case("matmul", "bf16", "sm_80", RAGGED, BM=128, BN=256, BK=64),
    case("matmul", "f16", "sm_86", disable=("double_buffer",)),  # synchronous copies
    case("matmul", "bf16", "sm_90", disable=("swizzle",)),
    # A without aligned vectors (element copies), B stored column-major (k contiguous).
    case("matmul", "f16", "sm_80", spec=Spec(tensors=(("A", TensorSpec(None, 1)),
                                                      ("B", TensorSpec(0, 8))))),
    case("matmul_bt", "f16", "sm_80", stages=1),
    case("matmul_bt", "bf16", "sm_86", stages=1, swizzle="off"),
    case("matmul_bt", "f16", "sm_90", DIVISIBLE, stages=1),
    case("matmul_bt", "f16", "sm_80"),
    case("matmul_bt", "bf16", "sm_90", RAGGED, stages=2),
    case("matmul_bt", "f16", "sm_86", BM=64, BN=64, BK=32, warps=(2, 2), stages=4),
    case("gemm_epilogue", "f16", "sm_80"),
    case("gemm_epilogue", "bf16", "sm_86"),
    case("gemm_epilogue", "f16", "sm_90", BM=128, BN=256, BK=64, warps=(2, 4)),
    case("gemm_epilogue", "bf16", "sm_80", stages=1),
    case("gemm_epilogue", "f16", "sm_86", BM=64, BN=64, BK=32, warps=(2, 2), stages=4),
    case("gemm_epilogue", "bf16", "sm_90", RAGGED),
    case("gemm_epilogue", "f16", "sm_80", DIVISIBLE, swizzle="off"),
    case("gemm_epilogue", "bf16", "sm_90", BM=64, BN=64, BK=32, stages=2),  # one warp
    # FFMA: ragged, unswizzled, synchronous, transposed operands, small and fused.
    case("sgemm", "f32", "sm_80", RAGGED),
    case("sgemm", "f32", "sm_86", swizzle="off", stages=1),
    case("sgemm", "f32", "sm_90", stages=4, BK=8),
    case("sgemm", "f32", "sm_80", spec=Spec(tensors=(("A", TensorSpec(0, 4)),
                                                     ("B", TensorSpec(0, 4))))),
    case("sgemm", "f32", "sm_86", spec=Spec(tensors=(("A", TensorSpec(None, 1)),))),
    case("sgemm", "f32", "sm_90", BM=64, BN=64, BK=16),
    case("matmul_bt", "f32", "sm_80", RAGGED),
    case("matmul", "f32", "sm_86"),
    case("matmul", "f16", "sm_90", l2_prefetch=256),
    case("sgemm", "f32", "sm_80", RAGGED, l2_prefetch=128),
    case("gemm_epilogue", "f32", "sm_90"),
    case("gemm_epilogue", "f32", "sm_86", RAGGED, BM=64, BN=128, BK=16, stages=2),
    # Split-K: the skinny tile it is for, a fused epilogue after the meeting, FFMA, and
    # empty slices (7 slices of 3 K steps).
    case("matmul", "f16", "sm_90", DIVISIBLE, BM=16, BN=64, BK=128, warps=(1, 4), stages=4,
         split_k=4),
    case("gemm_epilogue", "bf16", "sm_80", RAGGED, split_k=3),
    case("sgemm", "f32", "sm_86", split_k=2),
    case("matmul", "f16", "sm_80", RAGGED, BK=32, split_k=7, raster_group=1),
    # TF32: ragged, one stage, unswizzled (conflicted but correct addressing), small tiles
    # (32-bit reads of 128-byte rows), A column-major (32-bit reads of A, ldmatrix for a
    # column-major B), element copies, and a fused epilogue.
    case("sgemm", "f32", "sm_80", RAGGED, f32_math="tf32"),
    case("sgemm", "f32", "sm_86", stages=1, f32_math="tf32"),
    case("sgemm", "f32", "sm_90", swizzle="off", f32_math="tf32"),
    case("sgemm", "f32", "sm_80", BM=64, BN=32, BK=8, warps=(2, 1), f32_math="tf32"),
    case("sgemm", "f32", "sm_86", spec=Spec(tensors=(("A", TensorSpec(0, 4)),
                                                     ("B", TensorSpec(0, 4)))),
         f32_math="tf32"),
    case("sgemm", "f32", "sm_90", spec=Spec(tensors=(("A", TensorSpec(None, 1)),)),
         f32_math="tf32"),
    case("matmul_bt", "f32", "sm_86", RAGGED, stages=2, f32_math="tf32"),
    case("matmul", "f32", "sm_90", BM=128, BN=256, BK=32, warps=(2, 4), f32_math="tf32"),
    case("gemm_epilogue", "f32", "sm_80", f32_math="tf32"),
    # int8: ragged (K not 16-byte aligned: byte copies), one stage, unswizzled, small tiles,
    # and sm_90a, where the int8 family (not wgmma) takes i8 tiles.
    case("int8_gemm", "i8", "sm_80", RAGGED),
    case("int8_gemm", "i8", "sm_86", stages=1, swizzle="off"),
    case("int8_gemm", "i8", "sm_90", BM=64, BN=64, BK=32, warps=(1, 1), stages=4),
    case("int8_gemm", "i8", "sm_80", spec=Spec(tensors=(("A", TensorSpec(1, 1)),
                                                        ("B", TensorSpec(1, 2))))),
    case("int8_gemm", "i8", "sm_90a", RAGGED),
    case("int8_gemm", "i8", "sm_90a", DIVISIBLE, BM=128, BN=256, BK=64, warps=(2, 4)),
    # int8 split-K (i32 partials meet as integers): the skinny tile, ragged with empty
    # slices, and on each target.
    case("int8_gemm", "i8", "sm_80", DIVISIBLE, BM=16, BN=64, BK=128, warps=(1, 4), stages=4,
         split_k=4),
    case("int8_gemm", "i8", "sm_86", RAGGED, split_k=3),
    case("int8_gemm", "i8", "sm_90", RAGGED, BM=64, BN=64, BK=64, split_k=7),
    # fp8 (mma.sync m16n8k32 .e4m3 / .e5m2, PTX ISA 8.4): sm_90 and sm_90a only (the
    # default tile: main_fp8_cases).
    case("fp8_gemm", "f8e4m3", "sm_90", RAGGED, stages=2),
    case("fp8_gemm", "f8e5m2", "sm_90", DIVISIBLE, BM=128, BN=256, BK=128, warps=(2, 4)),
    case("fp8_gemm", "f8e4m3", "sm_90a", RAGGED),
    case("fp8_gemm", "f8e5m2", "sm_90a", DIVISIBLE, BM=128, BN=256, BK=64, warps=(2, 4)),
    # w8a16 (i8 weights W[N, K] converted to f16 in registers after frag.ldbytes'
    # ld.shared.u16): mma.sync on every target, sm_90a too (wgmma declines converted operands).
    case("w8a16", "f16", "sm_80"),
    case("w8a16", "f16", "sm_86", RAGGED, stages=2),
    case("w8a16", "f16", "sm_90", BM=64, BN=64, BK=32, warps=(1, 1), stages=4),
    case("w8a16", "f16", "sm_90a", RAGGED),
    case("w8a16", "f16", "sm_90a", (("M", 16), ("N", 8192), ("K", 8192)), BM=32, BN=64,
         BK=128, stages=4, warps=(1, 2)),  # the bench's skinny row
    # wfp8a16 (f8e4m3 / f8e5m2 weights converted to f16 in registers after frag.ldbytes,
    # cvt.rn.f16x2.e4m3x2 / .e5m2x2): sm_89 and later, so sm_90 and sm_90a (mma.sync there
    # too: wgmma declines converted operands). "f8e5m2" is the sample with e5m2 weights.
    case("wfp8a16", "f8e5m2", "sm_90", RAGGED, stages=2),
    case("wfp8a16", "f16", "sm_90", BM=64, BN=64, BK=32, warps=(1, 1), stages=4),
    case("wfp8a16", "f16", "sm_90a", RAGGED),
    case("wfp8a16", "f8e5m2", "sm_90a", (("M", 16), ("N", 8192), ("K", 8192)), BM=32, BN=64,
         BK=128, stages=4, warps=(1, 2)),  # a skinny decode-like row
    # Batched (bmm.py, a grid axis of batches): each base address moved by its batch.
    case("bmm", "f16", "sm_80"),
    case("bmm", "bf16", "sm_86", RAGGED),
    case("bmm", "f32", "sm_90"),
    case("bmm", "f16", "sm_90", DIVISIBLE, BM=128, BN=256, BK=64, warps=(2, 4)),
    case("bmm", "bf16", "sm_80", RAGGED, stages=2),
    case("bmm", "f32", "sm_86", RAGGED, f32_math="tf32"),
    # Bias + GELU (erf form): the epilogue's longest per-element sequence.
    case("gemm_gelu", "f16", "sm_80"),
    case("gemm_gelu", "bf16", "sm_86", RAGGED),
    case("gemm_gelu", "f32", "sm_90"),
    # Misaligned rows (2-byte aligned, odd strides) left unpacked, copied as 16-byte shared
    # vectors: loaded element by element ("vectors") or as aligned words + prmt ("words").
    case("matmul", "f16", "sm_80", RAGGED, spec=MISALIGNED, misaligned_copy="vectors"),
    case("matmul", "bf16", "sm_86", RAGGED, spec=MISALIGNED, misaligned_copy="words",
         stages=3),
    case("matmul", "f16", "sm_90", spec=MISALIGNED, misaligned_copy="words", BM=64, BN=64,
         BK=32, warps=(2, 2)),
    case("matmul", "f16", "sm_90a", RAGGED, spec=MISALIGNED, misaligned_copy="words", BM=64,
         BN=128, BK=80, warps=(2, 4), stages=1),  # the tuned 1000x1003x77 kernel
    case("matmul", "bf16", "sm_90a", RAGGED, spec=MISALIGNED, misaligned_copy="vectors",
         BM=64, BN=128, BK=80, warps=(2, 4), stages=1),
    case("matmul_bt", "f16", "sm_80", RAGGED, spec=MISALIGNED, misaligned_copy="words"),
    # f16 C's 2-byte aligned rows: a 4-byte store of a pair where a row is 4-byte aligned.
    case("gemm_epilogue", "f16", "sm_80", RAGGED, misaligned_store="pairs",
         spec=Spec(tensors=(("C", TensorSpec(1, 1)),))),
    case("gemm_epilogue", "bf16", "sm_86", misaligned_store="pairs",
         spec=Spec(tensors=(("C", TensorSpec(1, 1)),))),
    case("gemm_epilogue", "f16", "sm_90a", RAGGED, misaligned_store="pairs",
         misaligned_copy="words", BM=64, BN=128, BK=80, warps=(2, 4), stages=1,
         spec=Spec(tensors=(*MISALIGNED.tensors, ("C", TensorSpec(1, 1))))),
    # ... or staged in shared memory and stored a row at a time (passes/row_store.py).
    case("gemm_epilogue", "f16", "sm_80", RAGGED, misaligned_store="rows",
         spec=Spec(tensors=(("C", TensorSpec(1, 1)),))),
    case("gemm_epilogue", "bf16", "sm_86", RAGGED, misaligned_store="rows", BM=64, BN=64,
         BK=32, warps=(2, 2), stages=3, spec=Spec(tensors=(("C", TensorSpec(1, 1)),))),
    case("matmul", "bf16", "sm_90", RAGGED, misaligned_store="rows", misaligned_copy="words",
         BM=64, BN=128, BK=80, warps=(2, 4), stages=1,
         spec=Spec(tensors=(*MISALIGNED.tensors, ("C", TensorSpec(1, 1))))),
    case("gemm_epilogue", "f16", "sm_90a", RAGGED, misaligned_store="rows",
         misaligned_copy="words", BM=64, BN=128, BK=80, warps=(2, 4), stages=1,
         spec=Spec(tensors=(*MISALIGNED.tensors, ("C", TensorSpec(1, 1))))),
]
# The targets each sample compiles for, where not every one (fp8: sm_89 and later).
SAMPLE_ARCHS = {"fp8_gemm": {"sm_90", "sm_90a"}, "wfp8a16": {"sm_90", "sm_90a"},
                # The weights as A converted in registers: wgmma's register form only.
                "w8a16_swapped": {"sm_90a"}}

# sm_90a, the wgmma + TMA warp-specialized path: every sample, both dtypes, the tile shapes
# and ring depths it is tuned over, ragged sizes (TMA zero-fills) and both B orientations.
HOPPER_TILES = (dict(BM=128, BN=256, BK=64, stages=4), dict(BM=128, BN=128, BK=64, stages=4),
                dict(BM=64, BN=256, BK=64, stages=3), dict(BM=256, BN=128, BK=64, stages=3),
                dict(BM=128, BN=192, BK=64, stages=4), dict(BM=64, BN=128, BK=128, stages=2))
HOPPER = [case(sample, dtype, "sm_90a", shapes, **tiles)
          for sample in ("matmul", "matmul_bt", "gemm_epilogue") for dtype in ("f16", "bf16")
          for tiles, shapes in zip(HOPPER_TILES, (DIVISIBLE, RAGGED) * 3)] + [
    # Two blocks an SM: 128 registers at entry, the consumers' half-file setmaxnreg.
    case(sample, "f16", "sm_90a", RAGGED, BM=64, BN=128, BK=64, stages=4, blocks_per_sm=2)
    for sample in ("matmul", "gemm_epilogue")] + [
    # Persistent: both roles loop over the tiles.
    case(sample, dtype, "sm_90a", shapes, BM=128, BN=256, BK=64, stages=3, persistent=True)
    for sample, dtype, shapes in (("matmul", "f16", DIVISIBLE), ("gemm_epilogue", "bf16", RAGGED),
                                  ("matmul_bt", "f16", RAGGED))] + [
    # The TMA-store epilogue beside a fused epilogue's C loads at 128x256 (ptxas's
    # 168-register budget: where the thread coordinates live decides spills).
    case("gemm_epilogue", dtype, "sm_90a", RAGGED, BM=128, BN=256, BK=64, stages=3)
    for dtype in ("f16", "bf16")] + [
    # Clusters of two blocks along M sharing B (multicast loads, remote arrivals).
    case(sample, dtype, "sm_90a", shapes, BM=128, BN=256, BK=64, stages=3, cluster=2)
    for sample, dtype, shapes in (("matmul", "f16", DIVISIBLE), ("matmul_bt", "bf16", RAGGED),
                                  ("gemm_epilogue", "f16", DIVISIBLE),
                                  ("gemm_epilogue", "bf16", RAGGED))] + [
    # Persistent clusters: the pair walks pairs of M tiles, the producer's tail after them.
    case(sample, dtype, "sm_90a", shapes, BM=128, BN=256, BK=64, stages=3, cluster=2,
         persistent=True)
    for sample, dtype, shapes in (("matmul", "f16", DIVISIBLE), ("matmul_bt", "bf16", RAGGED),
                                  ("gemm_epilogue", "bf16", RAGGED))] + [
    # Clusters of 4: a quarter of B's rows a block, multicast to four, three remote
    # hand-backs; one tile a block, persistent, pingpong, split along K, batched, swapped.
    case(sample, dtype, "sm_90a", shapes, BK=64, cluster=4, **more)
    for sample, dtype, shapes, more in (
        ("matmul", "f16", RAGGED, dict(BM=64, BN=128, stages=6)),
        ("matmul_bt", "bf16", DIVISIBLE, dict(BM=128, BN=256, stages=3)),
        ("gemm_epilogue", "f16", RAGGED, dict(BM=128, BN=128, stages=4, persistent=True,
                                              raster_group=16)),
        ("matmul", "bf16", RAGGED, dict(BM=64, BN=224, stages=5, persistent=True,
                                        consumers="pingpong")),
        ("matmul", "f16", RAGGED, dict(BM=64, BN=128, stages=6, split_k=2)),
        ("bmm", "f16", RAGGED, dict(BM=128, BN=256, stages=3, persistent=True)),
        ("matmul", "f16", RAGGED, dict(BM=152, BN=128, stages=4, swap_product="always")))] + [
    # Clusters along N too (cluster_n): A multicast along each M row of the cluster as B
    # down each column, masks from the rank, hand-backs to the row's and column's blocks;
    # one tile a block, persistent, pingpong, split along K, batched, swapped, 8-bit.
    case(sample, dtype, "sm_90a", shapes, BK=64, **more)
    for sample, dtype, shapes, more in (
        ("matmul", "f16", RAGGED, dict(BM=64, BN=144, stages=8, cluster=4, cluster_n=2)),
        ("matmul_bt", "bf16", DIVISIBLE, dict(BM=128, BN=128, stages=4, cluster=2,
                                              cluster_n=2, persistent=True)),
        ("gemm_epilogue", "f16", RAGGED, dict(BM=128, BN=128, stages=4, cluster=2,
                                              cluster_n=4)),
        ("matmul", "f16", RAGGED, dict(BM=128, BN=256, stages=3, cluster_n=2,
                                       persistent=True)),
        ("matmul", "bf16", RAGGED, dict(BM=64, BN=128, stages=5, cluster=2, cluster_n=2,
                                        persistent=True, consumers="pingpong")),
        ("matmul", "f16", RAGGED, dict(BM=64, BN=128, stages=6, cluster=2, cluster_n=2,
                                       split_k=2)),
        ("bmm", "f16", RAGGED, dict(BM=128, BN=128, stages=4, cluster=2, cluster_n=2,
                                    persistent=True)),
        ("matmul", "f16", RAGGED, dict(BM=144, BN=128, stages=4, cluster=2, cluster_n=2,
                                       swap_product="always")))] + [
    case("int8_gemm", "i8", "sm_90a", RAGGED, BM=128, BN=128, BK=128, stages=4, cluster=2,
         cluster_n=2)] + [
    # Pingpong consumers: a 64-row tile a warpgroup, the two taking the tiles in turn
    # (named-barrier hand-over, a staging tile each), alone and in clusters of two.
    case(sample, dtype, "sm_90a", shapes, BM=64, BN=bn, BK=64, stages=stages,
         persistent=True, consumers="pingpong", **extra)
    for sample, dtype, shapes, bn, stages, extra in (
        ("matmul", "f16", DIVISIBLE, 256, 4, {}), ("gemm_epilogue", "bf16", RAGGED, 256, 4, {}),
        ("gemm_epilogue", "f16", DIVISIBLE, 256, 4, {}), ("matmul_bt", "f16", RAGGED, 128, 3, {}),
        ("gemm_epilogue", "f16", DIVISIBLE, 256, 4, {"cluster": 2}),
        ("matmul", "bf16", RAGGED, 256, 3, {"cluster": 2}))] + [
    # 8-bit operands on wgmma m64nNk32 (the wgmma8 family): BK 128, both operands K-major.
    case("int8_gemm", "i8", "sm_90a", DIVISIBLE, BM=128, BN=256, BK=128, stages=3),
    case("int8_gemm", "i8", "sm_90a", RAGGED, BM=128, BN=128, BK=128, stages=4),
    case("int8_gemm", "i8", "sm_90a", RAGGED, BM=128, BN=256, BK=128, stages=3,
         persistent=True),
    case("int8_gemm", "i8", "sm_90a", DIVISIBLE, BM=128, BN=256, BK=128, stages=3, cluster=2),
    case("fp8_gemm", "f8e4m3", "sm_90a", DIVISIBLE, BM=128, BN=256, BK=128, stages=3),
    # the bench's tuned "tiled" 8-bit kernels (tuning.TUNED's wgmma8 entry)
    *(case(sample, dtype, "sm_90a", DIVISIBLE, BM=128, BN=256, BK=128, stages=4,
           raster_group=8, persistent=True)
      for sample, dtype in (("int8_gemm", "i8"), ("fp8_gemm", "f8e4m3"))),
    case("fp8_gemm", "f8e5m2", "sm_90a", RAGGED, BM=256, BN=128, BK=128, stages=3)] + [
    # Batched: 3-D tensor maps, the batch coordinate from the program id.
    case("bmm", dtype, "sm_90a", shapes, **tiles)
    for dtype in ("f16", "bf16") for tiles, shapes in zip(HOPPER_TILES[:2], (DIVISIBLE, RAGGED))
] + [
    # Batched persistent blocks: the tile loop over batches x tiles, each tile's batch views.
    case("bmm", dtype, "sm_90a", shapes, persistent=True, **tiles)
    for dtype in ("f16", "bf16") for tiles, shapes in zip(
        (dict(BM=128, BN=256, BK=64, stages=3), HOPPER_TILES[1]), (DIVISIBLE, RAGGED))] + [
    # Batched clusters: pairs of M tiles within each batch, B multicast through 3-D maps,
    # persistent (the tile loop over batches x pairs) and one tile a block.
    case("bmm", dtype, "sm_90a", shapes, BM=128, BN=256, BK=64, stages=3, cluster=2, **more)
    for dtype, shapes, more in (("f16", DIVISIBLE, {"persistent": True}),
                                ("bf16", RAGGED, {"persistent": True}), ("f16", RAGGED, {}))] + [
    # Stream-K: the units' loop, the parts' stores and the owner's loads after the products'
    # final wait (before it, ptxas would serialize the wgmmas), batched too, and i32 parts.
    case(sample, dtype, "sm_90a", shapes, BM=128, BN=256, BK=64, stages=3, persistent=True,
         stream_k=True)
    for sample, dtype, shapes in (("matmul", "f16", DIVISIBLE), ("gemm_epilogue", "bf16", RAGGED),
                                  ("matmul_bt", "bf16", RAGGED), ("bmm", "f16", DIVISIBLE))] + [
    case("int8_gemm", "i8", "sm_90a", RAGGED, BM=128, BN=256, BK=128, stages=3,
         persistent=True, stream_k=True)] + [
    # Split-K: each slice a block, the slices meeting on the consumers' barrier after the
    # products' final wait; the bench's deep-K tiles (tuning.split._sliced), a fused epilogue
    # after the meeting, and i32 slices.
    case("matmul", "f16", "sm_90a", DIVISIBLE, BM=128, BN=128, BK=64, stages=4, split_k=8),
    case("matmul", "bf16", "sm_90a", RAGGED, BM=128, BN=256, BK=64, stages=3, split_k=2),
    case("gemm_epilogue", "f16", "sm_90a", RAGGED, BM=128, BN=128, BK=64, stages=4,
         split_k=3),
    case("int8_gemm", "i8", "sm_90a", RAGGED, BM=128, BN=128, BK=128, stages=4, split_k=4),
    # The bench's short-M and one-wave tiles (tuning.skinny.SHORT_TILES, ONE_WAVE_TILES): one
    # consumer warpgroup of 64 rows split along K at 40 rows, 128x128 in six stages.
    case("gemm_epilogue", "f16", "sm_90a", (("M", 40), ("N", 1003), ("K", 3000)), BM=64,
         BN=128, BK=64, stages=6, split_k=2),
    # ... and its short slices (tuning.split.SHORT_SLICE_STEPS): 16 of 5 steps, 3 of them empty.
    case("gemm_epilogue", "bf16", "sm_90a", (("M", 130), ("N", 1030), ("K", 4100)), BM=64,
         BN=128, BK=64, stages=6, split_k=16),
    case("matmul", "bf16", "sm_90a", DIVISIBLE, BM=128, BN=128, BK=64, stages=6),
    # The tall tiles split along K: tuning.swap.TALL_TILE (three consumer warpgroups of 64 rows)
    # and SPLIT_TILES' 256x128 (two of 128), under a fused epilogue with ragged edges.
    case("gemm_epilogue", "f16", "sm_90a", RAGGED, BM=192, BN=128, BK=64, stages=4,
         split_k=4),
    case("gemm_epilogue", "bf16", "sm_90a", RAGGED, BM=256, BN=128, BK=64, stages=3,
         warpgroup_rows=128, split_k=4),
    # The skinny tiles (tuning.skinny.SKINNY_TILES): one consumer warpgroup of m64n192 in six
    # stages, of m64n256 under a fused epilogue (with ragged edges, that one spills 8-188
    # bytes under the 240 registers in four stages, none in three; the bench times the plain
    # product, which does not), 64x128 one tile a block in clusters of 2.
    case("matmul", "f16", "sm_90a", RAGGED, BM=64, BN=192, BK=64, stages=6),
    case("gemm_epilogue", "bf16", "sm_90a", DIVISIBLE, BM=64, BN=256, BK=64, stages=4),
    case("matmul_bt", "f16", "sm_90a", RAGGED, BM=64, BN=256, BK=64, stages=4),
    case("gemm_epilogue", "f16", "sm_90a", RAGGED, BM=64, BN=128, BK=64, stages=6,
         cluster=2),
    # The swapped 16-bit product (swap_product "always", tuning.swap._swapped): C.T's tiles of
    # 152 or 136 rows of C along wgmma's n, on one warpgroup unsplit or two split along K,
    # a 16-bit C staged transposed in C's rows (stmatrix.trans) and stored with TMA, an
    # f32 one stored transposed by each thread; a fused epilogue's bias along C.T's columns; a
    # k-contiguous B (wgmma's A then K-major) at 104 rows.
    case("matmul", "f16", "sm_90a", RAGGED, BM=152, BN=64, BK=64, stages=6,
         swap_product="always"),
    case("matmul", "bf16", "sm_90a", RAGGED, BM=136, BN=128, BK=64, stages=4, split_k=2,
         swap_product="always"),
    case("gemm_epilogue", "f16", "sm_90a", RAGGED, BM=152, BN=128, BK=64, stages=4,
         split_k=2, swap_product="always"),
    case("matmul_bt", "bf16", "sm_90a", DIVISIBLE, BM=104, BN=128, BK=64, stages=4,
         swap_product="always"),
    # In clusters of 2 along m, sharing B's tile (the swapped A) through TMA multicast.
    case("matmul", "f16", "sm_90a", RAGGED, BM=152, BN=128, BK=64, stages=4, cluster=2,
         swap_product="always"),
    # A k-contiguous B takes any multiple of 8 as BN, unswapped (TMA's store of C in 8-column
    # slabs of the 32-byte swizzle).
    case("matmul_bt", "f16", "sm_90a", RAGGED, BM=128, BN=152, BK=64, stages=4)] + [
    # wgmma's register form, A converted from i8 (the wgmma_rs family): alternating register
    # sets across k16 steps and stages must not serialize the wgmmas.
    case("w8a16_swapped", "f16", "sm_90a", shapes, **more)
    for shapes, more in ((DIVISIBLE, {}), (RAGGED, dict(BA=256, stages=2, persistent=True)),
                         (RAGGED, dict(BW=256, BA=64, warpgroup_rows=128)),
                         (DIVISIBLE, dict(BK=256, stages=2, cluster=2)))] + [
    # The w8a16 sample as written, swapped onto the register form by swap_product, in the
    # schedules of wgmma: split-K, stream-K, pingpong, a cluster sharing W.
    case("w8a16", "f16", "sm_90a", shapes, BK=128, **more)
    for shapes, more in ((RAGGED, dict(split_k=2)),
                         (DIVISIBLE, dict(persistent=True, stream_k=True)),
                         (RAGGED, dict(BN=64, persistent=True, consumers="pingpong")),
                         (RAGGED, dict(cluster=2)))] + [
    # TMA's 64- and 32-byte swizzles (descriptor layouts SW64 and SW32) and padded 128-byte
    # slabs: tiles whose rows are not whole 128-byte spans (an N-major B of BN 208, 160, 144
    # or 240, padded unless tma_swizzle asks for a narrow span; BK 32 of f16 or 64 of
    # 8-bit), one span forced on the tuned tile, and the w8a16 sample at its default BK 64
    # on the register form.
    case(sample, dtype, "sm_90a", shapes, **tiles)
    for sample, dtype, shapes, tiles in (
        ("matmul", "f16", RAGGED, dict(BM=128, BN=208, BK=64, stages=4)),
        ("matmul", "bf16", DIVISIBLE, dict(BM=128, BN=160, BK=64, stages=4, persistent=True)),
        ("matmul", "f16", RAGGED, dict(BM=128, BN=208, BK=64, stages=4, tma_swizzle=32)),
        ("matmul", "bf16", DIVISIBLE, dict(BM=128, BN=160, BK=64, stages=4, persistent=True,
                                           tma_swizzle=64)),
        ("gemm_epilogue", "f16", DIVISIBLE, dict(BM=128, BN=144, BK=64, stages=4,
                                                 persistent=True, raster_group=16, cluster=2)),
        ("matmul", "bf16", RAGGED, dict(BM=128, BN=240, BK=64, stages=3, persistent=True,
                                        cluster=2)),
        ("matmul", "f16", RAGGED, dict(BM=128, BN=256, BK=32, stages=6, tma_swizzle=64)),
        ("matmul_bt", "f16", RAGGED, dict(BM=128, BN=208, BK=32, stages=4, cluster=2,
                                          tma_swizzle=32)),
        ("gemm_epilogue", "bf16", RAGGED, dict(BM=128, BN=224, BK=64, stages=3)),
        ("matmul", "f16", DIVISIBLE, dict(BM=128, BN=256, BK=64, stages=3, tma_swizzle=32)),
        ("int8_gemm", "i8", RAGGED, dict(BM=128, BN=256, BK=64, stages=4)),
        ("fp8_gemm", "f8e4m3", DIVISIBLE, dict(BM=128, BN=256, BK=64, stages=4,
                                                persistent=True)),
        ("w8a16", "f16", RAGGED, dict()),
        ("w8a16_swapped", "f16", DIVISIBLE, dict(BK=32, stages=6)))] + [
    # 256-row tiles in 128-row warpgroups up to BN 192: 2 x 96 accumulators a thread under
    # setmaxnreg's 232 (the block starts with 168), C in 3, 9 or 5 slabs taking turns (an
    # odd count) beside the ring.
    case(sample, dtype, "sm_90a", shapes, BM=256, BK=64, stages=3, warpgroup_rows=128, **more)
    for sample, dtype, shapes, more in (
        ("gemm_epilogue", "f16", RAGGED, dict(BN=192, persistent=True)),
        ("matmul", "bf16", DIVISIBLE, dict(BN=144, persistent=True, cluster=2)),
        ("gemm_epilogue", "bf16", RAGGED, dict(BN=160)),
        ("matmul_bt", "f16", RAGGED, dict(BN=176, persistent=True)))] + [
    # The bench's cluster tiles (tuning.rounds.CLUSTER_TILES) as it runs them: 192x176 beside four
    # stages (B's last slab padded, C's 11 slabs in turn), 256x64 in 128-row warpgroups.
    case(sample, dtype, "sm_90a", shapes, **tile, persistent=True, raster_group=16, cluster=2)
    for sample, dtype, shapes, tile in (
        ("gemm_epilogue", "f16", RAGGED, dict(BM=192, BN=176, BK=64, stages=4)),
        ("matmul", "bf16", RAGGED, dict(BM=256, BN=64, BK=64, stages=4, warpgroup_rows=128)))]
# ptxas's diagnostics that a wgmma kernel is slower than written: serialized wgmma (C7515,
# C7511, C7519, C7514: a non-wgmma instruction reading the accumulators inside a pipeline
# stage, or any other reason ptxas gives), setmaxnreg ignored (C7508) or short of registers
# (C7602).
HOPPER_DIAGNOSTICS = re.compile(r"C75(08|11|14|15|19)|C7602|wgmma\.mma_async instructions "
                                r"are serialized")

# The fused epilogue sample in its default configuration: it spilled until the epilogue was
# emitted a few registers at a time.
EPILOGUE_SPILLS = case("gemm_epilogue", "f16", "sm_80")


def ids(params: list) -> list[str]:
    return [(p.values[0] if hasattr(p, "values") else p).id for p in params]


# ------------------------------------------------------------------------------ assembling

@dataclass(frozen=True)
class Assembled:
    command: str
    returncode: int
    log: str


def assert_assembles(ptx_for: Callable[[str], str], folder: Path, archs=ARCHS) -> None:
    """ptxas accepts ``ptx_for(arch)`` for every target in ``archs`` (written to ``folder``)."""
    for arch in archs:
        path = folder / f"{arch}.ptx"
        path.write_text(ptx_for(arch), encoding="utf-8")
        result = run_ptxas(path, arch)
        assert result.returncode == 0, f"{arch}: {result.log}\nRepro command: {result.command}"


# Starting ptxas from the assembler's pool thread fails now and then with EFAULT ("Bad
# address") inside the spawn itself, before ptxas runs; it never fails twice in a row.
SPAWN_TRIES = 3


def run_ptxas(path: Path, arch: str) -> Assembled:
    command = [PTXAS, "-v", f"-arch={arch}", str(path), "-o", str(path.with_suffix(".cubin"))]
    for attempt in range(SPAWN_TRIES):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            break
        except OSError as err:
            if err.errno != errno.EFAULT or attempt == SPAWN_TRIES - 1:
                raise
    return Assembled(" ".join(command), done.returncode, done.stdout + done.stderr)


def assert_no_spills(log: str, what: str) -> None:
    spills = re.findall(r"(\d+) bytes spill stores", log)
    assert spills and set(spills) == {"0"}, f"{what} spills\n{log}"


def assert_clean_hopper_log(log: str, what: str) -> None:
    """No wgmma-serialization or setmaxnreg diagnostic, and no spill."""
    assert not HOPPER_DIAGNOSTICS.search(log), f"{what}\n{log}"
    assert_no_spills(log, what)


def assert_assembles_for_sm_90a(ptx: str, folder: Path, name: str) -> None:
    """ptxas -arch=sm_90a accepts ``ptx`` with a clean log (:func:`assert_clean_hopper_log`)."""
    path = folder / f"{name}.ptx"
    path.write_text(ptx, encoding="utf-8")
    result = run_ptxas(path, "sm_90a")
    assert result.returncode == 0, f"{result.command}\n{result.log}"
    assert_clean_hopper_log(result.log, result.command)


class Assembler:
    """Compiles cases in this thread and assembles them in a pool of two, so that ptxas runs
    while the next kernels compile; each test then waits for its own case."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.pool = ThreadPoolExecutor(max_workers=2)
        self.jobs: dict[Case, Future] = {}

    def submit(self, case: Case) -> None:
        if case in self.jobs:
            return
        try:
            ptx = case.ptx()
        except Exception as err:  # reported by the case's own test
            future: Future = Future()
            future.set_exception(err)
        else:
            path = self.directory / f"{len(self.jobs):03d}.ptx"
            path.write_text(ptx, encoding="utf-8")
            future = self.pool.submit(run_ptxas, path, case.arch)
        self.jobs[case] = future

    def result(self, case: Case) -> Assembled:
        self.submit(case)
        return self.jobs[case].result()


@pytest.fixture(scope="module")
def assembler(request, tmp_path_factory) -> Iterator[Assembler]:
    assembler = Assembler(tmp_path_factory.mktemp("ptxas"))
    # Start every selected case at once, in test order.
    for item in request.session.items:
        params = getattr(item, "callspec", None)
        if item.module is request.module and params is not None and "case" in params.params:
            assembler.submit(params.params["case"])
    yield assembler
    assembler.pool.shutdown(cancel_futures=True)


def assembled(assembler: Assembler, case: Case) -> Assembled:
    result = assembler.result(case)
    assert result.returncode == 0, f"ptxas failed on {case.id}\nRepro command: " \
                                   f"{result.command}\n{result.log}"
    return result


ALL = MAIN + OTHERS


@pytest.mark.parametrize("case", ALL, ids=ids(ALL))
def test_ptxas_assembles(assembler: Assembler, case: Case) -> None:
    result = assembled(assembler, case)
    assert "Compiling entry function" in result.log, result.log


@pytest.mark.parametrize("case", MAIN + [EPILOGUE_SPILLS], ids=ids(MAIN + [EPILOGUE_SPILLS]))
def test_no_spill_stores(assembler: Assembler, case: Case) -> None:
    assert_no_spills(assembled(assembler, case).log, case.id)


def test_every_sample_is_covered() -> None:
    cases = [p.values[0] if hasattr(p, "values") else p for p in ALL]
    for path in SAMPLES.glob("*.py"):
        mine = [c for c in cases if c.sample == path.stem]
        text = path.read_text()
        dtypes = ({"f16"} if "W: i8[" in text  # w8a16: f16 activations, int8 weights
                  # wfp8a16: f16 activations, e4m3 weights ("f16") or e5m2 ("f8e5m2")
                  else {"f16", "f8e5m2"} if "W: f8e4m3[" in text
                  else {"f16", "bf16", "f32"} if "A: f16[" in text
                  else {"i8"} if "A: i8[" in text
                  else {"f8e4m3", "f8e5m2"} if "A: f8e4m3[" in text else {"f32"})
        assert {c.dtype for c in mine} == dtypes, path.stem
        assert SAMPLE_ARCHS.get(path.stem, set(ARCHS)) <= {c.arch for c in mine}, path.stem


def test_threads_without_a_vector_write_nothing():
    """128x256x8 f32 has 512 threads for 256 vectors of A: half the threads are idle in A's
    copy, and their shared addresses lie past the tile, so their cp.async (which writes 16
    bytes even when it reads 0) must be predicated off, not given 0 source bytes."""
    ptx = load_sample("sgemm", "f32").ptx(arch="sm_80", BM=128, BN=256, BK=8, stages=2)
    copies = [line.strip() for line in ptx.splitlines() if "cp.async.cg" in line]
    guarded = [line for line in copies if line.startswith("@")]
    # Per stage copy: one access of A (half the threads idle), one of B (all busy).
    assert len(guarded) == len(copies) // 2 > 0, copies
    assert all(line.startswith("@%p1 ") for line in guarded)  # the same thread predicate


@pytest.mark.parametrize("case", HOPPER, ids=ids(HOPPER))
def test_hopper_kernels_assemble_without_serialization(assembler: Assembler, case: Case) -> None:
    """The sm_90a kernels take the wgmma family (their PTX says so), assemble with no
    wgmma-serialization or setmaxnreg diagnostic, and do not spill."""
    ptx = case.ptx()
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, case.id
    assert_clean_hopper_log(assembled(assembler, case).log, case.id)


# One-stage rings (every product group waited for: the fuzzer's class 7) on each schedule.
ONE_STAGE = [case("matmul", "f16", "sm_90a", RAGGED, BM=bm, BN=128, BK=64, stages=1, **more)
             for bm, more in ((128, {}), (128, {"cluster": 2}), (128, {"persistent": True}),
                              (64, {"persistent": True, "consumers": "pingpong"}))]


@pytest.mark.parametrize("case", ONE_STAGE, ids=ids(ONE_STAGE))
def test_one_stage_hopper_kernels_assemble_without_serialization(assembler: Assembler,
                                                                 case: Case) -> None:
    test_hopper_kernels_assemble_without_serialization(assembler, case)


def test_sm_90a_falls_back_to_mma_sync_where_wgmma_does_not_apply() -> None:
    """BK=32 (not a 128-byte swizzle row), with split-K too, an explicit warp grid and f32
    compile for sm_90a through the sm_80 instruction families, which sm_90a runs too."""
    for sample, dtype, options in (("matmul", "f16", {}), ("matmul", "f16", {"split_k": 2}),
                                   ("matmul", "bf16", {"BK": 64, "warps": (2, 2)}),
                                   ("sgemm", "f32", {})):
        ptx = load_sample(sample, dtype).ptx(arch="sm_90a", **options)
        assert ".target sm_90a" in ptx and "wgmma" not in ptx, (sample, options)


# sm_90a's tuned kernel for small ragged problems (1000x1003x77, benchmarking.contenders):
# mma.sync, all of K in one step of one stage, the misaligned operands and C copied element
# by element.
SMALL_RAGGED = [case(sample, dtype, "sm_90a", RAGGED, BM=64, BN=128, BK=80, stages=1,
                     warps=(2, 4), spec=Spec(tensors=(("A", TensorSpec(1, 1)),
                                                      ("B", TensorSpec(1, 1)),
                                                      ("C", TensorSpec(1, 1)))))
                for sample, dtype in (("matmul", "f16"), ("gemm_epilogue", "bf16"))]


@pytest.mark.parametrize("case", SMALL_RAGGED, ids=ids(SMALL_RAGGED))
def test_the_one_step_kernel_for_small_ragged_problems_assembles(assembler: Assembler,
                                                                  case: Case) -> None:
    ptx = case.ptx()
    # Element copies go through registers: no cp.async copy (cp.async.ca or .cg).
    assert "mma.sync" in ptx and "wgmma.mma_async" not in ptx, case.id
    assert not re.search(r"cp\.async\.c[ag]\b", ptx), case.id
    assert_no_spills(assembled(assembler, case).log, case.id)


# Batched persistent blocks with a 16-bit C, as the bench runs them: TMA stores (C's rows
# 16-byte aligned) or row stores (2-byte aligned), at the two tiles it is tuned over.
ALIGNED_C = Spec(tensors=(("A", TensorSpec(2, 8)), ("B", TensorSpec(2, 8)),
                          ("C", TensorSpec(2, 8))))
ROWS_C = Spec(tensors=(("A", TensorSpec(2, 8)), ("B", TensorSpec(2, 8)), ("C", TensorSpec(2, 1))))


@pytest.mark.parametrize("spec, via", [(ALIGNED_C, "tma"), (ROWS_C, "rows")], ids=["tma", "rows"])
@pytest.mark.parametrize("tiles", [dict(BM=128, BN=256, BK=64, stages=3), HOPPER_TILES[1]],
                         ids=["128x256x64", "128x128x64"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_persistent_batched_kernels_with_16_bit_c_assemble(tmp_path, dtype, tiles, spec, via):
    text = (SAMPLES / "bmm.py").read_text(encoding="utf-8")
    text = text.replace("A: f16[", f"A: {dtype}[").replace("B: f16[", f"B: {dtype}[").replace(
        "C: f32[", f"C: {dtype}[").replace("] = acc\n", f"] = acc.to({dtype})\n")
    function = load_file(SAMPLES / "bmm.py", text=text)["bmm"]
    compiled = function.compile(arch="sm_90a", persistent=True, spec=spec, **tiles)
    assert compiled.kernel.schedule.epilogue.via == via
    assert compiled.kernel.schedule.roles.batches
    assert_assembles_for_sm_90a(compiled.ptx, tmp_path, "bmm")
