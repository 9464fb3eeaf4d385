"""The weight-only quantization rows of ``tilec bench --w8a16``: C = (A @ W.T) * scale with
f16 activations A [M, K], int8 weights W [N, K] (an nn.Linear weight, k contiguous), one f32
scale per output channel and f16 C. Each contender is checked against float64 (relative
Frobenius error, f16's tolerance) and timed as the matmul rows are
(:func:`tilec.benchmarking.check_and_time.measure`); the TFLOP/s count the product's flops.

Contenders:

- tilec: ``samples/w8a16.py``: W's tiles stay int8 in shared memory and are converted to
  f16 in registers (half the bytes of W read), the scale applied in the epilogue; where
  many rows re-read W on sm_90a, the launch converts W to f16 once and the product runs on
  wgmma (``passes/dequantize.py``), both timed;
- torch: dequantize, then ``torch.matmul`` (cuBLAS): ``W.to(f16) * scale`` into an f16
  weight (scale rounded to f16 once, at prepare), then ``A @ that.T`` into C: what an eager
  model without a fused int8 kernel runs. The dequantized weight goes out and comes back.

The skinny row (16 x 8192 x 8192, one decode step of an LLM layer) is where weight-only
quantization pays: the time is reading W, and int8 halves it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional, Sequence

from tilec.benchmarking.array_libraries import Arrays, to_float64
from tilec.benchmarking.cases import Case, size_text
from tilec.benchmarking.check_and_time import run_row
from tilec.benchmarking.contenders import (Contender, Run, TilecContender, TorchOnlyContender,
                                           describe_compiled)
from tilec.benchmarking.tuning import tuned_config
from tilec.launch.packing import DEQUANTIZE_MIN_ROWS
from tilec.benchmarking.results import CaseResult, References
from tilec.benchmarking.timing import Timer

# The default sweep of --w8a16: a decode step, a batch of 512 rows (wgmma's register form
# on sm_90a: passes/swap_product.py), and a square product (W converted at launch).
W8A16_SIZES = ((16, 8192, 8192), (512, 8192, 8192), (4096, 4096, 4096))
W8A16_SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "w8a16.py"
# Rows with few of them (decode steps), by the most rows each configuration takes. The time
# is reading W, so the blocks keep deep K steps in flight. 16 rows (measured on the H100,
# 16x8192x8192, one call, two rounds each): one m16 granule a block, 64 columns, 256-deep K
# steps in 4 stages (64 KiB) and the K loop split in two, so 256 blocks stream W: 31.6 us,
# 0.71 of the memory bound, against 46.4 us (0.48) for the 32-row configuration below;
# split 3 or 4 and 128-column blocks gave 32.7-35.9 us. Up to 64 rows: 32-row blocks (the
# m16 granule twice), 64 columns a block, 4 stages of 128 (not tuned on a GPU yet).
SKINNY_CONFIGS = ((16, dict(BM=16, BN=64, BK=256, stages=4, warps=(1, 2), split_k=2)),
                  (64, dict(BM=32, BN=64, BK=128, stages=4, warps=(1, 2))))
# sm_90a, by the most rows each takes, below DEQUANTIZE_MIN_ROWS: BK 128, so the
# swap_product pass computes C.T = W @ A.T and the int8 weights feed wgmma from registers
# (the wgmma_rs family; BM is then the activation rows of a tile, BN the weight rows). H200,
# one call, TFLOP/s against the mma.sync configuration above and torch's dequantize +
# matmul (benchmarks/NOTES.md, session 22): 64x8192x8192 64x64 st4 229.0 (skinny 188.0);
# 128x8192x8192 128x64 st4 persistent 398.6 (154.1, torch 46.5); 256x8192x8192 128x128 st4
# persistent 577.9 (304.0); 512x8192x8192 256x64 st3 594.0 (360.6, torch 164.2);
# 768x8192x8192 625.7 (354.4). Not measured below 64 rows: the skinny configurations keep
# 32 and fewer. Session 23 (TMA's 64-byte swizzle for W's 64-byte rows), the same shared
# bytes in half-deep stages twice as many, H200, two rounds in one call: 256x64x64 st6
# 634.6, 634.8 against 592.9, 596.0 (512 rows) and 645.4, 645.7 against 627.2, 627.7 (768);
# but 64 rows 212.5 against 227.1, 128 rows 377.5 against 396.2, 256 rows level (571.4-574.8).
SWAPPED_CONFIGS = ((32, None),
                   (64, dict(BM=64, BN=64, BK=128, stages=4)),
                   (128, dict(BM=128, BN=64, BK=128, stages=4, persistent=True)),
                   (384, dict(BM=128, BN=128, BK=128, stages=4, persistent=True)),
                   (DEQUANTIZE_MIN_ROWS - 1, dict(BM=256, BN=64, BK=64, stages=6)))


@dataclass(frozen=True)
class W8A16Case(Case):
    """C = (A @ W.T) * scale for one size; ``dtype`` is the activations' (f16)."""

    @property
    def shape(self) -> str:
        return size_text((self.M, self.N, self.K)) + " w8a16"

    def weight_bytes(self) -> int:
        """What the kernel must read and write at least: A (f16), W (i8), scale (f32), C."""
        return 2 * self.M * self.K + self.N * self.K + 4 * self.N + 2 * self.M * self.N


