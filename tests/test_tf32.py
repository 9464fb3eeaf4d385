"""The tf32 product kind (``Options.f32_math = "tf32"``): f32 tiles on mma.m16n8k8 .tf32.

The fragment tables against the PTX ISA's, ldmatrix of k-contiguous f32 against a
simulation of its 32-bit distribution, tf32 rounding against an independent rounding,
the kind's selection, checks and warp grids, the swizzle it needs for 32-bit reads, the
executor's run of every stage against a tf32-aware reference (and the checks failing for
a wrong fragment table or a missing rounding), and the PTX of the inner loop.
"""
from __future__ import annotations

from dataclasses import replace

import itertools
import math
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest

from tilec.families import tf32 as tf32_family
from tilec.tools.bisect import make_inputs
from tilec.errors import TileConfigError
from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.families.tf32 import round_tf32
from tilec.analysis.hazards import check_schedule
from tilec.ir.core import Kernel
from tilec.kernel import TileFunction, load_file, written_params
from tilec.families.mma_sync import ldmatrix_lane_coord
from tilec.families.products import family_for, family_named
from tilec.families.tf32 import Tf32Layout, tf32_a_coord, tf32_b_coord, tf32_operand_coord
from tilec.target.layout import SmemLayout, Swizzle, operand_storage_coord, swizzle_candidates
from tilec.options import Options, Spec, TensorSpec
from tilec.pipeline import pipeline, run_pipeline

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SHAPES = {"M": 40, "N": 48, "K": 40}  # no dimension divides the 32x32 tiles
TF32 = dict(f32_math="tf32")


def sgemm(b_transposed: bool = False) -> TileFunction:
    """samples/sgemm.py, or with B given as [N, K] (k contiguous: the ldmatrix path)."""
    text = (SAMPLES / "sgemm.py").read_text()
    if b_transposed:
        text = text.replace("B: f32[K, N]", "B: f32[N, K]").replace(
            "B[k : +BK, n * BN : +BN]", "B[n * BN : +BN, k : +BK].T")
        assert "B.T" not in text and ".T\n" in text
    return load_file(SAMPLES / "sgemm.py", text)["sgemm"]


# ------------------------------------------------------------------------- fragments

