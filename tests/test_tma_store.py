"""The TMA-store epilogue (passes/tma_store.py): which stores it takes and why it declines the
others, what the backend writes for it (staging writes, the proxy fence, the consumers'
barrier, one box per slab from one thread, the waits), the tensor map it adds, and the
lowered kernel's result on the CPU."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.families.tma_boxes import (SPANS, atom_row_shift, is_tma_store, staging_layout,
                                      tensor_map_box)
from tilec.families.wgmma import WgmmaLayout
from tilec.kernel import load_file
from tilec.ir.printer import print_kernel
from tilec.ir.verifier import verify
from tilec.benchmarking.contenders import sample_kernel
from tilec.options import Options, Spec, TensorSpec
from tilec.pipeline import run_pipeline
from tilec.passes.tma_store import addressing_problem

from .test_ptxas import assert_assembles_for_sm_90a, load_sample

ALIGNED = Spec(tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)),
                        ("C", TensorSpec(1, 8))))


TILE = dict(BM=128, BN=256, BK=64)


def f16_out():
    """samples/matmul.py writing C as f16 (acc.to(f16)), as tilec bench runs it."""
    return sample_kernel("f16", "f16")


def lowered(function, stages=3, spec=ALIGNED, **options):
    kernel = function.lower(**TILE)
    return run_pipeline(kernel, Options(arch="sm_90a", stages=stages, spec=spec, **options),
                        keep_ir=True).kernel


def store_of(kernel):
    (store,) = [op for op in kernel.walk() if op.name == "tile.store"]
    return store


def test_a_16_bit_output_goes_through_shared_memory_and_tma():
    kernel = lowered(f16_out())
    store = store_of(kernel)
    assert is_tma_store(store)
    assert (store.attrs["box"], store.attrs["slabs"], store.attrs["coords"]) == ([64, 128], 4,
                                                                                  [1, 0])
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes, plan.box, plan.slabs) == ("tma", 65536, (64, 128), 4)
    assert "#epilogue = {via = tma, staging = 65536 bytes, writes = pairs, 4 boxes of " \
        "64x128}" in print_kernel(kernel)


@pytest.mark.parametrize("function, options, reason", [
    # Two slabs: nothing to take in turn.
    (f16_out, dict(BM=256, BN=128, stages=4, warpgroup_rows=128), "does not fit beside the ring"),
    (f16_out, dict(spec=Spec(tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)),
                                      ("C", TensorSpec(None, 1))))), "16-byte aligned rows"),
])
def test_other_stores_stay_direct_and_say_why(function, options, reason):
    options = dict(options)
    consts = {k: options.pop(k) for k in ("BM", "BN", "BK") if k in options}
    kernel = run_pipeline(function().lower(**{**TILE, **consts}),
                          Options(arch="sm_90a", **{"stages": 3, "spec": ALIGNED, **options}),
                          keep_ir=True).kernel
    assert not is_tma_store(store_of(kernel))
    assert kernel.schedule.epilogue.via == "direct"
    assert reason in kernel.schedule.epilogue.reason


def test_a_tile_whose_staging_does_not_fit_goes_out_a_slab_at_a_time():
    """128x256 f16 beside four stages (192 KiB): the 64 KiB staging tile does not fit, two
    one-slab buffers (32 KiB) do."""
    kernel = lowered(f16_out(), stages=4)
    store = store_of(kernel)
    assert is_tma_store(store) and store.attrs["staging_buffers"] == 2
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes, plan.buffers, plan.slabs) == ("tma", 32768, 2, 4)
    assert "#epilogue = {via = tma, staging = 32768 bytes (2 one-slab buffers in turn), " \
        "writes = pairs, 4 boxes of 64x128}" in print_kernel(kernel)


I8_K_MAJOR_B = Spec(tensors=(("A", TensorSpec(1, 16)), ("B", TensorSpec(0, 16)),
                              ("C", TensorSpec(1, 4))))


@pytest.mark.parametrize("function, bk, spec", [
    (lambda: sample_kernel("i8", "i32"), 128, I8_K_MAJOR_B),  # the int8 rows' i32 C
    (lambda: load_sample("matmul", "f16"), 64, ALIGNED)])  # the matmul sample's f32 C
def test_a_32_bit_tile_that_does_not_fit_whole_goes_out_a_slab_at_a_time(function, bk, spec):
    """128x256 of 4-byte elements beside three stages: 128 KiB of staging does not fit
    whole, two one-slab buffers of 128 rows x 32 columns do: eight slabs in turn."""
    kernel = run_pipeline(function().lower(BM=128, BN=256, BK=bk),
                          Options(arch="sm_90a", stages=3, spec=spec), keep_ir=True).kernel
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes, plan.buffers, plan.slabs, plan.box) == \
        ("tma", 32768, 2, 8, (32, 128))


@pytest.mark.parametrize("persistent", [False, True])
def test_an_odd_count_of_slabs_takes_turns_too(persistent):
    """128x208 f32 (13 slabs of 64 bytes) beside three stages: too big whole, so the slabs
    take turns in two buffers. The tile's last slab goes out of buffer 0, which the next
    tile's first slab writes: a persistent block's leader waits for that store's read and
    the consumers meet first, once a tile (a block of one tile has no next one)."""
    function = load_sample("matmul", "f16")
    compiled_kernel = function.compile(arch="sm_90a", stages=3, BM=128, BN=208, BK=64,
                                       persistent=persistent, spec=ALIGNED, verify=True)
    plan = compiled_kernel.kernel.schedule.epilogue
    assert (plan.via, plan.buffers, plan.slabs, plan.box) == ("tma", 2, 13, (16, 128))
    ptx = compiled_kernel.ptx
    epilogue = ptx[ptx.index("setmaxnreg.inc"):]
    waits = epilogue.count("cp.async.bulk.wait_group.read 0;")
    # One before each slab's store, one after the last tile; persistent: one before the
    # tile's first write.
    assert waits == 13 + 1 + persistent
    first_write = re.search(r"st\.shared\.v2\.b32", epilogue).start()
    assert ("cp.async.bulk.wait_group.read 0;" in epilogue[:first_write]) == persistent


def test_128_row_warpgroups_take_turns_a_strip_at_a_time(tmp_path):
    """256x144 f16 in 128-row warpgroups beside three stages: a thread's registers are strip
    0's (its rows 0-63 of each warpgroup's 128) then strip 1's, so the 9 slabs go out a
    strip at a time, 18 units each a 16x64 box per warpgroup: 36 TMA stores a tile, each
    from its warpgroup's 64 rows of a one-slab buffer of all 256. The schedule, explain and
    ptxas say so."""
    from tilec.tools.explain import explain, render_explanation
    compiled_kernel = f16_out().compile(arch="sm_90a", stages=3, BM=256, BN=144, BK=64,
                                        warpgroup_rows=128, persistent=True, spec=ALIGNED,
                                        verify=True)
    kernel = compiled_kernel.kernel
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.buffers, plan.slabs, plan.strips, plan.box, plan.staging_bytes) \
        == ("tma", 2, 9, 2, (16, 64), 2 * 256 * 16 * 2)
    assert "9 slabs in 2 strips, a box of 16x64 a warpgroup's strip" in print_kernel(kernel)
    store = store_of(kernel)
    assert (store.attrs["box"], store.attrs["strips"]) == ([16, 64], 2)
    ptx = compiled_kernel.ptx
    stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group "
                        r"\[[^]]*\], \[%r\d+\+(\d+)\];", ptx)
    assert len(stores) == 36
    # Unit u (strip u // 9, slab u % 9) in buffer u % 2 (8 KiB of 256 rows x 32 bytes); its
    # warpgroups' boxes at rows 64 s and 128 + 64 s of it.
    expected = [(u % 2) * 8192 + (first * 32) for u in range(18)
                for first in range(u // 9 * 64, 256, 128)]
    assert [int(offset) for offset in stores] == expected
    # An even count of units: no wait before the next tile's first write beyond the
    # stores' own (one before each unit's store, one after the last tile).
    epilogue = ptx[ptx.index("setmaxnreg.inc"):]
    assert epilogue.count("cp.async.bulk.wait_group.read 0;") == 18 + 1
    text = render_explanation(explain(compiled_kernel, ptxas=False))
    assert "9 slabs of each of the 2 64-row strips of the 128-row warpgroups in turn" in text
    assert "the whole 256x144 tile's staging does not fit" in text
    assert_assembles_for_sm_90a(ptx, tmp_path, "strips")


# An int8 product whose C keeps the i32 sums' low bytes (acc.to(i8) wraps): an 8-bit output.
I8_OUT = """from __future__ import annotations

