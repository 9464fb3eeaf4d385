"""The int8 product family: i8 tiles on mma.sync m16n8k32 .s8, exact i32 accumulation.

The fragment tables against the PTX ISA's (and byte for byte against the f16 ones, which is
why ldmatrix serves), the lowered kernel run in the executor at ragged sizes and several
configurations against integer numpy, the conversions of i32 tiles, the frontend's and the
tiling pass's errors for what the family cannot take, and the PTX's instructions. ptxas
assembles the sample in tests/test_ptxas.py; tests/gpu/test_int8_fp8_gpu.py runs it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.families.int8 import INT8_FRAGMENTS, int8_a_coord, int8_b_coord
from tilec.families.mma_sync import mma_a_coord, mma_b_coord
from tilec.families.products import family_for
from tilec.kernel import TileFunction, load_file
from tilec.options import Options, Spec, TensorSpec
from tilec.pipeline import run_pipeline

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SHAPES = {"M": 70, "N": 45, "K": 100}  # no dimension divides the tiles; K not 16-aligned


def sample() -> TileFunction:
    return load_file(SAMPLES / "int8_gemm.py")["int8_gemm"]


def program(body: str, params: str = "A: i8[M, K], B: i8[N, K], C: i32[M, N]") -> str:
    """A tile function with ``body`` after the K loop accumulating ``acc`` (i32)."""
    return (f"@tile\ndef f({params}, BM=64, BN=64, BK=64):\n"
            "    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):\n"
            "        acc = zeros([BM, BN], i32)\n"
            "        for k in range(0, K, BK):\n"
            "            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]\n"
            f"{body}")


def lowered(text: str) -> Any:
    return load_file(Path("test.tile"), text)["f"]


# ------------------------------------------------------------------------- fragments

def test_the_fragment_tables_are_the_ptx_isa_tables() -> None:
    """PTX ISA, "Matrix Fragments for mma.m16n8k32" (.s8): A element i of a lane is at row
    g (i < 4 or 8 <= i < 12) else g + 8, col 4 t + (i % 4) (+ 16 for i >= 8); B element i at
    row 4 t + (i % 4) (+ 16 for i >= 4), col g. Element i is byte i % 4 of register i // 4."""
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(16):
            row = g if i < 4 or 8 <= i < 12 else g + 8
            assert int8_a_coord(lane, i // 4, i % 4) == (row, 4 * t + i % 4 + 16 * (i >= 8))
        for i in range(8):
            assert int8_b_coord(lane, i // 4, i % 4) == (4 * t + i % 4 + 16 * (i >= 4), g)
    assert (INT8_FRAGMENTS.k, INT8_FRAGMENTS.halves, INT8_FRAGMENTS.integer) == (32, 4, True)


def test_an_8_bit_fragment_register_holds_the_bytes_of_the_16_bit_one() -> None:
    """Why non-.trans ldmatrix loads both operands: register r of a lane covers the same
    bytes of a k-contiguous row as the m16n8k16 f16 fragment's register r."""
    for lane in range(32):
        for reg in range(4):
            f16_bytes = {(m, 2 * k + b) for half in (0, 1)
                         for m, k in [mma_a_coord(lane, reg, half)] for b in (0, 1)}
            assert {int8_a_coord(lane, reg, q) for q in range(4)} == f16_bytes
        for reg in range(2):
            f16_bytes = {(2 * k + b, n) for half in (0, 1)
                         for k, n in [mma_b_coord(lane, reg, half)] for b in (0, 1)}
            assert {int8_b_coord(lane, reg, q) for q in range(4)} == f16_bytes


def test_i8_tiles_take_the_int8_family_on_every_target() -> None:
    """On sm_90a with a warp grid given: its own choice for the block is wgmma8."""
    for arch in ("sm_80", "sm_86", "sm_90", "sm_90a"):
        warps = {"warps": (2, 4)} if arch == "sm_90a" else {}
        family = family_for("i8", "ffma", (128, 128, 64), Options(arch=arch, **warps))
        assert family.name == "int8" and family.instruction == (16, 8, 32)
    assert family_for("i8", "ffma", (128, 128, 64), Options(arch="sm_90a")).name == "wgmma8"


# ------------------------------------------------------------------------- execution

def inputs(rng: np.random.Generator, shapes: dict[str, int]) -> dict[str, Any]:
    m, n, k = shapes["M"], shapes["N"], shapes["K"]
    a = rng.integers(-128, 128, size=(m, k)).astype(np.int8)
    b = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    # The extremes in one corner: -128 * -128 summed over k is the largest magnitude.
    a[:2, :] = -128
    b[:2, :] = -128
    return {"A": a, "B": b, "Cq": np.full((m, n), -1, np.int32),
            "C": np.full((m, n), np.nan, np.float32), "scale": np.float32(0.375)}


CONFIGS = [
    dict(),
    dict(stages=1),
    dict(swizzle="off"),
    dict(BM=64, BN=64, BK=32, warps=(1, 1)),
    dict(BM=128, BN=256, BK=64, warps=(2, 4), stages=2),
    dict(disable=("double_buffer",)),
    # A without aligned vectors: byte-by-byte copies through registers.
    dict(spec=Spec(tensors=(("A", TensorSpec(1, 1)),))),
    dict(arch="sm_90a", warps=(2, 2)),
]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_the_lowered_sample_is_exact_at_ragged_sizes(config: dict[str, Any]) -> None:
    config = dict(config)
    consts = {name: config.pop(name) for name in ("BM", "BN", "BK") if name in config}
    kernel = run_pipeline(sample().lower(**consts), Options(**config)).kernel
    assert kernel.schedule.tiling.kind == "int8"
    values = inputs(np.random.default_rng(len(str(config))), SHAPES)
    a, b = values["A"].astype(np.int64), values["B"].astype(np.int64)
    run_kernel(kernel, values, ops=op_catalogue())
    exact = a @ b.T
    assert exact[0, 0] == 128 * 128 * SHAPES["K"]
    np.testing.assert_array_equal(values["Cq"], exact.astype(np.int32))
    np.testing.assert_array_equal(values["C"], exact.astype(np.float32) * np.float32(0.375))


def test_conversions_of_the_i32_accumulator() -> None:
    """.to(i8) keeps the low byte (cvt.s8.s32); .to(f16) rounds once from f32; an f32 tile
    .to(i8) rounds to nearest even and saturates (cvt.rni.s8.f32); an i8 tile loaded in the
    epilogue converts exactly."""
    function = lowered(program(
        "        C8[m * BM : +BM, n * BN : +BN] = acc.to(i8)\n"
        "        Ch[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.25).to(f16)\n"
        "        Cs[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.001).to(i8)\n"
        "        Cw[m * BM : +BM, n * BN : +BN] = W[m * BM : +BM, n * BN : +BN].to(f32)\n",
        "A: i8[M, K], B: i8[N, K], W: i8[M, N], C8: i8[M, N], Ch: f16[M, N], "
        "Cs: i8[M, N], Cw: f32[M, N]"))
    kernel = run_pipeline(function.lower(), Options()).kernel
    rng = np.random.default_rng(5)
    m, n, k = 70, 45, 100
    a = rng.integers(-128, 128, size=(m, k)).astype(np.int8)
    b = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    w = rng.integers(-128, 128, size=(m, n)).astype(np.int8)
    values = {"A": a, "B": b, "W": w, "C8": np.zeros((m, n), np.int8),
              "Ch": np.zeros((m, n), np.float16), "Cs": np.zeros((m, n), np.int8),
              "Cw": np.zeros((m, n), np.float32)}
    run_kernel(kernel, values, ops=op_catalogue())
    exact = a.astype(np.int64) @ b.astype(np.int64).T
    np.testing.assert_array_equal(values["C8"], exact.astype(np.int8))  # wraps
    np.testing.assert_array_equal(values["Ch"], (exact.astype(np.float32) * 0.25)
                                  .astype(np.float16))
    scaled = np.rint((exact.astype(np.float32) * np.float32(0.001)).astype(np.float64))
    np.testing.assert_array_equal(values["Cs"], np.clip(scaled, -128, 127).astype(np.int8))
    assert np.abs(exact).max() * 0.001 > 127  # saturation happened somewhere
    np.testing.assert_array_equal(values["Cw"], w.astype(np.float32))


# ---------------------------------------------------------------------------- split-K
# The slices' i32 partials meet in the split-K workspace as integers (backend/split.py):
# integer addition is associative, so the sum is exact and the same bits as one slice's,
# whatever the order; the epilogue (non-linear ones too) runs after the meeting.

SPLIT_EPILOGUE = program(
    "        Cq[m * BM : +BM, n * BN : +BN] = acc\n"
    "        C8[m * BM : +BM, n * BN : +BN] = acc.to(i8)\n"
    "        Cs[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * scale).to(i8)\n"
    "        C[m * BM : +BM, n * BN : +BN] = relu(acc.to(f32) * scale)\n",
    "A: i8[M, K], B: i8[N, K], Cq: i32[M, N], C8: i8[M, N], Cs: i8[M, N], C: f32[M, N], "
    "scale: f32").replace("BK=64", "BK=32")


def run_split(splits: int, shapes: dict[str, int], seed: int,
              **options: Any) -> tuple[dict[str, Any], np.ndarray]:
    kernel = run_pipeline(lowered(SPLIT_EPILOGUE).lower(), Options(split_k=splits, **options)
                          ).kernel
    # sm_90a: wgmma8 takes the 64x64x32 block (TMA's 32-byte swizzle), its slices too.
    family = "wgmma8" if options.get("arch") == "sm_90a" else "int8"
    assert kernel.schedule.splits == splits and kernel.schedule.tiling.kind == family
    rng = np.random.default_rng(seed)
    m, n, k = shapes["M"], shapes["N"], shapes["K"]
    a = rng.integers(-128, 128, size=(m, k)).astype(np.int8)
    b = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    a[0], b[0] = -128, -128  # the largest sum, 2**14 K
    values = {"A": a, "B": b, "Cq": np.full((m, n), -1, np.int32),
              "C8": np.zeros((m, n), np.int8), "Cs": np.zeros((m, n), np.int8),
              "C": np.full((m, n), np.nan, np.float32), "scale": np.float32(0.002)}
    run_kernel(kernel, values, ops=op_catalogue())
    return values, a.astype(np.int64) @ b.astype(np.int64).T


@pytest.mark.parametrize("splits, K, arch", [
    (2, 300, "sm_80"),
    (3, 100, "sm_86"),  # 4 K steps of 32: slices of 2, 2, 0 steps (the last one empty)
    (8, 77, "sm_90a"),  # 3 K steps (the last masked), 5 empty slices; mma.sync on sm_90a
])
def test_split_k_of_i32_sums_is_exact_and_the_epilogue_runs_after_the_meeting(
        splits: int, K: int, arch: str) -> None:
    shapes = dict(M=70, N=45, K=K)
    values, exact = run_split(splits, shapes, seed=K, arch=arch)
    np.testing.assert_array_equal(values["Cq"], exact.astype(np.int32))
    assert values["Cq"][0, 0] == 2**14 * K
    np.testing.assert_array_equal(values["C8"], exact.astype(np.int8))  # wraps
    scaled = exact.astype(np.float32) * np.float32(0.002)
    np.testing.assert_array_equal(values["Cs"], np.clip(np.rint(scaled), -128, 127)
                                  .astype(np.int8))
    assert np.abs(scaled).max() > 127  # saturation, which a per-slice epilogue would break
    np.testing.assert_array_equal(values["C"], np.maximum(scaled, 0))
    one_slice, _ = run_split(1, shapes, seed=K, arch=arch)
    for name in ("Cq", "C8", "Cs", "C"):  # bit for bit the one-slice kernel's
        assert values[name].tobytes() == one_slice[name].tobytes(), name


def test_the_meeting_of_i32_partials_wraps_as_the_products_do() -> None:
    """Partials whose sum leaves i32 wrap (add.s32), as mma.sync's accumulation does; the
    sum is the exact one mod 2**32, in any slice order."""
    from tilec.cpu.interpreter import InterpState, ProgramEnd
    kernel = run_pipeline(sample().lower(BM=64, BN=64, BK=32), Options(split_k=3)).kernel
    meeting = next(op for op in kernel.body.ops if op.name == "split.reduce")
    assert meeting.result.type.dtype.short == "i32"
    shape = meeting.result.type.shape
    partials = [np.full(shape, 2**31 - 1, np.int32), np.full(shape, 2, np.int32),
                np.full(shape, 5, np.int32)]  # 2**31 + 6 in all: wraps to -2**31 + 6
    for order in ((0, 1, 2), (2, 0, 1)):
        state = InterpState(kernel, op_catalogue())
        evaluate = state.ops["split.reduce"].evaluate
        for position, slice_id in enumerate(order):
            state.program_id = (0, 0, slice_id)
            if position < 2:
                with pytest.raises(ProgramEnd):
                    evaluate(state, meeting, [partials[slice_id], slice_id])
            else:
                (total,) = evaluate(state, meeting, [partials[slice_id], slice_id])
        assert total.dtype == np.int32
        assert (total == np.int32(-2**31 + 6)).all()


def test_split_k_ptx_meets_with_integer_loads_and_adds() -> None:
    compiled = sample().compile(arch="sm_80", split_k=3)
    ptx = compiled.ptx
    registers = 128 * 128 // compiled.rendered.threads
    assert ptx.count("ld.relaxed.gpu.global.s32") == 3 * registers
    assert ptx.count("st.global.s32 ") >= registers  # the partials (stores of C are v2)
    assert "ld.relaxed.gpu.global.f32" not in ptx and "add.f32" not in ptx
    assert ptx.index("bar.red.or.pred") < ptx.index("cvt.rn.f32.s32")  # epilogue after


def test_explain_says_the_i32_split_is_exact() -> None:
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(sample().compile(split_k=4), ptxas=False))
    assert "the last to finish adds the 4 i32 partials (256 KiB of workspace per tile)" in text
    assert "integer sums are exact, the same in any order" in text


# ------------------------------------------------------------------------------ errors

def error_of(text: str, **options: Any) -> TileError:
    with pytest.raises(TileError) as info:
        lowered(text).ptx(**options)
    return info.value


def assert_at(err: TileError, line: int, fragment: str, message: str) -> None:
    text = str(err)
    assert message in err.message, text
    assert err.loc is not None and err.loc.line == line, text
    source_line, caret = text.splitlines()[1:3]
    assert source_line[caret.index("^"):].startswith(fragment), text


def test_an_i8_product_into_an_f32_accumulator_is_refused_at_the_product() -> None:
    text = program("        C[m * BM : +BM, n * BN : +BN] = acc\n").replace(
        "zeros([BM, BN], i32)", "zeros([BM, BN], f32)").replace("C: i32", "C: f32")
    assert_at(error_of(text), 6, "@ B", "i8 products accumulate in i32, not f32")


def test_storing_i32_into_an_f16_or_i8_tensor_needs_a_conversion() -> None:
    for dtype in ("f16", "i8"):
        text = program("        C[m * BM : +BM, n * BN : +BN] = acc\n").replace(
            "C: i32", f"C: {dtype}")
        err = error_of(text)
        assert_at(err, 7, "acc", "storing an i32 tile [64,64] into 'C', ")
        assert f".to({dtype})" in str(err)


def test_arithmetic_on_the_i32_accumulator_needs_a_conversion() -> None:
    for expression, what in (("acc * 2.0", "a * b"), ("relu(acc)", "relu()"),
                             ("-acc", "unary '-'")):
        text = program(f"        C[m * BM : +BM, n * BN : +BN] = ({expression}).to(f32)\n"
                       ).replace("C: i32", "C: f32")
        err = error_of(text)
        assert f"{what} on an i32 tile" in err.message, str(err)
        assert "x.to(f32)" in str(err)


def test_mixed_operand_dtypes_are_refused() -> None:
    text = program("        C[m * BM : +BM, n * BN : +BN] = acc\n").replace(
        "B: i8[N, K]", "B: f16[N, K]")
    assert_at(error_of(text), 6, "@ B", "dot operands differ in dtype: i8 @ f16")


def test_a_row_major_b_is_refused_with_the_layout_to_use() -> None:
    text = program("        C[m * BM : +BM, n * BN : +BN] = acc\n").replace(
        "B: i8[N, K]", "B: i8[K, N]").replace("B.T[k", "B[k")
    err = error_of(text)
    assert_at(err, 6, "@ B", "i8 operand B ('B') is stored [K, N]")
    assert "cannot transpose bytes" in err.message and "B.T" in str(err)


def test_an_unknown_8_bit_dtype_names_the_dtypes() -> None:
    text = program("        C[m * BM : +BM, n * BN : +BN] = acc\n").replace("A: i8", "A: u8")
    err = error_of(text)
    assert "unknown dtype 'u8'" in err.message and "i8" in str(err)


# ---------------------------------------------------------------------------------- PTX

def test_the_ptx_multiplies_with_m16n8k32_s8_and_stores_i32() -> None:
    ptx = sample().ptx(arch="sm_80")
    mmas = [line for line in ptx.splitlines() if "mma.sync" in line]
    assert mmas and all("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in m for m in mmas)
    # 2x2 warps of 64x64: 4 x 8 m16n8 tiles, two k32 steps per BK=64.
    assert len(mmas) == 4 * 8 * 2
    loads = [line for line in ptx.splitlines() if "ldmatrix" in line]
    assert loads and not any(".trans" in line for line in loads)
    assert "cvt.rn.f32.s32" in ptx and "st.global.v2.s32" in ptx
    assert "mov.b32 %r" in ptx  # the i32 accumulator starts at integer 0


# ---------------------------------------------------------------------------- benchmark

def test_the_bench_compiles_the_matmul_sample_for_i8_into_i32() -> None:
    """``tilec bench --dtypes i8``: samples/matmul.py with i8 A and B, an i32 accumulator
    stored as it is, B given k contiguous (torch's column-major [K, N]); the tuned tile."""
    from tilec.benchmarking.cases import BENCH_TOLERANCE, Case
    from tilec.benchmarking.contenders import (CublasContender, TilecContender, TritonContender,
                                               sample_kernel)
    from tilec.benchmarking.tuning import tuned_config
    kernel = sample_kernel("i8", "i32")
    tile_ir = kernel.lower()
    assert [str(p.type) for p in tile_ir.params] == [
        "tensor<i8,[M,K]>", "tensor<i8,[K,N]>", "tensor<i32,[M,N]>"]
    case = Case(4096, 4096, 4096, "i8")
    config = tuned_config(case)
    compiled = kernel.compile(spec=Spec(tensors=(("B", TensorSpec(0, 16)),)), arch="sm_90",
                              **config)
    assert compiled.kernel.schedule.tiling.kind == "int8"
    assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in compiled.ptx
    assert BENCH_TOLERANCE["i8"] == 0.0
    assert TilecContender({}, {}).out_dtype(case) == "i32"
    assert CublasContender(None).out_dtype(case) == "i32"
    assert TritonContender(None).unsupported(case) == "the Triton kernel has no i8 configuration"


def test_an_i8_product_of_k_1_reads_torchs_column_major_b() -> None:
    """K = 1: torch's column-major [1, N] B has strides (1, 1), k contiguous as 8-bit B is
    read (it was taken for n contiguous and refused); the tuned kernel compiled for that
    layout is exact in the interpreter."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.contenders import sample_kernel
    from tilec.benchmarking.tuning import tuned_config
    from tilec.launch.binding import tensor_spec
    from tilec.runtime.arrays import ArrayArg
    m, n = 300, 520
    spec = tensor_spec(ArrayArg("B", 1 << 20, "i8", (1, n), (1, 1), device=0))
    assert spec == TensorSpec(0, 1)
    kernel = sample_kernel("i8", "i32")
    config = tuned_config(Case(m, n, 1, "i8"), "sm_90a")
    compiled = kernel.compile(spec=Spec(tensors=(("B", spec),)), arch="sm_90a", **config)
    assert compiled.kernel.schedule.tiling.kind == "int8"
    rng = np.random.default_rng(3)
    values = {"A": rng.integers(-128, 128, (m, 1)).astype(np.int8),
              "B": rng.integers(-128, 128, (1, n)).astype(np.int8),
              "C": np.full((m, n), -1, np.int32)}
    run_kernel(compiled.kernel, values, ops=op_catalogue())
    exact = values["A"].astype(np.int64) @ values["B"].astype(np.int64)
    np.testing.assert_array_equal(values["C"], exact.astype(np.int32))


class IntegerArrays:
    """A numpy stand-in for torch in the i8 rows: i8 inputs (B column-major when asked),
    i32 outputs, exact products."""

    name = "numpy"
    version = np.__version__
    tf32 = False
    l2_bytes = 64 * 1024

    def __init__(self) -> None:
        self.rng = np.random.default_rng(1)
        self.b_layouts: list[bool] = []

    def unsupported(self, dtype: str) -> Any:
        return None

    def random(self, shape, dtype, k_major=False):
        assert dtype == "i8"
        stored = shape[::-1] if k_major else shape
        values = self.rng.integers(-128, 128, size=stored).astype(np.int8)
        return values.T if k_major else values

    def empty(self, shape, dtype):
        return np.empty(shape, dtype={"i32": np.int32}[dtype])

    def poison(self, array) -> None:
        array.fill(np.iinfo(array.dtype).min)

    def reference(self, a, b):
        return a.astype(np.float64) @ b.astype(np.float64)

    def rel_error(self, out, ref) -> float:
        return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))

    def all_finite(self, array) -> bool:
        return True

    def matmul(self, a, b, out, tf32=False, fast_accumulation=True) -> None:
        self.b_layouts.append(b.flags.f_contiguous and not b.flags.c_contiguous)
        out[...] = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)

    def synchronize(self) -> None:
        pass

    def release(self) -> None:
        pass


def test_an_i8_row_checks_exactly_with_b_k_contiguous() -> None:
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.check_and_time import run_case
    from tilec.benchmarking.contenders import CublasContender
    arrays = IntegerArrays()
    result = run_case(Case(40, 24, 72, "i8"), arrays, [CublasContender(arrays)],
                      lambda step: 1.0, None)
    measured = result.measurements["cuBLAS"]
    assert measured.status == "ok" and measured.error == 0.0 and measured.tolerance == 0.0
    assert measured.config == "torch._int_mm, C i32, B k contiguous"
    assert arrays.b_layouts and all(arrays.b_layouts)
