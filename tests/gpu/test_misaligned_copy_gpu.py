"""Widened copies of misaligned operands on the GPU (``misaligned_copy`` "vectors" and
"words", left unpacked): ragged f16/bf16 matmuls whose operand rows are 2-byte aligned, and
arrays starting 2 bytes into a 4-byte word, against a float64 reference; the tuned
1000x1003x77 kernel among them. "words" reads the aligned words around each vector: the
bytes it must not keep (the row before, the next row, past K) come from neighbouring
elements that are large here, so keeping one would show."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.runtime import gpu_unavailable_reason, has_gpu

from tests.gpu.test_packing_gpu import TOLERANCE, DeviceArray, assert_only_c_written, \
    nan_output, operand, rel_error, sample, sentinel_framed_c

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

# (M, N, K, constants): the tuned small ragged kernel, a pipelined one, K inside a vector.
CASES = [
    (1000, 1003, 77, dict(BM=64, BN=128, BK=80, warps=(2, 4), stages=1)),
    (257, 263, 135, dict(BM=64, BN=64, BK=32, warps=(2, 2), stages=3)),
    (45, 51, 37, dict(BM=32, BN=64, BK=48, warps=(2, 2), stages=2)),
]


@pytest.mark.parametrize("how", ["vectors", "words"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m,n,k,config", CASES, ids=lambda c: "x".join(map(str, c))
                         if isinstance(c, tuple) else None)
def test_ragged_unpacked_operands_copied_as_vectors_are_right(how, dtype, m, n, k, config):
    rng = np.random.default_rng(7)
    a, a64 = operand(rng, (m, k), dtype)
    b, b64 = operand(rng, (k, n), dtype)
    c = np.full((m, n), np.nan, np.float32)
    function = sample("matmul", dtype)
    function(a, b, c, device="gpu", pack="off", misaligned_copy=how, **config)
    assert rel_error(c.astype(np.float64), a64 @ b64) < TOLERANCE[dtype]


@pytest.mark.parametrize("how", ["vectors", "words"])
def test_arrays_starting_mid_word_and_neighbours_that_must_not_leak(how):
    m, n, k = 130, 70, 45
    rng = np.random.default_rng(8)
    # A starts one element into its buffer (2-byte aligned base); the element before it
    # and B's storage beyond K hold 1e4, which any kept byte of a neighbour would add in.
    a_store = rng.standard_normal(m * k + 2).astype(np.float16)
    a_store[0] = a_store[-1] = 1e4
    a = DeviceArray(a_store, shape=(m, k), strides=(k, 1), offset=1)
    b_store = np.full((k + 1, n + 1), 1e4, np.float16)
    b_store[:k, :n] = rng.standard_normal((k, n)).astype(np.float16)
    b = DeviceArray(b_store, shape=(k, n), strides=(n + 1, 1))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c, pack="off", misaligned_copy=how, BM=64, BN=64,
                                      BK=48, warps=(2, 2), stages=1)
    assert [(o.vec, o.global_vec) for o in launch.compiled.kernel.schedule.tiling.operands] \
        == [(8, 1), (8, 1)]
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]


@pytest.mark.parametrize("m,n,k,config", CASES[::2], ids=lambda c: "x".join(map(str, c))
                         if isinstance(c, tuple) else None)
def test_pair_stores_of_misaligned_c_rows_write_c_and_nothing_else(m, n, k, config):
    from tilec.benchmarking.contenders import sample_kernel
    rng = np.random.default_rng(9)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = sentinel_framed_c(m, n)
    launch = sample_kernel("f16", "f16").prepare(
        a, b, c, pack="off", misaligned_copy="words", misaligned_store="pairs", **config)
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]
    assert_only_c_written(c)
