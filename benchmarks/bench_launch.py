"""Host time of one launch of a compiled, cached kernel: tilec's prepared launch and a plain
call, against torch.matmul and a Triton kernel, on a tiny problem so the GPU is never the
bottleneck. Each figure is the median over 20 batches of the wall time of 200 back-to-back
launches divided by 200 (the queue absorbs them; a final synchronize ends each batch).

    python benchmarks/bench_launch.py

Needs a GPU and torch (``pip install -e '.[bench]'``, which brings Triton too; without Triton
its row is left out). Exit status 2, with the reason, when either is missing.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tilec.runtime.driver import gpu_unavailable_reason, has_gpu  # noqa: E402

INSTALL_HINT = "pip install -e '.[bench]'"
BATCH, BATCHES = 200, 20


torch: Optional[ModuleType] = None  # imported by main() once a GPU is known to be there


def missing_requirement() -> Optional[str]:
    """Why this benchmark cannot run here (no GPU, no torch), or None. The GPU is asked
    first: on a machine without one, installing torch would not help."""
    if not has_gpu():
        return f"no GPU ({gpu_unavailable_reason()})"
    try:
        import torch as _torch  # noqa: F401
    except ImportError as err:
        return f"needs torch ({err}): {INSTALL_HINT}"
    return None


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
    global torch
    reason = missing_requirement()
    if reason is not None:
        print(f"bench_launch.py: {reason}", file=sys.stderr)
        return 2
    import torch

    from bench_matmul import triton_matmul
    from tilec.kernel import load_file
    from tilec.tools.bench import _triton_version
    matmul = load_file(Path(__file__).resolve().parents[1] / "samples" / "matmul.py")["matmul"]
    a = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 128, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.float32)
    prepared = matmul.prepare(a, b, c)
    rows = [("tilec prepared launch", host_us(prepared)),
            ("tilec kernel(A, B, C)", host_us(lambda: matmul(a, b, c))),
            ("torch.matmul", host_us(lambda: torch.matmul(a, b)))]
    if _triton_version() is not None:
        rows.append(("triton kernel",
                     host_us(lambda: triton_matmul(a, b, c, (64, 64, 32, 2, 4)))))
    else:
        print(f"bench_launch.py: Triton is not installed ({INSTALL_HINT}); no Triton row",
              file=sys.stderr)
    for name, us in rows:
        print(f"{name:>24}: {us:6.1f} us of host time per launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
