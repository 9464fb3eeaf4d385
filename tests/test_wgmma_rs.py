"""wgmma's register form with an 8-bit A converted in registers (the wgmma_rs family,
samples/w8a16_swapped.py): which blocks it takes and the errors where none does, the A
fragments' byte pairs against the layout, the lowered kernels run in the executor at ragged
sizes against float64, the PTX (register sets, waits, fences), and the launch not converting
the weights it converts. ptxas: tests/test_ptxas.py (HOPPER)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileConfigError
from tilec.families.catalogue import op_catalogue
from tilec.families.products import FAMILIES, family_for
from tilec.families.tma_boxes import operand_tma_layout
from tilec.families.wgmma_rs import FAMILY as WGMMA_RS, REGISTER_SETS, a_offsets
from tilec.ir.schedule import OperandPlan
from tilec.compiler import compile_kernel
from tilec.kernel import load_file, written_params
from tilec.launch.packing import row_major_launch
from tilec.options import Options
from tilec.pipeline import run_pipeline
from tilec.target import fp8
from tilec.target.layout import SmemLayout

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
HOPPER = Options(arch="sm_90a")


def operands(source: str = "i8", a_k_major: bool = True) -> tuple[OperandPlan, OperandPlan]:
    a = OperandPlan("A", "W", SmemLayout(128, 128, transposed=not a_k_major), 16, source)
    b = OperandPlan("B", "A", SmemLayout(128, 128, transposed=True), 8)
    return a, b


def swapped(text_from: str = "i8", text_to: str = "i8", activations: str = "f16"):
    text = (SAMPLES / "w8a16_swapped.py").read_text()
    text = text.replace(f"W: {text_from}[", f"W: {text_to}[")
    text = text.replace("A: f16[", f"A: {activations}[").replace("C: f16[", f"C: {activations}[")
    text = text.replace(".to(f16)", f".to({activations})")
    if text_to != "i8":
        text = text.replace("import f16, f32, i8", f"import f16, f32, i8, {text_to}, bf16")
    elif activations != "f16":
        text = text.replace("import f16, f32, i8", "import f16, f32, i8, bf16")
    return load_file(SAMPLES / "w8a16_swapped.py", text=text)["w8a16_swapped"]


def test_a_converted_a_takes_wgmma_rs_on_sm_90a_only_where_it_applies() -> None:
    assert family_for("f16", "ffma", (128, 128, 128), HOPPER, operands()).name == "wgmma_rs"
    assert family_for("bf16", "ffma", (128, 256, 128), HOPPER,
                      operands("f8e4m3")).name == "wgmma_rs"
    # A plain product still takes wgmma, a converted B the mma family (w8a16.py).
    plain = (OperandPlan("A", "A", SmemLayout(128, 64), 8), operands()[1])
    assert family_for("f16", "ffma", (128, 128, 64), HOPPER, plain).name == "wgmma"
    names = [f.name for f in FAMILIES]
    assert names.index("wgmma") < names.index("wgmma_rs") < names.index("mma")


def test_the_reasons_it_declines() -> None:
    assert WGMMA_RS.declined((128, 128, 16), HOPPER, operands()) == (
        "BK=16 is not a multiple of 32 (32 bytes: TMA's narrowest swizzle span, and one k "
        "step)")
    # 64 and 32 bytes of A a row: TMA's 64- and 32-byte swizzles.
    assert WGMMA_RS.declined((128, 128, 64), HOPPER, operands()) is None
    assert WGMMA_RS.declined((128, 128, 32), HOPPER, operands()) is None
    assert "k must be contiguous" in WGMMA_RS.declined((128, 128, 128), HOPPER,
                                                       operands(a_k_major=False))
    assert "needs arch sm_90a" in WGMMA_RS.declined((128, 128, 128), Options(arch="sm_90"),
                                                     operands())
    plain = (OperandPlan("A", "A", SmemLayout(128, 128), 8), operands()[1])
    assert "not stored in 8 bits" in WGMMA_RS.declined((128, 128, 128), HOPPER, plain)
    # Registers: 256 accumulators a thread in 128-row warpgroups do not fit beside A's.
    rows_128 = Options(arch="sm_90a", warpgroup_rows=128)
    assert "registers" in WGMMA_RS.declined((256, 256, 128), rows_128, operands())
    assert WGMMA_RS.declined((128, 256, 128), HOPPER, operands()) is None


def test_the_compile_error_names_the_declined_rule() -> None:
    with pytest.raises(TileConfigError) as err:
        swapped().ptx(arch="sm_90a", BK=16)
    message = str(err.value)
    assert "only wgmma's register form does (sm_90a)" in message
    assert "BK=16 is not a multiple of 32" in message and "^" in message
    with pytest.raises(TileConfigError, match="needs arch sm_90a"):
        swapped().ptx(arch="sm_90")


@pytest.mark.parametrize("bk, span", [(128, 128), (64, 64), (32, 32)])
def test_a_fragment_pairs_are_the_swizzled_layout_and_conflict_free(bk: int, span: int) -> None:
    layout = operand_tma_layout("A", SmemLayout(128, bk), 1)
    assert layout.slab == span
    for m0 in (0, 64):
        for k0 in range(0, bk, 16):
            offsets = a_offsets(layout, m0, k0)
            expected = [[layout.offset(m0 + m, k0 + k) for k in range(16)] for m in range(64)]
            np.testing.assert_array_equal(offsets, expected)
    kernel = run_pipeline(swapped().lower(BK=bk), HOPPER).kernel
    assert kernel.schedule.tiling.kind == "wgmma_rs"
    a = next(c for c in kernel.schedule.conflicts if c.role == "A")
    assert a.swizzle == str(layout.swizzle)
    # The ld.shared.u16 pairs: one wavefront a warp access under TMA's swizzle, 8 without
    # (rows 128 bytes apart), 4 (64) or 2 (32).
    assert dict(a.chosen)["wgmma"] == 1 and dict(a.linear)["wgmma"] == span // 16, a


def run_swapped(function, consts: dict[str, Any], values: dict[str, Any],
                **options: Any) -> Any:
    kernel = run_pipeline(function.lower(**consts), Options(arch="sm_90a", **options)).kernel
    assert kernel.schedule.tiling.kind == "wgmma_rs"
    run_kernel(kernel, values, ops=op_catalogue())
    return kernel


CONFIGS = [(dict(), {}), (dict(BW=64, BA=128, BK=256), {"stages": 2}),
           (dict(BW=128, BA=128), {"persistent": True}),
           (dict(BW=256, BA=64), {"warpgroup_rows": 128}),
           (dict(BW=128, BA=128), {"cluster": 2, "persistent": True})]


@pytest.mark.parametrize("consts,options", CONFIGS,
                         ids=["128x128x128", "64x128x256", "persistent", "rows128", "cluster2"])
def test_int8_weights_in_registers_match_float64_at_ragged_sizes(consts, options) -> None:
    rng = np.random.default_rng(11)
    m, n, k = 150, 300, 333  # K: two full BK steps of 128 and a ragged one (zero-filled)
    a = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    w[0] = -128
    scale = (rng.random(n) / 64).astype(np.float32)
    values = {"A": a, "W": w, "scale": scale, "C": np.full((m, n), np.nan, np.float16)}
    run_swapped(swapped(), consts, values, **options)
    reference = (a.astype(np.float64) @ w.astype(np.float64).T) * scale
    error = np.linalg.norm(values["C"] - reference) / np.linalg.norm(reference)
    assert error < 2e-3, error


@pytest.mark.parametrize("weights,activations", [("f8e4m3", "f16"), ("f8e5m2", "bf16"),
                                                 ("i8", "bf16")])
def test_other_8_bit_weights_and_bf16_activations(weights: str, activations: str) -> None:
    rng = np.random.default_rng(12)
    m, n, k = 70, 130, 256
    a = rng.standard_normal((m, k)).astype(np.float32)
    if weights == "i8":
        w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
        decoded = w.astype(np.float64)
    else:
        w = fp8.encode(rng.standard_normal((n, k)), weights)
        decoded = fp8.decode(w, weights).astype(np.float64)
    function = swapped("i8", weights, activations)
    if activations == "bf16":  # bf16 arrays are uint16 bits (rounded to nearest even)
        bits = a.view(np.uint32)
        a_bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        a_in, a_exact = a_bits, (a_bits.astype(np.uint32) << 16).view(np.float32)
        c = np.zeros((m, n), np.uint16)
    else:
        a_in = a_exact = a.astype(np.float16)
        c = np.zeros((m, n), np.float16)
    values = {"A": a_in, "W": w, "scale": np.ones(n, np.float32), "C": c}
    run_swapped(function, {}, values)
    out = values["C"]
    if activations == "bf16":
        out = (out.astype(np.uint32) << 16).view(np.float32)
    reference = a_exact.astype(np.float64) @ decoded.T
    error = np.linalg.norm(out - reference) / np.linalg.norm(reference)
    assert error < (1e-2 if activations == "bf16" else 2e-3), error


def test_the_ptx_converts_into_alternating_register_sets() -> None:
    ptx = swapped().ptx(arch="sm_90a")
    body = ptx[ptx.index("wgmma.fence"):]
    products = [line.strip() for line in ptx.splitlines() if "wgmma.mma_async" in line]
    assert len(products) == 128 // 16  # one a k16 step of BK 128, one m64 strip
    a_sets = [re.search(r"\}, \{(%r\d+, %r\d+, %r\d+, %r\d+)\}, %rd", line).group(1)
              for line in products]
    assert len(set(a_sets)) == REGISTER_SETS
    assert a_sets[:REGISTER_SETS] * (len(a_sets) // REGISTER_SETS) == a_sets
    # Each step: the set's previous reader retired, the pairs loaded and converted, fenced.
    assert ptx.count(f"wgmma.wait_group.sync.aligned {REGISTER_SETS - 1};") >= len(products)
    assert ptx.count("wgmma.fence.sync.aligned;") == len(products)
    assert ptx.count("ld.shared.u16") == 4 * len(products)
    assert ptx.count("sub.rn.f16x2") == 4 * len(products)
    assert all(line.endswith(", 1, 1, 0;") for line in products)  # B K-major: no transpose
    assert "wgmma.commit_group" in body


@pytest.mark.parametrize("arch, consts, converted, product", [
    ("sm_90a", {}, None, "wgmma_rs"),
    ("sm_90", {}, "f16", "mma"),                   # no register form: W converted at launch
    ("sm_90a", {"BK": 64}, None, "wgmma_rs"),      # A's rows 64 bytes: TMA's 64-byte swizzle
    ("sm_90a", {"BK": 16}, "f16", "mma"),          # half a swizzle span: converted at launch,
                                                   # and BK 16 of f16 stays on mma.sync
])
def test_the_launch_keeps_the_weights_8_bit_where_registers_convert_them(
        arch, consts, converted, product) -> None:
    kernel = swapped().lower(**consts)
    sizes = {"M": 512, "N": 2048, "K": 1024}
    packing, launch_spec = row_major_launch(kernel, sizes, "auto", written_params(kernel), arch)
    entry = {p.name: p for p in packing.tensors}.get("W")
    assert (entry.converted if entry is not None else None) == converted
    compiled = compile_kernel(kernel, Options(arch=arch, spec=launch_spec,
                                              stages=2 if arch == "sm_90" else 3))
    assert compiled.kernel.schedule.tiling.kind == product


def test_rows_too_misaligned_for_tma_and_too_small_to_pack_are_converted_at_launch() -> None:
    """K = 1: W's rows are 1 byte apart, A's 2; too small to be worth packing, so TMA could
    not read them and the register form declines: the launch converts W, the f16 product
    runs on mma.sync, and nothing refuses to compile."""
    kernel = swapped().lower()
    sizes = {"M": 1, "N": 1, "K": 1}
    packing, launch_spec = row_major_launch(kernel, sizes, "auto", written_params(kernel),
                                            "sm_90a")
    entry = {p.name: p for p in packing.tensors}.get("W")
    assert entry is not None and entry.converted == "f16"
    compiled = compile_kernel(kernel, Options(arch="sm_90a", spec=launch_spec))
    assert compiled.kernel.schedule.tiling.kind == "mma"


def test_a_block_the_register_form_declines_has_its_weights_converted_at_launch() -> None:
    """256x128 in 128-row warpgroups: A's fragments beside 128 accumulators a thread do not
    fit the registers, so the launch (told the options) converts W and the f16 product
    compiles rather than the 8-bit one being refused."""
    kernel = swapped().lower(BW=256, BA=128)
    options = Options(arch="sm_90a", warpgroup_rows=128)
    sizes = {"M": 512, "N": 2048, "K": 1024}
    packing, launch_spec = row_major_launch(kernel, sizes, "auto", written_params(kernel),
                                            "sm_90a", options=options)
    entry = {p.name: p for p in packing.tensors}.get("W")
    assert entry is not None and entry.converted == "f16"
    compiled = compile_kernel(kernel, Options(arch="sm_90a", warpgroup_rows=128, stages=2,
                                              spec=launch_spec))
    assert compiled.kernel.schedule.tiling.kind == "wgmma"
