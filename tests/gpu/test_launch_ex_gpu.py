"""The launch function's cuLaunchKernelEx path on a GPU: thread block clusters and a
128-byte parameter passed by value (the shape of a TMA tensor map)."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.runtime import (BlobArg, DeviceBuffer, PtrArg, current_device, gpu_unavailable_reason,
                           has_gpu, launch, load_module, synchronize)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

# out[block] = cluster size * 1000 + the block's rank in its cluster;
# out[thread] = the thread's 4 bytes of the blob, read through its generic address as nvcc
# reads a __grid_constant__ parameter.
PTX = """.version 8.0
.target sm_90
.address_size 64

.visible .entry cluster_ranks(.param .u64 out)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %cluster_nctarank;
    mov.u32 %r3, %cluster_ctarank;
    mad.lo.s32 %r4, %r2, 1000, %r3;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}

.visible .entry copy_blob(.param .u64 out, .param .align 64 .b8 blob[128])
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    mov.u64 %rd3, blob;
    cvta.param.u64 %rd4, %rd3;
    add.s64 %rd5, %rd4, %rd2;
    ld.u32 %r2, [%rd5];
    add.s64 %rd6, %rd1, %rd2;
    st.global.u32 [%rd6], %r2;
    ret;
}
"""


@pytest.fixture(scope="module")
def module():
    if current_device().compute_capability < (9, 0):
        pytest.skip("thread block clusters need sm_90")
    return load_module(PTX, name="launch_ex")


@pytest.mark.parametrize("cluster, expected", [
    ((1, 1, 1), [1000, 1000, 1000, 1000]),
    ((2, 1, 1), [2000, 2001, 2000, 2001]),
])
def test_cluster_launches_see_their_cluster(module, cluster, expected) -> None:
    out = DeviceBuffer(4 * 4)
    out.memset_d8(0xFF)
    launch(module.function("cluster_ranks"), (4, 1, 1), (32, 1, 1), 0, None, [PtrArg(out.ptr)],
           cluster=cluster)
    synchronize()
    result = np.zeros(4, np.uint32)
    out.copy_to_host(result)
    assert result.tolist() == expected


@pytest.mark.parametrize("cluster", [None, (1, 1, 1)])
def test_a_128_byte_blob_arrives_by_value(module, cluster) -> None:
    data = bytes((7 * i + 3) % 256 for i in range(128))
    out = DeviceBuffer(128)
    out.memset_d8(0)
    launch(module.function("copy_blob"), (1, 1, 1), (32, 1, 1), 0, None,
           [PtrArg(out.ptr), BlobArg(data)], cluster=cluster)
    synchronize()
    result = np.zeros(128, np.uint8)
    out.copy_to_host(result)
    assert result.tobytes() == data
