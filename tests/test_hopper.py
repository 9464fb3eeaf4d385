"""The sm_90a path on the CPU: wgmma fed by TMA through a warp-specialized mbarrier ring.

The schedule in the IR (roles, ring, layouts), the descriptors against the layout TMA writes,
the lowered kernels run by the CPU executor (the producer region as a coroutine beside the
consumers, TMA boxes landing when their barrier's phase completes, wgmma reading where its
descriptors point) against float64, and planted protocol bugs that the executor turns into
wrong results or a named deadlock.
"""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from tilec.errors import TileConfigError
from tilec.cpu.interpreter import InterpreterError, run_kernel
from tilec.families.catalogue import op_catalogue
from tilec.families.tma_boxes import SWIZZLE_128B, tma_layout
from tilec.families.wgmma import WgmmaLayout, descriptor_offsets
from tilec.ir.printer import print_kernel
from tilec.options import Options, target_arch
from tilec.pipeline import run_pipeline
from tilec.target.layout import SmemLayout

from .test_ptxas import load_sample

SHAPE = dict(M=150, N=130, K=200)  # ragged everywhere; K spans 4 steps of 64


def compiled(sample: str = "matmul", dtype: str = "f16", stages: int = 3, **consts):
    consts = {"BM": 128, "BN": 128, "BK": 64, **consts}
    function = load_sample(sample, dtype)
    kernel = function.lower(**consts)
    return run_pipeline(kernel, Options(arch="sm_90a", stages=stages), keep_ir=True)


def random_inputs(kernel, rng, shape=SHAPE):
    arrays = {}
    for param in kernel.params:
        if not hasattr(param.type, "shape"):
            arrays[param.name] = 0.5
            continue
        dims = tuple(shape[d] if isinstance(d, str) else d for d in param.type.shape)
        arrays[param.name] = rng.standard_normal(dims).astype(np.float32)
    return arrays


def run_lowered(kernel, arrays, dtype="f16"):
    """Run the lowered kernel on 16-bit copies of A and B; returns C."""
    args = {}
    for name, value in arrays.items():
        if name in ("A", "B") and isinstance(value, np.ndarray):
            value = value.astype(np.float16) if dtype == "f16" else _bf16_bits(value)
        elif isinstance(value, np.ndarray):
            value = np.full_like(value, np.nan) if name == "C" else value
        args[name] = value
    run_kernel(kernel, args, ops=op_catalogue())
    return args["C"]


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _reference(arrays, dtype):
    a, b = arrays["A"], arrays["B"]
    if dtype == "f16":
        a, b = a.astype(np.float16), b.astype(np.float16)
    else:
        a = (_bf16_bits(a).astype(np.uint32) << 16).view(np.float32)
        b = (_bf16_bits(b).astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64) @ b.astype(np.float64)


def relative_error(got, want) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def check_product(sample: str, kernel, rng, dtype: str = "f16") -> None:
    """The lowered kernel in the executor on random inputs, against float64 (matmul_bt reads
    B as [N, K])."""
    arrays = random_inputs(kernel, rng)
    b = arrays["B"].T if sample == "matmul_bt" else arrays["B"]
    want = _reference({"A": arrays["A"], "B": b}, dtype)
    got = run_lowered(kernel, arrays, dtype)
    assert not np.isnan(got).any()
    assert relative_error(got, want) < 1e-5


# -- the schedule in the IR ---------------------------------------------------------------

def test_the_schedule_shows_roles_ring_and_tma_layouts() -> None:
    result = compiled(stages=4, BN=256)
    kernel = result.kernel
    roles = kernel.schedule.roles
    assert (roles.consumer_warpgroups, roles.ring, roles.producer_registers,
            roles.consumer_registers) == (2, 4, 40, 232)
    assert kernel.schedule.threads == 384
    plan = kernel.schedule.tiling
    assert plan.kind == "wgmma" and plan.warps == (8, 1) and plan.warp_tile == (16, 256)
    assert all(op.layout.slab == 64 and op.layout.swizzle == SWIZZLE_128B
               for op in plan.operands)
    text = result.stages["double_buffer"]
    assert "#roles = {producer = warpgroup 2" in text and "ring = 4" in text
    for op in ("ws.producer", "mbar.alloc", "mbar.arrive_expect_tx", "tma.load", "mbar.wait",
               "mbar.arrive"):
        assert op in text, op
    assert "wgmma.mma" in print_kernel(kernel)
    acc = [op for op in kernel.walk() if op.name == "wgmma.mma"][0].result.type.layout
    assert isinstance(acc, WgmmaLayout)