def test_the_fragment_tables_are_the_ptx_isa_tables() -> None:
    """PTX ISA, "Matrix Fragments for mma.m16n8k8" (.tf32): g = lane / 4 (groupID),
    t = lane % 4 (threadID_in_group). A: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
    a3 (g + 8, t + 4); B: b0 (k = t, n = g), b1 (k = t + 4, n = g)."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        assert [tf32_a_coord(lane, r) for r in range(4)] == [
            (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]
        assert [tf32_b_coord(lane, r) for r in range(2)] == [(t, g), (t + 4, g)]
    a = sorted(tf32_a_coord(lane, r) for lane in range(32) for r in range(4))
    b = sorted(tf32_b_coord(lane, r) for lane in range(32) for r in range(2))
    assert a == list(itertools.product(range(16), range(8)))  # each of 16 x 8 once
    assert b == list(itertools.product(range(8), range(8)))


def test_operand_registers_run_over_pieces_in_the_mma_order() -> None:
    # A: register 4p + r is register r of m16 piece p; B: 2p + r of n8 tile p, as (mn, k).
    assert tf32_operand_coord("A", 5, 6) == (16 + 1 + 0, 1 + 4)
    assert tf32_operand_coord("B", 5, 3) == (8 + 1, 1 + 4)


def simulate_ldmatrix_x4_words(smem: np.ndarray, row_addr: list[int]) -> np.ndarray:
    """ldmatrix.x4 (non-.trans) as it moves 32-bit words: lane l receives, in register j,
    word l % 4 of row l / 4 of matrix j, whose rows lanes 8j..8j+7 address (PTX ISA,
    ldmatrix). ``smem`` holds f32 elements, so a word is one element. [lane, reg]."""
    out = np.zeros((32, 4), smem.dtype)
    for lane, j in itertools.product(range(32), range(4)):
        out[lane, j] = smem[row_addr[8 * j + lane // 4] + lane % 4]
    return out


@pytest.mark.parametrize("operand", ["A", "B"])
@pytest.mark.parametrize("swizzle", [Swizzle(0, 2, 3), Swizzle(2, 2, 3), Swizzle(3, 2, 3),
                                     Swizzle(2, 3, 2)])
def test_ldmatrix_of_k_contiguous_f32_delivers_the_tf32_fragments(operand, swizzle) -> None:
    rows, cols = 64, 32  # (mn, k) storage: k contiguous
    layout = SmemLayout(rows, cols, swizzle)
    logical = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) + 1
    smem = np.zeros(rows * cols)
    for r, c in itertools.product(range(rows), range(cols)):
        smem[layout.offset(r, c)] = logical[r, c]
    mn0, k0 = 16, 8
    addresses = [layout.offset(*operand_storage_coord(True, mn0 + mn, k0 + k))
                 for mn, k in (ldmatrix_lane_coord(operand, True, lane, 4) for lane in range(32))]
    assert all(a % 4 == 0 for a in addresses)  # 16-byte rows
    got = simulate_ldmatrix_x4_words(smem, addresses)
    for lane, reg in itertools.product(range(32), range(4)):
        mn, k = tf32_operand_coord(operand, lane, reg)  # B: regs 2, 3 are the next n8 tile
        assert got[lane, reg] == logical[mn0 + mn, k0 + k]


# --------------------------------------------------------------------------- rounding

def independent_rna(x: float) -> float:
    """Round to 11 significant bits, ties away from zero, through frexp (normal numbers)."""
    if x == 0 or not math.isfinite(x):
        return x
    mantissa, exponent = math.frexp(x)  # |mantissa| in [0.5, 1): 11 bits = * 2^11
    scaled = abs(mantissa) * 2 ** 11
    return math.copysign(math.ldexp(math.floor(scaled + 0.5), exponent - 11), x)


def test_round_tf32_is_round_to_nearest_ties_away_to_10_mantissa_bits() -> None:
    ulp = 2.0 ** -10
    cases = [(1.0, 1.0), (1 + ulp / 2, 1 + ulp), (-(1 + ulp / 2), -(1 + ulp)),
             (1 + ulp / 2 - 2.0 ** -23, 1.0), (1 + 3 * ulp / 2, 1 + 2 * ulp),
             (2 - ulp / 2, 2.0), (0.0, 0.0), (-0.0, -0.0), (2.0 ** -149, 0.0),
             (float("inf"), float("inf")), (float("-inf"), float("-inf"))]
    got = round_tf32(np.array([x for x, _ in cases], dtype=np.float32))
    np.testing.assert_array_equal(got, np.array([y for _, y in cases], dtype=np.float32))
    assert np.signbit(got[7]) and not np.signbit(got[6])
    assert np.isnan(round_tf32(np.array([np.nan], dtype=np.float32)))[0]
    rng = np.random.default_rng(1)
    values = (rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 30, 4000)).astype(np.float32)
    ties = (np.round(values * 2 ** 11) / 2 ** 11 + 2.0 ** -12).astype(np.float32)
    for value in np.concatenate([values, ties]):
        assert round_tf32(np.array([value]))[0] == np.float32(independent_rna(float(value)))


# ------------------------------------------------------------- options, kinds, tiling

def test_f32_math_picks_the_kind_of_f32_tiles_only() -> None:
    assert family_for("f32").name == "simt"
    assert family_for("f32", "tf32").name == "tf32"
    assert family_for("f16", "tf32").name == family_for("bf16", "tf32").name == "mma"
    plan = sgemm().compile(**TF32).kernel.schedule.tiling
    assert (plan.kind, plan.instruction, plan.warps, plan.warp_tile) == (
        "tf32", (16, 8, 8), (2, 2), (64, 64))
    assert sgemm().compile().kernel.schedule.tiling.kind == "simt"
    matmul = load_file(SAMPLES / "matmul.py")["matmul"]
    assert matmul.compile(**TF32).ptx == matmul.compile().ptx  # f16: no effect


@pytest.mark.parametrize("value", ["TF32", "fp32", "tf32x3", ""])
def test_an_unknown_f32_math_is_refused_naming_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(
            f"f32_math must be one of ffma, tf32, got {value!r}")):
        Options(f32_math=value)
    with pytest.raises(ValueError, match="f32_math must be one of ffma, tf32"):
        sgemm().compile(f32_math=value)


def test_the_tf32_kind_is_part_of_the_cache_key() -> None:
    assert Options(f32_math="tf32") != Options()
    assert hash(Options(f32_math="tf32")) != hash(Options())


@pytest.mark.parametrize("kwargs, message", [
    (dict(BK=12), "BK=12 is not a multiple of the tf32 k (8)"),
    (dict(BM=48, warps=(2, 1)), "each warp's 24x128 tile must be a multiple of 16x16 "
                                "(m16n8k8 tf32 instructions, B loaded two n8 tiles at a time)"),
    (dict(BM=256, BN=256, warps=(1, 1)), "a 256x256 warp tile needs about 2344 registers per "
                                         "thread, more than 255"),
])
def test_tf32_tile_checks_name_the_kind(kwargs: dict, message: str) -> None:
    with pytest.raises(TileConfigError) as info:
        sgemm().compile(**TF32, **kwargs)
    assert info.value.message == message


def test_tf32_registers_count_one_f32_per_fragment_register() -> None:
    family = family_named("tf32")
    # 64x64: 128 accumulators + 2 x (4 m16 pieces x 4 + 8 n8 tiles x 2) + overhead.
    assert family.registers((64, 64), 40) == 128 + 2 * (16 + 16) + 40
    assert family.fragment_registers(32, 64) == family_named("mma").fragment_registers(32, 64)


def test_fragments_are_tf32_loads_and_mma_per_k8_step() -> None:
    kernel = run_pipeline(sgemm().lower(BM=64, BN=64, BK=16),
                          Options(stages=1, warps=(2, 2), **TF32)).kernel
    loads = [op for op in kernel.walk() if op.name == "frag.ldtf32"]
    products = [op for op in kernel.walk() if op.name == "frag.mma"]
    assert [(op.attrs["operand"], op.attrs["k0"]) for op in loads] == [
        ("A", 0), ("B", 0), ("A", 8), ("B", 8)]
    assert len(products) == 2
    a_type = loads[0].result.type
    assert (a_type.shape, a_type.layout) == ((64, 8), Tf32Layout("A", (2, 2), (32, 32)))
    assert str(products[0].result.type.layout) == "tf32_c(warps=2x2,warp_tile=32x32)"
    # The accumulator is the m16n8 C fragment, as for f16.
    assert products[0].result.type.layout.register_offsets() == \
        family_named("mma").layout("C", (2, 2), (32, 32)).register_offsets()


# -------------------------------------------------------------------------- swizzle

def tf32_plan(b_transposed: bool = False, **kwargs: Any):
    options = Options(**{"stages": 3, **TF32, **kwargs})
    return run_pipeline(sgemm(b_transposed).lower(BM=128, BN=128, BK=16), options).kernel


def test_32_bit_reads_get_a_swizzle_of_32_byte_units() -> None:
    kernel = tf32_plan()
    report = kernel.schedule.conflict_report()
    # Row-major B (16 x 128, n contiguous): 4 k rows x 8 consecutive n words per read.
    assert report["B"]["linear"]["ldtf32"] == 4
    assert report["B"]["chosen"] == {"copy": 1, "ldtf32": 1}
    assert report["B"]["swizzle"] == "swizzle(2,3,4)"
    # A (k contiguous) is read by ldmatrix: 16-byte chunks suffice.
    assert report["A"]["chosen"] == {"copy": 1, "ldtf32": 1}
    assert report["A"]["swizzle"] == "swizzle(2,2,3)"


@pytest.mark.parametrize("bn, warps, chosen, best_of_chunks", [
    (32, (2, 1), "swizzle(2,3,2)", 2), (64, (2, 2), "swizzle(2,3,3)", 1),
    (256, (2, 4), "swizzle(2,3,5)", 1)])
def test_32_byte_units_make_every_row_width_conflict_free(bn, warps, chosen,
                                                          best_of_chunks) -> None:
    """Why the tf32 kind also searches 32-byte units: 16-byte chunk swizzles need three
    XOR bits where they work at all, and none works for 128-byte rows (BN = 32)."""
    kernel = run_pipeline(sgemm().lower(BM=64, BN=bn, BK=16),
                          Options(warps=warps, **TF32)).kernel
    report = kernel.schedule.conflict_report()["B"]
    assert (report["swizzle"], report["chosen"]["ldtf32"]) == (chosen, 1)
    plan = kernel.schedule.tiling
    b = plan.operand("B")
    family = family_named("tf32")
    degrees = {s: family.worst_read_degree(plan, b, b.layout.with_swizzle(s), 4)
               for s in swizzle_candidates(4) if s.period <= b.layout.size}
    assert min(degrees.values()) == best_of_chunks
    assert all(s.bits == 3 for s, degree in degrees.items() if degree == 1)


def test_swizzle_off_leaves_the_32_bit_reads_4_way_conflicted() -> None:
    report = tf32_plan(swizzle="off").schedule.conflict_report()
    assert report["B"]["chosen"]["ldtf32"] == 4 and report["B"]["swizzle"] == "linear"


# ------------------------------------------------------------------------- executor

def stage_kernels(kernel: Kernel, options: Options) -> list[tuple[str, Kernel]]:
    kept = [("tile", kernel)]
    for p in pipeline():
        if p.name not in options.disable:
            kept.append((p.name, p.run(kept[-1][1], options)))
    return kept


def run(kernel: Kernel, arrays: dict[str, np.ndarray], scalars: dict[str, Any]) -> np.ndarray:
    values = {**{name: array.copy() for name, array in arrays.items()}, **scalars}
    run_kernel(kernel, values, ops=op_catalogue())
    (written,) = written_params(kernel)
    return values[written]


def operands(arrays: dict[str, np.ndarray], b_transposed: bool,
             spec: Optional[Spec] = None) -> tuple[np.ndarray, np.ndarray]:
    """A [M, K] and B [K, N] as the product reads them, in float64."""
    a, b = arrays["A"].astype(np.float64), arrays["B"].astype(np.float64)
    return a, (b.T if b_transposed else b)


def tf32_errors(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Errors relative to |A| @ |B| (the scale of each dot product's rounding) against the
    product of tf32-rounded inputs and against the exact f32 product."""
    scale = np.abs(a) @ np.abs(b)
    rounded = (round_tf32(a.astype(np.float32)).astype(np.float64)
               @ round_tf32(b.astype(np.float32)).astype(np.float64))
    return (float(np.max(np.abs(got - rounded) / scale)),
            float(np.max(np.abs(got - a @ b) / scale)))


