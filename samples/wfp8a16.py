"""C = (A @ W.T) * scale: weight-only quantization with fp8 weights (e4m3), f16 activations.

The fp8 twin of samples/w8a16.py. W is an nn.Linear weight, stored [N, K] (k contiguous) in
f8e4m3, with one f32 scale per output channel. The K loop keeps W's shared tile in 8 bits
(half the bytes of f16) and converts each fragment to f16 in registers after its load
(``W.T[...].to(f16)``: ld.shared.u16 of the two bytes an m16n8k16 B register holds, then one
cvt.rn.f16x2.e4m3x2, exact: every e4m3 value is an f16); the products are the f16 mma's,
accumulated in f32, and the epilogue applies the per-channel scale once. The conversion
needs sm_89 or later: of tilec's targets sm_90 and sm_90a (sm_80 and sm_86 are refused at
the ``.to``). Host arrays of fp8 are numpy uint8 arrays of the bits (or ml_dtypes
float8_e4m3fn arrays); change W to f8e5m2 for e5m2 weights, or the activations to bf16.
"""
from __future__ import annotations  # the DSL's shapes (f16[M, K]) are never evaluated

from tilec import f8e4m3, f16, f32, tile


@tile
def wfp8a16(A: f16[M, K], W: f8e4m3[N, K], scale: f32[N], C: f16[M, N],
            BM=128, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ W.T[k : +BK, n * BN : +BN].to(f16)
        C[m * BM : +BM, n * BN : +BN] = (acc * scale[n * BN : +BN]).to(f16)
