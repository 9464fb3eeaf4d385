"""C = A @ B.T on int8 operands with int32 accumulation (mma.sync m16n8k32 .s8), exact.

B is stored [N, K] (k contiguous): 8-bit products read both operands with k contiguous in
shared memory (ldmatrix moves 16-bit units and cannot transpose bytes), the layout
``torch._int_mm`` and cuBLASLt's int8 GEMM favour too. ``Cq`` gets the exact i32 sums; ``C``
the dequantized f32 result, ``scale_a * scale_b * acc``, converted once (cvt.rn.f32.s32).
"""
from __future__ import annotations  # the DSL's shapes (i8[M, K]) are never evaluated

from tilec import f32, i8, i32, tile


@tile
def int8_gemm(A: i8[M, K], B: i8[N, K], Cq: i32[M, N], C: f32[M, N], scale: f32,
              BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], i32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        Cq[m * BM : +BM, n * BN : +BN] = acc
        C[m * BM : +BM, n * BN : +BN] = acc.to(f32) * scale
