"""Each pass on its own: the frontend's output run through the passes before it, then the pass
under test, checked by the verifier, against exact expected IR text (small tiles keep it short)
and for the properties its docstring promises. Passes never mutate their input."""
from __future__ import annotations

import operator
from typing import Optional

import pytest

from tilec.frontend import lower, parse_function
from tilec.families.catalogue import op_catalogue
from tilec.ir import Kernel, Op, TileType, Value, defining_op, print_kernel
from tilec.ir.verifier import verify as verify_ir
from tilec.families.mma_sync import MMA_K, MmaLayout
from tilec.families.products import family_of
from tilec.target.layout import SmemLayout, Swizzle, swizzle_candidates
from tilec.options import Options, Spec, TensorSpec
from tilec.passes import (cse, dequantize, double_buffer, fragments, promote_accumulation,
                          row_store, split_k, swap_product, swizzle, tiling, tma_store)
from tilec.pipeline import pipeline


def verify(kernel: Kernel, after: Optional[str] = None) -> None:
    """The verifier with the op catalogue: lowered IR holds the families' ops."""
    verify_ir(kernel, after=after, ops=op_catalogue())

PASSES = [cse, dequantize, swap_product, tiling, split_k, double_buffer, swizzle, fragments,
          promote_accumulation, tma_store, row_store]  # pipeline order

MATMUL = '''\
def matmul(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
'''

# B stored [N, K] and read through B.T inside the K loop.
MATMUL_BT = MATMUL.replace("B: f16[K, N]", "B: f16[N, K]").replace("@ B[k", "@ B.T[k")

EPILOGUE = '''\
def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f32[N], scale: f32[M], alpha: f32,
         BM=32, BN=32, BK=16):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        c = C[m * BM : +BM, n * BN : +BN].to(f32)
        out = alpha * acc + c + bias[n * BN : +BN] + scale[m * BM : +BM][:, None]
        C[m * BM : +BM, n * BN : +BN] = relu(out).to(f16)
'''
# The frontend's output for MATMUL: the input of every pipeline.
BEFORE = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : tile<f32,[32,32]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 16} : tile<f32,[32,32]> (%k: i32, %acc.2: \
tile<f32,[32,32]>) {
    %BM.1 = arith.constant {value = 32} : i32
    %3 = arith.mul %m, %BM.1 : i32
    %4 = tile.load %A, %3, %k {shape = [32, 16]} : tile<f16,[32,16]>
    %BN.1 = arith.constant {value = 32} : i32
    %5 = arith.mul %n, %BN.1 : i32
    %6 = tile.load %B, %k, %5 {shape = [16, 32]} : tile<f16,[16,32]>
    %acc.3 = tile.dot %4, %6, %acc.2 : tile<f32,[32,32]>
    scf.yield %acc.3
  }
  %BM.2 = arith.constant {value = 32} : i32
  %7 = arith.mul %m, %BM.2 : i32
  %BN.2 = arith.constant {value = 32} : i32
  %8 = arith.mul %n, %BN.2 : i32
  tile.store %C, %7, %8, %acc.1
}
'''

# cse: one constant op per name (BM and BN stay apart, though both are 32), one row
# offset per scope (the loop's is out of scope after it).
CSED = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : tile<f32,[32,32]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 16} : tile<f32,[32,32]> (%k: i32, %acc.2: \
tile<f32,[32,32]>) {
    %3 = arith.mul %m, %BM : i32
    %4 = tile.load %A, %3, %k {shape = [32, 16]} : tile<f16,[32,16]>
    %5 = arith.mul %n, %BN : i32
    %6 = tile.load %B, %k, %5 {shape = [16, 32]} : tile<f16,[16,32]>
    %acc.3 = tile.dot %4, %6, %acc.2 : tile<f32,[32,32]>
    scf.yield %acc.3
  }
  %7 = arith.mul %m, %BM : i32
  %8 = arith.mul %n, %BN : i32
  tile.store %C, %7, %8, %acc.1
}
'''

# tiling, warps=(1, 1): one-stage buffers, synchronous copies, barriers around the dot.
TILED = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  #tiling = {kind = mma, block = [32, 32, 16], warps = [1, 1], warp_tile = [32, 32], \
instruction = [16, 8, 16], threads = 32, dtype = f16, raster_group = 8}
  #tiling.A = {tensor = A, layout = linear, vec = 8}
  #tiling.B = {tensor = B, layout = linear, vec = 8}
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 {raster_group = 8} : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : tile<f32,[32,32]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %c0 = arith.constant {value = 0} : i32
  %sA = smem.alloc {role = A, stages = 1} : tile<f16,[1,32,16],smem,linear>
  %sB = smem.alloc {role = B, stages = 1} : tile<f16,[1,16,32],smem,linear>
  %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 16} : tile<f32,[32,32]> (%k: i32, %acc.2: \
tile<f32,[32,32]>) {
    %3 = arith.mul %m, %BM : i32
    %vA = smem.stage %sA, %c0 : tile<f16,[32,16],smem,linear>
    copy.global_to_shared %A, %3, %k, %vA {masked = [true, true], mode = sync, shape = [32, 16], \
threads = 32, vec = 8}
    %4 = arith.mul %n, %BN : i32
    %vB = smem.stage %sB, %c0 : tile<f16,[16,32],smem,linear>
    copy.global_to_shared %B, %k, %4, %vB {masked = [true, true], mode = sync, shape = [16, 32], \
threads = 32, vec = 8}
    gpu.barrier
    %acc.3 = tile.dot %vA, %vB, %acc.2 : tile<f32,[32,32]>
    gpu.barrier
    scf.yield %acc.3
  }
  %5 = arith.mul %m, %BM : i32
  %6 = arith.mul %n, %BN : i32
  tile.store %C, %5, %6, %acc.1
}
'''

# double_buffer, stages=2: a prologue copy of iteration 0, then in the loop wait(0), one
# barrier, the predicated copy of iteration it + 1, and the dot on stage it % 2.
BUFFERED = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  #tiling = {kind = mma, block = [32, 32, 16], warps = [1, 1], warp_tile = [32, 32], \
instruction = [16, 8, 16], threads = 32, dtype = f16, raster_group = 8}
  #tiling.A = {tensor = A, layout = linear, vec = 8}
  #tiling.B = {tensor = B, layout = linear, vec = 8}
  #pipeline = {stages = 2}
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 {raster_group = 8} : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : tile<f32,[32,32]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %c0 = arith.constant {value = 0} : i32
  %sA = smem.alloc {role = A, stages = 2} : tile<f16,[2,32,16],smem,linear>
  %sB = smem.alloc {role = B, stages = 2} : tile<f16,[2,16,32],smem,linear>
  %c0.1 = arith.constant {value = 0} : i32
  %k0 = arith.add %2, %c0.1 : i32
  %p0 = arith.lt %k0, %K : pred
  %c0.2 = arith.constant {value = 0} : i32
  %3 = arith.mul %m, %BM : i32
  %vA = smem.stage %sA, %c0.2 : tile<f16,[32,16],smem,linear>
  copy.global_to_shared %A, %3, %k0, %vA, %p0 {masked = [true, true], mode = async, shape = [32, \
16], threads = 32, vec = 8}
  %4 = arith.mul %n, %BN : i32
  %vB = smem.stage %sB, %c0.2 : tile<f16,[16,32],smem,linear>
  copy.global_to_shared %B, %k0, %4, %vB, %p0 {masked = [true, true], mode = async, shape = [16, \
32], threads = 32, vec = 8}
  copy.commit
  %read_stage0 = arith.constant {value = 0} : i32
  %write_stage0 = arith.constant {value = 1} : i32
  %acc.1, %read_stage_end, %write_stage_end = scf.for %2, %K, %BK, %acc, %read_stage0, \
%write_stage0 {step_const = 16} : tile<f32,[32,32]>, i32, i32 (%k: i32, %acc.2: tile<f32,[32,32]>, \
%read_stage: i32, %write_stage: i32) {
    %5 = arith.mul %m, %BM : i32
    %6 = arith.mul %n, %BN : i32
    copy.wait {pending = 0}
    gpu.barrier
    %c16 = arith.constant {value = 16} : i32
    %k_next = arith.add %k, %c16 : i32
    %p_next = arith.lt %k_next, %K : pred
    %7 = arith.mul %m, %BM : i32
    %vA.1 = smem.stage %sA, %write_stage : tile<f16,[32,16],smem,linear>
    copy.global_to_shared %A, %7, %k_next, %vA.1, %p_next {masked = [true, true], mode = async, \
shape = [32, 16], threads = 32, vec = 8}
    %8 = arith.mul %n, %BN : i32
    %vB.1 = smem.stage %sB, %write_stage : tile<f16,[16,32],smem,linear>
    copy.global_to_shared %B, %k_next, %8, %vB.1, %p_next {masked = [true, true], mode = async, \
shape = [16, 32], threads = 32, vec = 8}
    copy.commit
    %vA.2 = smem.stage %sA, %read_stage : tile<f16,[32,16],smem,linear>
    %vB.2 = smem.stage %sB, %read_stage : tile<f16,[16,32],smem,linear>
    %acc.3 = tile.dot %vA.2, %vB.2, %acc.2 : tile<f32,[32,32]>
    %next_read_stage = arith.wrap_inc %read_stage {modulus = 2} : i32
    %next_write_stage = arith.wrap_inc %write_stage {modulus = 2} : i32
    scf.yield %acc.3, %next_read_stage, %next_write_stage
  }
  copy.wait {pending = 0}
  %9 = arith.mul %m, %BM : i32
  %10 = arith.mul %n, %BN : i32
  tile.store %C, %9, %10, %acc.1
}
'''

