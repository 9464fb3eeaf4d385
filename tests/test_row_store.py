"""The mma.sync kernels' row-store epilogue (``misaligned_store = "rows"``, passes/row_store.py,
tilec/families/row_store.py): the pass's decision and its reasons, the IR text and
``explain``, the staging tile's place in shared memory, the executor's results at ragged
shapes through every stage, the PTX (staging writes between two block barriers, then rows
of 64 contiguous bytes a warp instruction), and the llvm backend's refusal."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tilec.analysis.hazards import check_schedule
from tilec.benchmarking.contenders import sample_kernel
from tilec.cli import main
from tilec.errors import TileConfigError
from tilec.ir.printer import print_kernel
from tilec.options import Options, Spec, TensorSpec
from tilec.target.smem import place

from tests.test_executor import inputs, run, stage_kernels
from tests.test_misaligned_copy import MISALIGNED, RAGGED, sample

# C's rows 2-byte aligned (an odd N), beside misaligned operands: 1000x1003x77.
C_MISALIGNED = Spec(tensors=(*MISALIGNED.tensors, ("C", TensorSpec(1, 1))))
TUNED = dict(BM=64, BN=128, BK=80, warps=(2, 4), stages=1, misaligned_copy="words")


def stores(kernel):
    return [op for op in kernel.walk() if op.name == "tile.store"]


def compile_c(dtype: str = "f16", arch: str = "sm_90", spec: Spec = C_MISALIGNED, **options):
    config = {**TUNED, "misaligned_store": "rows", **options}
    return sample_kernel(dtype, dtype).compile(arch=arch, spec=spec, M=1000, N=1003, K=77,
                                               **config)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_misaligned_16_bit_rows_are_staged_and_stored_by_rows(arch) -> None:
    kernel = compile_c(arch=arch).kernel
    (store,) = stores(kernel)
    # 128 columns of f16 and a 16-byte pad a staged row; 64 rows.
    assert (store.attrs["via"], store.attrs["pitch"]) == ("block_rows", 272)
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes) == ("block_rows", 64 * 272)
    text = print_kernel(kernel)
    assert "#epilogue = {via = block_rows, staging = 17408 bytes}" in text
    assert "via = block_rows" in text and "pitch = 272" in text
    # After the operand ring (64x80 + 80x128 f16, one stage), disjoint from it.
    layout = place(kernel)
    staging = layout.of(store)
    rings = [p for p in layout.buffers.values() if p.kind == "ring"]
    assert staging.offset >= max(p.end for p in rings) and staging.total_bytes == 17408
    check_schedule(kernel)


def test_the_option_alone_and_misaligned_c_alone_leave_the_direct_stores() -> None:
    plain = compile_c(misaligned_store="elements").kernel
    assert "via" not in stores(plain)[0].attrs and plain.schedule.epilogue is None
    assert compile_c(misaligned_store="elements").ptx == sample_kernel("f16", "f16").ptx(
        arch="sm_90", spec=C_MISALIGNED, M=1000, N=1003, K=77, **TUNED)
    aligned = compile_c(spec=Spec(tensors=(*MISALIGNED.tensors, ("C", TensorSpec(1, 8)))))
    assert "via" not in stores(aligned.kernel)[0].attrs
    assert aligned.kernel.schedule.epilogue.reason == (
        "row store: 'C' has 16-byte aligned rows: the direct stores write whole sectors")


@pytest.mark.parametrize("options,reason", [
    (dict(dtype="f32"), "C is f32: rows are staged for 16-bit tiles"),
    (dict(split_k=3), "split-K's slices meet in C first"),
    (dict(BN=16, warps=(2, 1)), "the tile's 16 columns are not a multiple of a warp's 32 "
                                "lanes"),
])
def test_what_keeps_the_direct_stores_is_said(options, reason) -> None:
    kernel = compile_c(**options).kernel
    assert "via" not in stores(kernel)[0].attrs
    assert kernel.schedule.epilogue.reason == "row store: " + reason


def test_warp_specialized_kernels_keep_their_own_row_store() -> None:
    spec = Spec(tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)),
                         ("C", TensorSpec(1, 1))))
    kernel = sample_kernel("f16", "f16").compile(arch="sm_90a", spec=spec, BM=128, BN=256,
                                                 BK=64, misaligned_store="rows").kernel
    assert kernel.schedule.roles is not None
    assert [op.attrs.get("via") for op in stores(kernel)] == ["rows"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("config", [
    dict(BM=32, BN=64, BK=48, warps=(2, 2), stages=1),
    dict(BM=64, BN=32, BK=16, warps=(2, 1), stages=3),
])
def test_every_stage_reproduces_the_interpreter_at_ragged_shapes(dtype, config) -> None:
    kernel = sample("gemm_epilogue", dtype).lower(**{k: config[k] for k in ("BM", "BN", "BK")})
    options = Options(stages=config["stages"], warps=config["warps"], misaligned_store="rows",
                      spec=Spec(tensors=(("C", TensorSpec(1, 1)),)))
    stages_run = stage_kernels(kernel, options)
    assert stages_run[-1][0] == "row_store"
    assert stores(stages_run[-1][1])[0].attrs["via"] == "block_rows"
    # The fused epilogue reads C too (beta * C): C's old values must reach the result.
    arrays, scalars = inputs(kernel, RAGGED, seed=5)
    expected = run(kernel, arrays, scalars)
    for stage, lowered in stages_run[1:]:
        np.testing.assert_allclose(run(lowered, arrays, scalars), expected, rtol=1e-6,
                                   atol=1e-6, err_msg=stage)
    check_schedule(stages_run[-1][1])


def epilogue_ptx(text: str) -> str:
    """The PTX from the last mma.sync on (the epilogue)."""
    return text[text.rfind("mma.sync"):]


def test_the_ptx_stages_between_block_barriers_then_stores_rows() -> None:
    text = epilogue_ptx(compile_c().ptx)
    first, second = (m.start() for m in re.finditer(r"bar\.sync 0;", text))
    writes = re.findall(r"st\.shared\.b32 \[%r\d+\+(\d+)\]", text)
    # 64x128 over 256 threads: 32 registers a thread, 16 pairs, all between the barriers.
    assert len(writes) == 16
    assert all(first < m.start() < second for m in re.finditer(r"st\.shared\.b32", text))
    # Register pair (r, c) at r * 272 + c * 2: rows 8 apart are 2176 bytes apart.
    assert {int(w) for w in writes} >= {0, 2176, 4352, 6528}
    # Then 4 parts of 32 columns a row, a loop over the warp's rows: each part's load and
    # store are one warp's 64 contiguous bytes (lane l at 2 * l), masked past N.
    rows = text[second:]
    loads = re.findall(r"ld\.shared\.b16 %h\d+, \[%r\d+\+(\d+)\];", rows)
    assert loads == ["0", "64", "128", "192"]
    assert len(re.findall(r"@%p\d+ st\.global\.b16 \[%rd\d+\+\d+\], %h\d+;", rows)) == 4
    assert "bra $L_block_rows" in rows
    assert "st.global.b16" not in text[:second]


def test_the_llvm_backend_refuses_it_by_name() -> None:
    with pytest.raises(TileConfigError, match="misaligned_store='rows' \\(C's tile staged "
                                              "in shared memory.*llvm backend"):
        sample().ptx(backend="llvm", misaligned_store="rows")


def test_explain_and_the_ir_dump_show_it(capsys) -> None:
    args = ["samples/gemm_epilogue.py", "--shape", "M=1000", "N=1003", "K=77", "--arch",
            "sm_90", "--misaligned-store", "rows"]
    assert main(["explain", *args]) == 0
    out = capsys.readouterr().out
    assert "the block stores it a row at a time (st.global.b16" in out
    assert re.search(r"sC .* rows of 272 B \(the block's row stores staging\)", out)
    # compile takes sizes, not alignments: C's rows are taken 16-byte aligned there.
    assert main(["compile", *args, "--dump-ir", "row_store"]) == 0
    assert ("#epilogue = {via = direct, reason = \"row store: 'C' has 16-byte aligned rows"
            in capsys.readouterr().err)
