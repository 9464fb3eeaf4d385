"""The pipeline as a list users edit: disabling, replacing, user passes and their failures,
per-pass times and IR, annotated PTX, stage dumps."""
from __future__ import annotations

from pathlib import Path

import pytest

import tilec
from tilec.ir import IRError
from tilec.kernel import load_file
from tilec.pipeline import Pass, PassError, pipeline, register_pass, _REGISTERED

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


@pytest.fixture
def matmul():
    return load_file(SAMPLES / "matmul.py")["matmul"]


def test_the_pipeline_is_an_ordered_list_of_named_passes():
    names = [p.name for p in pipeline()]
    assert names == ["cse", "dequantize", "swap_product", "tiling", "split_k", "double_buffer",
                     "swizzle", "fragments", "promote_accumulation", "tma_store", "row_store"]
    assert all(p.doc for p in pipeline())
    assert tilec.pipeline() is not tilec.pipeline()  # a fresh list each time: safe to edit


def test_every_stage_has_text_and_a_time(matmul):
    compiled = matmul.compile(keep_ir=True, verify=True)
    assert list(compiled.asm) == ["tile", "cse", "dequantize", "swap_product", "tiling",
                                  "split_k", "double_buffer", "swizzle", "fragments",
                                  "promote_accumulation", "tma_store", "row_store", "ptx"]
    assert "copy.global_to_shared" in compiled.asm["tiling"]
    assert "frag.mma" in compiled.asm["fragments"]
    assert set(compiled.times) == {"cse", "dequantize", "swap_product", "tiling", "split_k",
                                   "double_buffer",
                                   "swizzle", "fragments", "promote_accumulation", "tma_store",
                                   "row_store", "hazards", "backend"}
    assert all(t >= 0 for t in compiled.times.values())


def test_disabling_swizzle_keeps_rows_linear(matmul):
    text = matmul.compile(keep_ir=True, disable=("swizzle",)).asm["fragments"]
    assert "swizzle(" not in text and "linear" in text


def _identity(kernel, options):
    return kernel


def test_a_user_pass_in_the_list_runs_and_is_named_in_the_ptx(matmul):
    seen = []

    def count_ops(kernel, options):
        seen.append(sum(1 for _ in kernel.walk()))
        return kernel
    passes = pipeline()
    passes.insert(2, Pass("count_ops", count_ops))
    compiled = matmul.compile(passes=passes, keep_ir=True)
    assert seen and seen[0] > 10
    assert "count_ops" in compiled.asm


@pytest.mark.parametrize("bad, message", [
    (lambda kernel, options: 1 / 0, "pass 'bad' raised ZeroDivisionError"),
    (lambda kernel, options: "not a kernel", "pass 'bad' returned str, not a Kernel"),
])
def test_a_failing_user_pass_is_named(matmul, bad, message):
    passes = pipeline()
    passes.insert(1, Pass("bad", bad))
    with pytest.raises(PassError) as err:
        matmul.compile(passes=passes)
    assert message in str(err.value)


def test_a_user_pass_that_breaks_the_ir_is_named_with_the_invariant_and_a_dump(matmul):
    def drop_yield(kernel, options):
        for op in kernel.walk():
            if op.name == "scf.for":
                op.regions[0].ops.pop()  # the loop body no longer ends with scf.yield
        return kernel
    passes = pipeline()
    passes.insert(1, Pass("drop_yield", drop_yield))
    with pytest.raises(PassError) as err:
        matmul.compile(passes=passes, verify=True)
    text = str(err.value)
    assert "pass 'drop_yield' broke an IR invariant" in text and "scf.yield" in text
    dump = Path(err.value.dump_path)
    assert dump.exists() and "scf.for" in dump.read_text()


def test_registered_pass_joins_the_default_pipeline(matmul):
    register_pass(Pass("noop", _identity), after="swizzle")
    try:
        names = [p.name for p in pipeline()]
        assert names[names.index("swizzle") + 1] == "noop"
        assert "noop" in matmul.compile(keep_ir=True, M=256).asm
        with pytest.raises(ValueError, match="unknown pass 'nope'"):
            register_pass(Pass("other", _identity), after="nope")
    finally:
        _REGISTERED.clear()


