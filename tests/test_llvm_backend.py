"""The llvm backend (``backend="llvm"``, backend/llvm/): every sample through both backends
for every target, assembled by ptxas, with the same count of each instruction the families
issue (so an instruction the LLVM emitters drop shows on the CPU); the asm stages, the CLI
flags, the disk cache key, and the errors for what it does not support (named before LLVM
is called), a target LLVM cannot select, and a missing llvmlite or NVPTX target.

The CPU executor runs the lowered IR, not PTX: the results of the LLVM path are checked on
the GPU (tests/gpu/test_llvm_backend_gpu.py).
"""
from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tilec.compiler import _CACHE, disk_cache
from tilec.errors import TileConfigError
from tilec.kernel import load_file
from tilec.options import Options, Spec, TensorSpec

from tests.test_ptxas import DIVISIBLE, load_sample

pytest.importorskip("llvmlite.binding")
from tilec.backend import llvm as llvm_backend  # noqa: E402
from tilec.backend.llvm import target  # noqa: E402

PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
ARCHS = ("sm_80", "sm_86", "sm_90")

# (sample, dtype, options): every sample and family the llvm backend emits; sizes given as
# shapes (divisible, so the edge masks go) or left ragged (the default: masks everywhere).
CASES = [
    ("matmul", "f16", {}),
    ("matmul", "bf16", {}),
    ("matmul", "f16", dict(DIVISIBLE)),
    ("matmul", "f16", dict(stages=1)),
    ("matmul", "f16", dict(stages=2, BM=64, BN=64, warps=(2, 2))),
    ("matmul", "bf16", dict(stages=4, mma_order="m")),
    ("matmul", "f16", dict(split_k=4)),
    ("matmul_bt", "f16", {}),
    ("matmul_bt", "bf16", dict(stages=4)),
    ("gemm_epilogue", "f16", {}),
    ("gemm_epilogue", "bf16", dict(split_k=3)),
    ("sgemm", "f32", {}),
    ("sgemm", "f32", dict(stages=2, split_k=2)),
    ("sgemm", "f32", dict(f32_math="tf32")),
    ("matmul_bt", "f32", dict(f32_math="tf32", stages=3)),
    ("bmm", "f16", {}),
    ("gemm_gelu", "f16", {}),
    ("int8_gemm", "i8", {}),
    ("int8_gemm", "i8", dict(DIVISIBLE)),
    ("int8_gemm", "i8", dict(split_k=3)),  # i32 partials meet as integers
    # Rows 1-byte aligned (odd K launched with pack="off"): byte copies.
    ("int8_gemm", "i8", dict(spec=Spec(tensors=(("A", TensorSpec(1, 1)),
                                                ("B", TensorSpec(1, 1)))))),
    ("fp8_gemm", "f8e4m3", {}),
    ("fp8_gemm", "f8e5m2", dict(stages=2)),
    # 8-bit weights converted in registers after frag.ldbytes' 16-bit shared loads: i8
    # (xor, prmt, sub.f16x2), f8e4m3 and f8e5m2 (cvt.rn.f16x2.e4m3x2 / .e5m2x2).
    ("w8a16", "f16", {}),
    ("w8a16", "f16", dict(stages=2, BM=64, BN=64, warps=(2, 2))),
    ("wfp8a16", "f16", {}),
    ("wfp8a16", "f8e5m2", dict(stages=4, BM=32, BN=64, BK=128, warps=(1, 2))),
]
# fp8 products and fp8 conversions exist on sm_89 and later only (both backends refuse sm_80
# and sm_86).
CASE_ARCHS = {"fp8_gemm": ("sm_90",), "wfp8a16": ("sm_90",)}
# The instructions whose counts both backends' PTX must share, per kernel: each family's
# loads and products, the copy pipeline, and split-K's meeting.
MIX = {
    "mma.sync": r"\bmma\.sync\.aligned\.m16n8k\d+",
    "mma.f16": r"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32",
    "mma.bf16": r"\bmma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32",
    "mma.tf32": r"\bmma\.sync\.aligned\.m16n8k8\.row\.col\.f32\.tf32\.tf32\.f32",
    "mma.s8": r"\bmma\.sync\.aligned\.m16n8k32\.row\.col\.s32\.s8\.s8\.s32",
    "mma.e4m3": r"\bmma\.sync\.aligned\.m16n8k32\.row\.col\.f32\.e4m3\.e4m3\.f32",
    "mma.e5m2": r"\bmma\.sync\.aligned\.m16n8k32\.row\.col\.f32\.e5m2\.e5m2\.f32",
    "ldmatrix": r"\bldmatrix\.sync\.aligned",
    "ldmatrix.trans": r"\bldmatrix\.sync\.aligned\.m8n8\.x4\.trans",
    "cp.async": r"\bcp\.async\.c[ag]\.",
    "cp.async.cg": r"\bcp\.async\.cg\.shared\.global",
    "commit": r"\bcp\.async\.commit_group",
    "wait": r"\bcp\.async\.wait_group",
    "fma": r"\bfma\.rn\.f32\b",  # the ffma products, gelu's erfc polynomial
    "ex2": r"\bex2\.approx",
    "rcp": r"\brcp\.approx",
    "setp.f32": r"\bsetp\.\w+\.f32",  # where's and gelu's comparisons
    "selp.f32": r"\bselp\.f32",
    "cvt.f32.s32": r"\bcvt\.rn\.f32\.s32",  # the int8 epilogue's dequantization
    # f32 -> f16/bf16, counted in elements (mix): frag.cvt's operands go a pair at a time in
    # both backends, C's elements one at a time in the PTX backend (ptxas pairs them) and a
    # pair at a time through LLVM (backend/llvm/emit.py, _convert_pairs).
    "cvt.x2": r"\bcvt\.rn\.b?f16x2\.f32",
    "cvt.to16": r"\bcvt\.rn\.b?f16\.f32",
    "cvt.f32.f16": r"\bcvt\.f32\.f16",  # ... of fp8 (through f16) and f16 to bf16
    "cvt.f8": r"\bcvt\.rn\.f16x2\.e(?:4m3|5m2)x2",  # ... of fp8 weights
    "prmt": r"\bprmt\.b32",  # ... of i8 weights (the magic-number trick)
    # ... its subtraction (LLVM adds the negated constant: the same bits)
    "f16x2.sub": r"\b(?:sub|add)\.rn\.f16x2",
    "ld.shared.16": r"\bld\.shared\.[ub]16",  # frag.ldbytes (LLVM spells it .b16)
    "cvt.rni": r"\bcvt\.rni\.s(?:8|32)\.f32",  # f32 -> i8, rounded and saturated
    "cvt.rna": r"\bcvt\.rna\.tf32\.f32",
    "bar.red": r"\bbar\.red\.or\.pred",
    "atom": r"\batom\.",
    "ld.relaxed": r"\bld\.relaxed\.gpu",
}


