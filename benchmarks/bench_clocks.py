"""The SM clock and board power under each load the f16 speed target compares: the mma.sync
ceiling loop (registers only), tilec's matmul and cuBLAS's, at one square size.

Why: the target is a fraction of the ceiling loop's TFLOP/s, and a GPU lowers its clock
when a load draws more power. A matmul that moves operands through L2, shared memory and
registers cannot run at the clock of a loop that touches nothing but registers, so part of
the gap to the ceiling is clock, not code. This prints how much.

Each load runs back to back for a few seconds while ``nvidia-smi`` samples ``clocks.sm`` and
``power.draw`` every 50 ms; the first half second (the ramp) is dropped. Per load: median
clock and power, TFLOP/s over the whole run, and TFLOP/s per GHz of median clock.

    python benchmarks/bench_clocks.py [--size 4096] [--seconds 3]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tilec.benchmarking.ceilings import MMA_TRIPS, MmaLoop  # noqa: E402
from tilec.benchmarking.contenders import sample_kernel  # noqa: E402
from tilec.benchmarking.tuning import tuned_config  # noqa: E402
from tilec.benchmarking.cases import Case  # noqa: E402

SAMPLE_MS = 50
RAMP_S = 0.5
BATCH = 20  # launches queued between host checks of the elapsed time


def sampled(load, seconds: float) -> tuple[float, list[tuple[float, float]]]:
    """Run ``load()`` back to back for ``seconds``; (launches per second, [(MHz, W)])."""
    command = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
               f"-lms={SAMPLE_MS}", f"--id={torch.cuda.current_device()}"]
    sampler = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    start = time.perf_counter()
    launches = 0
    while time.perf_counter() - start < seconds:
        for _ in range(BATCH):
            load()
        launches += BATCH
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    sampler.terminate()
    out, _ = sampler.communicate()
    samples = [tuple(float(x) for x in line.split(",")) for line in out.splitlines() if line]
    skip = int(RAMP_S * 1000 / SAMPLE_MS)
    return launches / elapsed, [(c, w) for c, w in samples[skip:]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    n = args.size
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c16 = torch.empty(n, n, device="cuda", dtype=torch.float16)
    from tilec.options import target_arch
    from tilec.runtime import current_device
    arch = target_arch(current_device().compute_capability)  # sm_90a on Hopper: wgmma
    # C in f16, as cuBLAS writes it (tilec bench's default --c-dtype inputs).
    tilec = sample_kernel("f16", "f16").prepare(a, b, c16,
                                                **tuned_config(Case(n, n, n, "f16"), arch))
    loop = MmaLoop("f16")
    loop_trips = MMA_TRIPS * 8
    matmul_flops = 2 * n**3
    loads = {
        "mma.sync loop": (lambda: loop.launch(loop_trips), loop.flops(loop_trips)),
        f"tilec {n}^3": (tilec, matmul_flops),
        f"cuBLAS {n}^3": (lambda: torch.matmul(a, b, out=c16), matmul_flops),
    }
    print(f"{torch.cuda.get_device_name()}: {args.seconds:g} s per load, nvidia-smi every "
          f"{SAMPLE_MS} ms, first {RAMP_S:g} s dropped")
    print(f"{'load':<16} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'TFLOP/s/GHz':>12}")
    for name, (load, flops) in loads.items():
        load()
        torch.cuda.synchronize()
        rate, samples = sampled(load, args.seconds)
        if not samples:
            print(f"{name:<16} nvidia-smi gave no samples")
            continue
        mhz = statistics.median(s[0] for s in samples)
        watts = statistics.median(s[1] for s in samples)
        tflops = rate * flops / 1e12
        print(f"{name:<16} {tflops:8.1f} {mhz:7.0f} {watts:6.0f} {tflops / mhz * 1e3:12.1f}")
    loop.check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