def test_annotated_ptx_names_line_op_and_pass(matmul):
    ptx = matmul.ptx(annotate=True)
    assert "<- frag.mma [fragments]" in ptx
    assert "<- copy.global_to_shared [double_buffer]" in ptx
    assert "line 12: `acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]`" in ptx
    assert "// " not in matmul.ptx().split("\n", 1)[1].replace("// Generated", "")


def test_dump_dir_writes_every_stage(matmul, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_DUMP_DIR", str(tmp_path))
    matmul.compile(stages=2, BM=64)
    (folder,) = list(tmp_path.iterdir())
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["00-tile.ir", "01-cse.ir", "02-dequantize.ir", "03-swap_product.ir",
                     "04-tiling.ir", "05-split_k.ir", "06-double_buffer.ir", "07-swizzle.ir",
                     "08-fragments.ir", "09-promote_accumulation.ir", "10-tma_store.ir",
                     "11-row_store.ir", "12-ptx.ptx", "options.txt"]
    assert ".entry matmul" in (folder / "12-ptx.ptx").read_text()


def test_same_input_gives_byte_identical_ptx(matmul):
    from tilec.compiler import _CACHE
    first = matmul.ptx(stages=4)
    _CACHE.clear()
    assert matmul.ptx(stages=4) == first


def test_verifier_error_is_an_ir_error():
    assert issubclass(IRError, Exception)


def test_a_pass_that_makes_a_race_is_a_compile_error_naming_both_accesses(matmul):
    from tilec.errors import TileConfigError

    def drop_loop_barrier(kernel, options):
        for op in kernel.walk():
            if op.name == "scf.for":
                body = op.regions[0]
                body.ops = [o for o in body.ops if o.name != "gpu.barrier"]
        return kernel
    passes = pipeline()
    passes.append(Pass("drop_loop_barrier", drop_loop_barrier))
    with pytest.raises(TileConfigError) as err:
        matmul.compile(passes=passes)
    assert "copy.global_to_shared" in str(err.value) and "frag.ldmatrix" in str(err.value)


def test_zero_sizes_in_the_interpreter(matmul):
    import numpy as np
    a, b = np.ones((0, 8), np.float16), np.ones((8, 5), np.float16)
    c = np.full((0, 5), np.nan, np.float32)
    assert matmul(a, b, c, device="cpu") is c
    a, b = np.ones((7, 0), np.float16), np.ones((0, 5), np.float16)
    c = np.full((7, 5), np.nan, np.float32)
    matmul(a, b, c, device="cpu")
    assert (c == 0).all()  # an empty sum: every element written, as zero


def test_ptx_comes_back_from_the_disk_cache(matmul, tmp_path, monkeypatch):
    from tilec.compiler import _CACHE, _DISK_CACHES, disk_cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    _CACHE.clear()
    first = matmul.compile(BM=64, stages=2)
    cache = disk_cache()
    assert cache.directory == tmp_path and any(tmp_path.glob("*.ptx"))
    _CACHE.clear()  # as a new process would start
    hits = cache.hits
    second = matmul.compile(BM=64, stages=2)
    assert cache.hits == hits + 1 and second.ptx == first.ptx
    assert second.rendered == first.rendered
    # A corrupt entry is not trusted: it is dropped and the kernel compiled again.
    (ptx_file,) = tmp_path.glob("*.ptx")
    ptx_file.write_text("garbage")
    _CACHE.clear()
    third = matmul.compile(BM=64, stages=2)
    assert third.ptx == first.ptx and cache.discarded >= 1
    _DISK_CACHES.clear()


def test_disk_cache_can_be_turned_off(matmul, tmp_path, monkeypatch):
    from tilec.compiler import _CACHE, disk_cache
    monkeypatch.setenv("TILEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEC_DISK_CACHE", "0")
    _CACHE.clear()
    matmul.compile(BM=64, stages=3)
    assert disk_cache() is None and not any(tmp_path.iterdir())
