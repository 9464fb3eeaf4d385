"""8-bit weights converted at launch (tilec.launch.packing.convert_to, passes/dequantize.py)
on the GPU, against float64: the w8a16 sample where many rows re-read W (converted, then
the f16/bf16 product: wgmma on sm_90a) and the same launch with --pack off (converted in
registers); weights stored [K, N] and fp8 activations, which only the launch's conversion
reads; fp8 weights; a weight whose rows are padded. Each launch says what it packed."""
from __future__ import annotations

from pathlib import Path

import pytest

from tilec.kernel import load_file
from tilec.launch.packing import DEQUANTIZE_MIN_ROWS
from tilec.runtime.driver import has_gpu

from .test_w8a16_gpu import assert_within_bound, operands, w8a16
from .test_wfp8a16_gpu import wfp8a16

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an NVIDIA GPU")]
torch = pytest.importorskip("torch")

PROGRAMS = Path(__file__).resolve().parents[1] / "dequantize_programs.py"
SHAPES = [(DEQUANTIZE_MIN_ROWS, 1003, 77), (2000, 517, 4099), (4096, 4096, 4096)]


@pytest.fixture(scope="module")
def programs():
    return load_file(PROGRAMS)


def packed(kernel, *args, **options) -> tuple[str, ...]:
    """Launch through prepare (what a call does) and say which tensors the launch packed (A
    too where its rows are misaligned: odd K)."""
    launch = kernel.prepare(*args, **options)
    launch()
    torch.cuda.synchronize()
    return launch.packing.names


@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_w8a16_converts_at_launch_where_many_rows_re_read_w(shape, activations):
    m, n, k = shape
    a, w, scale = operands(m, n, k, activations)
    for policy, converted in (("auto", True), ("off", False)):
        c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
        assert ("W" in packed(w8a16(activations), a, w, scale, c, pack=policy)) == converted
        assert_within_bound(c, a, w, scale, f"{activations} {shape} pack={policy}")


@pytest.mark.parametrize("shape", [(16, 300, 200), (1500, 777, 555), (2048, 2048, 2048)],
                         ids=lambda s: "x".join(map(str, s)))
def test_a_weight_stored_k_by_n_is_converted_at_launch(programs, shape):
    m, n, k = shape
    a, w, scale = operands(m, n, k, "f16")
    w_kn = w.t().contiguous()
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    assert "W" in packed(programs["kn"], a, w_kn, scale, c)
    assert_within_bound(c, a, w, scale, f"[K, N] weight {shape}")


def test_fp8_weights_convert_exactly():
    m, n, k = 2048, 1000, 333
    a, _, scale = operands(m, n, k, "bf16")
    bits = torch.randint(0, 256, (n, k), dtype=torch.uint8, device="cuda")
    bits[(bits & 0x7F) == 0x7F] = 0  # e4m3's NaNs: a finite product to compare
    w = bits.view(torch.float8_e4m3fn)
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    assert "W" in packed(wfp8a16("f8e4m3", "bf16"), a, w, scale, c)
    assert_within_bound(c, a, w, scale, "e4m3 weights")


def test_a_weight_with_padded_rows_converts(programs):
    m, n, k = DEQUANTIZE_MIN_ROWS, 640, 300
    a, w, scale = operands(m, n, k, "f16")
    padded = torch.zeros((n, k + 13), dtype=torch.int8, device="cuda")
    padded[:, :k] = w
    c = torch.full((m, n), float("nan"), device="cuda").to(a.dtype)
    assert "W" in packed(w8a16("f16"), a, padded[:, :k], scale, c)
    assert_within_bound(c, a, w, scale, "padded rows")


def test_8_bit_activations_are_converted_at_launch(programs):
    """An fp8 A converted in the loop: registers convert only B, so the launch converts A."""
    m, n, k = 300, 520, 190
    bits = torch.randint(0, 256, (m, k), dtype=torch.uint8, device="cuda")
    bits[(bits & 0x7F) == 0x7F] = 0  # no NaN activations
    a = bits.view(torch.float8_e4m3fn)
    weights = torch.randn((n, k), device="cuda").to(torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda").to(torch.float16)
    assert "A" in packed(programs["a8"], a, weights, c)
    assert_within_bound(c, a, weights, torch.ones(n, device="cuda"), "fp8 activations")


@pytest.mark.parametrize("shared", [False, True], ids=["per_batch", "shared"])
def test_a_batch_of_k_by_n_weights_converts_at_launch(programs, shared):
    bt, m, n, k = 3, 300, 130, 100
    a = torch.randn((bt, m, k), device="cuda").to(torch.float16)
    w = torch.randint(-128, 128, (1 if shared else bt, k, n), dtype=torch.int8, device="cuda")
    weights = w.expand(bt, k, n) if shared else w
    c = torch.full((bt, m, n), float("nan"), device="cuda").to(torch.float16)
    assert "W" in packed(programs["batched_kn"], a, weights, c)
    for b in range(bt):
        assert_within_bound(c[b], a[b], weights[b].t(), torch.ones(n, device="cuda"),
                            f"batch {b} of [K, N] weights, shared={shared}")
