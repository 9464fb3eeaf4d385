"""The benchmark's cases: the dtypes and their tolerances, the default sweep, sizes as the
command line writes them, and how many input sets a case rotates among."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional, Sequence

from tilec.ir.types import BF16, F16
from tilec.tools.checking import TOLERANCE

# "tf32": f32 inputs and outputs, every contender computing with TF32 tensor cores (tilec
# with f32_math="tf32", cuBLAS with TF32 allowed, Triton's default f32 dot). Not in the
# default sweep (DEFAULT_DTYPES); ask for it with --dtypes tf32.
# "i8": i8 inputs, exact i32 C (tilec's int8 family against torch._int_mm); "f8e4m3": e4m3
# inputs, f32 accumulation, f16 C (against torch._scaled_mm with unit scales). B is given k
# contiguous (a column-major [K, N], K_MAJOR_B), as 8-bit tensor-core products read it. Not
# in the default sweep; ask for them with --dtypes i8 f8e4m3.
DTYPES = ("f16", "bf16", "f32", "tf32", "i8", "f8e4m3")
DEFAULT_DTYPES = ("f16", "bf16", "f32")
TILEC_DTYPES = ("f16", "bf16", "f32", "tf32", "i8", "f8e4m3")
ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4, "tf32": 4, "i8": 1, "i32": 4, "f8e4m3": 1}
# Input dtypes whose B the sweep creates k contiguous.
K_MAJOR_B = ("i8", "f8e4m3")
# The dtype every contender writes each 8-bit input dtype's C in: i8's exact i32 sums, and
# fp8's f16 (what torch._scaled_mm writes for fp8 inference).
EXACT_OUTPUT = {"i8": "i32", "f8e4m3": "f16"}
# The relative Frobenius error each dtype may reach against float64: `tilec run`'s for f16
# (rounds at 2^-11) and bf16 (2^-8); tf32 rounds each input to 10 mantissa bits as f16 does
# (~3e-4 on random inputs, whatever K), so f16's. f32 is tighter than `tilec run` (which
# allows f16's in case of --f32-math tf32): here f32 math is exact FFMA, and through cuBLAS
# with TF32 off it stays near 1e-6.
BENCH_TOLERANCE = {"f16": TOLERANCE[F16], "bf16": TOLERANCE[BF16], "f32": 1e-4,
                   "tf32": TOLERANCE[F16], "i8": 0.0,  # int8: exact
                   # fp8 against float64 of the decoded inputs: f16 C's rounding and the
                   # tensor cores' f32 accumulation of fp8 products (not full f32 on Hopper).
                   "f8e4m3": 5e-3}
# (M, N, K): square, ragged (no tile divides them), skinny (memory-bound).
DEFAULT_SIZES = ((1024,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3,
                 (4095, 4097, 4093), (1000, 1003, 77),
                 (16, 8192, 8192), (8192, 8192, 256))
# Batched rows (Bt, M, N, K): Bt products C[b] = A[b] @ B[b] against torch.bmm, in the
# default sweep's f16 only (BATCHED_DTYPES); --sizes takes them as BtxMxNxK.
DEFAULT_BATCHED_SIZES = ((32, 1024, 1024, 1024), (8, 4095, 4097, 128))
BATCHED_DTYPES = ("f16",)
# Never batched: their cuBLAS references (torch._int_mm, torch._scaled_mm) take matrices.
TWO_D_DTYPES = ("i8", "f8e4m3")
SKINNY_RATIO = 16  # a shape is skinny when its longest side is 16x its shortest or more

# Rotation: enough input sets to cover 3x the L2 cache, at least two, at most MAX_SETS.
L2_FACTOR = 3
MIN_SETS, MAX_SETS = 2, 512

Size = tuple[int, ...]  # (M, N, K), or (Bt, M, N, K) for a batch of products


@dataclass(frozen=True)
class Case:
    """One product C[M, N] = A[M, K] @ B[K, N] in one dtype; with ``batch`` > 1, that many
    products C[b] = A[b] @ B[b] (3-D arrays, torch.bmm's)."""

    M: int  # noqa: N815  (the problem's own names)
    N: int  # noqa: N815
    K: int  # noqa: N815
    dtype: str
    batch: int = 1

    @property
    def shape(self) -> str:
        return size_text(self.size)

    @property
    def size(self) -> Size:
        sides = (self.M, self.N, self.K)
        return (self.batch, *sides) if self.batch > 1 else sides

    @property
    def batched(self) -> bool:
        return self.batch > 1

    def _shape(self, rows: int, cols: int) -> tuple[int, ...]:
        return (self.batch, rows, cols) if self.batched else (rows, cols)

    @property
    def a_shape(self) -> tuple[int, ...]:
        return self._shape(self.M, self.K)

    @property
    def b_shape(self) -> tuple[int, ...]:
        return self._shape(self.K, self.N)

    @property
    def c_shape(self) -> tuple[int, ...]:
        return self._shape(self.M, self.N)

    @property
    def b_strides(self) -> tuple[int, ...]:
        """B's element strides as the sweep draws it: row-major, or k contiguous (a
        column-major [K, N], each batch's after the last) for K_MAJOR_B dtypes."""
        if self.dtype in K_MAJOR_B:
            return ((self.K * self.N,) if self.batched else ()) + (1, self.K)
        from tilec.runtime.arrays import c_strides
        return c_strides(self.b_shape)

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
        return 2.0 * self.batch * self.M * self.N * self.K

    def nbytes(self, out_dtype: str) -> int:
        """The fewest bytes a product moves: A and B read once, C written once."""
        return self.batch * ((self.M * self.K + self.K * self.N) * ITEMSIZE[self.dtype]
                             + self.M * self.N * ITEMSIZE[out_dtype])


def size_text(size: Size) -> str:
    """``4096`` for a cube, else ``16x8192x8192`` (M x N x K), or ``32x1024x1024x1024``
    (Bt x M x N x K) for a batch: as ``--sizes`` takes it."""
    if len(size) == 4:
        return "x".join(map(str, size))
    M, N, K = size  # noqa: N806  (the problem's own names)
    return str(M) if M == N == K else f"{M}x{N}x{K}"


def parse_sizes(text: str) -> list[Size]:
    """``4096``, ``16x8192x8192`` (M x N x K), ``32x1024x1024x1024`` (Bt x M x N x K: a
    batch) or a comma-separated list of them."""
    sizes: list[Size] = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            values = [int(part) for part in parts]
        except ValueError:
            values = []
        if len(values) not in (1, 3, 4) or min(values, default=0) < 1:
            raise argparse.ArgumentTypeError(f"expected a size N, MxNxK or BtxMxNxK, got "
                                             f"{item!r}")
        sizes.append((values[0],) * 3 if len(values) == 1 else tuple(values))
    return sizes


def sweep(sizes: Optional[Sequence[Sequence[Size]]], dtypes: Optional[Sequence[str]]) \
        -> list[Case]:
    """The cases in order: each size in each dtype (defaults: the whole default sweep, whose
    batched sizes come last, in BATCHED_DTYPES only)."""
    flat = [size for group in sizes for size in group] if sizes else list(DEFAULT_SIZES)
    cases = [_case(size, dtype) for size in flat for dtype in (dtypes or DEFAULT_DTYPES)]
    if not sizes:
        cases += [_case(size, dtype) for size in DEFAULT_BATCHED_SIZES
                  for dtype in (dtypes or DEFAULT_DTYPES) if dtype in BATCHED_DTYPES]
    return cases


def _case(size: Size, dtype: str) -> Case:
    if len(size) == 4:
        return Case(size[1], size[2], size[3], dtype, batch=size[0])
    return Case(size[0], size[1], size[2], dtype)


def rotation_sets(case: Case, l2_bytes: int) -> int:
    """Input sets to rotate among so that one pass over them covers 3x the L2 cache."""
    per_set = case.nbytes("f32")  # the largest output any contender writes
    return max(MIN_SETS, min(MAX_SETS, -(-L2_FACTOR * l2_bytes // per_set)))
