"""Conversions from and to the 8-bit floats on the GPU (tests/test_fp8_conversions.py's
programs): f32 values rounded to e4m3 / e5m2 by cvt.rn.satfinite, bit for bit the CPU
encoder's (every finite value, every tie, beyond the largest, infinities, NaN, values
under the smallest subnormal); all 256 patterns of each format widened exactly; and fp8
outputs of fp8 and f16 products at ragged sizes, on mma.sync and wgmma8, with both
backends, against float64 within the output format's rounding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import has_gpu
from tilec.target import fp8

from ..test_fp8_conversions import CONVERSIONS, special_values
from ..test_tma_store import I8_OUT

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TORCH_NAMES = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}


def needs_sm_89():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("the fp8 conversions need sm_89 or later")


def program(x_to: str, r_from: str):
    text = CONVERSIONS.replace("C8: f8e4m3", f"C8: {x_to}").replace(".to(f8e4m3)",
                                                                    f".to({x_to})")
    return load_file(Path("conversions.py"), text=text.replace("R: f8e5m2", f"R: {r_from}"))["f"]


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("x_to, r_from", [("f8e4m3", "f8e5m2"), ("f8e5m2", "f8e4m3")])
def test_conversions_are_the_cpu_encoders_bit_for_bit(x_to, r_from, arch, backend):
    needs_sm_89()
    if backend == "llvm" and arch == "sm_90a":
        pytest.skip("the llvm backend's sm_90a kernels are its sm_90 ones")
    rng = np.random.default_rng(11)
    m, n, k = 77, 301, 40
    x = (rng.standard_normal((m, n)) * 100).astype(np.float32)
    specials = special_values(x_to)
    x.flat[:specials.size] = specials
    x.flat[specials.size:2 * specials.size] = -specials
    r = np.arange(m * n, dtype=np.uint32).astype(np.uint8).reshape(m, n)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c8, c = np.full((m, n), 0xAA, np.uint8), np.full((m, n), 0xAA, np.uint8)
    c32 = np.full((m, n), np.nan, np.float32)
    program(x_to, r_from)(a, b, x, r, c8, c32, c, 0.25, arch=arch, backend=backend)
    expected = fp8.encode(x, x_to)
    nan = np.isnan(fp8.decode(expected, x_to))
    np.testing.assert_array_equal(c8[~nan], expected[~nan])
    assert np.isnan(fp8.decode(c8[nan], x_to)).all()
    np.testing.assert_array_equal(c32, fp8.decode(r, r_from))  # NaN where NaN
    reference = 0.25 * (a.astype(np.float64) @ b.astype(np.float64).T)
    out = fp8.decode(c, "f8e5m2")
    error = np.linalg.norm(out - reference) / np.linalg.norm(reference)
    assert error < 0.14, error


@pytest.mark.parametrize("config", [dict(arch="sm_90"),
                                    dict(arch="sm_90a", BM=128, BN=256, BK=128, stages=4,
                                         raster_group=8, persistent=True),
                                    dict(arch="sm_90a", BM=128, BN=128, BK=128, stages=4),
                                    dict(arch="sm_90", backend="llvm"),
                                    # stored directly: 192 columns are not whole 128-byte
                                    # staging slabs of e4m3 (once an illegal address)
                                    dict(arch="sm_90a", BM=128, BN=192, BK=128, stages=4,
                                         persistent=True, fp8_accumulation="promoted")],
                         ids=["mma.sync", "wgmma8-tuned", "wgmma8-128", "llvm",
                              "wgmma8-192-promoted"])
@pytest.mark.parametrize("shape", [(1, 1, 16), (127, 129, 64), (1000, 1008, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_fp8_outputs_of_the_fp8_product(name, shape, config):
    """samples/fp8_gemm.py writing C in the operands' format: torch float8 tensors in and
    out (zero-copy), against float64 of the decoded operands."""
    needs_sm_89()
    text = (SAMPLES / "fp8_gemm.py").read_text().replace("f8e4m3", name)
    text = text.replace("C: f16[M, N]", f"C: {name}[M, N]").replace(".to(f16)", f".to({name})")
    function = load_file(Path("fp8_out.py"), text=text)["fp8_gemm"]
    m, n, k = shape
    dtype = getattr(torch, TORCH_NAMES[name])
    generator = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
    b = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda").to(dtype)
    scale = 1 / max(1.0, k ** 0.5)  # keeps the outputs inside e4m3's 448
    function(a, b, c, scale, 1.0, **config)
    torch.cuda.synchronize()
    reference = scale * (a.double() @ b.double().t())
    out = c.double()
    assert not torch.isnan(out).any(), "some outputs were never written"
    error = float(torch.linalg.norm(out - reference) / torch.linalg.norm(reference))
    print(f"{name} out {shape} {config}: rel Frobenius error {error:.3g}")
    assert error < {"f8e4m3": 0.07, "f8e5m2": 0.14}[name], error




@pytest.mark.parametrize("options", [dict(stages=4, persistent=True, raster_group=8),
                                     dict(BN=128, stages=4)], ids=["tuned", "128x128"])
@pytest.mark.parametrize("shape", [(127, 144, 64), (1000, 1008, 4112), (333, 1003, 160)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.usefixtures("hopper")
def test_an_i8_output_is_staged_two_bytes_a_write_and_exact(shape, options):
    """An i8 C (the i32 sums' low bytes) on sm_90a: TMA-stored where C's rows are 16-byte
    aligned (N a multiple of 16), stored directly otherwise; exact either way."""
    kernel = load_file(Path("i8_out.py"), text=I8_OUT)["f"]
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(13)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device="cuda", generator=generator)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device="cuda", generator=generator)
    c = torch.full((m, n), 77, dtype=torch.int8, device="cuda")
    launch = kernel.prepare(a, b, c, arch="sm_90a", **options)
    assert launch.compiled.kernel.schedule.epilogue.via == ("tma" if n % 16 == 0 else "direct")
    launch()
    torch.cuda.synchronize()
    exact = (a.cpu().numpy().astype(np.float64) @ b.cpu().numpy().astype(np.float64).T)
    expected = exact.astype(np.int64).astype(np.int8)  # the low byte, as cvt.s8.s32 keeps
    assert np.array_equal(c.cpu().numpy(), expected)
