"""C = (scale_a * scale_b) * (A @ B.T) on fp8 (e4m3) operands with f32 accumulation
(mma.sync m16n8k32 .e4m3 on sm_90 and sm_90a; sm_80 and sm_86 have no fp8 tensor cores and
are refused at the `@`).

As in samples/int8_gemm.py, B is stored [N, K] (k contiguous), the layout 8-bit tensor-core
products read. The per-tensor scales are scalars: the f32 accumulator is dequantized once, in
the epilogue. Host arrays of fp8 are numpy uint8 arrays of the bits (or ml_dtypes.float8_e4m3fn
arrays when ml_dtypes is installed); torch.float8_e4m3fn tensors are taken zero-copy. Change
both operands to f8e5m2 for e5m2.
"""
from __future__ import annotations  # the DSL's shapes (f8e4m3[M, K]) are never evaluated

from tilec import f8e4m3, f16, f32, tile


@tile
def fp8_gemm(A: f8e4m3[M, K], B: f8e4m3[N, K], C: f16[M, N], scale_a: f32, scale_b: f32,
             BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = (acc * (scale_a * scale_b)).to(f16)
