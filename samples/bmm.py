"""C[b] = A[b] @ B[b]: a batch of f16 matmuls with f32 output, one grid axis per batch."""
from __future__ import annotations  # the DSL's shapes (f16[Bt, M, K]) are never evaluated

from tilec import f16, f32, tile


@tile
def bmm(A: f16[Bt, M, K], B: f16[Bt, K, N], C: f32[Bt, M, N], BM=128, BN=128, BK=32):
    for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[b, m * BM : +BM, k : +BK] @ B[b, k : +BK, n * BN : +BN]
        C[b, m * BM : +BM, n * BN : +BN] = acc
