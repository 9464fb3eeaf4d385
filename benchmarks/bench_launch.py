"""Host time of one launch of a compiled, cached kernel: tilec's prepared launch and a plain
call, against torch.matmul and a Triton kernel, on a tiny problem so the GPU is never the
bottleneck. Each figure is the median over 20 batches of the wall time of 200 back-to-back
launches divided by 200 (the queue absorbs them; a final synchronize ends each batch).

    python benchmarks/bench_launch.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_matmul import triton_matmul  # noqa: E402
from tilec.kernel import load_file  # noqa: E402

BATCH, BATCHES = 200, 20


def host_us(launch) -> float:
    for _ in range(50):
        launch()
    torch.cuda.synchronize()
    per_launch = []
    for _ in range(BATCHES):
        start = time.perf_counter()
        for _ in range(BATCH):
            launch()
        per_launch.append((time.perf_counter() - start) / BATCH * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_launch)


def main() -> int:
    matmul = load_file(Path(__file__).resolve().parents[1] / "samples" / "matmul.py")["matmul"]
    a = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.float32)
    prepared = matmul.prepare(a, b, c)
    rows = [("tilec prepared launch", host_us(prepared)),
            ("tilec kernel(A, B, C)", host_us(lambda: matmul(a, b, c))),
            ("torch.matmul", host_us(lambda: torch.matmul(a, b))),
            ("triton kernel", host_us(lambda: triton_matmul(a, b, c, (64, 64, 32, 2, 4))))]
    for name, us in rows:
        print(f"{name:>24}: {us:6.1f} us of host time per launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
