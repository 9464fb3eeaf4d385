"""C = (A @ W.T) * scale computed as C.T = W @ A.T: weight-only quantization (w8a16) with the
int8 weights as the product's A operand, for wgmma's register form on sm_90a.

The same product as samples/w8a16.py, with the roles of the tiles swapped: each block computes
a BW x BA tile of C.T (BW weight rows, i.e. output channels, by BA activation rows). On sm_90a
the weights then feed wgmma from registers (the wgmma_rs family): TMA brings W's 8-bit tile
into shared memory, each consumer thread loads the bytes of its A fragment and converts them
to f16 exactly, and the activations, wgmma's B, are read from shared memory through
descriptors. W's bytes are read once, at half the bytes of f16, and the products run on
wgmma rather than mma.sync. The per-channel scale is a column vector of C.T, and the tile is
stored through the transposed view of C.

BK must be a multiple of 128 (one 128-byte swizzle row of the 8-bit weights); the weights are
stored [N, K] as an nn.Linear weight. On other targets (no wgmma) a launch converts W to f16
first and the product runs as a plain f16 one.
"""
from __future__ import annotations  # the DSL's shapes (f16[M, K]) are never evaluated

from tilec import f16, f32, i8, tile


@tile
def w8a16_swapped(A: f16[M, K], W: i8[N, K], scale: f32[N], C: f16[M, N],
                  BW=128, BA=128, BK=128):
    for n, m in grid(cdiv(N, BW), cdiv(M, BA)):
        acc = zeros([BW, BA], f32)
        for k in range(0, K, BK):
            acc += W[n * BW : +BW, k : +BK].to(f16) @ A.T[k : +BK, m * BA : +BA]
        C.T[n * BW : +BW, m * BA : +BA] = (acc * scale[n * BW : +BW][:, None]).to(f16)
