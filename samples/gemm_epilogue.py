"""C = relu(alpha * A @ B + beta * C + bias): a GEMM with a fused epilogue, f16 output."""
from __future__ import annotations  # the DSL's shapes (f16[M, K]) are never evaluated

from tilec import f16, f32, tile


@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f32[N], alpha: f32, beta: f32,
         BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        c = C[m * BM : +BM, n * BN : +BN]
        out = relu(alpha * acc + beta * c + bias[n * BN : +BN])
        C[m * BM : +BM, n * BN : +BN] = out.to(f16)
