"""In-process compile time of the llvm backend against tilec's own PTX backend: for each
target, the median over ``--runs`` compiles (after one uncounted warm-up that loads llvmlite
and creates the target machine) of the backend step alone (``Compiled.times["backend"]``:
the LLVM IR written, parsed, optimised and emitted as PTX) and of LLVM's part of it
(``times["llvm"]``), beside the PTX backend's backend step. The in-memory and disk caches
are bypassed (every compile runs the backend).

    python benchmarks/bench_llvm_compile.py [--file samples/matmul.py] [--runs 5] [--opt 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["TILEC_DISK_CACHE"] = "0"

from tilec.compiler import _CACHE  # noqa: E402
from tilec.kernel import load_file  # noqa: E402

ARCHS = ("sm_80", "sm_86", "sm_90", "sm_90a")


def median_ms(fn, arch: str, runs: int, **options) -> tuple[float, float]:
    backend, llvm = [], []
    for run in range(runs + 1):
        _CACHE.clear()
        compiled = fn.compile(arch=arch, **options)
        if run:
            backend.append(compiled.times["backend"])
            llvm.append(compiled.times.get("llvm", 0.0))
    return statistics.median(backend) * 1e3, statistics.median(llvm) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=ROOT / "samples" / "matmul.py")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--opt", type=int, default=3, choices=(0, 1, 2, 3))
    args = parser.parse_args()
    for name, fn in load_file(args.file).items():
        for arch in ARCHS:
            ptx, _ = median_ms(fn, arch, args.runs)
            total, llvm = median_ms(fn, arch, args.runs, backend="llvm", llvm_opt=args.opt)
            print(f"{name} {arch}: llvm backend {total:6.1f} ms (LLVM {llvm:6.1f} ms, "
                  f"-O{args.opt}); ptx backend {ptx:6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