from tilec import i8, i32, tile


@tile
def f(A: i8[M, K], B: i8[N, K], C: i8[M, N], BM=128, BN=256, BK=128):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], i32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B.T[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc.to(i8)
"""


def test_an_8_bit_output_is_staged_two_bytes_a_write(tmp_path):
    """An i8 C (the int8 product's i32 sums' low bytes) beside four stages of 128x256x128:
    32 KiB of staging, a 128-column box a slab, each register pair's low bytes packed by
    prmt into one st.shared.b16 at its swizzled place; assembles clean for sm_90a, and the
    staged kernel computes the wrapped sums on the CPU."""
    function = load_file(Path("i8_out.py"), text=I8_OUT)["f"]
    kernel = run_pipeline(function.lower(), Options(arch="sm_90a", stages=4),
                          keep_ir=True).kernel
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes, plan.box, plan.slabs) == ("tma", 32768, (128, 128), 2)
    ptx = function.ptx(arch="sm_90a", stages=4)
    assert "prmt.b32" in ptx and "st.shared.b16" in ptx
    assert_assembles_for_sm_90a(ptx, tmp_path, "i8_out")
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (130, 160), dtype=np.int8)
    b = rng.integers(-128, 128, (300, 160), dtype=np.int8)
    c = np.zeros((130, 300), np.int8)
    run_kernel(kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    exact = a.astype(np.int64) @ b.astype(np.int64).T
    np.testing.assert_array_equal(c, exact.astype(np.int8))


def test_an_8_bit_tile_of_192_columns_is_staged_in_64_byte_slabs():
    """BN = 192 of an 8-bit C is a slab and a half of 128 bytes (staged so, its second half
    went past the staging tile: an illegal address on the GPU in the 128x192 promoted fp8
    kernel with an e4m3 C); it is three 64-byte slabs, a box each."""
    function = load_file(Path("i8_out.py"), text=I8_OUT)["f"]
    kernel = run_pipeline(function.lower(BN=192), Options(arch="sm_90a", stages=4),
                          keep_ir=True).kernel
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.span, plan.box, plan.slabs) == ("tma", 64, (64, 128), 3)
    assert plan.staging_bytes == 128 * 192


def test_an_8_bit_tile_that_is_not_whole_spans_keeps_its_direct_stores():
    function = load_file(Path("i8_out.py"), text=I8_OUT)["f"]
    kernel = run_pipeline(function.lower(BN=48), Options(arch="sm_90a", stages=4),
                          keep_ir=True).kernel
    plan = kernel.schedule.epilogue
    assert plan.via == "direct"
    assert plan.reason == ("BN = 48 columns of i8 (48 bytes) are not a whole number of 32 "
                           "bytes, TMA's narrowest swizzle span")
    assert "st.shared.b16" not in function.ptx(arch="sm_90a", stages=4, BN=48)


def test_the_verifier_refuses_boxes_that_do_not_cover_the_tile():
    """The staged store's invariant, in the IR's type check: with verify=True a pass that
    staged part of a tile (the 128x192 e4m3 C of 37b8ad1) is named at the store."""
    from tilec.families.catalogue import op_definitions
    from tilec.ir.ops import IRError
    function = load_file(Path("i8_out.py"), text=I8_OUT)["f"]
    kernel = run_pipeline(function.lower(), Options(arch="sm_90a", stages=4, verify=True),
                          keep_ir=True).kernel
    store_of(kernel).attrs["slabs"] = 1
    with pytest.raises(IRError, match="staged store's 1 boxes of 128x128 do not cover its "
                                      "128x256 tile"):
        verify(kernel, ops=op_definitions())


@pytest.mark.parametrize("persistent", [False, True])
def test_each_slab_is_written_fenced_and_stored_while_the_next_fills_the_other_buffer(
        persistent):
    """Per slab: its 16 register pairs into buffer slab % 2, the fence, the leader's wait for
    the previous slab's store to have read the other buffer, the consumers' meeting, one box
    from this buffer; no meeting before the tile's first slab."""
    compiled = f16_out().compile(arch="sm_90a", stages=4, persistent=persistent, spec=ALIGNED,
                                 **TILE)
    text = compiled.ptx
    tail = text[text.index("cvt.rn.f16.f32"):]
    rounds = tail.split("cp.async.bulk.commit_group;")[:-1]
    assert len(rounds) == 4
    for slab, part in enumerate(rounds):
        writes = re.findall(r"st\.shared\.b32 \[%r\d+\+(\d+)\]", part)
        assert len(writes) == 16  # 32 of the thread's 128 registers, in pairs
        # Buffer slab % 2: offsets within one 16 KiB buffer, the second one's past it.
        assert all((int(offset) >= 16384) == slab % 2 for offset in writes)
        fence = part.index("fence.proxy.async.shared::cta;")
        wait = part.index("cp.async.bulk.wait_group.read 0;")
        meet = part.index("bar.sync 1, 256;")
        (store,) = re.findall(r"bulk_group \[%rd\d+, \{%r\d+, %r\d+\}\], \[%r\d+\+(\d+)\]",
                              part)
        assert fence < wait < meet < part.index("bulk_group [")
        assert int(store) == 16384 * (slab % 2)
        assert max(part.rfind("st.shared"), 0) < fence
    assert "bar.sync 1, 256;" not in text[text.index("wgmma.wait_group.sync.aligned 0;"):
                                         text.index("cvt.rn.f16.f32")]
    # The last stores read the staging before the block (or its last tile) ends.
    assert "cp.async.bulk.wait_group.read 0;" in text[text.rindex("commit_group;"):]
    assert compiled.rendered.smem_bytes <= 232448


def test_kernels_without_warp_specialization_have_no_epilogue_plan():
    kernel = run_pipeline(f16_out().lower(**TILE), Options(arch="sm_90", spec=ALIGNED)).kernel
    assert kernel.schedule.epilogue is None
    assert not is_tma_store(store_of(kernel))


def ptx(persistent=False, **options):
    return f16_out().compile(arch="sm_90a", stages=3, persistent=persistent, spec=ALIGNED,
                             **TILE, **options)


def test_the_backend_stages_fences_meets_and_stores_one_box_per_slab():
    text = ptx().ptx
    tail = text[text.index("cvt.rn.f16.f32"):]
    assert len(re.findall(r"st\.shared\.b32", tail)) == 64  # 128 f16 registers in pairs
    assert "st.global" not in tail
    fence, meet = tail.index("fence.proxy.async.shared::cta;"), tail.index("bar.sync 1, 256;")
    stores = [m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta"
                                             r"\.bulk_group", tail)]
    assert len(stores) == 4 and fence < meet < stores[0]
    commit, wait = tail.index("cp.async.bulk.commit_group;"), tail.index(
        "cp.async.bulk.wait_group.read 0;")
    assert stores[-1] < commit < wait


