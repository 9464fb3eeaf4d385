"""Tile programs whose 8-bit operands a launch converts before the kernel
(tests/test_dequantize.py, tests/gpu/test_dequantize_gpu.py): parsed with load_file, never
imported by the tests."""
from __future__ import annotations

from tilec import f8e4m3, f16, f32, i8, tile


@tile
def kn(A: f16[M, K], W: i8[K, N], scale: f32[N], C: f16[M, N], BM=128, BN=128, BK=64):
    """w8a16 with the weight stored [K, N] (n contiguous): registers cannot convert it."""
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ W[k : +BK, n * BN : +BN].to(f16)
        C[m * BM : +BM, n * BN : +BN] = (acc * scale[n * BN : +BN]).to(f16)


@tile
def a8(A: f8e4m3[M, K], W: f16[N, K], C: f16[M, N], BM=128, BN=128, BK=64):
    """fp8 activations converted in the loop: registers convert only B."""
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK].to(f16) @ W.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc.to(f16)


@tile
def batched_kn(A: f16[Bt, M, K], W: i8[Bt, K, N], C: f16[Bt, M, N], BM=128, BN=128, BK=64):
    """A batch of [K, N] weights: the launch converts the batches as one 2-D array."""
    for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[b, m * BM : +BM, k : +BK] @ W[b, k : +BK, n * BN : +BN].to(f16)
        C[b, m * BM : +BM, n * BN : +BN] = acc.to(f16)
