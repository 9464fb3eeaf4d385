"""The Triton matmul the benchmark times beside tilec (also imported by
benchmarks/bench_launch.py, through ``tilec.tools.bench.triton_matmul``). Triton is imported the
first time a kernel is wanted, so the rest of the benchmark runs without it."""
from __future__ import annotations

from typing import Any, Sequence

TRITON_CONFIG = {"f16": (128, 256, 64, 3, 8), "bf16": (128, 256, 64, 3, 8),
                 "f32": (128, 128, 32, 3, 8), "tf32": (128, 128, 32, 3, 8)}
# (BM, BN, BK, stages, warps)

# triton.language once _triton_kernel() has imported it: the kernel's body reads this global
# when Triton compiles it, and importing Triton is left until a Triton kernel is wanted.
tl: Any = None
_TRITON_KERNEL: Any = None


def _triton_matmul_kernel(a, b, bias, c, M, N, K, sam, sak, sbk, sbn, scm, scn,  # noqa: N803
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          GROUP: tl.constexpr, IEEE: tl.constexpr, BIAS_GELU: tl.constexpr):
    """C = A @ B, or with ``BIAS_GELU`` the epilogue ``gelu(acc + bias)`` (the erf form)
    fused: the benchmark's "GEMM + bias + GELU" rows (tilec/benchmarking/epilogue.py).
    ``IEEE`` and ``BIAS_GELU`` are constexprs: Triton compiles one branch of each, so the
    plain matmul (``bias`` None) carries no epilogue."""
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
        if IEEE:
            acc += tl.dot(x, y, input_precision="ieee")
        else:
            acc += tl.dot(x, y)
    if BIAS_GELU:
        acc += tl.load(bias + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _triton_kernel() -> Any:
    global tl, _TRITON_KERNEL
    if _TRITON_KERNEL is None:
        import triton
        import triton.language
        tl = triton.language
        _TRITON_KERNEL = triton.jit(_triton_matmul_kernel)
    return _TRITON_KERNEL


def _launch(a: Any, b: Any, bias: Any, c: Any, config: Sequence[int], ieee: bool) -> None:
    kernel = _triton_kernel()
    bm, bn, bk, stages, warps = config
    M, K = a.shape  # noqa: N806
    N = b.shape[1]  # noqa: N806
    grid = (-(-M // bm) * -(-N // bn),)
    kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, GROUP=8, IEEE=ieee,
                 BIAS_GELU=bias is not None, num_stages=stages, num_warps=warps)


def triton_matmul(a: Any, b: Any, c: Any, config: Sequence[int] = TRITON_CONFIG["f16"],
                  ieee: bool = False) -> None:
    """C = A @ B with Triton (torch tensors); ``config`` is (BM, BN, BK, stages, warps);
    ``ieee`` makes f32 dots exact f32 instead of TF32."""
    _launch(a, b, None, c, config, ieee)


def triton_matmul_bias_gelu(a: Any, b: Any, bias: Any, c: Any,
                            config: Sequence[int] = TRITON_CONFIG["f16"]) -> None:
    """C = gelu(A @ B + bias) with Triton (torch tensors), the epilogue fused; ``config`` is
    (BM, BN, BK, stages, warps)."""
    _launch(a, b, bias, c, config, ieee=False)
