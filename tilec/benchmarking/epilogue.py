"""The fused-epilogue rows of ``tilec bench --epilogue bias_gelu``: "f16 GEMM + bias + GELU",
C = gelu(A @ B + bias) with f16 A, B, bias and C and GELU's erf form (torch's default). Each
contender is checked against float64 (relative Frobenius error, f16's tolerance) and timed
as the matmul rows are (:func:`tilec.benchmarking.check_and_time.measure`); the TFLOP/s
count the product's flops alone.

Contenders:

- tilec: ``samples/gemm_gelu.py``, the epilogue fused, in the tuned configuration of the
  plain f16 matmul of the same size (:func:`tilec.benchmarking.tuning.tuned_config`);
- torch: ``torch.matmul`` into C (cuBLAS), then torch's epilogue on C: ``C += bias`` and GELU
  in place (``aten.gelu_``), the unfused pair an eager model runs: C goes out and comes back
  twice more;
- Triton: the benchmark's Triton matmul with the same epilogue fused
  (:func:`tilec.benchmarking.triton_kernel.triton_matmul_bias_gelu`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tilec.benchmarking.array_libraries import Arrays, to_float64
from tilec.benchmarking.cases import ITEMSIZE, Case, size_text
from tilec.benchmarking.check_and_time import run_row
from tilec.benchmarking.contenders import (Contender, Run, TilecContender, TorchOnlyContender,
                                           describe_compiled)
from tilec.benchmarking.tuning import tuned_config
from tilec.benchmarking.results import CaseResult, References
from tilec.benchmarking.timing import Timer
from tilec.benchmarking.triton_kernel import TRITON_CONFIG, triton_matmul_bias_gelu

# The epilogues a row can fuse, by their --epilogue name: how the shape column says it.
EPILOGUES = {"bias_gelu": "+bias+gelu"}
EPILOGUE_DTYPES = ("f16",)
EPILOGUE_SIZES = ((4096,) * 3,)  # the default sweep of --epilogue
GELU_SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gemm_gelu.py"


@dataclass(frozen=True)
class EpilogueCase(Case):
    """C = epilogue(A @ B) for one size and dtype."""

    epilogue: str = "bias_gelu"

    @property
    def shape(self) -> str:
        return size_text((self.M, self.N, self.K)) + EPILOGUES[self.epilogue]

    def product(self) -> Case:
        """The plain product of the same size: whose tuned configuration tilec runs."""
        return Case(self.M, self.N, self.K, self.dtype)


def epilogue_cases(sizes: Optional[Sequence[Sequence[tuple[int, int, int]]]],
                   epilogue: str) -> list[EpilogueCase]:
    flat = [size for group in sizes for size in group] if sizes else list(EPILOGUE_SIZES)
    # epilogue by keyword: the field after dtype is Case's batch count.
    return [EpilogueCase(*size, dtype, epilogue=epilogue) for size in flat
            for dtype in EPILOGUE_DTYPES]


def _erfc(x: Any) -> Any:
    """erfc in the array library of ``x`` (torch, cupy, or numpy for the CPU tests)."""
    library = type(x).__module__.partition(".")[0]
    if library == "torch":
        import torch
        return torch.special.erfc(x)
    if library == "cupy":
        from cupyx.scipy.special import erfc
        return erfc(x)
    import numpy as np
    return np.vectorize(math.erfc, otypes=[np.float64])(x)


def bias_gelu_reference(arrays: Arrays, a: Any, b: Any, bias: Any) -> Any:
    """gelu(A @ B + bias) in float64, as 0.5 x erfc(-x / sqrt 2) (no cancellation)."""
    x = arrays.reference(a, b) + to_float64(bias)
    return 0.5 * x * _erfc(x * (-1.0 / math.sqrt(2.0)))


class TilecEpilogue(TilecContender):
    """tilec's samples/gemm_gelu.py, the matmul rows' configuration and flags."""

    def epilogue_kernel(self) -> Any:
        if ("epilogue", "bias_gelu") not in self._kernels:
            from tilec.kernel import load_file
            self._kernels["epilogue", "bias_gelu"] = load_file(GELU_SAMPLE)["gemm_gelu"]
        return self._kernels["epilogue", "bias_gelu"]

    def unsupported(self, case: Case) -> Optional[str]:
        return None if case.dtype in EPILOGUE_DTYPES else f"no {case.dtype} epilogue sample"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, ...]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        assert isinstance(case, EpilogueCase)
        kernel = self.epilogue_kernel()
        fixed = {**self.consts, **self.options}
        tuned = {} if self.consts else tuned_config(case.product(), self.arch())
        kwargs = {**tuned, **fixed}
        launches = [kernel.prepare(a, b, c, bias, **kwargs)
                    for (a, b, bias), c in zip(inputs, outputs)]
        first = launches[0]
        return (lambda i: launches[i]()), (describe_compiled(first.compiled, first.packing,
                                                             first.tile_axes)
                                           + f", C {self.out_dtype(case)}, epilogue fused")


def _gelu_in_place(torch: Any) -> tuple[Callable[[Any], Any], str]:
    """aten's in-place GELU, else GELU out of place copied back (one more pass over C)."""
    try:
        gelu_ = torch.ops.aten.gelu_
    except (AttributeError, RuntimeError):
        return (lambda c: c.copy_(torch.nn.functional.gelu(c))), "gelu copied back"
    return gelu_, "gelu_ in place"