def case_id(case) -> str:
    sample, dtype, options = case
    return f"{sample}-{dtype}-" + (",".join(
        "unaligned" if k == "spec" else f"{k}={v}" for k, v in options.items()
        if k not in "MNK") or "defaults") + (
        "-divisible" if "M" in options else "")


def compiled(case, arch: str, backend: str):
    sample, dtype, options = case
    options = dict(options)
    return load_sample(sample, dtype).compile(arch=arch, backend=backend, **options)


def mix(ptx: str) -> dict[str, int]:
    code = "\n".join(line.split("//")[0] for line in ptx.splitlines())
    counts = {name: len(re.findall(pattern, code)) for name, pattern in MIX.items()}
    counts["cvt.to16"] += 2 * counts.pop("cvt.x2")
    return counts


def assemble(ptx: str, arch: str, tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.ptx"
    path.write_text(ptx)
    result = subprocess.run([PTXAS, "-arch", arch, "-v", str(path), "-o", str(tmp_path / "o")],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"ptxas rejected {name} for {arch}:\n{result.stderr}"
    return result.stderr


def compare_backends(ptx: str, llvm: str, arch: str, tmp_path: Path,
                     merged: frozenset = frozenset()) -> tuple[str, str]:
    """Both assembled, the same instruction mix; ptxas's reports (ptx, llvm). ``merged``:
    instructions LLVM may issue fewer of (common subexpressions across ops, which the PTX
    backend's per-op emitters repeat), but still some."""
    assert "Generated by LLVM NVPTX" in llvm and f".target {arch}" in llvm
    ptx_report = assemble(ptx, arch, tmp_path, "ptx")
    llvm_report = assemble(llvm, arch, tmp_path, "llvm")
    counts, expected = mix(llvm), mix(ptx)
    for name in merged:
        assert 0 < counts[name] <= expected[name], (name, counts[name], expected[name])
        counts[name] = expected[name]
    assert counts == expected
    assert counts["mma.sync"] + counts["fma"] > 0  # the products are there at all
    return ptx_report, llvm_report


def merged_loads(name: str) -> frozenset:
    """frag.ldbytes' loads are plain LLVM loads (ldmatrix is an intrinsic): LLVM may fold
    the pair loaded before the loop and the one carried into the next iteration into one
    load of the phi of their addresses (InstCombine), so it issues fewer, but some."""
    return frozenset({"ld.shared.16"} if name.startswith(("w8a16", "wfp8a16")) else ())


@needs_ptxas
@pytest.mark.parametrize("case, arch", [(case, arch) for case in CASES
                                        for arch in CASE_ARCHS.get(case[0], ARCHS)],
                         ids=lambda v: v if isinstance(v, str) else case_id(v))
def test_both_backends_assemble_with_the_same_instruction_mix(case, arch, tmp_path):
    ptx_report, report = compare_backends(compiled(case, arch, "ptx").ptx,
                                          compiled(case, arch, "llvm").ptx, arch, tmp_path,
                                          merged_loads(case[0]))
    # The configurations the samples are tuned for do not spill through LLVM either, where
    # the PTX backend's kernel does not (fp8_gemm's default included: 64x32 warp tiles, the
    # fp8 family's auto_warp_tile_limit).
    if (not case[2] or set(case[2]) <= {"M", "N", "K"}) and " 0 bytes spill stores" in ptx_report:
        assert " 0 bytes spill stores" in report, report


@needs_ptxas
@pytest.mark.parametrize("problem", ["tiled", "small", "shallow", "short"])
def test_fp8_tuned_tiles_do_not_spill_through_llvm(problem, tmp_path):
    """The tiles tilec runs fp8 with (FP8_TUNED in tilec/benchmarking/tuning/tables.py: 64x32
    warp tiles, where 64x64 ones spill) do not spill through LLVM either."""
    from tilec.benchmarking.tuning import FP8_TUNED
    fn = load_sample("fp8_gemm", "f8e4m3")
    compiled_llvm = fn.compile(arch="sm_90", backend="llvm", **FP8_TUNED[problem])
    assert compiled_llvm.kernel.schedule.tiling.kind == "fp8"
    report = assemble(compiled_llvm.ptx, "sm_90", tmp_path, problem)
    assert " 0 bytes spill stores" in report, report
    assert mix(compiled_llvm.ptx) == mix(fn.compile(arch="sm_90", **FP8_TUNED[problem]).ptx)


def _dsl(module: str, build):
    def function():
        return build(importlib.import_module(f"tests.{module}"))
    return function


def _operand_cast(a: str, b: str, lhs: str, rhs: str):
    def build(m):
        text = m.SOURCE.format(a=a, b=b, lhs=m.LHS + lhs, rhs=m.RHS + rhs)
        return load_file("casts.py", text=text)["gemm"]
    return _dsl("test_operand_casts", build)


# DSL features no sample uses, from the tests that introduced them: where (setp/selp in the
# epilogue), [1, N] / [M, 1] views of 2-D tensors, and frag.cvt (an operand converted in its
# registers before mma.sync, each pair of 16-bit float dtypes).
FEATURE_CASES = {
    "where": _dsl("test_where", lambda m: m.gemm()),
    "unit-views": _dsl("test_unit_views", lambda m: m.function()),
    "unit-views-bf16": _dsl("test_unit_views", lambda m: m.function("bf16", "f16")),
    "cvt-bf16-to-f16": _operand_cast("f16", "bf16", "", ".to(f16)"),
    "cvt-f16-to-bf16": _operand_cast("f16", "bf16", ".to(bf16)", ""),
    "cvt-bf16-to-f16-lhs": _operand_cast("bf16", "f16", ".to(f16)", ""),
    # i32 -> i8 (low byte), i32 -> f32 -> f16, f32 -> i8 (saturating), an i8 tile -> f32.
    "int8-conversions": _dsl("test_int8", lambda m: m.lowered(m.program(
        "        C8[m * BM : +BM, n * BN : +BN] = acc.to(i8)\n"
        "        Ch[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.25).to(f16)\n"
        "        Cs[m * BM : +BM, n * BN : +BN] = (acc.to(f32) * 0.001).to(i8)\n"
        "        Cw[m * BM : +BM, n * BN : +BN] = W[m * BM : +BM, n * BN : +BN].to(f32)\n",
        "A: i8[M, K], B: i8[N, K], W: i8[M, N], C8: i8[M, N], Ch: f16[M, N], "
        "Cs: i8[M, N], Cw: f32[M, N]"))),
    # 8-bit weights converted to bf16 after frag.ldbytes: i8 (prmt into 0x4B000000, sub.f32,
    # cvt.rn.bf16x2.f32) and fp8 (cvt.rn.f16x2.e4m3x2 / .e5m2x2, then through f32).
    "w8a16-bf16": _dsl("test_w8a16", lambda m: m.sample("bf16")),
    "wfp8a16-e4m3-bf16": _dsl("test_wfp8a16", lambda m: m.sample("f8e4m3", "bf16")),
    "wfp8a16-e5m2-bf16": _dsl("test_wfp8a16", lambda m: m.sample("f8e5m2", "bf16")),
}
# The targets a feature compiles for, where not every one (fp8 conversions: sm_89 and later).
FEATURE_ARCHS = {"wfp8a16-e4m3-bf16": ("sm_90",), "wfp8a16-e5m2-bf16": ("sm_90",)}


@needs_ptxas
@pytest.mark.parametrize("feature, arch", [(feature, arch) for feature in sorted(FEATURE_CASES)
                                           for arch in FEATURE_ARCHS.get(feature, ARCHS)])
def test_dsl_features_through_both_backends(feature, arch, tmp_path):
    fn = FEATURE_CASES[feature]()
    ptx, llvm = (fn.compile(arch=arch, backend=b).ptx for b in ("ptx", "llvm"))
    # int8-conversions converts acc.to(f32) in two stores: LLVM converts it once.
    merged = frozenset({"cvt.f32.s32"} if feature == "int8-conversions" else ())
    merged |= merged_loads(feature)
    _, report = compare_backends(ptx, llvm, arch, tmp_path, merged)
    assert " 0 bytes spill stores" in report, report
    counts = mix(llvm)
    expected = {"where": "setp.f32", "cvt": "cvt.to16", "int8": "cvt.rni", "w8a16": "prmt",
                "wfp8a16": "cvt.f8"}
    for prefix, name in expected.items():
        if feature.startswith(prefix):
            assert counts[name] > 0, (name, counts)


def test_fp8_asks_llvm_for_ptx_isa_8_4():
    llvm = load_sample("fp8_gemm", "f8e4m3").compile(arch="sm_90", backend="llvm").ptx
    assert ".version 8.4" in llvm
    assert ".version 8.0" in load_sample("int8_gemm", "i8").compile(arch="sm_90",
                                                                    backend="llvm").ptx
    assert target.selection("sm_90", ptx="8.4") == target.Selection("sm_90", "+ptx84")
    with pytest.raises(ValueError, match="no LLVM feature for PTX ISA 9.9"):
        target.selection("sm_90", ptx="9.9")


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_int8_split_k_sums_its_partials_as_integers(backend):
    """The i32 partials are loaded and added as integers in both backends (no float add of
    the partials, which would round sums above 2**24): every register of every slice loaded
    once, and only the epilogue's dequantization is float arithmetic."""
    compiled = load_sample("int8_gemm", "i8").compile(arch="sm_80", backend=backend,
                                                      split_k=3, keep_ir=True)
    code = "\n".join(line.split("//")[0] for line in compiled.ptx.splitlines())
    registers = 128 * 128 // compiled.rendered.threads
    assert len(re.findall(r"\bld\.relaxed\.gpu\.global\.[bs]32\b", code)) == 3 * registers
    assert not re.findall(r"\badd(?:\.rn)?\.f32\b", code)
    if backend == "llvm":
        assert "load atomic i32" in compiled.asm["llvm"] and "fadd" not in compiled.asm["llvm"]


def test_gelu_is_the_ptx_backends_erfc_sequence():
    """gelu's erf form: the erfc polynomial's nine fma (degree 9, Horner) plus P - z^2 and
    1 + z/2, one ex2 and one rcp, and the setp/selp of its two sides, per element in both
    backends (the MIX above counts them over the kernel)."""
    fn = load_sample("gemm_gelu", "f16")
    counts = mix(fn.compile(arch="sm_90", backend="llvm").ptx)
    elements = counts["setp.f32"]  # one gelu per accumulator element of the thread
    assert elements > 0 and elements % 32 == 0
    assert counts["ex2"] == counts["rcp"] == elements
    assert counts["fma"] == 11 * elements


@needs_ptxas
@pytest.mark.parametrize("sample", ["matmul", "matmul_bt", "gemm_epilogue"])
def test_sm_90a_kernels_of_the_mma_family_assemble(sample, tmp_path):
    """sm_90a where wgmma is not chosen (the default 128x128x32 tiles: BK 32 stays on
    mma.sync, Wgmma.shallow_problem): the mma.sync path, selected with LLVM's sm_90a cpu."""
    fn = load_sample(sample, "f16")
    llvm = fn.compile(arch="sm_90a", backend="llvm").ptx
    assert ".target sm_90a" in llvm and "wgmma" not in llvm
    assemble(llvm, "sm_90a", tmp_path, sample)
    assert mix(llvm) == mix(fn.compile(arch="sm_90a").ptx)


# Every elementwise function of the epilogue, in place of gemm_epilogue's relu.
UNARY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "silu",
         "gelu_tanh")
APPROXIMATIONS = r"\b(?:ex2|lg2|rcp|rsqrt|sqrt|tanh|abs|max|min|div|neg|fma)\.[a-zA-Z0-9.]*"


@needs_ptxas
@pytest.mark.parametrize("function", UNARY)
def test_epilogue_math_uses_the_ptx_backends_approximations(function, tmp_path):
    path = SAMPLES / "gemm_epilogue.py"
    text = path.read_text().replace("out = relu(alpha * acc + beta * c",
                                    f"out = {function}(alpha * acc - c / beta")
    assert f"out = {function}(" in text
    (fn,) = load_file(path, text=text).values()
    llvm, ptx = (fn.compile(arch="sm_90", backend=b).ptx for b in ("llvm", "ptx"))
    assemble(llvm, "sm_90", tmp_path, function)
    assert approximations(llvm) == approximations(ptx)


def approximations(ptx: str) -> set[str]:
    """The math instructions, without their type (LLVM may take |x| after narrowing to f16,
    abs.f16, which gives the same bits as abs.f32 before it)."""
    return {re.sub(r"\.(f16|bf16|f32|s32|u32)$", "", op) for op in re.findall(APPROXIMATIONS, ptx)}


# Samples whose ops have no LLVM emitters yet, and the refusal each gets (a sample moves to
# CASES when its emitters land): none now.
REFUSED_SAMPLES: dict[str, str] = {}
# Samples that only sm_90a's wgmma families compile, which the llvm backend has no emitters
# for: refused on sm_90a naming the PTX backend.
WGMMA_ONLY_SAMPLES = {"w8a16_swapped": "the llvm backend emits no wgmma"}


def _params_read_by_llvm(ir: str) -> set[int]:
    define = re.search(r"define [^\n]*", ir).group(0)
    body = ir[ir.index(define) + len(define):]
    count = len(re.findall(r"%p\d+\b", define))
    return {i for i in range(count) if re.search(rf"%p{i}\b", body)}


def _scalars_used_by_ptx(ptx: str) -> set[int]:
    """Positions of the kernel parameters (strides aside) whose loaded register the PTX
    backend's kernel uses: it loads every parameter, and leaves the unused ones to ptxas."""
    entry = ptx[ptx.index(".entry"):]
    names = re.findall(r"\.param \.[\w.]+(?: \.align \d+)? (\w+)", entry[:entry.index(")")])
    used = set()
    for i, name in enumerate(names):
        load = re.search(rf"ld\.param\.\w+ (%\w+), \[{name}\];", entry)
        if "_stride" in name or load is None:
            continue
        if len(re.findall(rf"{re.escape(load.group(1))}(?!\d)", entry)) > 1:
            used.add(i)
    return used


# The cases both checks below read: the DSL features, and every sample the llvm backend
# emits at ragged sizes (bmm: the batch index on CUDA's y beside the folded M and N axes).
SCALAR_CASES = {**FEATURE_CASES, **{
    f"{sample}-{dtype}": (lambda sample=sample, dtype=dtype: load_sample(sample, dtype))
    for sample, dtype, options in CASES if not options}}


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_llvm_reads_every_scalar_and_size_the_ptx_backend_reads(name):
    """An instruction mix can match while an address misses a term: a [1, N] view of a
    table at a run-time row once read row 0 through LLVM, never loading `row` or checking
    it against the table's size. And the other way round, LLVM uses no parameter the PTX
    backend leaves unused: bmm's grid once folded (Bt, cdiv(M, BM)) into CUDA's x where the
    PTX backend folds the M and N tile counts (Bt unused: the batch is %ctaid.y)."""
    fn = SCALAR_CASES[name]()
    compiled = fn.compile(backend="ptx", arch="sm_90")
    ir = fn.asm(sass=False, backend="llvm", arch="sm_90")["llvm"]
    # Strides aside: the two backends may fold a unit stride differently.
    strides = {i for i, p in enumerate(compiled.rendered.abi) if p.role == "stride"}
    assert _params_read_by_llvm(ir) - strides == _scalars_used_by_ptx(compiled.ptx)


def _copy_sizes(ptx: str) -> list[tuple[str, str]]:
    """Each zero-filling cp.async's source size: (its selp's selected value, predicate)."""
    selp = {dst: (value, predicate) for dst, value, predicate in re.findall(
        r"selp\.b32\s+(%r\d+), (\S+), 0, (%p\d+);", ptx)}
    sizes = re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]+\], \[[^\]]+\], \d+, "
                       r"(%r\d+);", ptx)
    assert all(size in selp for size in sizes), "a cp.async size that is no selp"
    return [selp[size] for size in sizes]