def test_an_h100_compiles_for_sm_90a_by_default() -> None:
    assert target_arch((9, 0)) == "sm_90a"
    assert target_arch((8, 0)) == "sm_80" and target_arch((8, 9)) == "sm_86"
    # An "a" target runs on its own capability only.
    assert target_arch((10, 0)) == "sm_90"


# -- descriptors describe what TMA wrote ---------------------------------------------------

@pytest.mark.parametrize("role, transposed, rows, cols", [
    ("A", False, 128, 64), ("A", False, 64, 128), ("A", True, 64, 192),
    ("B", False, 64, 256), ("B", True, 128, 64), ("B", True, 256, 128),
])
@pytest.mark.parametrize("span", [128, 64, 32])
def test_descriptors_read_exactly_where_the_tma_layout_stores(role, transposed, rows, cols,
                                                              span) -> None:
    """The wgmma descriptor model (start, LBO, SBO, the span's swizzle on addresses) and the
    shared layout TMA fills agree on every element of every k16 piece, in each of TMA's
    swizzle spans: the two are written independently, so this pins both."""
    layout = tma_layout(SmemLayout(rows, cols, transposed=transposed), 2, span)
    k_extent = cols if (role == "A") != transposed else rows
    mn_extent = rows if (role == "A") != transposed else cols
    for mn0, k0 in itertools.product(range(0, mn_extent, 64), range(0, k_extent, 16)):
        mn = min(64, mn_extent - mn0)
        got = descriptor_offsets(layout, role, mn0, k0, mn, 2)
        m, k = np.meshgrid(np.arange(mn), np.arange(16), indexing="ij")
        i, j = (mn0 + m, k0 + k) if role == "A" else (k0 + k, mn0 + m)
        want = np.vectorize(layout.logical_offset)(i, j)
        assert np.array_equal(got, want if role == "A" else want.T), (mn0, k0)


# -- the lowered kernels on the CPU ---------------------------------------------------------

@pytest.mark.parametrize("sample, dtype, stages, consts", [
    ("matmul", "f16", 3, {}),
    ("matmul", "bf16", 2, {"BN": 256}),
    ("matmul", "f16", 4, {"BM": 64, "BK": 128}),
    ("matmul_bt", "f16", 2, {"BM": 192, "BN": 64}),
    ("matmul_bt", "bf16", 5, {}),
])
def test_lowered_hopper_kernels_compute_the_product(sample, dtype, stages, consts) -> None:
    kernel = compiled(sample, dtype, stages, **consts).kernel
    check_product(sample, kernel, np.random.default_rng(7), dtype)


