"""C = gelu(A @ B + bias): a GEMM with its bias and GELU (the erf form, as
torch.nn.functional.gelu's default) fused into the epilogue, f16 output."""
from __future__ import annotations  # the DSL's shapes (f16[M, K]) are never evaluated

from tilec import f16, f32, tile


@tile
def gemm_gelu(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f16[N],
              BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = gelu(acc + bias[n * BN : +BN]).to(f16)