class TorchUnfused(TorchOnlyContender):
    name = "torch"
    needs_torch = "the torch epilogue runs on torch tensors"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, ...]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        torch = self.arrays.torch  # type: ignore[attr-defined]
        gelu, how = _gelu_in_place(torch)

        def run(i: int) -> None:
            (a, b, bias), c = inputs[i], outputs[i]
            torch.matmul(a, b, out=c)
            c.add_(bias)
            gelu(c)
        return run, f"torch.matmul, then C += bias and {how}, C {self.out_dtype(case)}"


class TritonFused(TorchOnlyContender):
    name = "Triton"
    needs_torch = "the Triton kernel runs on torch tensors"

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, ...]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        config = TRITON_CONFIG[case.dtype]

        def run(i: int) -> None:
            (a, b, bias), c = inputs[i], outputs[i]
            triton_matmul_bias_gelu(a, b, bias, c, config)
        bm, bn, bk, stages, warps = config
        return run, (f"{bm}x{bn}x{bk} warps {warps} stages {stages}, C "
                     f"{self.out_dtype(case)}, epilogue fused")


def epilogue_contenders(arrays: Arrays, consts: dict[str, Any], options: dict[str, Any],
                        triton: bool) -> list[Contender]:
    contenders: list[Contender] = [TilecEpilogue(consts, options), TorchUnfused(arrays)]
    return contenders + ([TritonFused(arrays)] if triton else [])


def run_epilogue_case(case: Case, arrays: Arrays, contenders: Sequence[Contender],
                      timer: Timer, references: Optional[References]) -> CaseResult:
    """One epilogue row, as :func:`tilec.benchmarking.check_and_time.run_case` runs a matmul
    row, with a bias vector among each input set's arrays and the epilogue's float64
    reference."""
    assert isinstance(case, EpilogueCase)
    return run_row(case, arrays, contenders, timer, references, dtypes=(case.dtype,),
                   draw=lambda: (arrays.random((case.M, case.K), case.dtype),
                                 arrays.random((case.K, case.N), case.dtype),
                                 arrays.random((case.N,), case.dtype)),
                   reference=partial(bias_gelu_reference, arrays),
                   bound_bytes=(case.nbytes(contenders[0].out_dtype(case))
                                + case.N * ITEMSIZE[case.dtype]))  # the bias