# tilec bench's ragged 4K f16 matmul on sm_90 (4095 x 4097 x 4093, the tuned 128x128x64 tiles):
# A and B packed at launch, K padded to 4096, so A's copies are masked at M's edge alone.
PACKED_RAGGED = dict(BM=128, BN=128, BK=64, stages=3, warps=(2, 2), spec=Spec(
    tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)), ("C", TensorSpec(1, 1))),
    divisible=(("K", 256), ("M", 1), ("N", 1))))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_k_loops_edge_masks_stay_one_selp_per_copy(dtype):
    """A copy inside the K loop is masked by its predicate (this K step is inside the loop)
    and its row's edge check. Written as select(predicate and row < M, 16, 0), LLVM's
    instruction selection nests two selp (the row check hoisted out of the loop), which
    ptxas cannot fold into the zero-filling LDGSTS's predicate: 3 SASS instructions per
    access where the PTX backend has one, and a K loop 305 instructions long against the
    PTX backend's 292 (nvdisasm, sm_90), the 6% tilec bench measured. The predicate goes
    into the bound instead (row < (predicate ? M : 0)): one selp of a compare (a loop of
    284)."""
    ptx = load_sample("matmul", dtype).compile(arch="sm_90", backend="llvm",
                                               **PACKED_RAGGED).ptx
    sizes = _copy_sizes(ptx)
    assert len(sizes) >= 16  # the prologue's and the loop's copies of A and B
    selp_results = set(re.findall(r"selp\.b32\s+(%r\d+),", ptx))
    nested = [size for size in sizes if size[0] in selp_results]
    assert not nested, f"{len(nested)} of {len(sizes)} copy sizes are a selp of a selp"
    assert ("16", ) in {size[:1] for size in sizes}  # A's rows: 16 bytes or none


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_epilogue_converts_c_beside_its_stores(dtype):
    """C in the input dtype (tilec bench's ragged 4K row): the accumulators are converted a
    pair at a time after the K loop's last cp.async.wait_group, among the 2-byte stores, as
    the PTX backend does. Written as fptrunc, InstCombine folded each conversion into the
    loop's exit phi: 128 single conversions ahead of the wait, 64 f16 zeros for the skip
    path, and the stores back to back (the epilogue's lg-throttle stalls, ncu on an H100)."""
    from tilec.benchmarking.contenders import sample_kernel
    compiled = sample_kernel(dtype, dtype).compile(arch="sm_90", backend="llvm",
                                                   keep_ir=True, **PACKED_RAGGED)
    ptx = "\n".join(line.split("//")[0] for line in compiled.ptx.splitlines())
    ty = {"f16": "half", "bf16": "bfloat"}[dtype]
    assert not re.search(rf"= phi {ty} ", compiled.asm["llvm-opt"]), \
        f"a conversion to {dtype} was folded into a phi"
    pairs = [m.start() for m in re.finditer(rf"cvt\.rn\.{dtype}x2\.f32 ", ptx)]
    stores = [m.start() for m in re.finditer(r"st\.global\.b16 ", ptx)]
    assert len(pairs) == 64 and len(stores) == 128  # 128 accumulators a thread, 2-byte rows
    assert not re.search(rf"cvt\.rn\.{dtype}\.f32 ", ptx)
    last_wait = [m.start() for m in re.finditer(r"cp\.async\.wait_group\s+0;", ptx)][-1]
    assert min(pairs) > last_wait
    assert min(stores) < max(pairs), "all conversions come before the first store"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_k_loops_copy_offsets_are_32_bit_products(dtype):
    """Each K step's copy corner (K offset times a stride) is one mul.wide.s32 per operand,
    as in the PTX backend, not a sign extension and a 64 x 64-bit mad.lo.s64 (LICM hoists
    the stride's extension, and NVPTX then cannot select mul.wide): five SASS instructions
    fewer per operand, 406 -> 384 us on the ragged 4K f16 kernel (H100, PTX backend 371)."""
    from tilec.benchmarking.contenders import sample_kernel
    ptx = sample_kernel(dtype, dtype).compile(arch="sm_90", backend="llvm",
                                              **PACKED_RAGGED).ptx
    loops = re.findall(r"^(\$L__BB\d+_\d+):\n(.*?)^\s*@%p\d+ bra\s+\1;", ptx,
                       re.MULTILINE | re.DOTALL)
    assert len(loops) == 1, [label for label, _ in loops]  # the K loop
    body = "\n".join(line.split("//")[0] for line in loops[0][1].splitlines())
    assert "cp.async.cg.shared.global" in body
    assert len(re.findall(r"\bmul\.wide\.s32\b", body)) == 2  # A's and B's K offsets
    assert not re.search(r"\b(?:mad|mul)\.lo\.s64\b|\bcvt\.s64\.s32\b", body)


