"""C = A @ B with f16 inputs and f32 output: the plain tile-level matmul."""
from __future__ import annotations  # the DSL's shapes (f16[M, K]) are never evaluated

from tilec import f16, f32, tile


@tile
def matmul(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