@pytest.mark.parametrize("sample, consts, options, spans", [
    ("matmul", {"BN": 208}, {"tma_swizzle": 32}, {"A": 32, "B": 32}),
    ("matmul", {"BN": 160}, {"persistent": True, "tma_swizzle": 64}, {"A": 64, "B": 64}),
    ("matmul", {"BN": 208}, {}, {"A": 128, "B": 128}),  # B padded: 4 slabs, 48 columns
    ("matmul", {"BN": 160}, {"persistent": True}, {"A": 128, "B": 128}),
    ("matmul", {"BN": 144}, {"persistent": True, "cluster": 2}, {"A": 128, "B": 128}),
    ("matmul", {"BN": 208}, {"tma_swizzle": 64}, {"A": 64, "B": 64}),  # 6.5 slabs of 64 B
    ("matmul", {"BK": 32}, {"tma_swizzle": 64}, {"A": 64, "B": 64}),
    ("matmul", {"BK": 16, "BN": 96}, {"tma_swizzle": 32}, {"A": 32, "B": 32}),
    ("matmul", {"BN": 256}, {"tma_swizzle": 32}, {"A": 32, "B": 32}),
    ("matmul_bt", {"BN": 208, "BK": 64}, {"cluster": 2}, {"A": 128, "B": 128}),
    ("matmul_bt", {"BN": 208, "BK": 32}, {"cluster": 2, "tma_swizzle": 32},
     {"A": 32, "B": 32}),
    ("matmul_bt", {}, {"tma_swizzle": 64}, {"A": 64, "B": 64}),
])
def test_each_tma_swizzle_span_computes_the_product(sample, consts, options, spans) -> None:
    """Rows that are not whole 128-byte spans (an N-major B of 208, 160 or 144 columns, BK
    32 or 16) take 128-byte slabs where they run along mn (the last padded), else the
    widest span K-major rows take, or the span ``tma_swizzle`` asks for (padded where the
    rows are not whole spans of it): the boxes, the layout, the descriptors' layout bits
    and SBO follow it, and the executor, reading where the descriptors point, computes the
    product."""
    consts = {"BM": 128, "BN": 128, "BK": 64, **consts}
    compiled = load_sample(sample, "f16").compile(arch="sm_90a", stages=3, **consts, **options)
    lowered = compiled.kernel
    assert lowered.schedule.tiling.kind == "wgmma"
    for op_plan in lowered.schedule.tiling.operands:
        assert op_plan.layout.slab * 2 == spans[op_plan.role], op_plan
    boxes = {op.attrs["tensor"]: op.attrs["box"][0] * 2 for op in lowered.walk()
             if op.name == "tma.load"}
    assert boxes == spans
    # The descriptors' high words: SBO (8 rows of the span, in 16-byte units) and the
    # layout (1: 128 bytes, 2: 64, 3: 32) in bits 62-63.
    codes = {128: 1, 64: 2, 32: 3}
    highs = {int(word) for word in re.findall(r"mov\.b64 %rd\d+, \{%r\d+, (\d+)\};",
                                              compiled.ptx)}
    assert highs == {span // 2 | codes[span] << 30 for span in spans.values()}
    check_product(sample, lowered, np.random.default_rng(11))


def test_explain_names_the_narrow_spans_and_what_they_cost() -> None:
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(load_sample("matmul", "f16").compile(
        arch="sm_90a", BM=128, BN=208, BK=64, tma_swizzle=32), ptxas=False))
    assert "TMA box (cp.async.bulk.tensor, 32B swizzle)" in text
    line = next(line for line in text.splitlines() if line.startswith("  tma spans"))
    assert "B in 32-byte slabs (rows of 208 elements)" in line and "0.5x (32-byte)" in line
    assert "A in 32-byte slabs (rows of 64 elements)" in line  # asked for: tma_swizzle=32
    padded = render_explanation(explain(load_sample("matmul", "f16").compile(
        arch="sm_90a", BM=128, BN=208, BK=64), ptxas=False))
    line = next(line for line in padded.splitlines() if line.startswith("  tma spans"))
    assert line.startswith("  tma spans         B in 128-byte slabs, the last padded (rows of "
                           "208 elements, 256 loaded): TMA loads the last box whole")
    assert "A in" not in line  # A's rows are 64 elements: whole 128-byte slabs
    wide = render_explanation(explain(load_sample("matmul", "f16").compile(
        arch="sm_90a", BM=128, BN=256, BK=64), ptxas=False))
    assert "tma spans" not in wide


