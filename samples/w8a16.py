"""C = (A @ W.T) * scale: weight-only quantization (w8a16), int8 weights, f16 activations.

W is an nn.Linear weight, stored [N, K] (k contiguous) in i8, with one f32 scale per output
channel. The K loop keeps W's shared tile in i8 (half the bytes of f16) and converts each
fragment to f16 in registers after its load (``W.T[...].to(f16)``: ld.shared.u16 of the two
bytes an m16n8k16 B register holds, then prmt into 0x6400 | byte and one sub.f16x2, exact);
the products accumulate in f32 and the epilogue applies the per-channel scale once.
"""
from __future__ import annotations  # the DSL's shapes (f16[M, K]) are never evaluated

from tilec import f16, f32, i8, tile


@tile
def w8a16(A: f16[M, K], W: i8[N, K], scale: f32[N], C: f16[M, N], BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ W.T[k : +BK, n * BN : +BN].to(f16)
        C[m * BM : +BM, n * BN : +BN] = (acc * scale[n * BN : +BN]).to(f16)
