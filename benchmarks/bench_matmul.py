"""tilec's matmul against cuBLAS (torch.matmul) and Triton, timed in one process: a thin
wrapper around ``tilec bench`` (tilec/bench.py holds the one implementation), keeping this
script's flags and its default of one 4096^3 f16 product.

Each contender is checked against a float64 reference (outputs poisoned with NaN first)
before it is timed on inputs rotated among enough sets to exceed L2; times are medians of
device-event timings. The copy bandwidth and the mma.sync ceiling are measured first.

    python benchmarks/bench_matmul.py --sizes 4096 --dtypes f16 bf16 --json out.json
    python benchmarks/bench_matmul.py --sizes 1024 2048 --const BM=128 BN=64 --stages 4

``tilec bench`` runs the whole default sweep (square, ragged and skinny shapes, f16, bf16
and f32) and also takes --autotune, --plot FILE.png and --quick, as does this script.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tilec.tools import bench  # noqa: E402
from tilec.tools.bench import triton_matmul  # noqa: E402,F401  (bench_launch.py imports it here)


def main(argv: Optional[Sequence[str]] = None) -> int:
    return bench.main(argv, prog="bench_matmul.py", default_sizes=["4096"],
                      default_dtypes=["f16"])


if __name__ == "__main__":
    sys.exit(main())