# f32 accumulation over K = 40 (5 mma k-steps, one f32 rounding each) stays near 2^-24 of
# the scale; a wrong fragment register is O(1); unrounded inputs differ by ~2^-11 per
# product, ~1e-4 over a row.
TIGHT = 1e-6
ROUNDING_VISIBLE = 3e-5


@pytest.mark.parametrize("b_transposed", [False, True], ids=["B-row-major", "B-given-as-BT"])
@pytest.mark.parametrize("swizzle", ["auto", "off"])
@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize("warps, bk", [((1, 1), 16), ((2, 1), 32), ((1, 2), 8)])
def test_every_stage_computes_the_tf32_product(b_transposed, swizzle, stages, warps,
                                               bk) -> None:
    kernel = sgemm(b_transposed).lower(BM=32, BN=32, BK=bk)
    arrays, scalars = make_inputs(kernel, SHAPES, np.random.default_rng(0))
    options = Options(stages=stages, warps=warps, swizzle=swizzle, **TF32)
    results = {stage: run(k, arrays, scalars) for stage, k in stage_kernels(kernel, options)}
    expected = results.pop("tile")
    fragments = results.pop("fragments")
    # After fragments only the store's route changes (tma_store): fragments' numbers.
    np.testing.assert_array_equal(results.pop("promote_accumulation"), fragments,
                                  err_msg="after promote_accumulation")
    np.testing.assert_array_equal(results.pop("tma_store"), fragments, err_msg="after tma_store")
    np.testing.assert_array_equal(results.pop("row_store"), fragments, err_msg="after row_store")
    # Until fragments the tile.dot reads shared memory in exact f32: the same numbers.
    for stage, got in results.items():
        np.testing.assert_array_equal(got, expected, err_msg=f"after {stage}")
    to_rounded, to_exact = tf32_errors(fragments, *operands(arrays, b_transposed))
    assert to_rounded < TIGHT
    assert to_exact > ROUNDING_VISIBLE  # the inputs were rounded


