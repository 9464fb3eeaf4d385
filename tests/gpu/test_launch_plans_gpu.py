"""Plain calls reuse the launch plan of an earlier call with arrays laid out alike
(tilec/launch/plans.py): the plan is decided once, every call reads its own arrays and is
right, and a call whose arrays are laid out otherwise (a misaligned view that must be packed,
another shape) gets a plan of its own and is right too."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.launch import plans
from tilec.runtime import gpu_unavailable_reason, has_gpu

from tests.gpu.test_packing_gpu import DeviceArray, nan_output, rel_error, sample

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]


def planned(monkeypatch) -> list[str]:
    """Records each call that plans afresh (reaches plan_packing)."""
    import tilec.launch.packing as packing
    seen: list[str] = []
    original = packing.plan_packing

    def counting(kernel, tensors, *args, **kwargs):
        seen.append(",".join(f"{name}@{arg.ptr % 16}" for name, arg in tensors.items()))
        return original(kernel, tensors, *args, **kwargs)
    monkeypatch.setattr(packing, "plan_packing", counting)
    return seen


def f16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(np.float16)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_calls_laid_out_alike_share_a_plan_and_read_their_own_arrays(arch, monkeypatch,
                                                                     request):
    if arch == "sm_90a":
        request.getfixturevalue("hopper")
    plans.forget_plans()
    seen = planned(monkeypatch)
    function = sample("matmul")
    rng = np.random.default_rng(3)
    m, n, k = 300, 256, 192
    for call in range(3):  # fresh buffers each call: other pointers, the same layout
        a, b = f16(rng, (m, k)), f16(rng, (k, n))
        c = nan_output(m, n)
        function(DeviceArray(a), DeviceArray(b), c, arch=arch)
        want = a.astype(np.float64) @ b.astype(np.float64)
        assert rel_error(c.values(), want) < 2e-3, call
    assert len(seen) == 1, seen
    # A's rows one element into its buffer (2-byte aligned): another plan, which packs A.
    a, b = f16(rng, (m, k)), f16(rng, (k, n))
    storage = np.concatenate([[np.float16(0)], a.reshape(-1)])
    shifted = DeviceArray(storage, shape=(m, k), strides=(k, 1), offset=1)
    c = nan_output(m, n)
    function(shifted, DeviceArray(b), c, arch=arch)
    assert rel_error(c.values(), a.astype(np.float64) @ b.astype(np.float64)) < 2e-3
    assert len(seen) == 2 and "A@2" in seen[1], seen
    # Another M: another plan.
    a = f16(rng, (m + 1, k))
    c = nan_output(m + 1, n)
    function(DeviceArray(a), DeviceArray(b), c, arch=arch)
    assert rel_error(c.values(), a.astype(np.float64) @ b.astype(np.float64)) < 2e-3
    assert len(seen) == 3, seen
