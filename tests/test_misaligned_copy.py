"""Misaligned 16-bit rows (odd strides, 2-byte aligned) left unpacked. Copies
(``Options.misaligned_copy``): 16-byte shared vectors loaded through registers, element by
element ("vectors") or as the aligned 4-byte words covering each vector ("words"): the
tiling plan and copy attributes, the executor's results at ragged shapes through every
stage, the race checker, the PTX each way emits, and the errors. C's stores
(``Options.misaligned_store = "pairs"``): the PTX of a 4-byte store where a row is aligned."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilec.analysis.hazards import check_schedule
from tilec.errors import TileConfigError
from tilec.ir.core import Kernel
from tilec.kernel import TileFunction, load_file
from tilec.options import Options, Spec, TensorSpec

from tests.test_executor import inputs, run, stage_kernels

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
# Both operands' rows 2-byte aligned (odd strides), as for 1000x1003x77 left unpacked.
MISALIGNED = Spec(tensors=(("A", TensorSpec(1, 1)), ("B", TensorSpec(1, 1))))
# No dim divides the tiles, and K = 37 ends inside a vector of 8 (32..39).
RAGGED = {"M": 45, "N": 51, "K": 37}
WIDENED = ("vectors", "words")


def sample(name: str = "matmul", dtype: str = "f16") -> TileFunction:
    path = SAMPLES / f"{name}.py"
    text = path.read_text(encoding="utf-8").replace("A: f16[", f"A: {dtype}[").replace(
        "B: f16[", f"B: {dtype}[")
    (function,) = load_file(path, text=text).values()
    return function


def copies(kernel: Kernel) -> list:
    return [op for op in kernel.walk() if op.name == "copy.global_to_shared"]


@pytest.mark.parametrize("how", WIDENED)
@pytest.mark.parametrize("stages", [1, 3])
def test_misaligned_rows_copy_16_byte_vectors_through_registers(how: str, stages: int) -> None:
    kernel = sample().compile(BM=64, BN=128, BK=80, warps=(2, 4), stages=stages,
                              spec=MISALIGNED, misaligned_copy=how).kernel
    assert [(o.vec, o.global_vec) for o in kernel.schedule.tiling.operands] == [(8, 1), (8, 1)]
    # Pipelined or not, the copies stay loads (cp.async would need aligned rows).
    assert {(op.attrs["mode"], op.attrs["vec"], op.attrs["global_vec"], op.attrs["misaligned"])
            for op in copies(kernel)} == {("sync", 8, 1, how)}
    check_schedule(kernel)


def test_elements_the_default_and_aligned_rows_are_left_as_they_were() -> None:
    plain = sample().compile(spec=MISALIGNED).kernel
    assert [(o.vec, o.global_vec) for o in plain.schedule.tiling.operands] == [(1, 0), (1, 0)]
    assert all("global_vec" not in op.attrs and "misaligned" not in op.attrs
               for op in copies(plain))
    aligned = sample().compile(misaligned_copy="words").kernel
    assert {(op.attrs["mode"], op.attrs["vec"]) for op in copies(aligned)} == {("async", 8)}
    assert sample().ptx(misaligned_copy="words") == sample().ptx()
    # An operand without a unit-stride dim has no adjacent elements to load as a vector.
    strided = Spec(tensors=(("A", TensorSpec(None, 1)), ("B", TensorSpec(1, 1))))
    kernel = sample().compile(spec=strided, misaligned_copy="words").kernel
    assert [(o.vec, o.global_vec) for o in kernel.schedule.tiling.operands] == [(1, 0), (8, 1)]


def test_sm_90a_keeps_misaligned_operands_off_wgmma() -> None:
    kernel = sample().compile(arch="sm_90a", BM=64, BN=128, BK=80, warps=(2, 4), stages=1,
                              spec=MISALIGNED, misaligned_copy="words").kernel
    plan = kernel.schedule.tiling
    assert plan.kind == "mma" and [o.vec for o in plan.operands] == [8, 8]


@pytest.mark.parametrize("how", WIDENED)
@pytest.mark.parametrize("stages,swizzle", [(1, "auto"), (2, "auto"), (3, "off")])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_every_stage_reproduces_the_interpreter_at_ragged_shapes(how, stages, swizzle,
                                                                  dtype) -> None:
    kernel = sample(dtype=dtype).lower(BM=32, BN=64, BK=48)
    options = Options(stages=stages, warps=(2, 2), swizzle=swizzle, spec=MISALIGNED,
                      misaligned_copy=how)
    stages_run = stage_kernels(kernel, options)
    assert {op.attrs["vec"] for op in copies(stages_run[-1][1])} == {8}
    arrays, scalars = inputs(kernel, RAGGED, seed=3)
    expected = run(kernel, arrays, scalars)
    for stage, lowered in stages_run[1:]:
        np.testing.assert_allclose(run(lowered, arrays, scalars), expected, rtol=1e-6,
                                   atol=1e-6, err_msg=stage)


def test_a_misaligned_copy_made_asynchronous_is_refused() -> None:
    kernel = sample().compile(stages=2, spec=MISALIGNED, misaligned_copy="vectors").kernel
    copy = copies(kernel)[0]
    copy.attrs["mode"] = "async"
    from tilec.families.catalogue import op_catalogue
    with pytest.raises(Exception, match="global_vec"):
        op_catalogue()[copy.name].check(copy)


def ptx(how: str, arch: str = "sm_80") -> str:
    return sample().ptx(arch=arch, BM=64, BN=128, BK=80, warps=(2, 4), stages=1,
                        spec=MISALIGNED, misaligned_copy=how, M=1000, N=1003, K=77)


def test_vectors_load_elements_and_store_each_vector_once() -> None:
    text = ptx("vectors")
    # A 64x80 and B 80x128 tiles: 640 + 1280 vectors over 256 threads, 3 + 5 accesses.
    assert len(re.findall(r"st\.shared\.v4\.b32", text)) == 8
    assert len(re.findall(r"ld\.global\.nc\.b16", text)) == 8 * 8
    assert "st.shared.b16" not in text


def test_words_load_aligned_words_and_shift_them_into_place() -> None:
    text = ptx("words")
    assert len(re.findall(r"st\.shared\.v4\.b32", text)) == 8
    # Five words cover 16 bytes at any 2-byte offset; four prmt take the vector out. The
    # fifth holds only the vector's last 2 bytes (when it starts 2 bytes into a word): its
    # lower half alone is loaded, so a vector ending the tensor's storage reads nothing past
    # it. So is the lower half of the word where a masked vector's in-bounds bytes end
    # (setp.eq.and splits each word's guard into "whole word" and "lower half").
    assert len(re.findall(r"ld\.global\.nc\.b32", text)) == 8 * 4
    assert len(re.findall(r"setp\.eq\.and\.s32 %p\d+\|%p\d+", text)) == 8 * 4
    assert len(re.findall(r"ld\.global\.nc\.u16", text)) == 8 * 5
    assert len(re.findall(r"prmt\.b32\.f4e", text)) == 8 * 4
    assert "ld.global.nc.b16" not in text
    # The word addresses are the vector's rounded down to 4 bytes.
    assert re.search(r"and\.b64 %rd\d+, %rd\d+, -4;", text)


def test_bad_values_and_the_llvm_backend_say_what_they_take() -> None:
    with pytest.raises(ValueError, match="misaligned_copy must be one of elements, vectors, "
                                         "words"):
        Options(misaligned_copy="bytes")
    with pytest.raises(TileConfigError, match="misaligned_copy='words'.*llvm backend"):
        sample().ptx(backend="llvm", spec=MISALIGNED, misaligned_copy="words")


def c_ptx(**options) -> str:
    from tilec.benchmarking.contenders import sample_kernel
    spec = Spec(tensors=(*MISALIGNED.tensors, ("C", options.pop("c_spec", TensorSpec(1, 1)))))
    return sample_kernel("f16", "f16").ptx(arch="sm_90", BM=64, BN=128, BK=80, warps=(2, 4),
                                          stages=1, spec=spec, M=1000, N=1003, K=77, **options)


def test_pair_stores_where_a_row_is_aligned_and_elements_where_not() -> None:
    text = c_ptx(misaligned_store="pairs")
    # 64x128 over 256 threads: 16 register pairs a thread, each a guarded 4-byte store and
    # two guarded 2-byte ones; the alignment is found once per row (4 rows a thread).
    assert len(re.findall(r"@%p\d+ st\.global\.b32 \[%rd\d+(\+\d+)?\], %r\d+;", text)) == 16
    assert len(re.findall(r"@%p\d+ st\.global\.b16", text)) == 32
    assert len(re.findall(r"setp\.eq\.u32 %p\d+, %r\d+, 0;", text)) == 4
    assert "st.global.b32" not in c_ptx()  # the default stores elements
    # Rows known 4-byte aligned keep their plain pair stores.
    assert c_ptx(misaligned_store="pairs", c_spec=TensorSpec(1, 8)) == c_ptx(
        c_spec=TensorSpec(1, 8))


def test_bad_store_values_and_the_llvm_backend_say_what_they_take() -> None:
    with pytest.raises(ValueError, match="misaligned_store must be one of elements, pairs"):
        Options(misaligned_store="words")
    with pytest.raises(TileConfigError, match="misaligned_store='pairs'.*llvm backend"):
        sample().ptx(backend="llvm", misaligned_store="pairs")