def test_every_sample_is_covered():
    covered = {sample for sample, _, _ in CASES} | set(REFUSED_SAMPLES) | set(
        WGMMA_ONLY_SAMPLES)
    assert covered == {p.stem for p in SAMPLES.glob("*.py")}


# Each refused sample with the arch it is refused on: sm_90, or sm_90a for the wgmma-only ones.
REFUSALS = sorted([(sample, "sm_90", why) for sample, why in REFUSED_SAMPLES.items()]
                  + [(sample, "sm_90a", why) for sample, why in WGMMA_ONLY_SAMPLES.items()])


@pytest.mark.parametrize("sample, arch, why", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_samples_without_llvm_emitters_are_refused_by_name(sample, arch, why, monkeypatch):
    from tilec.kernel import load_file
    monkeypatch.setattr(target, "compile_ir", never_called)
    function = next(iter(load_file(SAMPLES / f"{sample}.py").values()))
    with pytest.raises(TileConfigError) as err:
        function.compile(backend="llvm", arch=arch)
    assert why in str(err.value)
    assert "backend='ptx'" in str(err.value)


def test_a_conversion_without_an_llvm_emitter_is_named(monkeypatch):
    """frag.cvt pairs come from the family's CONVERT_PTX table; a pair the LLVM emitter
    does not convert is refused by name before LLVM is called."""
    from tilec.families import mma_sync_llvm
    monkeypatch.setattr(target, "compile_ir", never_called)
    monkeypatch.setattr(llvm_backend, "convertible", lambda source, target: False)
    fn = FEATURE_CASES["cvt-bf16-to-f16"]()
    _CACHE.clear()  # a kernel compiled earlier in the session, IR and all, would be reused
    with pytest.raises(TileConfigError, match=r"frag\.cvt from bf16 to f16 is not supported "
                                              r"by the llvm backend; use backend='ptx'"):
        fn.compile(backend="llvm", arch="sm_90", keep_ir=True)  # keep_ir: never from a cache
    assert mma_sync_llvm.convertible(mma_sync_llvm.BF16, mma_sync_llvm.F16)


# -- the stages and options ------------------------------------------------------------------

def test_asm_holds_the_llvm_ir_before_and_after_the_pipeline():
    fn = load_sample("matmul", "f16")
    asm = fn.asm(sass=False, backend="llvm")
    assert {"llvm", "llvm-opt", "ptx"} <= set(asm)
    assert list(asm)[-3:] == ["llvm", "llvm-opt", "ptx"]
    emitted, optimised = asm["llvm"], asm["llvm-opt"]
    for intrinsic in ("llvm.nvvm.mma.m16n8k16.row.col.f32.f32",
                      "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4", "llvm.nvvm.cp.async.cg",
                      "llvm.nvvm.cp.async.wait.group", "llvm.nvvm.barrier.cta.sync"):
        assert intrinsic in emitted and intrinsic in optimised
    assert "define ptx_kernel void @matmul(" in emitted and "phi " in emitted
    assert emitted != optimised
    # Level 0 runs no pipeline: the IR comes back as parsed.
    unoptimised = fn.asm(sass=False, backend="llvm", llvm_opt=0)
    assert unoptimised["llvm-opt"].count("\n  %") >= unoptimised["llvm"].count("\n  %")
    assert "ptx" in fn.asm(sass=False) and "llvm" not in fn.asm(sass=False)


def test_dsl_lines_reach_the_ptx_through_debug_metadata():
    fn = load_sample("gemm_epilogue", "f16")
    ptx = fn.compile(backend="llvm").ptx
    assert re.search(r'\.file\s+1 "[^"]*gemm_epilogue\.py"', ptx)
    lines = {int(m) for m in re.findall(r"\.loc\s+1 (\d+) \d+", ptx)}
    source = (SAMPLES / "gemm_epilogue.py").read_text().splitlines()
    dsl = {i + 1 for i, text in enumerate(source) if "acc +=" in text or "out = relu(" in text}
    assert dsl <= lines
    assert ".loc" not in fn.compile(backend="llvm", line_info=False).ptx


def test_options_are_checked():
    with pytest.raises(ValueError, match="backend must be one of ptx, llvm"):
        Options(backend="nvcc")
    for level in (4, -1, True, "3"):
        with pytest.raises(ValueError, match="llvm_opt must be one of"):
            Options(llvm_opt=level)


def test_compile_time_is_recorded():
    """LLVM's own time (parsing, the pipeline, PTX emission) for the matmul sample, printed
    for the report (benchmarks/bench_llvm_compile.py measures it properly)."""
    fn = load_sample("matmul", "f16")
    result = fn.compile(backend="llvm", keep_ir=True, BK=64)
    assert 0 < result.times["llvm"] <= result.times["backend"]
    print(f"\nllvm backend, matmul sm_80: LLVM {result.times['llvm'] * 1e3:.0f} ms, "
          f"backend total {result.times['backend'] * 1e3:.0f} ms")


# -- the disk cache ----------------------------------------------------------------------------

def test_the_disk_cache_keys_on_the_backend_and_llvm_version():
    cache = disk_cache()
    options = Options(backend="llvm")
    plain = cache.key_for("src", {}, options, "p")
    assert cache.key_for("src", {}, options, "p", backend=target.version()) != plain
    assert cache.key_for("src", {}, Options(), "p") != plain  # the backend is an option
    assert re.fullmatch(r"llvm-\d+\.\d+\.\d+\+llvmlite-.+", target.version())


def test_llvm_ptx_comes_back_from_the_disk_cache():
    fn = load_sample("matmul_bt", "bf16")
    first = fn.compile(backend="llvm", BK=64)
    _CACHE.clear()
    again = fn.compile(backend="llvm", BK=64)
    assert again is not first and again.ptx == first.ptx
    assert "llvm" not in again.asm  # from the disk: no LLVM ran
    assert fn.compile(BK=64).ptx != first.ptx
    # Asking for the stages runs LLVM again rather than returning PTX without its IR.
    assert "llvm" in fn.compile(backend="llvm", BK=64, keep_ir=True).asm


# -- what it refuses -----------------------------------------------------------------------------

def never_called(*args, **kwargs):
    raise AssertionError("LLVM was called")


# (sm_90a's warp-specialized kernels: tests/test_llvm_decline.py, where the wgmma families
# decline the blocks and the schedule's options are refused.)
@pytest.mark.parametrize("options, words", [
    (dict(l2_prefetch=128), "L2 prefetch hint (l2_prefetch)"),
])
def test_unsupported_features_are_refused_before_llvm_is_called(options, words, monkeypatch):
    monkeypatch.setattr(target, "compile_ir", never_called)
    fn = load_sample("matmul", "f16")
    with pytest.raises(TileConfigError) as err:
        fn.compile(backend="llvm", **options)
    assert words in str(err.value)
    assert "not supported by the llvm backend" in str(err.value)
    assert "backend='ptx'" in str(err.value)


def test_an_op_without_an_llvm_emitter_is_named(monkeypatch):
    """A family the llvm backend emits, missing one op's emitter (as the mma family's
    frag.ldbytes was): the op is named before LLVM is called."""
    from tilec.families import llvm_emitters
    monkeypatch.setattr(target, "compile_ir", never_called)
    emitters = {**llvm_emitters.PRODUCT_EMITTERS}
    emitters["mma"] = {k: v for k, v in emitters["mma"].items() if k != "frag.ldbytes"}
    monkeypatch.setattr(llvm_backend, "PRODUCT_EMITTERS", emitters)
    _CACHE.clear()
    with pytest.raises(TileConfigError, match=r"the mma family's op 'frag\.ldbytes' is not "
                                              r"supported by the llvm backend; use "
                                              r"backend='ptx'"):
        load_sample("w8a16", "f16").compile(backend="llvm", arch="sm_90", keep_ir=True)


def test_a_family_without_llvm_emitters_is_named(monkeypatch):
    from tilec.families import llvm_emitters
    monkeypatch.setattr(target, "compile_ir", never_called)
    monkeypatch.setattr(llvm_emitters, "PRODUCT_EMITTERS", {})
    monkeypatch.setattr(llvm_backend, "PRODUCT_EMITTERS", {})
    with pytest.raises(TileConfigError, match=r"the simt family \(frag\.fma\) is not supported "
                                              r"by the llvm backend; use backend='ptx'"):
        load_sample("sgemm", "f32").compile(backend="llvm", BK=32)


def test_targets_and_features_llvm_cannot_select_are_refused():
    assert target.selection("sm_90a") == target.Selection("sm_90a", "+ptx80")
    with pytest.raises(ValueError, match="no LLVM target for 'sm_75'"):
        target.selection("sm_75")
    with pytest.raises(ValueError, match="could make LLVM abort"):
        target.selection("sm_90", "+ptx80,+sm_90a")
    kernel = load_sample("matmul", "f16").lower()
    with pytest.raises(TileConfigError, match="no LLVM target for 'sm_89'"):
        llvm_backend.check_supported(kernel, _with_arch(Options(backend="llvm"), "sm_89"))


def _with_arch(options: Options, arch: str) -> Options:
    object.__setattr__(options, "arch", arch)  # an arch Options itself would refuse
    return options


def test_a_missing_nvptx_target_names_the_fix(monkeypatch):
    llvm = target.binding()

    def no_target(triple):
        raise RuntimeError("Unable to find target for this triple (no targets are registered)")
    monkeypatch.setattr(llvm.Target, "from_triple", staticmethod(no_target))
    target._target.cache_clear()
    target.target_machine.cache_clear()
    try:
        with pytest.raises(target.LlvmUnavailable, match=r"no NVPTX target.*pip install"):
            target.target_machine("sm_80", 3)
    finally:
        monkeypatch.undo()
        target._target.cache_clear()
        target.target_machine.cache_clear()


def test_a_missing_llvmlite_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "llvmlite.binding", None)
    with pytest.raises(TileConfigError, match=r"needs llvmlite.*pip install"):
        target.binding()