def test_padded_slabs_are_stored_and_loaded_whole() -> None:
    """B's 144 columns in 128-byte slabs: three boxes of 64 columns a stage, the last 48
    past the tile; the ring, the barrier's transaction bytes and the launch's shared memory
    count them, and where real columns (the next tile's) land in the padding the product
    is still its own."""
    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", stages=4, BM=128, BN=144,
                                                    BK=64)
    kernel = compiled.kernel
    layout = next(o.layout for o in kernel.schedule.tiling.operands if o.role == "B")
    assert (layout.slab, layout.slabs, layout.stored_cols, layout.size) == (64, 3, 192, 64 * 192)
    assert str(layout) == "slab64,pad48,swizzle(3,3,3)"
    loads = {op.attrs["tensor"]: (op.attrs["box"], op.attrs["slabs"]) for op in kernel.walk()
             if op.name == "tma.load"}
    assert loads == {"A": ([64, 128], 1), "B": ([64, 64], 3)}
    expected = {op.attrs["bytes"] for op in kernel.walk() if op.name == "mbar.arrive_expect_tx"}
    assert expected == {128 * 64 * 2 + 64 * 192 * 2}
    assert compiled.ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == 4
    check_product("matmul", kernel, np.random.default_rng(5))
    rng = np.random.default_rng(6)
    wide = dict(M=150, N=500, K=200)  # four N tiles: each one's padding is the next's columns
    arrays = random_inputs(kernel, rng, wide)
    got = run_lowered(kernel, arrays)
    assert relative_error(got, _reference(arrays, "f16")) < 1e-5


def test_padded_slabs_that_do_not_fit_the_ring_fall_back_or_are_an_error() -> None:
    """Five stages of 128x208: B's padded slabs would need 245760 bytes, more than a block
    has; chosen by the compiler the rows take their whole 32-byte spans instead, asked for
    (tma_swizzle=128) the error names the padding and the way out."""
    kernel = load_sample("matmul", "f16").lower(BM=128, BN=208, BK=64)
    lowered = run_pipeline(kernel, Options(arch="sm_90a", stages=5), keep_ir=True).kernel
    layout = next(o.layout for o in lowered.schedule.tiling.operands if o.role == "B")
    assert (layout.slab, layout.padded) == (16, False)
    with pytest.raises(TileConfigError) as caught:
        run_pipeline(kernel, Options(arch="sm_90a", stages=5, tma_swizzle=128))
    message = str(caught.value)
    assert "5 stages of this tile need 245760 (B's 128-byte slabs padded)" in message
    assert "a tma_swizzle the rows are whole spans of" in message
    assert "matmul.py:" in message and "^" in message


@pytest.mark.parametrize("schedule", [{}, {"cluster": 2}, {"persistent": True},
                                      {"persistent": True, "consumers": "pingpong"}],
                         ids=["one-tile", "cluster", "persistent", "pingpong"])
def test_one_stage_rings_wait_for_each_product_group(schedule) -> None:
    """One stage: a product group left in flight would hand its stage back after the
    producer's next load of it, which the schedule check called a deadlock (the fuzzer's
    class 7). Each group is waited for instead, and the kernel computes the product."""
    consts = {"BM": 64} if schedule.get("consumers") == "pingpong" else {}
    function = load_sample("matmul", "f16")
    kernel = function.lower(**{"BM": 128, "BN": 128, "BK": 64, **consts})
    result = run_pipeline(kernel, Options(arch="sm_90a", stages=1, **schedule), keep_ir=True)
    lowered = result.kernel
    text = print_kernel(lowered)
    assert "in_flight = 1" not in text
    rng = np.random.default_rng(3)
    arrays = random_inputs(lowered, rng)
    got = run_lowered(lowered, arrays)
    assert relative_error(got, _reference(arrays, "f16")) < 1e-5


def test_the_fused_epilogue_runs_after_the_consumers_loop() -> None:
    """gemm_epilogue (alpha, beta * C, bias, relu, f16 out) on the consumers' accumulators
    gives what the tile program means (the interpreter on the frontend's IR)."""
    function = load_sample("gemm_epilogue", "f16")
    lowered = compiled("gemm_epilogue", "f16", 3).kernel
    rng = np.random.default_rng(3)
    arrays = random_inputs(lowered, rng)
    args = {k: (v.astype(np.float16) if isinstance(v, np.ndarray) and k != "bias" else v)
            for k, v in arrays.items()}
    meant = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    run_kernel(function.lower(BM=128, BN=128, BK=64), meant)
    run_kernel(lowered, args, ops=op_catalogue())
    written = [k for k, v in args.items()
               if isinstance(v, np.ndarray) and not np.array_equal(v, arrays[k].astype(v.dtype))]
    assert written
    for name in written:
        assert relative_error(args[name].astype(np.float64),
                              meant[name].astype(np.float64)) < 2e-3, name