@pytest.mark.parametrize("tensors", [
    (("A", TensorSpec(0, 4)),),  # A column-major: 32-bit reads of A too
    (("A", TensorSpec(0, 4)), ("B", TensorSpec(0, 4))),  # B column-major: ldmatrix for B
    (("A", TensorSpec(None, 1)), ("B", TensorSpec(None, 1))),  # element copies
])
def test_every_operand_orientation(tensors) -> None:
    kernel = sgemm().lower(BM=32, BN=64, BK=16)
    arrays, scalars = make_inputs(kernel, SHAPES, np.random.default_rng(2))
    options = Options(stages=2, warps=(2, 2), spec=Spec(tensors=tensors), **TF32)
    final = stage_kernels(kernel, options)[-1][1]
    got = run(final, arrays, scalars)
    to_rounded, to_exact = tf32_errors(got, *operands(arrays, False))
    assert to_rounded < TIGHT and to_exact > ROUNDING_VISIBLE


def final_kernel(b_transposed: bool) -> tuple[Kernel, dict, dict]:
    kernel = sgemm(b_transposed).lower(BM=32, BN=32, BK=16)
    arrays, scalars = make_inputs(kernel, SHAPES, np.random.default_rng(3))
    return (run_pipeline(kernel, Options(stages=2, warps=(1, 1), **TF32)).kernel, arrays,
            scalars)


