"""tilec's matmul against cuBLAS (torch.matmul) and Triton, timed in one process.

Each contender runs on fresh random inputs, rotated among several sets so that L2 does not
flatter anyone, and is checked against a float64 reference (output poisoned with NaN first)
before it is timed. Times are medians of device-event timings (triton.testing.do_bench).

    python benchmarks/bench_matmul.py --sizes 4096 --dtypes f16 bf16 --json out.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tilec.kernel import TileFunction  # noqa: E402
from tilec.kernel import load_file  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TORCH_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
L2_BYTES = 60 * 2**20


@triton.jit
def _triton_matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per_group = GROUP * grid_n
    first_m = (pid // per_group) * GROUP
    rows = min(grid_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        x = tl.load(a + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def triton_matmul(a, b, c, config=(128, 256, 64, 3, 8)):
    bm, bn, bk, stages, warps = config
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _triton_matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, GROUP=8,
                         num_stages=stages, num_warps=warps)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    if torch.isnan(out).any():
        return float("nan")
    return float(torch.linalg.norm(out.double() - ref) / max(torch.linalg.norm(ref), 1e-30))


def input_sets(M, N, K, dtype, count):
    return [(torch.randn(M, K, device="cuda", dtype=dtype),
             torch.randn(K, N, device="cuda", dtype=dtype)) for _ in range(count)]


def time_rotating(fn, count: int) -> float:
    state = {"i": 0}

    def step():
        fn(state["i"] % count)
        state["i"] += 1
    return triton.testing.do_bench(step, warmup=50, rep=300, return_mode="median")


def bench_shape(kernel: TileFunction, M, N, K, dtype_name, consts, options, triton_config):
    dtype = TORCH_DTYPES[dtype_name]
    bytes_per_set = (M * K + K * N) * 2 + M * N * 4
    count = max(1, min(4, -(-3 * L2_BYTES // bytes_per_set)))
    sets = input_sets(M, N, K, dtype, count)
    outs = [torch.empty(M, N, device="cuda", dtype=torch.float32) for _ in range(count)]
    flops = 2.0 * M * N * K
    row = {"M": M, "N": N, "K": K, "dtype": dtype_name}

    a, b = sets[0]
    ref = a.double() @ b.double()
    launches = [kernel.prepare(x, y, c, **consts, **options) for (x, y), c in zip(sets, outs)]
    outs[0].fill_(float("nan"))
    launches[0]()
    torch.cuda.synchronize()
    row["tilec_err"] = rel_error(outs[0], ref)
    row["tilec_ms"] = time_rotating(lambda i: launches[i](), count)

    c16 = [torch.empty(M, N, device="cuda", dtype=dtype) for _ in range(count)]
    torch.matmul(a, b, out=c16[0])
    row["cublas_err"] = rel_error(c16[0].float(), ref)
    row["cublas_ms"] = time_rotating(lambda i: torch.matmul(*sets[i], out=c16[i]), count)

    outs[0].fill_(float("nan"))
    triton_matmul(a, b, outs[0], triton_config)
    torch.cuda.synchronize()
    row["triton_err"] = rel_error(outs[0], ref)
    row["triton_ms"] = time_rotating(lambda i: triton_matmul(*sets[i], outs[i], triton_config),
                                     count)
    for name in ("tilec", "cublas", "triton"):
        row[f"{name}_tflops"] = flops / (row[f"{name}_ms"] * 1e-3) / 1e12
    row["tilec_vs_cublas"] = row["tilec_tflops"] / row["cublas_tflops"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="*", default=["4096"],
                        help="N for N^3, or MxNxK")
    parser.add_argument("--dtypes", nargs="*", default=["f16"])
    parser.add_argument("--const", nargs="*", default=[], help="NAME=VALUE (BM=128 ...)")
    parser.add_argument("--stages", type=int, default=None)
    parser.add_argument("--warps", default=None, help="e.g. 2x4")
    parser.add_argument("--swizzle", default=None, choices=["auto", "off"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench: no GPU", file=sys.stderr)
        return 2
    consts = {k: int(v) for k, v in (c.split("=") for c in args.const)}
    options = {}
    if args.stages:
        options["stages"] = args.stages
    if args.warps:
        options["warps"] = tuple(int(x) for x in args.warps.split("x"))
    if args.swizzle:
        options["swizzle"] = args.swizzle
    kernels = {dtype: _sample_kernel(dtype) for dtype in args.dtypes}
    rows = []
    header = (f"{'shape':>16} {'dt':>4} {'tilec':>8} {'cuBLAS':>8} {'Triton':>8} "
              f"{'vs cuBLAS':>9} {'err':>9}  config")
    print(header)
    for size in args.sizes:
        M, N, K = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
        for dtype in args.dtypes:
            row = bench_shape(kernels[dtype], M, N, K, dtype, consts, options,
                              (128, 256, 64, 3, 8))
            row.update(consts=consts, options={k: str(v) for k, v in options.items()})
            rows.append(row)
            print(f"{size:>16} {dtype:>4} {row['tilec_tflops']:8.1f} {row['cublas_tflops']:8.1f} "
                  f"{row['triton_tflops']:8.1f} {row['tilec_vs_cublas']:9.2f} "
                  f"{row['tilec_err']:9.2e}  {consts} {options}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _sample_kernel(dtype: str) -> TileFunction:
    """The matmul sample, with its input dtype set to ``dtype`` (f16 or bf16)."""
    source = (SAMPLES / "matmul.py").read_text().replace("f16[", f"{dtype}[")
    return load_file(SAMPLES / "matmul.py", text=source)["matmul"]


if __name__ == "__main__":
    sys.exit(main())
