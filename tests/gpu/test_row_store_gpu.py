"""The mma.sync kernels' row-store epilogue on the GPU (``misaligned_store = "rows"``,
passes/row_store.py): ragged f16/bf16 products whose C rows are only 2-byte aligned (odd N),
C poisoned with NaN (every element must be written) or with a sentinel around it (nothing
else may be), the tuned 1000x1003x77 kernel among them, and the fused epilogue (which also
reads C), against float64 references."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.runtime import gpu_unavailable_reason, has_gpu

from tests.gpu.test_packing_gpu import TOLERANCE, DeviceArray, assert_only_c_written, operand, \
    rel_error, sample, sentinel_framed_c

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

# (M, N, K, constants): the tuned small ragged kernel (sm_90a picks mma.sync for it with
# misaligned operands), a pipelined one, and a tile wider than N.
CASES = [
    (1000, 1003, 77, dict(BM=64, BN=128, BK=80, warps=(2, 4), stages=1,
                          misaligned_copy="words")),
    (257, 263, 135, dict(BM=64, BN=64, BK=32, warps=(2, 2), stages=3)),
    (45, 51, 37, dict(BM=32, BN=64, BK=48, warps=(2, 2), stages=2)),
]
IDS = ["x".join(map(str, case[:3])) for case in CASES]


def f16_out(dtype: str):
    from tilec.benchmarking.contenders import sample_kernel
    return sample_kernel(dtype, dtype)


def c_spec_decision(function, m, n, k, config) -> str:
    """The epilogue the pass picks for C rows of an odd stride (the launch's spec here)."""
    from tilec.options import Spec, TensorSpec
    spec = Spec(tensors=(("A", TensorSpec(1, 1)), ("B", TensorSpec(1, 1)),
                         ("C", TensorSpec(1, 1))))
    compiled = function.compile(spec=spec, M=m, N=n, K=k, misaligned_store="rows", **config)
    return compiled.kernel.schedule.epilogue.via


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m,n,k,config", CASES, ids=IDS)
def test_rows_write_every_element_of_a_nan_poisoned_c(dtype, m, n, k, config):
    rng = np.random.default_rng(11)
    a, a64 = operand(rng, (m, k), dtype)
    b, b64 = operand(rng, (k, n), dtype)
    c, _ = operand(rng, (m, n), dtype)
    c[...] = np.nan
    function = f16_out(dtype)
    assert c_spec_decision(function, m, n, k, config) == "block_rows"
    function(a, b, c, device="gpu", pack="off", misaligned_store="rows", **config)
    assert rel_error(c.astype(np.float64), a64 @ b64) < 2 * TOLERANCE[dtype]


@pytest.mark.parametrize("m,n,k,config", CASES[::2], ids=IDS[::2])
def test_rows_write_c_and_nothing_else(m, n, k, config):
    rng = np.random.default_rng(12)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = sentinel_framed_c(m, n)
    launch = f16_out("f16").prepare(a, b, c, pack="off", misaligned_store="rows", **config)
    assert launch.compiled.kernel.schedule.epilogue.via == "block_rows"
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < 2 * TOLERANCE["f16"]
    assert_only_c_written(c)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m,n,k,config", CASES, ids=IDS)
def test_the_fused_epilogue_through_rows(dtype, m, n, k, config):
    rng = np.random.default_rng(13)
    a, a64 = operand(rng, (m, k), dtype)
    b, b64 = operand(rng, (k, n), dtype)
    c, c64 = operand(rng, (m, n), dtype)
    bias = rng.standard_normal(n).astype(np.float32)
    alpha, beta = 0.75, -0.5
    function = sample("gemm_epilogue", dtype)
    assert c_spec_decision(function, m, n, k, config) == "block_rows"
    function(a, b, c, bias, alpha, beta, device="gpu", pack="off", misaligned_store="rows",
             **config)
    ref = np.maximum(alpha * (a64 @ b64) + beta * c64 + bias.astype(np.float64), 0)
    assert rel_error(c.astype(np.float64), ref) < 2 * TOLERANCE[dtype]