def test_a_persistent_kernel_waits_for_the_reads_before_reusing_the_staging_tile():
    text = ptx(persistent=True).ptx
    consumers = text[text.index("$L_consumers"):]
    read_wait = consumers.index("cp.async.bulk.wait_group.read 0;")
    assert read_wait < consumers.index("st.shared.b32")
    # Twice: before each tile's first write, and once after the tile loop.
    assert consumers.count("cp.async.bulk.wait_group.read 0;") == 2
    assert consumers.rindex("cp.async.bulk.wait_group.read 0;") > \
        consumers.rindex("$L_tiles_done")


def test_the_stored_tensor_gets_a_tensor_map_parameter():
    compiled = ptx()
    names = [p.name for p in compiled.rendered.abi]
    assert "C_tensor_map" in names
    assert ".param .align 64 .b8 C_tensor_map[128]" in compiled.ptx


def test_disabling_the_pass_gives_direct_stores():
    text = ptx(disable=("tma_store",)).ptx
    assert "bulk_group" not in text and "st.global.b32" in text


def test_the_accumulator_layout_passes_the_addressing_checks():
    layout = WgmmaLayout("C", (8, 1), (16, 256))
    assert addressing_problem(layout) is None
    assert "columns" in addressing_problem(WgmmaLayout("C", (4, 2), (16, 128)))