# -- the command line --------------------------------------------------------------------------

def tilec(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilec", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**__import__("os").environ,
                                                    "PYTHONPATH": str(ROOT)})


def test_compile_dumps_the_llvm_ir(tmp_path):
    out = tmp_path / "m.ptx"
    result = tilec("compile", "samples/matmul.py", "--backend", "llvm", "--llvm-opt", "2",
                   "--dump-ir", "llvm", "--dump-ir", "llvm-opt", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "===== matmul: LLVM IR as emitted =====" in result.stderr
    assert "===== matmul: LLVM IR after LLVM's pipeline =====" in result.stderr
    assert "Generated by LLVM NVPTX" in out.read_text()


def test_cli_errors_are_clear():
    result = tilec("compile", "samples/matmul.py", "--dump-ir", "llvm")
    assert result.returncode != 0
    assert "the LLVM IR exists with --backend llvm only" in result.stderr
    result = tilec("compile", "samples/matmul.py", "--backend", "llvm", "--arch", "sm_90a",
                   "--misaligned-store", "pairs")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "is not emitted by the llvm backend; use backend='ptx'" in result.stderr
    result = tilec("compile", "samples/matmul.py", "--backend", "llvm", "--llvm-opt", "7")
    assert result.returncode != 0 and "invalid choice" in result.stderr


@pytest.mark.parametrize("verb", ["compile", "run", "explain", "bench"])
def test_every_compiling_verb_takes_the_backend(verb):
    result = tilec(verb, "--help")
    assert "--backend {ptx,llvm}" in result.stdout and "--llvm-opt" in result.stdout


def test_bench_adds_a_column_for_the_llvm_backend(monkeypatch, capsys):
    from tests.test_bench import NumpyArrays, NumpyTilec, fake_gpu
    from tilec.cli import main as cli_main
    from tilec.tools import bench
    seen = {}

    class Recording(NumpyTilec):
        def prepare(self, case, inputs, outputs):
            seen[self.name] = dict(self.options)
            return super().prepare(case, inputs, outputs)

    class RecordingLlvm(Recording):
        name = "tilec-llvm"
    fake_gpu(monkeypatch, NumpyArrays())
    monkeypatch.setattr(bench, "TilecContender", Recording)
    monkeypatch.setattr(bench, "LlvmTilecContender", RecordingLlvm)
    code = cli_main(["bench", "--sizes", "32x24x16", "--dtypes", "f16", "--backend", "llvm",
                     "--llvm-opt", "2", "--arch", "sm_90"])
    out = capsys.readouterr().out
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("shape"))
    assert "tilec-llvm" in header.split() and "tilec/tilec-llvm" in header.split()
    assert seen["tilec"] == {"arch": "sm_90"}
    assert seen["tilec-llvm"] == {"arch": "sm_90", "backend": "llvm", "llvm_opt": 2}