# -- planted protocol bugs ------------------------------------------------------------------

def assert_caught(kernel, seed: int) -> None:
    """A broken protocol shows on the CPU: a named deadlock, or a wrong result (stages read
    before their boxes landed hold NaN, or older data)."""
    arrays = random_inputs(kernel, np.random.default_rng(seed))
    try:
        got = run_lowered(kernel, arrays)
    except InterpreterError as err:
        assert "deadlock" in str(err), err
        return
    assert np.isnan(got).any() or relative_error(got, _reference(arrays, "f16")) > 1e-2


def _consumer_loop(kernel):
    return next(op for op in kernel.body.ops if op.name == "scf.for")


def _drop(block, predicate) -> None:
    block.ops = [op for op in block.ops if not predicate(op)]


def test_a_consumer_that_does_not_wait_reads_unfilled_stages() -> None:
    kernel = compiled(stages=3).kernel
    _drop(_consumer_loop(kernel).regions[0], lambda op: op.name == "mbar.wait")
    assert_caught(kernel, 1)


def test_a_wait_for_the_wrong_parity_passes_too_early() -> None:
    kernel = compiled(stages=3).kernel
    loop = _consumer_loop(kernel)
    wait = next(op for op in loop.regions[0].ops if op.name == "mbar.wait")
    from tilec.ir.core import Builder
    b = Builder(loop.regions[0])
    one = b.value("arith.constant", [], wait.operands[2].type, "one", value=1)
    flipped = b.value("arith.sub", [one, wait.operands[2]], wait.operands[2].type, "flipped")
    ops = loop.regions[0].ops
    ops.remove(one.owner), ops.remove(flipped.owner)
    at = ops.index(wait)
    ops[at:at] = [one.owner, flipped.owner]
    wait.operands[2] = flipped
    assert_caught(kernel, 2)


def test_a_producer_that_does_not_wait_for_empty_stages_is_caught() -> None:
    kernel = compiled(stages=2).kernel
    producer = next(op for op in kernel.body.ops if op.name == "ws.producer")
    loop = next(op for op in producer.regions[0].ops if op.name == "scf.for")
    _drop(loop.regions[0], lambda op: op.name == "mbar.wait")
    assert_caught(kernel, 5)


def test_a_wrong_byte_count_is_a_named_deadlock() -> None:
    kernel = compiled(stages=2).kernel
    expect = next(op for op in kernel.walk() if op.name == "mbar.arrive_expect_tx")
    expect.attrs["bytes"] += 16
    arrays = random_inputs(kernel, np.random.default_rng(4))
    stuck = r"mbar.wait .*deadlock: .*full\[0\].*16 bytes outstanding"
    with pytest.raises(InterpreterError, match=stuck):
        run_lowered(kernel, arrays)


def test_explain_describes_the_tma_copies_the_ring_and_the_register_split() -> None:
    from tilec.tools.explain import explain, render_explanation
    compiled_kernel = load_sample("matmul", "f16").compile(arch="sm_90a", stages=4, BM=128,
                                                           BN=256, BK=64)
    text = render_explanation(explain(compiled_kernel, ptxas=False))
    assert "box 64 x 128 (128 B rows)" in text and "TMA box (cp.async.bulk.tensor" in text
    assert "a producer warpgroup of 128 threads" in text and "384 threads" in text
    assert "1024 B" in text and "mbarrier, 2 arrival(s) a phase" in text
    # TMA writes the stages (no st.shared copies); the f32 C's slabs go out in turn.
    copies, epilogue = text.split("  epilogue ", 1)
    assert "st.shared" not in copies and "wgmma descriptor (MN-major)" in text
    assert epilogue.startswith(" " * 9 + "registers -> 2 one-slab staging buffers sC")
    assert "the producer warpgroup gives up to 40, the consumers take 232" in text
    assert "runs of 9, 1, 2, 3, 4, 5 K-loop iterations" in text
    assert "note: the backend declared" not in text  # the barriers are counted too