def test_staging_layout_is_tmas_swizzled_slabs():
    layout = staging_layout(128, 256, 2)
    assert layout.slab == 64
    # Row r, 16-byte chunk c lands at chunk c ^ (r % 8) of its 128-byte row.
    for row in range(16):
        for chunk in range(8):
            offset = layout.offset(row, 64 + chunk * 8)
            assert offset == (128 + row) * 64 + ((chunk ^ row % 8) * 8)


def assert_computes_the_product(kernel, M: int, N: int, K: int, seed: int) -> None:
    """The lowered kernel on the CPU: f16 C, every element written, against float64."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, dtype=np.float16)
    run_kernel(kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert not np.isnan(c).any()
    assert float(np.linalg.norm(c - want) / np.linalg.norm(want)) < 1e-3


def test_the_lowered_kernel_computes_the_product_on_the_cpu():
    assert_computes_the_product(lowered(f16_out()), 130, 300, 150, seed=3)


def test_the_pass_leaves_its_input_alone():
    from tilec.pipeline import pipeline
    from tilec.passes import tma_store
    kernel = f16_out().lower(**TILE)
    options = Options(arch="sm_90a", stages=3, spec=ALIGNED)
    for p in pipeline():
        if p.name == "tma_store":
            break
        kernel = p.run(kernel, options)
    before, schedule = print_kernel(kernel, locs=True), kernel.schedule
    result = tma_store.run(kernel, options)
    assert print_kernel(kernel, locs=True) == before and kernel.schedule == schedule
    assert result is not kernel and is_tma_store(store_of(result))



# -- C's rows not 16-byte aligned: staged, then stored a row at a time (via = rows) ---------

MISALIGNED_C = Spec(tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)),
                             ("C", TensorSpec(1, 1))))


def test_misaligned_output_rows_are_staged_and_stored_by_rows():
    kernel = lowered(f16_out(), spec=MISALIGNED_C)
    store = store_of(kernel)
    assert store.attrs["via"] == "rows" and not is_tma_store(store)
    assert "tensor" not in store.attrs  # no tensor map: TMA cannot address C
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes) == ("rows", 65536)
    assert "#epilogue = {via = rows, staging = 65536 bytes, writes = pairs}" in print_kernel(kernel)


def test_the_row_stores_write_64_contiguous_bytes_a_warp_instruction():
    compiled = f16_out().compile(arch="sm_90a", stages=3, spec=MISALIGNED_C, **TILE)
    text = compiled.ptx
    assert "bulk_group" not in text and "C_tensor_map" not in text
    tail = text[text.index("cvt.rn.f16.f32"):]
    assert len(re.findall(r"st\.shared\.b32", tail)) == 64  # staged as for TMA
    meet, loop = tail.index("bar.sync 1, 256;"), tail.index("$L_rows_")
    assert tail.index("st.shared.b32") < meet < loop
    body = tail[loop:tail.index("$L_rows_done", loop + 1)]
    # Per row: 4 slabs of 64 columns, each two half slabs of 32 lanes; lane l's half-slab
    # stores sit 32 elements apart (64 bytes), masked by column.
    stores = re.findall(r"@%p\d+ st\.global\.b16 \[%rd\d+\+(\d+)\]", body)
    assert [int(offset) for offset in stores] == [64 * part for part in range(8)]
    assert len(re.findall(r"ld\.shared\.b16", body)) == 8
    assert "add.s32 %r" in body and "bar.sync" not in body


# -- staging writes by stmatrix ----------------------------------------------------------------
# Where a thread holds at most 64 16-bit accumulators in the mma fragment's lane grid, each
# run of eight (four 8x8 matrices) is written by one stmatrix.x4 instead of four st.shared.b32.

def test_a_128x128_tile_is_staged_by_stmatrix_and_a_128x256_one_by_pairs():
    small = run_pipeline(f16_out().lower(BM=128, BN=128, BK=64),
                         Options(arch="sm_90a", stages=4, spec=ALIGNED), keep_ir=True).kernel
    assert store_of(small).attrs["writes"] == "stmatrix"
    assert "writes = stmatrix" in print_kernel(small)
    text = f16_out().compile(arch="sm_90a", stages=4, spec=ALIGNED, BM=128, BN=128,
                             BK=64).ptx
    consumers = re.split(r"^\$L_consumers_\d+:", text, maxsplit=1, flags=re.M)[1]
    # 128x128 over two consumer warpgroups: 64 registers a thread, eight runs of eight.
    writes = re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 \[%r\d+\+\d+\], "
                        r"\{%r\d+, %r\d+, %r\d+, %r\d+\};", consumers)
    assert len(writes) == 8 and "st.shared" not in consumers
    assert consumers.index("stmatrix") < consumers.index("fence.proxy.async.shared::cta;")
    large = lowered(f16_out())  # 128x256: 128 accumulators a thread
    assert large.schedule.epilogue.writes == "pairs"


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("bm, bn, rows", [(128, 128, 64), (128, 256, 64), (256, 128, 64),
                                          (256, 128, 128), (128, 96, 64)])
def test_stmatrix_lane_addresses_follow_the_staging_swizzle(bm, bn, rows, span):
    """Lane t of a warp gives stmatrix the address of row t % 8 of matrix t / 8 of each run
    (tilec.families.staged_store._stage_by_stmatrix's arithmetic): that row's chunk, where
    staging_layout places the matrix row's first element, for every run of every warp, in
    each span's swizzle (the row's XOR (r % 8) >> atom_row_shift, its bits above the
    lane's lowest per run: none in 32 bytes)."""
    if bn * 2 % span:
        pytest.skip(f"{bn} 16-bit columns are not whole {span}-byte spans")
    layout = WgmmaLayout("C", (bm * 4 // rows, 1), (rows // 4, bn))
    staging = staging_layout(bm, bn, 2, span)
    offsets = layout.register_offsets()
    high = span // 16 - 2
    for warp in range(layout.warps[0]):
        warp_row, _ = layout.warp_origin(warp)
        for lane in range(32):
            row, chunk_bit = warp_row + (lane & 15), lane >> 4
            row_bits = (row & 7) >> atom_row_shift(span)
            base = row * span + (((row_bits ^ chunk_bit) & 1) << 4)
            for start in range(0, len(offsets), 8):
                r, c = offsets[start]
                slab, within = divmod(c, span // 2)
                moved = ((row_bits & high) << 4) ^ ((within >> 3) << 4)
                address = base + moved + (slab * bm + r) * span
                matrix_row = warp_row + r + 8 * ((lane >> 3) & 1) + (lane & 7)
                matrix_col = c + 8 * (lane >> 4)
                assert address == 2 * staging.offset(matrix_row, matrix_col), (warp, lane, r, c)


# -- a swapped product's C.T tile, staged transposed in C's rows by stmatrix.trans ------------

@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("n_rows, m_cols, strip_rows", [(128, 152, 64), (64, 136, 64),
                                                       (128, 160, 64), (256, 128, 128)])
def test_stmatrix_trans_puts_every_element_of_c_t_where_c_s_staging_holds_it(
        span, n_rows, m_cols, strip_rows):
    """stmatrix.trans as the PTX ISA defines it (matrix j's row i, at the address lane 8j + i
    gives, receives the fragment's column i: element (k, i) from lane 4k + i / 2), with the
    lane addresses of tilec.families.staged_store._stage_by_stmatrix_trans: every register
    of every lane of every warp, element (n, m) of C.T, lands where C's staging tile (rows
    of m, slabs of n one span wide, TMA's swizzle) holds (m, n). 152 and 136 columns end in
    a run of two matrices (.x2); 256 rows are 128-row warpgroups (two strips a thread)."""
    from tilec.families.staged_store import transposed_stmatrix_groups
    if n_rows * 2 % span:
        pytest.skip(f"{n_rows} 16-bit columns of C are not whole {span}-byte spans")
    layout = WgmmaLayout("C", (n_rows * 4 // strip_rows, 1), (strip_rows // 4, m_cols))
    assert transposed_stmatrix_groups(layout, 2)
    staging = staging_layout(m_cols, n_rows, 2, span)
    inner, row_bytes = span // 2, span
    slab_bytes = m_cols * row_bytes
    offsets = layout.register_offsets()
    written = {}
    for warp in range(layout.warps[0]):
        warp_row, _ = layout.warp_origin(warp)
        lanes = []
        for lane in range(32):
            n = warp_row + 8 * ((lane >> 3) & 1)
            m = 8 * (lane >> 4) + (lane & 7)
            xor = (m & 7) >> atom_row_shift(span)
            chunk = (n % inner) >> 3
            lanes.append(n // inner * slab_bytes + m * row_bytes + ((chunk ^ xor) << 4))
        for start in range(0, len(offsets), 8):
            r, c = offsets[start]
            matrices = min(8, len(offsets) - start) // 2
            immediate = r // inner * slab_bytes + c * row_bytes
            for j in range(matrices):
                for i in range(8):
                    row_address = lanes[8 * j + i] + immediate
                    for k in range(8):  # fragment element (k, i): lane 4k + i / 2
                        lane, one = 4 * k + i // 2, i % 2
                        reg = start + 2 * j + one
                        written[warp, lane, reg] = row_address + 2 * k
    for warp in range(layout.warps[0]):
        for lane in range(32):
            for reg in range(len(offsets)):
                n, m = layout.c_coord(warp, lane, reg)
                assert written[warp, lane, reg] == 2 * staging.offset(m, n), (warp, lane, reg)


def swapped_f16(**options):
    return run_pipeline(f16_out().lower(BM=152, BN=128, BK=64),
                        Options(arch="sm_90a", stages=4, spec=ALIGNED, swap_product="always",
                                **options), keep_ir=True).kernel


def test_a_swapped_product_stores_c_through_tma_staged_transposed():
    """C.T's 128x152 tile (two warpgroups of m64n152) staged as C's 152 rows of two 64-column
    slabs, written by stmatrix.trans (nine runs of four matrices and one of two a thread),
    stored as two boxes of C: the inner coordinate n, C.T's view's first offset."""
    kernel = swapped_f16()
    store = store_of(kernel)
    assert is_tma_store(store) and store.attrs["tensor"] == "C"
    assert (store.attrs["box"], store.attrs["slabs"], store.attrs["coords"],
            store.attrs["writes"]) == ([64, 152], 2, [0, 1], "stmatrix.trans")
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes, plan.box) == ("tma", 152 * 128 * 2, (64, 152))
    assert tensor_map_box(kernel, "C") == (64, 152, 128)
    text = f16_out().compile(arch="sm_90a", stages=4, spec=ALIGNED, swap_product="always",
                             BM=152, BN=128, BK=64).ptx
    consumers = re.split(r"^\$L_consumers_\d+:", text, maxsplit=1, flags=re.M)[1]
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16 "
                          r"\[%r\d+\+\d+\], \{(%r\d+, ){3}%r\d+\};", consumers)) == 9
    assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x2\.trans\.shared\.b16 "
                          r"\[%r\d+\+\d+\], \{%r\d+, %r\d+\};", consumers)) == 1
    assert "st.global" not in consumers
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", consumers)) == 2
    assert_computes_the_product(kernel, 300, 390, 200, seed=8)


@pytest.mark.parametrize("options, why", [
    (dict(spec=Spec(tensors=(("A", TensorSpec(1, 8)), ("B", TensorSpec(1, 8)),
                             ("C", TensorSpec(1, 1))))), "16-byte aligned"),
], ids=["misaligned-c"])
def test_a_swapped_store_tma_cannot_take_goes_direct_saying_why(options, why):
    kernel = run_pipeline(f16_out().lower(BM=152, BN=128, BK=64),
                          Options(arch="sm_90a", stages=4, swap_product="always", **options),
                          keep_ir=True).kernel
    plan = kernel.schedule.epilogue
    assert plan.via == "direct" and why in plan.reason, plan.reason
    f32 = run_pipeline(load_sample("matmul", "f16").lower(BM=152, BN=128, BK=64),
                       Options(arch="sm_90a", stages=4, spec=ALIGNED,
                               swap_product="always"), keep_ir=True).kernel
    assert f32.schedule.epilogue.via == "direct"
    assert "stmatrix.trans, which moves 16-bit elements, not 32-bit" in \
        f32.schedule.epilogue.reason


def test_the_row_store_addresses_follow_the_staging_swizzle():
    """The loop's shared addresses (row r, lane l, half h of slab s): slab s, row r, chunk
    (l / 8 + 4h) ^ (r % 8), element l % 8, as staging_layout places column 64s + 32h + l."""
    rows = 128
    layout = staging_layout(rows, 256, 2)
    for r in range(16):
        for lane in range(32):
            within = (((lane >> 3) ^ (r & 7)) << 4) | ((lane & 7) << 1)
            for part in range(8):
                slab, half = divmod(part, 2)
                offset = r * 128 + (within ^ 64 if half else within) + slab * rows * 128
                assert offset == 2 * layout.offset(r, 64 * slab + 32 * half + lane)


def test_a_persistent_kernel_meets_before_reusing_the_staging_tile_for_row_stores():
    text = f16_out().compile(arch="sm_90a", stages=4, spec=MISALIGNED_C, persistent=True,
                             BM=128, BN=128, BK=64).ptx
    consumers = text[text.index("$L_consumers"):]
    tile_loop = consumers[consumers.index("$L_tiles"):]
    first_write = re.search(r"st\.shared\.b32|stmatrix", tile_loop).start()
    assert tile_loop.index("bar.sync 1, 256;") < first_write
    assert "cp.async.bulk.wait_group" not in text


def test_the_row_store_kernel_computes_the_product_on_the_cpu():
    assert_computes_the_product(lowered(f16_out(), spec=MISALIGNED_C), 130, 301, 150, seed=5)


ROW_STORE_KERNELS = [
    # bmm.py with f16 C (the 8x4095x4097x128 bench row's kernel) and its 3-D C, one tile a
    # block; samples/matmul.py's 2-D C in a persistent kernel.
    (True, dict(BM=128, BN=256, BK=64, stages=3)),
    (True, dict(BM=64, BN=128, BK=64, stages=6)),
    (True, dict(BM=128, BN=128, BK=64, stages=4)),
    (False, dict(BM=128, BN=128, BK=64, stages=4, persistent=True)),
]


@pytest.mark.parametrize("batched, tiles", ROW_STORE_KERNELS,
                         ids=["bmm-128x256", "bmm-64x128", "bmm-128x128", "matmul-persistent"])
def test_row_store_kernels_assemble_without_spills(tmp_path, batched, tiles):
    rank = 3 if batched else 2
    spec = Spec(tensors=tuple((name, TensorSpec(rank - 1, 8 if name != "C" else 1))
                              for name in "ABC"))
    compiled = sample_kernel("bf16", "bf16", batched=batched).compile(
        arch="sm_90a", spec=spec, **tiles)
    assert compiled.kernel.schedule.epilogue.via == "rows"
    assert_assembles_for_sm_90a(compiled.ptx, tmp_path, "rows")


# -- i32 outputs (int8 products' exact sums) --------------------------------------------------
# A 32-bit C is staged with st.shared.v2.b32 (stmatrix moves 16-bit elements only), a register
# pair an 8-byte write, in TMA's 128-byte swizzle of 4-byte elements (a chunk of 4 columns:
# the thread's first column reaches into the second chunk), and TMA-stored a 32-column slab a
# box; rows that are not 16-byte aligned stay direct (the row stores take 16-bit tiles).

I32_ALIGNED = Spec(tensors=(("A", TensorSpec(1, 16)), ("B", TensorSpec(1, 16)),
                            ("C", TensorSpec(1, 4))))
I32_TILE = dict(BM=128, BN=128, BK=128)  # wgmma8's: BK a multiple of 128


def i32_out():
    """i8 A[M, K] @ B[N, K].T into an i32 C, stored as it is (tests/test_int8.py's program)."""
    from tests import test_int8
    return test_int8.lowered(test_int8.program("        C[m * BM : +BM, n * BN : +BN] = acc\n"))


def i32_lowered(spec=I32_ALIGNED, stages=3, **options):
    return run_pipeline(i32_out().lower(**I32_TILE),
                        Options(arch="sm_90a", stages=stages, spec=spec, **options),
                        keep_ir=True).kernel


def test_an_i32_output_goes_through_shared_memory_and_tma():
    kernel = i32_lowered()
    assert kernel.schedule.tiling.kind == "wgmma8"
    store = store_of(kernel)
    assert is_tma_store(store)
    assert (store.attrs["box"], store.attrs["slabs"]) == ([32, 128], 4)  # 128-byte slabs
    plan = kernel.schedule.epilogue
    assert (plan.via, plan.staging_bytes, plan.box, plan.slabs) == ("tma", 65536, (32, 128), 4)


def test_the_i32_staging_writes_register_pairs_with_st_shared_v2():
    text = i32_out().compile(arch="sm_90a", stages=3, spec=I32_ALIGNED, **I32_TILE).ptx
    consumers = text[text.index("$L_consumers"):]
    # 128x128 i32 over two consumer warpgroups: 64 registers a thread, 32 pairs.
    assert len(re.findall(r"st\.shared\.v2\.b32 \[%r\d+\+\d+\], \{%r\d+, %r\d+\};",
                          consumers)) == 32
    assert "stmatrix" not in text and "st.global" not in consumers
    assert not re.findall(r"mov\.b32 %r\d+, \{", consumers)  # no 16-bit packing
    stores = re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group", text)
    assert len(stores) == 4
    assert consumers.index("fence.proxy.async.shared::cta;") < consumers.index(
        "cp.async.bulk.tensor.2d.global")


def test_a_layout_whose_pairs_would_carry_into_the_threads_chunk_is_refused():
    """With 4-byte elements a thread's first column (0, 2, 4 or 6) may set chunk bit 0 only
    where no register pair's chunk does: a pair at columns 4-5 (chunk 1) of a thread at
    column 4 lands in chunk 2, not 1 ^ 1; at columns 2-3 of a thread at column 2 it crosses
    a chunk. 16-bit elements (chunks of 8) take both."""
    from types import SimpleNamespace

    def layout(*pairs):
        offsets = [(0, c + half) for c in pairs for half in (0, 1)]
        return SimpleNamespace(warps=(1, 1), lane_grid=(8, 4), lane_step=(1, 2),
                               register_offsets=lambda: offsets)
    assert addressing_problem(layout(0, 8, 16), 4) is None
    assert addressing_problem(layout(0, 4), 4) == "a register pair crosses a 16-byte chunk"
    assert addressing_problem(layout(2), 4) == "a register pair crosses a 16-byte chunk"
    assert addressing_problem(layout(0, 8, 16), 2) is None
    assert addressing_problem(layout(8, 16), 2) is None


@pytest.mark.parametrize("spec, reason", [
    (Spec(tensors=(("A", TensorSpec(1, 16)), ("B", TensorSpec(1, 16)), ("C", TensorSpec(1, 1)))),
     "16-byte aligned rows"),  # N not a multiple of 4: the row stores are 16-bit only
])
def test_misaligned_i32_rows_stay_direct(spec, reason):
    kernel = i32_lowered(spec=spec)
    assert kernel.schedule.epilogue.via == "direct"
    assert reason in kernel.schedule.epilogue.reason
    assert "st.shared.v2.b32" not in i32_out().compile(arch="sm_90a", stages=3, spec=spec,
                                                       **I32_TILE).ptx


@pytest.mark.parametrize("shape", [(130, 300, 256), (64, 36, 128)])
def test_the_i32_tma_store_kernel_computes_the_product_exactly_on_the_cpu(shape):
    M, N, K = shape
    rng = np.random.default_rng(M)
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (N, K)).astype(np.int8)
    c = np.full((M, N), -1, np.int32)
    run_kernel(i32_lowered(), {"A": a, "B": b, "C": c}, ops=op_catalogue())
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64).T)