# double_buffer, stages=1: copy, wait for it, and barriers on both sides of the dot.
BUFFERED_ONE_STAGE = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  #tiling = {kind = mma, block = [32, 32, 16], warps = [1, 1], warp_tile = [32, 32], \
instruction = [16, 8, 16], threads = 32, dtype = f16, raster_group = 8}
  #tiling.A = {tensor = A, layout = linear, vec = 8}
  #tiling.B = {tensor = B, layout = linear, vec = 8}
  #pipeline = {stages = 1}
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 {raster_group = 8} : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : tile<f32,[32,32]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %c0 = arith.constant {value = 0} : i32
  %sA = smem.alloc {role = A, stages = 1} : tile<f16,[1,32,16],smem,linear>
  %sB = smem.alloc {role = B, stages = 1} : tile<f16,[1,16,32],smem,linear>
  %read_stage0 = arith.constant {value = 0} : i32
  %write_stage0 = arith.constant {value = 0} : i32
  %acc.1, %read_stage_end, %write_stage_end = scf.for %2, %K, %BK, %acc, %read_stage0, \
%write_stage0 {step_const = 16} : tile<f32,[32,32]>, i32, i32 (%k: i32, %acc.2: tile<f32,[32,32]>, \
%read_stage: i32, %write_stage: i32) {
    %3 = arith.mul %m, %BM : i32
    %4 = arith.mul %n, %BN : i32
    gpu.barrier
    %5 = arith.mul %m, %BM : i32
    %vA = smem.stage %sA, %read_stage : tile<f16,[32,16],smem,linear>
    copy.global_to_shared %A, %5, %k, %vA {masked = [true, true], mode = async, shape = [32, 16], \
threads = 32, vec = 8}
    %6 = arith.mul %n, %BN : i32
    %vB = smem.stage %sB, %read_stage : tile<f16,[16,32],smem,linear>
    copy.global_to_shared %B, %k, %6, %vB {masked = [true, true], mode = async, shape = [16, 32], \
threads = 32, vec = 8}
    copy.commit
    copy.wait {pending = 0}
    gpu.barrier
    %vA.1 = smem.stage %sA, %read_stage : tile<f16,[32,16],smem,linear>
    %vB.1 = smem.stage %sB, %read_stage : tile<f16,[16,32],smem,linear>
    %acc.3 = tile.dot %vA.1, %vB.1, %acc.2 : tile<f32,[32,32]>
    %next_read_stage = arith.wrap_inc %read_stage {modulus = 1} : i32
    %next_write_stage = arith.wrap_inc %write_stage {modulus = 1} : i32
    scf.yield %acc.3, %next_read_stage, %next_write_stage
  }
  copy.wait {pending = 0}
  %7 = arith.mul %m, %BM : i32
  %8 = arith.mul %n, %BN : i32
  tile.store %C, %7, %8, %acc.1
}
'''

# swizzle on BUFFERED: only the buffers' layouts change (the fewest XOR bits that remove
# ldmatrix conflicts: 32-byte rows of A need 1 bit, 64-byte rows of B 2).
SWIZZLED = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  #tiling = {kind = mma, block = [32, 32, 16], warps = [1, 1], warp_tile = [32, 32], \
instruction = [16, 8, 16], threads = 32, dtype = f16, raster_group = 8}
  #tiling.A = {tensor = A, layout = swizzle(1,3,3), vec = 8}
  #tiling.B = {tensor = B, layout = swizzle(2,3,3), vec = 8}
  #pipeline = {stages = 2}
  #conflicts.A = {swizzle = swizzle(1,3,3), conflicts = {copy = 1, ldmatrix = 1}, \
linear = {copy = 1, ldmatrix = 2}}
  #conflicts.B = {swizzle = swizzle(2,3,3), conflicts = {copy = 1, ldmatrix = 1}, \
linear = {copy = 1, ldmatrix = 4}}
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 {raster_group = 8} : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : tile<f32,[32,32]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %c0 = arith.constant {value = 0} : i32
  %sA = smem.alloc {role = A, stages = 2} : tile<f16,[2,32,16],smem,swizzle(1,3,3)>
  %sB = smem.alloc {role = B, stages = 2} : tile<f16,[2,16,32],smem,swizzle(2,3,3)>
  %c0.1 = arith.constant {value = 0} : i32
  %k0 = arith.add %2, %c0.1 : i32
  %p0 = arith.lt %k0, %K : pred
  %c0.2 = arith.constant {value = 0} : i32
  %3 = arith.mul %m, %BM : i32
  %vA = smem.stage %sA, %c0.2 : tile<f16,[32,16],smem,swizzle(1,3,3)>
  copy.global_to_shared %A, %3, %k0, %vA, %p0 {masked = [true, true], mode = async, shape = [32, \
16], threads = 32, vec = 8}
  %4 = arith.mul %n, %BN : i32
  %vB = smem.stage %sB, %c0.2 : tile<f16,[16,32],smem,swizzle(2,3,3)>
  copy.global_to_shared %B, %k0, %4, %vB, %p0 {masked = [true, true], mode = async, shape = [16, \
32], threads = 32, vec = 8}
  copy.commit
  %read_stage0 = arith.constant {value = 0} : i32
  %write_stage0 = arith.constant {value = 1} : i32
  %acc.1, %read_stage_end, %write_stage_end = scf.for %2, %K, %BK, %acc, %read_stage0, \
%write_stage0 {step_const = 16} : tile<f32,[32,32]>, i32, i32 (%k: i32, %acc.2: tile<f32,[32,32]>, \
%read_stage: i32, %write_stage: i32) {
    %5 = arith.mul %m, %BM : i32
    %6 = arith.mul %n, %BN : i32
    copy.wait {pending = 0}
    gpu.barrier
    %c16 = arith.constant {value = 16} : i32
    %k_next = arith.add %k, %c16 : i32
    %p_next = arith.lt %k_next, %K : pred
    %7 = arith.mul %m, %BM : i32
    %vA.1 = smem.stage %sA, %write_stage : tile<f16,[32,16],smem,swizzle(1,3,3)>
    copy.global_to_shared %A, %7, %k_next, %vA.1, %p_next {masked = [true, true], mode = async, \
shape = [32, 16], threads = 32, vec = 8}
    %8 = arith.mul %n, %BN : i32
    %vB.1 = smem.stage %sB, %write_stage : tile<f16,[16,32],smem,swizzle(2,3,3)>
    copy.global_to_shared %B, %k_next, %8, %vB.1, %p_next {masked = [true, true], mode = async, \
shape = [16, 32], threads = 32, vec = 8}
    copy.commit
    %vA.2 = smem.stage %sA, %read_stage : tile<f16,[32,16],smem,swizzle(1,3,3)>
    %vB.2 = smem.stage %sB, %read_stage : tile<f16,[16,32],smem,swizzle(2,3,3)>
    %acc.3 = tile.dot %vA.2, %vB.2, %acc.2 : tile<f32,[32,32]>
    %next_read_stage = arith.wrap_inc %read_stage {modulus = 2} : i32
    %next_write_stage = arith.wrap_inc %write_stage {modulus = 2} : i32
    scf.yield %acc.3, %next_read_stage, %next_write_stage
  }
  copy.wait {pending = 0}
  %9 = arith.mul %m, %BM : i32
  %10 = arith.mul %n, %BN : i32
  tile.store %C, %9, %10, %acc.1
}
'''