def test_two_blocks_per_sm_halve_the_register_file_and_the_shared_memory() -> None:
    """blocks_per_sm=2: .minnctapersm 2 (ptxas starts each thread at 65536 / (256 * 2)
    registers), the consumers' setmaxnreg share of half the file, the schedule says so; a
    tile whose stages do not fit half the SM's shared memory, or whose accumulators do not
    fit half the registers, is refused at its line (it once ran on mma.sync, where two
    blocks an SM mean nothing, without a word)."""
    function = load_sample("matmul", "f16")
    compiled_kernel = function.compile(arch="sm_90a", stages=4, BM=64, BN=128, BK=64,
                                       blocks_per_sm=2)
    roles = compiled_kernel.kernel.schedule.roles
    assert (roles.blocks_per_sm, roles.consumer_registers) == (2, 216)
    ptx = compiled_kernel.ptx
    assert ".minnctapersm 2" in ptx and "setmaxnreg.inc.sync.aligned.u32 216;" in ptx
    assert "2 blocks per SM" in print_kernel(compiled_kernel.kernel)
    with pytest.raises(Exception, match="2 blocks per SM leave each .* bytes of shared memory"):
        function.ptx(arch="sm_90a", stages=4, BM=64, BN=192, BK=64, blocks_per_sm=2)
    with pytest.raises(TileConfigError) as caught:
        function.ptx(arch="sm_90a", stages=2, BM=128, BN=256, BK=64, blocks_per_sm=2)
    message = str(caught.value)
    assert "blocks_per_sm=2 halves a wgmma block's registers" in message and "^" in message
    assert "more than the 80 a 384-thread block starts with at 2 blocks per SM" in message
    # Where wgmma declines the tile anyway (sm_80 has none), the option has nothing to say.
    assert "mma.sync" in function.ptx(arch="sm_80", stages=2, BM=128, BN=256, BK=32,
                                      blocks_per_sm=2)
    with pytest.raises(ValueError, match="blocks_per_sm must be one of"):
        Options(blocks_per_sm=3)


def test_a_persistent_kernel_loops_both_roles_over_the_tiles() -> None:
    """persistent=True: the schedule says so; the producer's region and the consumers'
    accumulator, K loop and epilogue each sit in a loop from %ctaid.x by %nctaid.x, whose
    ring count feeds ws.ring_base (stages and phases continue across tiles); the grid is a
    block per SM."""
    from tilec.launch.binding import launch_grid
    function = load_sample("gemm_epilogue", "f16")
    compiled_kernel = function.compile(arch="sm_90a", stages=3, BM=128, BN=256, BK=64,
                                       persistent=True)
    kernel = compiled_kernel.kernel
    assert kernel.schedule.roles.persistent and ", persistent}" in print_kernel(kernel)
    ptx = compiled_kernel.ptx
    assert ptx.count("mov.u32 %r") and ptx.count("%nctaid.x;") == 2
    assert len(re.findall(r"\$L_tile_\d+:", ptx)) == 2
    assert len(re.findall(r"\$L_tiles_done_\d+:", ptx)) == 2
    assert launch_grid([40, 16], kernel, 132) == (132, 1, 1)
    assert launch_grid([4, 3], kernel, 132) == (12, 1, 1)
    with pytest.raises(ValueError, match="multiprocessor count"):
        launch_grid([40, 16], kernel)
    # The CPU runs a tile per program (ring base 0): the same product.
    lowered = compiled("matmul", "f16", 3, BN=256).kernel
    arrays = random_inputs(lowered, np.random.default_rng(9))
    assert relative_error(run_lowered(lowered, arrays), _reference(arrays, "f16")) < 1e-5