@pytest.mark.parametrize("b_transposed", [False, True])
def test_a_fragment_table_that_disagrees_with_the_loads_fails(monkeypatch, b_transposed):
    """The check above can fail: the mma reading a1 and a2 swapped computes garbage."""
    kernel, arrays, scalars = final_kernel(b_transposed)
    swapped = (lambda lane, r, h: tf32_a_coord(lane, {1: 2, 2: 1}.get(r, r)))
    fragments = tf32_family.TF32_FRAGMENTS
    monkeypatch.setattr(tf32_family.FAMILY, "fragments",
                        replace(fragments, a_coord=swapped))
    got = run(kernel, arrays, scalars)
    assert tf32_errors(got, *operands(arrays, b_transposed))[0] > 1e-2


def test_unrounded_fragments_fail_the_tf32_reference(monkeypatch) -> None:
    kernel, arrays, scalars = final_kernel(False)
    monkeypatch.setattr(tf32_family, "round_tf32", lambda values: values)
    to_rounded, to_exact = tf32_errors(run(kernel, arrays, scalars), *operands(arrays, False))
    assert to_rounded > ROUNDING_VISIBLE and to_exact < TIGHT


def test_a_tf32_fragment_into_an_ffma_product_is_refused() -> None:
    kernel, arrays, scalars = final_kernel(False)
    for op in kernel.walk():
        if op.name == "frag.ldtf32" and op.attrs["operand"] == "A":
            op.attrs["operand"] = "B"
    with pytest.raises(Exception, match="operand B loaded into a tile of layout tf32_a"):
        run(kernel, arrays, scalars)


# ----------------------------------------------------------------------- hazards, PTX

@pytest.mark.parametrize("b_transposed", [False, True])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_tf32_schedules_have_no_hazards(b_transposed: bool, stages: int) -> None:
    check_schedule(sgemm(b_transposed).compile(stages=stages, **TF32).kernel)


def loop_text(ptx: str) -> str:
    head = re.search(r"^\$L_loop_\d+:$", ptx, re.M)
    return ptx[head.end():ptx.index("\n$L_done_", head.end())]


@pytest.mark.parametrize("b_transposed", [False, True])
def test_the_inner_loop_rounds_every_fragment_register_before_the_mma(b_transposed) -> None:
    ptx = sgemm(b_transposed).compile(pipeline_fragments=False, **TF32).ptx
    loop = loop_text(ptx)
    mmas = re.findall(r"mma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32 "
                      r"\{[^}]*\}, \{([^}]*)\}, \{([^}]*)\}", loop)
    assert len(mmas) == 2 * 4 * 8  # BK 16: 2 k-steps of 4 x 8 m16n8 tiles per 64x64 warp
    rounded = set(re.findall(r"cvt\.rna\.tf32\.f32 (%r\d+), \1;", loop))
    loaded = set(re.findall(r"ld\.shared\.b32 (%r\d+),", loop))
    for group in re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 \{([^}]*)\}", loop):
        loaded |= set(group.split(", "))
    used = {reg for a, b in mmas for reg in (a + ", " + b).split(", ")}
    assert used == rounded == loaded
    assert ".trans" not in ptx and "fma.rn.f32" not in loop
    # Per k-step: A 4 ldmatrix.x4 (4 m16 pieces); B 16 ld.shared.b32 (8 n8 tiles x 2), or
    # 4 ldmatrix.x4 when k is contiguous.
    assert loop.count("ldmatrix") == 2 * (8 if b_transposed else 4)
    assert loop.count("ld.shared.b32") == (0 if b_transposed else 2 * 16)