# fragments on SWIZZLED: the dot becomes ldmatrix + mma; stage 0's first fragments are
# loaded before the loop and the next stage's inside it, carried by the loop.
MAPPED = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, %M: i32, %K: \
i32, %N: i32) consts {BK = 16, BM = 32, BN = 32} {
  #tiling = {kind = mma, block = [32, 32, 16], warps = [1, 1], warp_tile = [32, 32], \
instruction = [16, 8, 16], threads = 32, dtype = f16, raster_group = 8}
  #tiling.A = {tensor = A, layout = swizzle(1,3,3), vec = 8}
  #tiling.B = {tensor = B, layout = swizzle(2,3,3), vec = 8}
  #pipeline = {stages = 2}
  #conflicts.A = {swizzle = swizzle(1,3,3), conflicts = {copy = 1, ldmatrix = 1}, \
linear = {copy = 1, ldmatrix = 2}}
  #conflicts.B = {swizzle = swizzle(2,3,3), conflicts = {copy = 1, ldmatrix = 1}, \
linear = {copy = 1, ldmatrix = 4}}
  %BM = arith.constant {value = 32} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 32} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 {raster_group = 8} : i32, i32
  %acc = tile.full {shape = [32, 32], value = 0.0} : \
tile<f32,[32,32],reg,mma_c(warps=1x1,warp_tile=32x32)>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 16} : i32
  %sA = smem.alloc {role = A, stages = 2} : tile<f16,[2,32,16],smem,swizzle(1,3,3)>
  %sB = smem.alloc {role = B, stages = 2} : tile<f16,[2,16,32],smem,swizzle(2,3,3)>
  %c0 = arith.constant {value = 0} : i32
  %k0 = arith.add %2, %c0 : i32
  %p0 = arith.lt %k0, %K : pred
  %c0.1 = arith.constant {value = 0} : i32
  %3 = arith.mul %m, %BM : i32
  %vA = smem.stage %sA, %c0.1 : tile<f16,[32,16],smem,swizzle(1,3,3)>
  copy.global_to_shared %A, %3, %k0, %vA, %p0 {masked = [true, true], mode = async, shape = [32, \
16], threads = 32, vec = 8}
  %4 = arith.mul %n, %BN : i32
  %vB = smem.stage %sB, %c0.1 : tile<f16,[16,32],smem,swizzle(2,3,3)>
  copy.global_to_shared %B, %k0, %4, %vB, %p0 {masked = [true, true], mode = async, shape = [16, \
32], threads = 32, vec = 8}
  copy.commit
  %read_stage0 = arith.constant {value = 0} : i32
  %write_stage0 = arith.constant {value = 1} : i32
  copy.wait {pending = 0}
  gpu.barrier
  %c0.2 = arith.constant {value = 0} : i32
  %v0 = smem.stage %sA, %c0.2 : tile<f16,[32,16],smem,swizzle(1,3,3)>
  %a0_first = frag.ldmatrix %v0 {k0 = 0, operand = A} : \
tile<f16,[32,16],reg,mma_a(warps=1x1,warp_tile=32x32)>
  %v0.1 = smem.stage %sB, %c0.2 : tile<f16,[16,32],smem,swizzle(2,3,3)>
  %b0_first = frag.ldmatrix %v0.1 {k0 = 0, operand = B} : \
tile<f16,[16,32],reg,mma_b(warps=1x1,warp_tile=32x32)>
  %acc.1, %read_stage_end, %write_stage_end, %a0_unused, %b0_unused = scf.for %2, %K, %BK, %acc, \