C_BEFORE_THE_LOOP = """
from __future__ import annotations

from tilec import f16, f32, tile


@tile
def c_first(A: f16[M, K], B: f16[K, N], C: f16[M, N], BM=64, BN=128, BK=64):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        c = C[m * BM : +BM, n * BN : +BN]
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = (acc + c).to(f16)
"""


@pytest.mark.parametrize("consumers", ["cooperative", "pingpong"])
def test_a_persistent_kernel_reading_c_before_its_k_loop_takes_its_offsets_per_tile(
        consumers, tmp_path) -> None:
    """C read before the K loop leaves ``m * BM`` and ``n * BN``, common to the loads and
    the epilogue, between the grid and the loop (CSE). A persistent kernel runs what lies
    between the grid and the producer once, so the backend refused it (the fuzzer's seed
    147: "a persistent kernel computes nothing from the tile between the grid and the
    producer"). Now the producer computes its own copies, and the consumers theirs after
    it, per tile; the product is right, and the PTX assembles."""
    from tilec.analysis.hazards import check_schedule
    from tilec.kernel import load_file
    from .test_ptxas import assert_assembles_for_sm_90a
    (function,) = load_file("c_first.py", text=C_BEFORE_THE_LOOP).values()
    result = function.compile(arch="sm_90a", stages=3, persistent=True, consumers=consumers)
    kernel = result.kernel
    top = kernel.body.ops
    grid = next(op for op in top if op.name == "tile.grid")
    producer = next(op for op in top if op.name == "ws.producer")
    between = top[top.index(grid) + 1:top.index(producer)]
    assert not any(v in grid.results for op in between for v in op.operands)
    region = producer.regions[0].ops
    assert [op.name for op in region[:2]] == ["arith.mul", "arith.mul"]
    assert {v for op in region[:2] for v in op.operands} >= set(grid.results)
    check_schedule(kernel)
    assert_assembles_for_sm_90a(result.ptx, tmp_path, f"c_first_{consumers}")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((SHAPE["M"], SHAPE["K"])).astype(np.float16)
    b = rng.standard_normal((SHAPE["K"], SHAPE["N"])).astype(np.float16)
    c = rng.standard_normal((SHAPE["M"], SHAPE["N"])).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64) + c.astype(np.float64)
    run_kernel(kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert relative_error(c, want) < 2e-3


@pytest.mark.parametrize("consumer_warpgroups", [1, 2, 3, 4])
@pytest.mark.parametrize("blocks_per_sm", [1, 2])
def test_setmaxnreg_asks_only_for_registers_the_block_holds(consumer_warpgroups,
                                                           blocks_per_sm) -> None:
    """The consumers' setmaxnreg.inc waits until the block has the registers: asking for
    more than the producer's dec freed from what the block was launched with hangs the GPU
    (it did, for 256-row tiles: 640 threads start with 96 registers, and an inc to 112)."""
    from tilec.families.wgmma import FAMILY, PRODUCER_REGISTERS, registers_at_entry
    threads = 128 * (consumer_warpgroups + 1)
    held = registers_at_entry(threads, blocks_per_sm) * threads
    inc = FAMILY.consumer_registers(consumer_warpgroups, blocks_per_sm)
    assert inc % 8 == 0 and 24 <= inc <= 256
    assert 128 * PRODUCER_REGISTERS + 128 * consumer_warpgroups * inc <= held


@pytest.mark.parametrize("options, reason", [
    (dict(swizzle="off", BM=128, BN=256, BK=64), "swizzle is fixed"),
    (dict(BM=128, BN=128, BK=64, warps=(2, 4)), "an explicit warp grid"),
    (dict(BM=96, BN=128, BK=64), "BM=96 is not 64 to 256"),
    (dict(BM=128, BN=128, BK=32), "BK=32 is under 64: a stage of so few k16 steps ran slower "
                                  "on wgmma than on mma.sync"),
    (dict(BM=16, BN=64, BK=128, warps=(1, 4)), "BM=16 is not 64 to 256"),
])
def test_explain_says_why_an_sm_90a_kernel_is_not_on_the_wgmma_path(options, reason) -> None:
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", **options)
    text = render_explanation(explain(compiled, ptxas=False))
    line = next(line for line in text.splitlines() if line.startswith("  not wgmma"))
    assert "the mma family multiplies" in line and reason in line


def test_explain_on_the_wgmma_path_gives_no_reason() -> None:
    from tilec.tools.explain import explain, render_explanation
    compiled = load_sample("matmul", "f16").compile(arch="sm_90a", BM=128, BN=256, BK=64)
    assert "not wgmma" not in render_explanation(explain(compiled, ptxas=False))


def test_explain_names_the_schedule_options_a_kernel_left_to_mma_sync_ignores() -> None:
    """persistent, consumers and the other options of the warp-specialized schedule are
    accepted where the kernel falls back to mma.sync (a tuned configuration given over a
    forced BK keeps them), and change nothing: explain says so; on the wgmma path, nothing."""
    from tilec.tools.explain import explain, render_explanation

    def not_applied(arch, **options) -> list[str]:
        compiled = load_sample("matmul", "f16").compile(arch=arch, **options)
        return [line for line in render_explanation(explain(compiled, ptxas=False))
                .splitlines() if line.startswith("  not applied")]
    line, = not_applied("sm_90a", persistent=True, consumers="pingpong", BK=32)
    assert "persistent=True, consumers='pingpong': they shape sm_90a's warp-specialized" in line
    line, = not_applied("sm_80", blocks_per_sm=2, tma_swizzle=32)
    assert "blocks_per_sm=2, tma_swizzle=32: they shape" in line
    assert not_applied("sm_90a", persistent=True, BM=128, BN=256, BK=64) == []
    assert not_applied("sm_80") == []


@pytest.mark.parametrize("consts", [dict(BM=128, BN=256), dict(BM=256, BN=128, warpgroup_rows=128)],
                         ids=["64-row", "128-row"])
def test_a_descriptors_take_the_warpgroup_index_broadcast_from_lane_0(consts) -> None:
    """A's descriptors start at this warpgroup's rows: the index (tid / 128) reaches them
    through shfl.sync.idx from lane 0, where ptxas can tell it is the warp's, so it builds
    the descriptors in uniform registers; one broadcast, in the K loop where they are."""
    ptx = load_sample("matmul", "f16").ptx(arch="sm_90a", stages=3, BK=64, persistent=True,
                                           **consts)
    broadcasts = re.findall(r"shfl\.sync\.idx\.b32 (%r\d+), (%r\d+), 0, 31, -1;", ptx)
    assert len(broadcasts) == 1
    uniform, index = broadcasts[0]
    assert re.search(rf"shr\.u32 {re.escape(index)}, %r\d+, 7;", ptx)
    assert re.search(rf"mad\.lo\.s32 %r\d+, {re.escape(uniform)}, \d+, %r\d+;", ptx)
    loop = ptx.index("$L_loop_", ptx.index("setmaxnreg.inc"))
    assert loop < ptx.index("shfl.sync.idx") < ptx.index("wgmma.mma_async")


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_the_producer_prefetches_every_tensor_map_before_its_first_load(persistent):
    """A, B and (through the TMA store) C: each map once, by the elected producer thread,
    before the first cp.async.bulk.tensor; the consumers never prefetch."""
    ptx = load_sample("gemm_epilogue", "f16").ptx(arch="sm_90a", stages=3, BM=128, BN=256,
                                                  BK=64, persistent=persistent)
    producer = ptx[ptx.index("setmaxnreg.dec"):ptx.index("setmaxnreg.inc")]
    prefetched = re.findall(r"prefetch\.param\.tensormap \[(\w+)\];", producer)
    assert prefetched == ["A_tensor_map", "B_tensor_map", "C_tensor_map"]
    assert producer.rindex("prefetch.param") < producer.index("cp.async.bulk.tensor")
    assert ptx.count("prefetch.param.tensormap") == 3