def test_the_llvm_contender_runs_every_row():
    """sm_90a's f16/bf16 rows included: there the llvm backend's kernels are mma.sync ones,
    in mma.sync's tuned configurations (tests/test_llvm_decline.py)."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.contenders import LlvmTilecContender
    for arch in ("sm_90a", "sm_90"):
        contender = LlvmTilecContender({}, {"arch": arch, "backend": "llvm"})
        for dtype in ("f16", "bf16", "f32"):
            assert contender.unsupported(Case(4096, 4096, 4096, dtype)) is None


def test_explain_says_the_ptx_is_llvms():
    result = tilec("explain", "samples/matmul.py", "--backend", "llvm", "--llvm-opt", "1")
    assert result.returncode == 0, result.stderr
    assert "raster group 8, backend llvm (LLVM -O1)" in result.stdout.splitlines()[0]
    assert "backend llvm" not in tilec("explain", "samples/matmul.py").stdout


# -- the pack kernel through LLVM --------------------------------------------------------------

@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("itemsize", [1, 2, 4])
def test_the_pack_kernel_through_llvm_assembles(itemsize, arch, tmp_path):
    from tilec.backend.llvm.pack import pack_ptx
    from tilec.backend.pack import PACK_PARAMS, pack_entry
    ptx = pack_ptx(itemsize, arch)
    report = assemble(ptx, arch, tmp_path, "pack")
    assert " 0 bytes spill stores" in report
    assert f".entry {pack_entry(itemsize)}(" in ptx and f".target {arch}" in ptx
    kinds = re.findall(r"\.param \.(u64|u32|b32|b64)[ .a-z0-9]* \w+_param_\d+", ptx)
    assert [{"b64": "u64", "b32": "u32"}.get(k, k) for k in kinds] == [
        kind for _, kind in PACK_PARAMS]
    # The two aligned chunks of a contiguous row, the vector store, and the element loads of
    # strided rows and of the last contiguous row.
    assert len(re.findall(r"ld\.global(?:\.nc)?\.v4\.b32", ptx)) == 2
    assert re.search(r"st\.global\.v4\.b32", ptx)
    width = 8 * itemsize
    assert len(re.findall(rf"ld\.global(?:\.nc)?\.b{width}\b", ptx)) == 2 * (16 // itemsize)


def test_a_launch_compiled_by_llvm_packs_with_llvms_pack_kernel(loaded_modules):
    from tilec.launch import packing
    loaded = loaded_modules
    assert packing.llvm_pack_function(2, "sm_90") == "tilec_pack_b16"
    assert packing.pack_function(2, "sm_90") == "tilec_pack_b16"
    (llvm_ptx, _), (ptx, _) = loaded
    assert "Generated by LLVM NVPTX" in llvm_ptx and "Generated by LLVM" not in ptx


def test_asm_after_a_plain_compile_still_has_every_stage():
    fn = load_sample("matmul", "bf16")
    fn.compile(backend="llvm", BK=16)  # cached without the passes' IR
    asm = fn.asm(sass=False, backend="llvm", BK=16)
    assert {"tile", "tiling", "fragments", "llvm", "llvm-opt", "ptx"} <= set(asm)