%read_stage0, %write_stage0, %a0_first, %b0_first {step_const = 16} : \
tile<f32,[32,32],reg,mma_c(warps=1x1,warp_tile=32x32)>, i32, i32, \
tile<f16,[32,16],reg,mma_a(warps=1x1,warp_tile=32x32)>, \
tile<f16,[16,32],reg,mma_b(warps=1x1,warp_tile=32x32)> (%k: i32, %acc.2: \
tile<f32,[32,32],reg,mma_c(warps=1x1,warp_tile=32x32)>, %read_stage: i32, %write_stage: i32, %a0: \
tile<f16,[32,16],reg,mma_a(warps=1x1,warp_tile=32x32)>, %b0: \
tile<f16,[16,32],reg,mma_b(warps=1x1,warp_tile=32x32)>) {
    %c16 = arith.constant {value = 16} : i32
    %k_next = arith.add %k, %c16 : i32
    %p_next = arith.lt %k_next, %K : pred
    %5 = arith.mul %m, %BM : i32
    %vA.1 = smem.stage %sA, %write_stage : tile<f16,[32,16],smem,swizzle(1,3,3)>
    copy.global_to_shared %A, %5, %k_next, %vA.1, %p_next {masked = [true, true], mode = async, \
shape = [32, 16], threads = 32, vec = 8}
    %6 = arith.mul %n, %BN : i32
    %vB.1 = smem.stage %sB, %write_stage : tile<f16,[16,32],smem,swizzle(2,3,3)>
    copy.global_to_shared %B, %k_next, %6, %vB.1, %p_next {masked = [true, true], mode = async, \
shape = [16, 32], threads = 32, vec = 8}
    copy.commit
    copy.wait {pending = 0}
    gpu.barrier
    %next_stage = arith.wrap_inc %read_stage {modulus = 2} : i32
    %v_next = smem.stage %sA, %next_stage : tile<f16,[32,16],smem,swizzle(1,3,3)>
    %a0_next = frag.ldmatrix %v_next {k0 = 0, operand = A} : \
tile<f16,[32,16],reg,mma_a(warps=1x1,warp_tile=32x32)>
    %v_next.1 = smem.stage %sB, %next_stage : tile<f16,[16,32],smem,swizzle(2,3,3)>
    %b0_next = frag.ldmatrix %v_next.1 {k0 = 0, operand = B} : \
tile<f16,[16,32],reg,mma_b(warps=1x1,warp_tile=32x32)>
    %acc.3 = frag.mma %a0, %b0, %acc.2 : tile<f32,[32,32],reg,mma_c(warps=1x1,warp_tile=32x32)>
    %next_read_stage = arith.wrap_inc %read_stage {modulus = 2} : i32
    %next_write_stage = arith.wrap_inc %write_stage {modulus = 2} : i32
    scf.yield %acc.3, %next_read_stage, %next_write_stage, %a0_next, %b0_next
  }
  copy.wait {pending = 0}
  %7 = arith.mul %m, %BM : i32
  %8 = arith.mul %n, %BN : i32
  tile.store %C, %7, %8, %acc.1 {masked = [true, true]}
}
'''


# ---------------------------------------------------------------------------------- helpers

def lowered(text: str = MATMUL, **consts) -> Kernel:
    kernel = lower(parse_function(text, "matmul.tile"), consts)
    verify(kernel)
    return kernel


def input_of(module, options: Options, text: str = MATMUL, **consts) -> Kernel:
    """What ``module`` receives in the pipeline: the lowered program after the passes before
    it, each checked by the verifier."""
    kernel = lowered(text, **consts)
    for earlier in PASSES[:PASSES.index(module)]:
        kernel = earlier.run(kernel, options)
        verify(kernel, after=earlier.NAME)
    return kernel


def run_pass(module, kernel: Kernel, options: Options) -> Kernel:
    result = module.run(kernel, options)
    verify(result, after=module.NAME)
    return result


def through(module, options: Options, text: str = MATMUL, **consts) -> Kernel:
    """The program after ``module`` and every pass before it."""
    return run_pass(module, input_of(module, options, text, **consts), options)


def main_loop(kernel: Kernel) -> Op:
    loops = [op for op in kernel.body.ops if op.name == "scf.for"]
    assert len(loops) == 1
    return loops[0]


def before_loop(kernel: Kernel) -> list[Op]:
    ops = kernel.body.ops
    return ops[:ops.index(main_loop(kernel))]


def after_loop(kernel: Kernel) -> list[Op]:
    ops = kernel.body.ops
    return ops[ops.index(main_loop(kernel)) + 1:]


def loop_ops(kernel: Kernel) -> list[Op]:
    return main_loop(kernel).regions[0].ops


def named(ops: list[Op], name: str) -> list[Op]:
    return [op for op in ops if op.name == name]


def constant_of(value: Value) -> Optional[int]:
    op = defining_op(value)
    return op.attrs["value"] if op is not None and op.name == "arith.constant" else None


def producer(value: Value, name: str) -> Op:
    op = defining_op(value)
    assert op is not None and op.name == name, f"{value!r} comes from {op and op.name}"
    return op


def stage_of(view: Value) -> tuple[Op, Value]:
    """The smem.alloc a shared view reads, and the stage index value."""
    stage = producer(view, "smem.stage")
    return producer(stage.operands[0], "smem.alloc"), stage.operands[1]


def fragment_args(loop: Op) -> list[Value]:
    """The loop's block arguments that carry mma A or B fragments."""
    return [arg for arg in loop.regions[0].args
            if isinstance(arg.type, TileType) and isinstance(arg.type.layout, MmaLayout)
            and arg.type.layout.operand in "AB"]


# The scalar index arithmetic the passes emit, evaluated: schedules are checked by what each
# iteration computes (which stage, which k, which predicate), whatever ops compute it.
INT_OPS = {"arith.add": operator.add, "arith.sub": operator.sub, "arith.mul": operator.mul,
           "arith.floordiv": operator.floordiv, "arith.mod": operator.mod, "arith.min": min,
           "arith.max": max, "arith.lt": operator.lt, "arith.cdiv": lambda a, b: -(-a // b)}


def evaluate(ops: list[Op], env: dict[Value, int]) -> None:
    for op in ops:
        if op.name == "arith.constant":
            env[op.result] = op.attrs["value"]
        elif op.name == "arith.wrap_inc":  # (a + 1) % modulus, per its OpDef
            env[op.result] = (env[op.operands[0]] + 1) % op.attrs["modulus"]
        elif op.name in INT_OPS and all(v in env for v in op.operands):
            env[op.result] = INT_OPS[op.name](*(env[v] for v in op.operands))
        elif op.name == "tile.grid":
            env.update((r, 0) for r in op.results)


def simulate(kernel: Kernel, **sizes: int) -> tuple[dict[Value, int], list[dict[Value, int]]]:
    """Scalar values before the K loop, and in each of its iterations, for these sizes."""
    env = {kernel.symbol_value(s): v for s, v in sizes.items()}
    evaluate(before_loop(kernel), env)
    loop = main_loop(kernel)
    lower_bound, upper_bound, step = (env[v] for v in loop.operands[:3])
    body = loop.regions[0]
    carried = [env.get(v) for v in loop.operands[3:]]
    iterations = []
    for k in range(lower_bound, upper_bound, step):
        inner = dict(env)
        inner[body.args[0]] = k
        inner.update((a, v) for a, v in zip(body.args[1:], carried) if v is not None)
        evaluate(body.ops, inner)
        iterations.append(inner)
        carried = [inner.get(v) for v in body.ops[-1].operands]
    return env, iterations


def k_offset(copy: Op) -> Value:
    """The K offset of an operand copy: A is read at (row, k), B at (k, col)."""
    return copy.operands[2] if copy.operands[0].hint == "A" else copy.operands[1]


# ------------------------------------------------------------------------ golden IR texts

def test_the_pipeline_runs_the_passes_in_this_order() -> None:
    assert [p.name for p in pipeline()] == [m.NAME for m in PASSES]


def test_frontend_output_is_the_golden_input() -> None:
    assert print_kernel(lowered()) == BEFORE


@pytest.mark.parametrize("module, stages, before, expected", [
    (cse, 2, BEFORE, CSED),
    (tiling, 2, CSED, TILED),
    (double_buffer, 2, TILED, BUFFERED),
    (double_buffer, 1, TILED, BUFFERED_ONE_STAGE),
    (swizzle, 2, BUFFERED, SWIZZLED),
    (fragments, 2, SWIZZLED, MAPPED),
], ids=["cse", "tiling", "double_buffer-2", "double_buffer-1", "swizzle", "fragments"])
def test_pass_output_text(module, stages: int, before: str, expected: str) -> None:
    options = Options(warps=(1, 1), stages=stages)
    kernel = input_of(module, options)
    assert print_kernel(kernel) == before
    assert print_kernel(run_pass(module, kernel, options)) == expected


@pytest.mark.parametrize("module", PASSES, ids=[m.NAME for m in PASSES])
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("text", [MATMUL, EPILOGUE], ids=["matmul", "epilogue"])
def test_passes_never_mutate_their_input(module, stages: int, text: str) -> None:
    # split_k changes nothing unless asked to split.
    options = Options(warps=(2, 1), stages=stages, split_k=2 if module is split_k else 1)
    kernel = input_of(module, options, text)
    before = print_kernel(kernel, locs=True)
    schedule = kernel.schedule
    result = module.run(kernel, options)
    assert print_kernel(kernel, locs=True) == before
    assert kernel.schedule == schedule
    if module in (dequantize, swap_product, promote_accumulation, tma_store, row_store):
        # Nothing to convert without a launch converting weights, no 8-bit B to swap into
        # wgmma's A (tests/test_swap_product.py), no fp8 wgmma sums to
        # promote, nothing to route without warp specialization (sm_90a) or misaligned_store
        # = rows: tests/test_dequantize.py, tests/test_promote_accumulation.py,
        # tests/test_tma_store.py and tests/test_row_store.py check them where they act
        assert result is kernel
    else:
        assert result is not kernel and print_kernel(result, locs=True) != before
    verify(kernel)


# ----------------------------------------------------------------------------------- tiling

@pytest.mark.parametrize("consts, warps, chosen, warp_tile", [
    ((32, 32, 16), (1, 1), (1, 1), (32, 32)),
    ((32, 32, 16), (2, 1), (2, 1), (16, 32)),
    ((64, 64, 32), None, (1, 1), (64, 64)),
    ((128, 64, 32), None, (2, 1), (64, 64)),
    ((128, 128, 32), None, (2, 2), (64, 64)),
    ((128, 256, 64), None, (2, 4), (64, 64)),
    ((256, 128, 32), None, (4, 2), (64, 64)),
    ((128, 128, 32), (2, 4), (2, 4), (64, 32)),
    ((96, 128, 32), (2, 2), (2, 2), (48, 64)),
])
def test_tiling_plan_splits_the_block_among_warps(consts, warps, chosen, warp_tile) -> None:
    bm, bn, bk = consts
    kernel = through(tiling, Options(warps=warps), BM=bm, BN=bn, BK=bk)
    plan = kernel.schedule.tiling
    assert plan.block == (bm, bn, bk)
    assert plan.warps == chosen
    assert plan.warp_tile == warp_tile
    assert plan.instruction == (16, 8, 16)
    assert plan.threads == 32 * chosen[0] * chosen[1]
    assert plan.dtype == "f16"
    copies = named(loop_ops(kernel), "copy.global_to_shared")
    assert [c.attrs["threads"] for c in copies] == [plan.threads] * 2


def test_tiling_plan_operands_default_to_row_major_16_byte_vectors() -> None:
    plan = through(tiling, Options(), BM=64, BN=128, BK=32).schedule.tiling
    a, b = plan.operands
    assert (a.role, a.tensor, a.vec, a.k_major) == ("A", "A", 8, True)
    assert (b.role, b.tensor, b.vec, b.k_major) == ("B", "B", 8, False)
    assert (a.layout, b.layout) == (SmemLayout(64, 32), SmemLayout(32, 128))
    assert plan.operand("B") is b


@pytest.mark.parametrize("spec, layout, vec, k_major", [
    (TensorSpec(1, 4), SmemLayout(32, 16), 4, True),
    (TensorSpec(1, 2), SmemLayout(32, 16), 2, True),
    (TensorSpec(None, 1), SmemLayout(32, 16), 1, True),
    # A stored column-major: the contiguous M dim stays contiguous in shared memory.
    (TensorSpec(0, 8), SmemLayout(16, 32, transposed=True), 8, False),
])
def test_tiling_follows_the_tensor_spec(spec, layout, vec: int, k_major: bool) -> None:
    options = Options(spec=Spec(tensors=(("A", spec),)))
    plan = through(tiling, options).schedule.tiling
    a = plan.operand("A")
    assert (a.layout, a.vec, a.k_major) == (layout, vec, k_major)
    assert plan.operand("B").vec == 8


def test_tiling_stores_a_transposed_operand_k_major() -> None:
    plan = through(tiling, Options(), MATMUL_BT).schedule.tiling
    b = plan.operand("B")
    assert b.layout == SmemLayout(32, 16, transposed=True)
    assert b.k_major


def test_tiling_of_bf16_inputs() -> None:
    kernel = through(tiling, Options(), MATMUL.replace("f16[", "bf16["))
    assert kernel.schedule.tiling.dtype == "bf16"
    assert [str(a.result.type) for a in named(before_loop(kernel), "smem.alloc")] == [
        "tile<bf16,[1,32,16],smem,linear>", "tile<bf16,[1,16,32],smem,linear>"]


@pytest.mark.parametrize("divisible, masks", [
    ((), [[True, True], [True, True]]),
    ((("M", 4096), ("N", 4096), ("K", 4096)), [[False, False], [False, False]]),
    # M only a multiple of 8: A's rows need masks, its K columns and all of B do not.
    ((("M", 8), ("N", 4096), ("K", 4096)), [[True, False], [False, False]]),
    ((("M", 4096), ("N", 4096), ("K", 8)), [[False, True], [True, False]]),
])
def test_tiling_masks_only_dims_the_tiles_may_overrun(divisible, masks) -> None:
    kernel = through(tiling, Options(spec=Spec(divisible=divisible)))
    copies = named(loop_ops(kernel), "copy.global_to_shared")
    assert [c.attrs["masked"] for c in copies] == masks


def test_tiling_fences_the_dot_and_replaces_the_loads() -> None:
    kernel = through(tiling, Options(raster_group=4))
    body = loop_ops(kernel)
    assert not named(body, "tile.load")
    dot = named(body, "tile.dot")[0]
    at = body.index(dot)
    assert body[at - 1].name == "gpu.barrier" and body[at + 1].name == "gpu.barrier"
    copies = named(body, "copy.global_to_shared")
    assert [c.attrs["mode"] for c in copies] == ["sync", "sync"]
    assert [c.attrs["shape"] for c in copies] == [[32, 16], [16, 32]]
    assert all(body.index(c) < at for c in copies)
    views = [c.operands[-1] for c in copies]
    assert dot.operands[:2] == views
    allocs = [stage_of(v)[0] for v in views]
    assert [a.attrs for a in allocs] == [{"stages": 1, "role": "A"}, {"stages": 1, "role": "B"}]
    assert all(a in before_loop(kernel) for a in allocs)
    grid = named(kernel.body.ops, "tile.grid")[0]
    assert grid.attrs["raster_group"] == 4


# ---------------------------------------------------------------------------- double_buffer

@pytest.mark.parametrize("stages", [2, 3, 4])
def test_double_buffer_schedule(stages: int) -> None:
    bk, size_k = 16, 40  # three iterations: k = 0, 16, 32
    kernel = through(double_buffer, Options(warps=(1, 1), stages=stages))
    assert kernel.schedule.stages == stages
    allocs = named(before_loop(kernel), "smem.alloc")
    assert [a.result.type.shape[0] for a in allocs] == [stages, stages]
    assert [a.attrs["stages"] for a in allocs] == [stages, stages]
    before, iterations = simulate(kernel, M=64, N=64, K=size_k)
    assert len(iterations) == 3

    # Prologue: iterations 0 .. S-2 into stages 0 .. S-2, one commit group each, predicated
    # on being inside the loop.
    prologue = before_loop(kernel)
    copies = named(prologue, "copy.global_to_shared")
    assert len(copies) == 2 * (stages - 1)
    assert len(named(prologue, "copy.commit")) == stages - 1
    commits = [prologue.index(c) for c in named(prologue, "copy.commit")]
    for s, copy in enumerate(copies):
        assert prologue.index(copy) < commits[s // 2]
        assert before[stage_of(copy.operands[3])[1]] == s // 2
        assert before[k_offset(copy)] == s // 2 * bk
        assert before[copy.operands[4]] == (s // 2 * bk < size_k)

    # Loop: wait(S-2), one barrier, the predicated copies of iteration it + S - 1 into stage
    # (it + S - 1) % S, a commit, the dot on stage it % S.
    body = loop_ops(kernel)
    names = [op.name for op in body if not op.name.startswith(("arith.", "smem.stage"))]
    assert names == ["copy.wait", "gpu.barrier", "copy.global_to_shared",
                     "copy.global_to_shared", "copy.commit", "tile.dot", "scf.yield"]
    assert named(body, "copy.wait")[0].attrs == {"pending": stages - 2}
    copies = named(body, "copy.global_to_shared")
    dot = named(body, "tile.dot")[0]
    for it, env in enumerate(iterations):
        k_ahead = (it + stages - 1) * bk
        for copy in copies:
            assert len(copy.operands) == 5
            assert env[stage_of(copy.operands[3])[1]] == (it + stages - 1) % stages
            assert env[k_offset(copy)] == k_ahead
            assert env[copy.operands[4]] == (k_ahead < size_k)
        assert [env[stage_of(v)[1]] for v in dot.operands[:2]] == [it % stages] * 2

    # After the loop every group is drained.
    assert [op.attrs for op in named(after_loop(kernel), "copy.wait")] == [{"pending": 0}]


def test_double_buffer_with_one_stage_waits_for_each_copy() -> None:
    kernel = through(double_buffer, Options(warps=(1, 1), stages=1))
    assert not named(before_loop(kernel), "copy.global_to_shared")
    assert not named(before_loop(kernel), "copy.commit")
    body = loop_ops(kernel)
    names = [op.name for op in body if not op.name.startswith(("arith.", "smem.stage"))]
    assert names == ["gpu.barrier", "copy.global_to_shared", "copy.global_to_shared",
                     "copy.commit", "copy.wait", "gpu.barrier", "tile.dot", "scf.yield"]
    assert named(body, "copy.wait")[0].attrs == {"pending": 0}
    copies = named(body, "copy.global_to_shared")
    assert [len(c.operands) for c in copies] == [4, 4]  # no predicate: the loop bound guards
    _, iterations = simulate(kernel, M=64, N=64, K=40)
    for it, env in enumerate(iterations):
        assert [env[k_offset(c)] for c in copies] == [16 * it] * 2
        assert [env[stage_of(c.operands[3])[1]] for c in copies] == [0, 0]
    assert [a.result.type.shape[0] for a in named(before_loop(kernel), "smem.alloc")] == [1, 1]


@pytest.mark.parametrize("spec, mode", [
    (TensorSpec(1, 8), "async"),  # 16 bytes: cp.async.cg
    (TensorSpec(1, 4), "async"),  # 8 bytes: cp.async.ca
    (TensorSpec(1, 2), "async"),  # 4 bytes: cp.async.ca
    (TensorSpec(None, 1), "sync"),  # 2 bytes: cp.async cannot move it
])
def test_double_buffer_makes_cp_async_sized_copies_async(spec, mode: str) -> None:
    options = Options(stages=3, spec=Spec(tensors=(("A", spec),)))
    kernel = through(double_buffer, options)
    for ops in (before_loop(kernel), loop_ops(kernel)):
        modes = [c.attrs["mode"] for c in named(ops, "copy.global_to_shared")
                 if c.operands[0] is kernel.param_value("A")]
        assert modes and set(modes) == {mode}


@pytest.mark.parametrize("stages", [2, 3])
def test_double_buffer_with_a_transposed_view_made_in_the_loop(stages: int) -> None:
    # The frontend makes B.T inside the K loop; the prologue copies need it before the loop.
    kernel = through(double_buffer, Options(stages=stages), MATMUL_BT)
    copies = [c for c in named(before_loop(kernel), "copy.global_to_shared")
              if c.operands[0] is not kernel.param_value("A")]
    assert len(copies) == stages - 1
    for copy in copies:
        view = producer(copy.operands[0], "tensor.transpose")
        assert view.operands[0] is kernel.param_value("B")
        assert view in before_loop(kernel)


# ---------------------------------------------------------------------------------- swizzle

def ldmatrix_conflicts(layout: SmemLayout, rows: int, k_extent: int) -> int:
    """Worst shared-memory wavefronts per phase of the plain (k-major) ldmatrix.x4 loads of an
    ``rows x k_extent`` A tile: in phase j lanes 8j..8j+7 give 8 rows of 16 bytes at
    (mn block j % 2, k block j // 2); 16-byte row r of a phase sits in bank group
    address / 16 % 8, so two rows in one group cost a second wavefront."""
    worst = 1
    for mn0 in range(0, rows, 16):
        for k0 in range(0, k_extent, MMA_K):
            for j in range(4):
                groups: dict[int, set[int]] = {}
                for r in range(8):
                    row, col = mn0 + 8 * (j % 2) + r, k0 + 8 * (j // 2)
                    address = layout.offset(row, col) * 2
                    groups.setdefault(address // 16 % 8, set()).add(address // 128)
                worst = max(worst, max(len(lines) for lines in groups.values()))
    return worst


def test_swizzle_removes_conflicts_of_a_64_wide_f16_tile() -> None:
    kernel = through(swizzle, Options(warps=(2, 2)), BM=64, BN=64, BK=64)
    report = kernel.schedule.conflict_report()
    for role in "AB":
        assert report[role]["swizzle"] == "swizzle(3,3,3)"
        assert report[role]["chosen"] == {"copy": 1, "ldmatrix": 1}
        assert report[role]["linear"]["ldmatrix"] == 8
    a_layout = kernel.schedule.tiling.operand("A").layout
    assert a_layout == SmemLayout(64, 64, Swizzle(3, 3, 3))
    # The same figures from an independent count of A's ldmatrix rows per bank group.
    assert ldmatrix_conflicts(a_layout, 64, 64) == 1
    assert ldmatrix_conflicts(SmemLayout(64, 64), 64, 64) == 8


@pytest.mark.parametrize("consts, warps", [((32, 32, 16), (1, 1)), ((64, 64, 32), (1, 1)),
                                           ((128, 128, 32), None), ((128, 256, 64), None)])
def test_swizzle_types_every_buffer_and_view_with_the_chosen_layout(consts, warps) -> None:
    bm, bn, bk = consts
    kernel = through(swizzle, Options(warps=warps, stages=3), BM=bm, BN=bn, BK=bk)
    plan = kernel.schedule.tiling
    report = kernel.schedule.conflict_report()
    for op_plan in plan.operands:
        degrees = report[op_plan.role]
        assert str(op_plan.layout.swizzle) == degrees["swizzle"]
        assert degrees["chosen"]["ldmatrix"] == 1
        assert degrees["chosen"]["copy"] <= degrees["linear"]["copy"]
    layouts = {op.attrs["role"]: op.result.type.layout for op in kernel.walk()
               if op.name == "smem.alloc"}
    assert layouts == {"A": plan.operand("A").layout, "B": plan.operand("B").layout}
    stage_layouts = {(stage_of(op.result)[0].attrs["role"], op.result.type.layout)
                     for op in kernel.walk() if op.name == "smem.stage"}
    assert stage_layouts == set(layouts.items())


SGEMM = MATMUL.replace("f16", "f32")


@pytest.mark.parametrize("text, options, consts", [
    (MATMUL, Options(stages=3), (128, 128, 32)), (MATMUL_BT, Options(stages=2), (64, 128, 64)),
    (MATMUL, Options(warps=(1, 1)), (32, 32, 16)), (SGEMM, Options(), (64, 128, 32)),
    (SGEMM, Options(f32_math="tf32"), (128, 128, 32)),
    (SGEMM.replace("@ B[k", "@ B.T[k").replace("B: f32[K, N]", "B: f32[N, K]"),
     Options(f32_math="tf32"), (64, 64, 32))])
def test_swizzle_chooses_the_least_conflicting_candidate(text, options, consts) -> None:
    # choose() scores a candidate's copy stores only when they could decide; the choice
    # and its figures are those of scoring every candidate in full.
    bm, bn, bk = consts
    plan = input_of(swizzle, options, text, BM=bm, BN=bn, BK=bk).schedule.tiling
    family = family_of(plan)
    for op_plan in plan.operands:
        scored = []
        for candidate in sorted(swizzle_candidates(plan.elem_bytes, family.swizzle_units),
                                key=lambda c: c.bits):
            layout = op_plan.layout.with_swizzle(candidate)
            if candidate.period > layout.size and candidate.bits:
                continue
            degrees = swizzle.operand_conflicts(plan, op_plan, layout, plan.elem_bytes)
            scored.append(((degrees[family.read_name], degrees["copy"], candidate.bits),
                           candidate, degrees))
        _, best, degrees = min(scored, key=lambda entry: entry[0])
        assert swizzle.choose(plan, op_plan, plan.elem_bytes, "auto") == (best, degrees)


def test_swizzle_off_keeps_rows_linear() -> None:
    kernel = through(swizzle, Options(warps=(2, 2), swizzle="off"), BM=64, BN=64, BK=64)
    report = kernel.schedule.conflict_report()
    for role in "AB":
        assert report[role]["swizzle"] == "linear"
        assert report[role]["chosen"] == report[role]["linear"]
        assert report[role]["linear"]["ldmatrix"] > 1
    layouts = [op.result.type.layout for op in kernel.walk()
               if op.name in ("smem.alloc", "smem.stage")]
    assert layouts and all(layout.swizzle.bits == 0 for layout in layouts)
    assert all(p.layout.swizzle.bits == 0 for p in kernel.schedule.tiling.operands)


def test_swizzle_uses_an_explicit_swizzle_as_given() -> None:
    given = Swizzle(2, 3, 3)
    kernel = through(swizzle, Options(warps=(2, 2), swizzle=given), BM=64, BN=64, BK=64)
    assert [p.layout.swizzle for p in kernel.schedule.tiling.operands] == [given, given]
    assert {op.result.type.layout.swizzle for op in kernel.walk()
            if op.name == "smem.alloc"} == {given}
    # Two XOR bits halve the eight-way conflict of 128-byte rows, no better.
    assert kernel.schedule.conflict_report()["A"]["chosen"]["ldmatrix"] == 2


# -------------------------------------------------------------------------------- fragments

@pytest.mark.parametrize("bk", [16, 32, 64])
@pytest.mark.parametrize("warps", [(1, 1), (2, 1)])
def test_fragments_one_stage_loads_each_k_step_before_the_previous_mma(bk, warps) -> None:
    kernel = through(fragments, Options(warps=warps, stages=1), BK=bk)
    steps = bk // MMA_K
    body = loop_ops(kernel)
    assert not [op for op in kernel.walk() if op.name == "tile.dot"]
    loads = named(body, "frag.ldmatrix")
    mmas = named(body, "frag.mma")
    assert [(op.attrs["operand"], op.attrs["k0"]) for op in loads] == [
        (role, step * MMA_K) for step in range(steps) for role in "AB"]
    assert len(mmas) == steps
    for step, mma in enumerate(mmas):
        assert [defining_op(v) for v in mma.operands[:2]] == loads[2 * step:2 * step + 2]
        if step + 1 < steps:
            assert body.index(loads[2 * step + 3]) < body.index(mma)
    accumulator = main_loop(kernel).regions[0].args[1]
    assert mmas[0].operands[2] is accumulator
    assert [m.operands[2] for m in mmas[1:]] == [m.result for m in mmas[:-1]]
    assert named(body, "scf.yield")[0].operands[0] is mmas[-1].result
    assert not fragment_args(main_loop(kernel))  # nothing to carry with one stage


@pytest.mark.parametrize("warps, warp_tile", [((1, 1), (32, 32)), ((2, 1), (16, 32))])
def test_fragments_types_follow_the_warp_tiles(warps, warp_tile) -> None:
    kernel = through(fragments, Options(warps=warps, stages=1))
    expected = {"A": MmaLayout("A", warps, warp_tile), "B": MmaLayout("B", warps, warp_tile)}
    for load in [op for op in kernel.walk() if op.name == "frag.ldmatrix"]:
        role = load.attrs["operand"]
        assert load.result.type.layout == expected[role]
        assert load.result.type.shape == ((32, MMA_K) if role == "A" else (MMA_K, 32))
        assert load.result.type.space == "reg"
    c_layout = MmaLayout("C", warps, warp_tile)
    loop = main_loop(kernel)
    accumulators = [loop.operands[3], loop.regions[0].args[1], loop.results[0]]
    accumulators += [op.result for op in kernel.walk() if op.name == "frag.mma"]
    assert {v.type.layout for v in accumulators} == {c_layout}
    assert producer(loop.operands[3], "tile.full").attrs["value"] == 0.0


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("bk", [16, 32, 64])
def test_fragments_carry_the_first_k_step_across_iterations(stages: int, bk: int) -> None:
    kernel = through(fragments, Options(warps=(1, 1), stages=stages), BK=bk)
    steps = bk // MMA_K
    loop = main_loop(kernel)
    body = loop.regions[0]

    # Before the loop: stage 0 is waited for, fenced, and its k-step-0 fragments loaded.
    prologue = before_loop(kernel)
    first = named(prologue, "frag.ldmatrix")
    assert [(op.attrs["operand"], op.attrs["k0"]) for op in first] == [("A", 0), ("B", 0)]
    assert all(constant_of(stage_of(op.operands[0])[1]) == 0 for op in first)
    tail = [op.name for op in prologue[prologue.index(named(prologue, "copy.commit")[-1]) + 1:]
            if op.name.startswith(("copy.", "gpu."))]
    assert tail == ["copy.wait", "gpu.barrier"]
    assert named(prologue, "copy.wait")[0].attrs == {"pending": stages - 2}

    # The loop carries them: two more block arguments, initial values, yields and results.
    a0, b0 = fragment_args(loop)
    carried = [body.args.index(a0) - 1, body.args.index(b0) - 1]  # args[0] is the index
    assert [loop.operands[3 + i] for i in carried] == [op.result for op in first]
    assert [loop.results[i].type for i in carried] == [a0.type, b0.type]
    assert (a0.type, b0.type) == (first[0].result.type, first[1].result.type)
    mmas = named(body.ops, "frag.mma")
    assert len(mmas) == steps
    assert mmas[0].operands[:2] == [a0, b0]

    # Inside: k-steps 1.. from this stage, then wait, barrier and k-step 0 of the next stage
    # just before the last mma.
    loads = named(body.ops, "frag.ldmatrix")
    assert [(op.attrs["operand"], op.attrs["k0"]) for op in loads] == [
        (role, step * MMA_K) for step in [*range(1, steps), 0] for role in "AB"]
    ahead = loads[-2:]
    start = body.ops.index(mmas[-2]) + 1 if steps > 1 else 0
    between = [op.name for op in body.ops[start:body.ops.index(ahead[0])]
               if op.name in ("copy.wait", "gpu.barrier", "frag.ldmatrix", "frag.mma")]
    assert between == ["copy.wait", "gpu.barrier"]
    assert named(body.ops, "copy.wait")[0].attrs == {"pending": stages - 2}
    assert len(named(body.ops, "gpu.barrier")) == 1
    assert body.ops.index(ahead[1]) < body.ops.index(mmas[-1])
    _, iterations = simulate(kernel, M=64, N=64, K=5 * bk)
    for it, env in enumerate(iterations):
        assert [env[stage_of(op.operands[0])[1]] for op in ahead] == [(it + 1) % stages] * 2
        assert {env[stage_of(op.operands[0])[1]] for op in loads[:-2]} <= {it % stages}
    yielded = named(body.ops, "scf.yield")[0].operands
    assert yielded[0] is mmas[-1].result
    assert [yielded[i] for i in carried] == [op.result for op in ahead]
    assert [stage_of(op.operands[0])[0] for op in ahead] == [
        stage_of(op.operands[0])[0] for op in first]
    # Exactly 2 ldmatrix per k step in all, plus one pair for the next iteration.
    all_loads = [op for op in kernel.walk() if op.name == "frag.ldmatrix"]
    assert len(all_loads) == 2 * steps + 2


def test_fragments_without_pipelining_keep_every_load_in_its_iteration() -> None:
    options = Options(warps=(1, 1), stages=3, pipeline_fragments=False)
    kernel = through(fragments, options, BK=32)
    assert not named(before_loop(kernel), "frag.ldmatrix")
    assert not fragment_args(main_loop(kernel))
    assert len(named(loop_ops(kernel), "frag.ldmatrix")) == 4
    body = loop_ops(kernel)
    assert body.index(named(body, "gpu.barrier")[0]) < body.index(
        named(body, "frag.ldmatrix")[0])


def test_fragments_map_the_epilogue_to_the_accumulator_layout() -> None:
    kernel = through(fragments, Options(warps=(2, 1), stages=2), EPILOGUE)
    c_layout = MmaLayout("C", (2, 1), (16, 32))
    epilogue = after_loop(kernel)
    assert not named(epilogue, "tile.load") and not named(epilogue, "tile.broadcast")
    loads = {op.operands[0]: op for op in named(epilogue, "frag.load")}
    assert loads[kernel.param_value("C")].attrs["dims"] == [0, 1]
    assert loads[kernel.param_value("bias")].attrs["dims"] == [-1, 0]
    assert loads[kernel.param_value("scale")].attrs["dims"] == [0, -1]
    tiles = [op for op in epilogue if op.results and isinstance(op.result.type, TileType)]
    assert len(tiles) >= 8
    for op in tiles:
        assert op.result.type.layout == c_layout, op.name
        assert op.result.type.shape == (32, 32)
    store = named(epilogue, "tile.store")[0]
    assert str(store.operands[-1].type) == (
        "tile<f16,[32,32],reg,mma_c(warps=2x1,warp_tile=16x32)>")


@pytest.mark.parametrize("divisible, masked", [
    ((), [True, True]),
    ((("M", 4096), ("N", 4096), ("K", 4096)), [False, False]),
    ((("M", 8), ("N", 4096), ("K", 8)), [True, False]),  # rows may overrun, columns not
])
def test_fragments_mask_epilogue_accesses_only_where_tiles_may_overrun(divisible,
                                                                       masked) -> None:
    options = Options(warps=(2, 1), spec=Spec(divisible=divisible))
    epilogue = after_loop(through(fragments, options, EPILOGUE))
    assert named(epilogue, "tile.store")[0].attrs["masked"] == masked
    loads = {op.operands[0].hint: op.attrs["masked"] for op in named(epilogue, "frag.load")}
    assert loads == {"C": masked, "bias": masked[1:], "scale": masked[:1]}