@pytest.mark.parametrize("options", [dict(stages=3), dict(stages=2, persistent=True),
                                     dict(BN=256, stages=2)],
                         ids=["one-tile", "persistent", "128x256"])
def test_i32_tma_store_kernels_assemble_without_spills(tmp_path, options):
    options = dict(options)
    compiled = i32_out().compile(arch="sm_90a", spec=I32_ALIGNED, **{**I32_TILE, **options})
    assert compiled.kernel.schedule.epilogue.via == "tma"
    assert_assembles_for_sm_90a(compiled.ptx, tmp_path, "i32")


# -- rows that are not whole 128-byte lines: staged in 64- or 32-byte slabs ----------------

def narrow(bn: int, **options):
    """The f16-out matmul at 128 x ``bn``, lowered for sm_90a (three stages, aligned)."""
    return run_pipeline(f16_out().lower(BM=128, BN=bn, BK=64),
                        Options(arch="sm_90a", stages=3, spec=ALIGNED, **options),
                        keep_ir=True).kernel


@pytest.mark.parametrize("bn, span", [(256, 128), (192, 128), (224, 64), (160, 64), (96, 64),
                                      (208, 32), (80, 32)])
def test_a_16_bit_tile_is_staged_in_the_widest_span_its_rows_take(bn, span):
    kernel = narrow(bn)
    plan = kernel.schedule.epilogue
    inner = span // 2
    assert (plan.via, plan.span, plan.box, plan.slabs) == ("tma", span, (inner, 128), bn // inner)
    store = store_of(kernel)
    assert (store.attrs["box"], store.attrs["slabs"]) == ([inner, 128], bn // inner)
    # The launcher encodes C's map in the same span, a box a slab.
    assert tensor_map_box(kernel, "C") == (inner, 128, span)
    assert str(plan).endswith(f"{bn // inner} boxes of {inner}x128}}")
    assert (f", {span}-byte swizzle" in str(plan)) == (span != 128)


def test_explain_names_the_staging_span():
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(f16_out().compile(arch="sm_90a", stages=3, spec=ALIGNED,
                                                        BM=128, BN=208, BK=64), ptxas=False))
    assert "TMA's 32-byte swizzle) -> 13 TMA stores of 16x128" in text
    assert "slab16,swizzle(1,3,3) (TMA store staging)" in text


def _pair_layout(eb: int):
    """(layout, rows, cols) of a C tile staged by pair writes: 128x192 over eight warps of
    wgmma's accumulators (8- and 16-bit), the i32 kernel's 128x128 tile (32-bit)."""
    if eb == 4:
        return store_of(i32_lowered()).operands[-1].type.layout, 128, 128
    return WgmmaLayout("C", (8, 1), (16, 192)), 128, 192


@pytest.mark.parametrize("span, eb", [(span, eb) for span in SPANS for eb in (1, 2, 4)])
def test_the_pair_writes_land_where_tmas_swizzle_puts_their_elements(span, eb):
    """tilec.families.staged_store._stage_by_pairs's arithmetic, for every thread and
    register pair: base (row0 * S + col0 % C) * eb (S the span's columns, C a 16-byte
    chunk's), the thread's XOR (its row's, (row0 % 8) >> atom_row_shift, ^ col0 / C: 4-byte
    elements' first column may reach the next chunk) << 4, the register's chunk XORed in,
    its slab, row and low column as the immediate. Each pair lands where staging_layout
    puts its first element, the second next to it, aligned for its one write (v2.b32 of
    32-bit pairs), each element once."""
    layout, rows, cols = _pair_layout(eb)
    assert addressing_problem(layout, eb) is None
    staging = staging_layout(rows, cols, eb, span)
    inner, per_chunk = span // eb, 16 // eb
    written = set()
    for warp in range(layout.warps[0] * layout.warps[1]):
        for lane in range(32):
            row0, col0 = layout.c_coord(warp, lane, 0)
            base = (row0 * inner + col0 % per_chunk) * eb
            xor = (((row0 & 7) >> atom_row_shift(span)) ^ (col0 // per_chunk)) << 4
            for index, (r, c) in enumerate(layout.register_offsets()):
                if index % 2:
                    continue
                slab, within = divmod(c, inner)
                address = base + (xor ^ ((within // per_chunk) << 4)) + (
                    (slab * rows + r) * inner + within % per_chunk) * eb
                row, col = layout.c_coord(warp, lane, index)
                assert address == eb * staging.offset(row, col)
                assert address + eb == eb * staging.offset(row, col + 1)
                assert address % (2 * eb) == 0
                written.add(address)
    assert len(written) == rows * cols // 2  # every pair of the tile, once


@pytest.mark.parametrize("bn, options", [
    (208, {}), (96, {}), (224, dict(persistent=True)), (160, dict(cluster=2)),
    (96, dict(persistent=True, consumers="pingpong", BM=64))],
    ids=["208-pairs-32B", "96-stmatrix-64B", "224-persistent-64B", "160-cluster-64B",
         "96-pingpong-64B"])
def test_narrow_span_staging_kernels_assemble_and_compute_the_product(tmp_path, bn, options):
    options = dict(options)
    bm = options.pop("BM", 128)
    kernel = run_pipeline(f16_out().lower(BM=bm, BN=bn, BK=64),
                          Options(arch="sm_90a", stages=3, spec=ALIGNED, **options),
                          keep_ir=True).kernel
    assert kernel.schedule.epilogue.via == "tma" and kernel.schedule.epilogue.span < 128
    ptx = f16_out().compile(arch="sm_90a", stages=3, spec=ALIGNED, BM=bm, BN=bn, BK=64,
                            **options).ptx
    assert_assembles_for_sm_90a(ptx, tmp_path, f"narrow_{bn}")
    assert_computes_the_product(kernel, 200, 3 * bn + 40, 150, seed=bn)


def test_an_i32_tile_of_8_odd_columns_is_staged_in_32_byte_slabs(tmp_path):
    compiled = i32_out().compile(arch="sm_90a", spec=I32_ALIGNED, stages=3,
                                 **{**I32_TILE, "BN": 96})
    plan = compiled.kernel.schedule.epilogue
    assert (plan.via, plan.span, plan.box, plan.slabs) == ("tma", 128, (32, 128), 3)
    compiled = i32_out().compile(arch="sm_90a", spec=I32_ALIGNED, stages=3,
                                 **{**I32_TILE, "BN": 80})
    plan = compiled.kernel.schedule.epilogue
    assert (plan.via, plan.span, plan.box, plan.slabs) == ("tma", 64, (16, 128), 5)
    assert_assembles_for_sm_90a(compiled.ptx, tmp_path, "i32_80")
