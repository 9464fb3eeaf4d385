"""C = A @ B in f32 with exact f32 multiply-adds (SGEMM): no tensor cores, no TF32 rounding.

The f32 operands select the FFMA product kind: each lane of a warp computes an 8 x 8 piece
of C from 16-byte shared-memory reads, fed by the same cp.async pipeline as the f16 sample.
"""
from __future__ import annotations  # the DSL's shapes (f32[M, K]) are never evaluated

from tilec import f32, tile


@tile
def sgemm(A: f32[M, K], B: f32[K, N], C: f32[M, N], BM=128, BN=128, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