def w8a16_cases(sizes: Optional[Sequence[Sequence[tuple[int, int, int]]]]) -> list[W8A16Case]:
    flat = [size for group in sizes for size in group] if sizes else list(W8A16_SIZES)
    return [W8A16Case(*size[-3:], "f16") for size in flat]


def w8a16_reference(arrays: Arrays, a: Any, w: Any, scale: Any) -> Any:
    """(A @ W.T) * scale in float64."""
    return arrays.reference(a, w.T) * to_float64(scale)


def tilec_config(case: Case, arch: Optional[str] = None) -> dict[str, Any]:
    """The sample's configuration for a case on a target: on sm_90a, below
    :data:`DEQUANTIZE_MIN_ROWS` rows, the swapped product's (:data:`SWAPPED_CONFIGS`); the
    skinny one for few rows; where the launch converts W to f16 first (sm_90a, many rows:
    :func:`tilec.launch.packing.convert_to`), the f16 product's tuned one; else the
    sample's defaults (128x128x64, 3 stages)."""
    if arch == "sm_90a":
        swapped = next((config for rows, config in SWAPPED_CONFIGS if case.M <= rows), None)
        if swapped is not None:
            return dict(swapped)
    skinny = next((dict(config) for rows, config in SKINNY_CONFIGS if case.M <= rows), None)
    if skinny is not None:
        return skinny
    if arch == "sm_90a" and case.M >= DEQUANTIZE_MIN_ROWS:
        return tuned_config(Case(case.M, case.N, case.K, "f16"), arch)
    return {}


class TilecW8A16(TilecContender):
    """tilec's samples/w8a16.py."""

    def w8a16_kernel(self) -> Any:
        key = ("w8a16", "f16", False)
        if key not in self._kernels:
            from tilec.kernel import load_file
            self._kernels[key] = load_file(W8A16_SAMPLE)["w8a16"]
        return self._kernels[key]

    def unsupported(self, case: Case) -> Optional[str]:
        return None if case.dtype == "f16" else f"no {case.dtype} w8a16 sample"

    def config(self, case: Case) -> dict[str, Any]:
        # --pack off keeps W in int8: the sample's own configuration, not the f16 product's.
        return tilec_config(case, self.arch() if self.options.get("pack") != "off" else None)

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, ...]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        kernel = self.w8a16_kernel()
        kwargs = {**(self.config(case) if not self.consts else {}),
                  **self.consts, **self.options}
        launches = [kernel.prepare(a, w, scale, c, **kwargs)
                    for (a, w, scale), c in zip(inputs, outputs)]
        first = launches[0]
        # A converted W is in the packing's description; else W stays int8 in the kernel.
        in_registers = "W" not in first.packing.names
        return (lambda i: launches[i]()), (describe_compiled(first.compiled, first.packing,
                                                             first.tile_axes)
                                           + (", W int8 in shared memory, f16 in registers"
                                              if in_registers else ""))


class TorchDequantize(TorchOnlyContender):
    name = "torch"
    needs_torch = "the torch rows run on torch tensors"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, ...]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        torch = self.arrays.torch  # type: ignore[attr-defined]
        scales = [scale.to(torch.float16)[:, None] for _, _, scale in inputs]

        def run(i: int) -> None:
            (a, w, _), c = inputs[i], outputs[i]
            torch.matmul(a, (w.to(torch.float16) * scales[i]).t(), out=c)
        return run, "W.to(f16) * scale (f16), then torch.matmul(A, that.T), C f16"


def w8a16_contenders(arrays: Arrays, consts: dict[str, Any],
                     options: dict[str, Any]) -> list[Contender]:
    return [TilecW8A16(consts, options), TorchDequantize(arrays)]


def run_w8a16_case(case: Case, arrays: Arrays, contenders: Sequence[Contender],
                   timer: Timer, references: Optional[References]) -> CaseResult:
    """One w8a16 row, as :func:`tilec.benchmarking.check_and_time.run_case` runs a matmul
    row, with int8 weights and a scale vector among each input set's arrays."""
    assert isinstance(case, W8A16Case)
    return run_row(case, arrays, contenders, timer, references, dtypes=("i8", case.dtype),
                   draw=lambda: (arrays.random((case.M, case.K), case.dtype),
                                 arrays.random((case.N, case.K), "i8"),
                                 arrays.random((case.N,), "f32") * (1.0 / 64)),
                   reference=partial(w8a16_reference, arrays),
                   bound_bytes=case.weight_bytes())
