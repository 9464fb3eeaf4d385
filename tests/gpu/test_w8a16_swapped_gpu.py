"""wgmma's register form on the GPU (the wgmma_rs family): samples/w8a16_swapped.py, the int8
weights as A converted in the consumers' registers, at ragged sizes and in the schedules it
takes (persistent, 128-row warpgroups, clusters, split-free deep BK), f16 and bf16
activations, against float64 with the bound of tests/gpu/test_w8a16_gpu.py; integer-valued
activations give float64's result exactly; e4m3 weights too. Skips off sm_90 GPUs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu

from .test_w8a16_gpu import assert_within_bound, operands, reference, w8a16

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")
if has_gpu() and torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("wgmma's register form needs sm_90a (compute capability 9.0)",
                allow_module_level=True)

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
SHAPES = [(1, 1, 1), (127, 129, 96), (1000, 1003, 77), (333, 517, 4099), (64, 8192, 8192),
          (512, 4096, 4096)]
CONFIGS = [dict(), dict(stages=4), dict(BA=256, stages=2), dict(BA=64, stages=4),
           dict(persistent=True, stages=4), dict(BW=256, BA=64, warpgroup_rows=128),
           dict(cluster=2), dict(cluster=2, persistent=True), dict(BK=256, stages=2),
           dict(BW=64, BA=256)]


def swapped(activations: str = "f16", weights: str = "i8"):
    text = (SAMPLES / "w8a16_swapped.py").read_text(encoding="utf-8")
    text = text.replace("from tilec import f16, f32, i8",
                        "from tilec import bf16, f16, f32, f8e4m3, i8")
    for old in ("A: f16[", "C: f16[", ".to(f16)"):
        text = text.replace(old, old.replace("f16", activations))
    text = text.replace("W: i8[", f"W: {weights}[")
    return load_file(SAMPLES / "w8a16_swapped.py", text=text)["w8a16_swapped"]


# 1x1x1: rows too short for TMA and too small to pack, so the launch converts W and the f16
# product runs on mma.sync (defaults only). 1000x1003x77 and 333x517x4099: rows misaligned
# but large enough to pack, so the launch packs both operands as they are (W in 8 bits). The
# large shapes: defaults only (their float64 reference is the slow part).
CASES = [(shape, config) for shape in SHAPES for config in CONFIGS
         if not config or shape != (1, 1, 1) and shape[0] * shape[1] * shape[2] < 2 ** 31]


@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("shape, config", CASES, ids=lambda v: "x".join(map(str, v))
                         if isinstance(v, tuple) else ",".join(f"{k}={x}" for k, x in
                                                              v.items()) or "defaults")
def test_swapped_w8a16_matches_float64(shape, config, activations):
    m, n, k = shape
    a, w, scale = operands(m, n, k, activations)
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    launch = swapped(activations).prepare(a, w, scale, c, **config)
    converted = [t.converted for t in launch.packing.tensors if t.name == "W"]
    if shape == (1, 1, 1):
        assert converted == [activations]
    else:  # the weights stay int8 (packed as bytes where their rows are misaligned)
        assert converted in ([], [None])
        assert launch.compiled.kernel.schedule.tiling.kind == "wgmma_rs"
    launch()
    torch.cuda.synchronize()
    assert_within_bound(c, a, w, scale, f"swapped {activations} {shape} {config}")


@pytest.mark.parametrize("shape", [(127, 129, 65), (1000, 1003, 77), (64, 64, 256)],
                         ids=lambda s: "x".join(map(str, s)))
def test_the_conversion_is_exact(shape):
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randint(-1, 2, (m, k), device="cuda", generator=generator).to(torch.float16)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=generator)
    w[0, :] = -128
    w[-1, :] = 127
    scale = torch.ones(n, device="cuda")
    c = torch.full((m, n), float("nan"), device="cuda").to(torch.float16)
    swapped()(a, w, scale, c)
    torch.cuda.synchronize()
    assert torch.equal(c.cpu(), torch.from_numpy(reference(a, w, scale)).to(torch.float16))


def test_e4m3_weights():
    m, n, k = 300, 500, 700
    generator = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn((m, k), device="cuda", generator=generator).to(torch.float16)
    w = (torch.randn((n, k), device="cuda", generator=generator) * 4).to(torch.float8_e4m3fn)
    scale = torch.rand(n, device="cuda", generator=generator) * 0.02 + 0.001
    c = torch.full((m, n), float("nan"), device="cuda").to(torch.float16)
    launch = swapped("f16", "f8e4m3").prepare(a, w, scale, c)
    assert launch.compiled.kernel.schedule.tiling.kind == "wgmma_rs"
    launch()
    torch.cuda.synchronize()
    want = (a.double() @ w.double().T * scale.double()).cpu().numpy()
    error = np.linalg.norm(c.double().cpu().numpy() - want) / np.linalg.norm(want)
    assert error < 2e-3, error


SWAPPED_BY_THE_COMPILER = [dict(BK=128), dict(BM=64, BN=128, BK=128, stages=4),
                           dict(BK=128, stages=4, persistent=True),
                           dict(BM=256, BN=64, BK=128, stages=3)]


@pytest.mark.parametrize("activations", ["f16", "bf16"])
# K a multiple of 16: both operands' rows 16-byte aligned as passed (too small to be packed),
# which TMA needs.
@pytest.mark.parametrize("shape", [(127, 129, 96), (333, 517, 4096), (512, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("config", SWAPPED_BY_THE_COMPILER,
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_the_w8a16_sample_swapped_by_the_compiler(shape, config, activations):
    """samples/w8a16.py as written, BK 128: the swap_product pass computes C.T = W @ A.T on
    wgmma's register form."""
    m, n, k = shape
    a, w, scale = operands(m, n, k, activations)
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    launch = w8a16(activations).prepare(a, w, scale, c, **config)
    schedule = launch.compiled.kernel.schedule
    assert schedule.swap.swapped and schedule.tiling.kind == "wgmma_rs"
    launch()
    torch.cuda.synchronize()
    assert_within_bound(c, a, w, scale, f"w8a16 swapped {activations} {shape} {config}")
