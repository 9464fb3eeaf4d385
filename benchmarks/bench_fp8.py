"""fp8 GEMMs as the default `tilec bench` rows do not time them: e4m3 outputs as well as f16
ones, and both ways of summing the products (fast: the tensor cores' own accumulator over
the whole K loop; promoted: each K step added into f32), against torch._scaled_mm writing
the same output with use_fast_accum True and False. One process, the same e4m3 inputs for
every contender, the bench's timer (device events after an L2 flush, medians); each output
is checked against float64 of the decoded inputs and its error printed.

Why: an fp8 output and the accumulation change both speed and accuracy, and only a
comparison at the same numerics says anything (tilec's fast sums have cuBLAS's fast-mode
errors, its promoted ones cuBLAS's default errors; benchmarks/NOTES.md, session 16).

    python benchmarks/bench_fp8.py [--sizes 4096 8192]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tilec.benchmarking.array_libraries import TorchArrays  # noqa: E402
from tilec.benchmarking.timing import make_timer  # noqa: E402
from tilec.kernel import load_file  # noqa: E402

TUNED = dict(BM=128, BN=256, BK=128, stages=4, raster_group=8, persistent=True)
PROMOTED = dict(BM=128, BN=192, BK=128, stages=4, raster_group=8, persistent=True,
                fp8_accumulation="promoted")
# An 8-bit C is staged for TMA stores in 128-column slabs, which 192 columns are not (it would
# go out by direct byte stores: 803 against 1232 TFLOP/s at 4096^3).
PROMOTED_8_BIT_C = {**PROMOTED, "BN": 128, "stages": 5}
OUTPUTS = {"f16": torch.float16, "f8e4m3": torch.float8_e4m3fn}


def kernel(out: str):
    """samples/fp8_gemm.py writing C in ``out``."""
    text = (ROOT / "samples" / "fp8_gemm.py").read_text()
    text = text.replace("C: f16[M, N]", f"C: {out}[M, N]").replace(".to(f16)", f".to({out})")
    return load_file(ROOT / "samples" / "fp8_gemm.py", text=text)["fp8_gemm"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    args = parser.parse_args()
    arrays = TorchArrays(0)
    timer, timer_name = make_timer(arrays, quick=False)
    print(f"{torch.cuda.get_device_name()}; timer: {timer_name}; TFLOP/s (rel. error)")
    one = torch.ones((), device="cuda")
    for size in args.sizes:
        generator = torch.Generator(device="cuda").manual_seed(size)
        a = torch.randn(size, size, device="cuda", generator=generator).to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device="cuda", generator=generator).to(torch.float8_e4m3fn)
        scale = 1 / size ** 0.5  # keeps the outputs inside e4m3's 448
        reference = scale * (a.double() @ b.double().t())
        rows = []

        def measure(label: str, run, c) -> None:
            ms = timer(run)
            error = float(torch.linalg.norm(c.double() - reference)
                          / torch.linalg.norm(reference))
            rows.append(f"{label:<34} {2 * size ** 3 / ms / 1e9:8.1f}  ({error:.3g})")

        for out, dtype in OUTPUTS.items():
            promoted = PROMOTED_8_BIT_C if dtype.itemsize == 1 else PROMOTED
            for mode, config in (("fast", TUNED), ("promoted", promoted)):
                c = torch.full((size, size), float("nan"), device="cuda").to(dtype)
                launch = kernel(out).prepare(a, b, c, scale, 1.0, arch="sm_90a", **config)
                measure(f"tilec {mode}, C {out}", launch, c)
            scale_a = torch.tensor(scale, device="cuda")
            for fast in (True, False):
                c = torch.empty((size, size), device="cuda", dtype=dtype)
                measure(f"torch._scaled_mm fast={fast}, C {out}",
                        lambda c=c, fast=fast: torch._scaled_mm(
                            a, b.t(), scale_a=scale_a, scale_b=one, out_dtype=c.dtype, out=c,
                            use_fast_accum=fast), c)
        print(f"{size}^3\n  " + "\n  ".join(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
