"""In-process compile time, source to PTX, of the kernels the tuned bench rows run: for each,
the median over ``--runs`` compiles in a process that has imported tilec and compiled once
already, with the compile caches (in memory and on disk) bypassed, and per pass. Two
figures a kernel: "new", as a kernel the process has not seen (every memo of the passes and
the backend cleared before each compile: the swizzle pass's conflict scores, the layouts'
bank patterns), and "again", the same kernel with those memos kept (an autotuner's or a
notebook's second compile of a tile it has scored).

    python benchmarks/bench_compile.py [--runs 9]

Issue 11 asks for under 50 ms for a Hopper kernel.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["TILEC_DISK_CACHE"] = "0"

from tilec.compiler import _CACHE  # noqa: E402
from tilec.kernel import load_file  # noqa: E402

# (label, sample, kernel, compile arguments): the tuned bench configurations.
KERNELS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("sm_90 mma.sync 128x256x128 st2", "matmul.py", "matmul",
     dict(arch="sm_90", BM=128, BN=256, BK=128, stages=2, warps=(2, 4))),
    ("sm_90a wgmma 128x256x64 st3 persistent", "matmul.py", "matmul",
     dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, persistent=True, raster_group=16)),
    ("sm_90a wgmma 192x192x64 cluster 2", "matmul.py", "matmul",
     dict(arch="sm_90a", BM=192, BN=192, BK=64, stages=3, persistent=True, cluster=2)),
    ("sm_90a bias+gelu 128x256x64 st3 persistent", "gemm_gelu.py", "gemm_gelu",
     dict(arch="sm_90a", BM=128, BN=256, BK=64, stages=3, persistent=True)),
    ("sm_90a wgmma8 e4m3 128x256x128 st4 persistent", "fp8_gemm.py", "fp8_gemm",
     dict(arch="sm_90a", BM=128, BN=256, BK=128, stages=4, persistent=True, raster_group=8)),
)
PREFIX = "tilec"  # the passes and the backend are tilec.passes and tilec.backend


def clear_memos() -> None:
    """Every functools cache of tilec's modules (passes and backend among them)."""
    for name, module in list(sys.modules.items()):
        if name != PREFIX and not name.startswith(PREFIX + "."):
            continue
        for value in list(vars(module).values()):
            if callable(getattr(value, "cache_clear", None)) \
                    and getattr(value, "__module__", name) == name:
                value.cache_clear()


def timed(fn, arguments: dict[str, Any], runs: int, new: bool) -> tuple[float, dict]:
    totals, stages = [], {}
    for _ in range(runs):
        _CACHE.clear()
        if new:
            clear_memos()
        compiled = fn.compile(**arguments)
        totals.append(sum(compiled.times.values()))
        for stage, seconds in compiled.times.items():
            stages.setdefault(stage, []).append(seconds)
    return statistics.median(totals) * 1e3, {
        stage: statistics.median(values) * 1e3 for stage, values in stages.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    for label, sample, name, arguments in KERNELS:
        fn = load_file(ROOT / "samples" / sample)[name]
        fn.compile(**arguments)  # the imports and the lowering, not counted
        new, stages = timed(fn, arguments, args.runs, new=True)
        again, _ = timed(fn, arguments, args.runs, new=False)
        slowest = sorted(stages.items(), key=lambda item: -item[1])[:3]
        print(f"{label:48s} new {new:6.1f} ms, again {again:6.1f} ms  (new: "
              + ", ".join(f"{stage} {ms:.1f}" for stage, ms in slowest) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
