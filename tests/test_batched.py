"""Batched matmul on the CPU: 3-D tensors indexed ``A[b, rows, cols]`` by a grid program id
(samples/bmm.py). The frontend (the tensor.batch view, its errors with a caret), the tile IR
in the interpreter and the lowered IR of the sm_80 and sm_90a paths in the executor against a
float64 numpy reference at ragged per-batch sizes and with a batch stride of 0, the whole-
tensor reference, launch binding, the grid, 3-D TMA tensor maps, persistent blocks over
batches x tiles, clusters pairing M tiles within each batch, explain, the refusals (split-K, a
cluster on a grid without a batch axis) and ptxas on every target."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.cpu.reference import reference
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.ir import print_kernel
from tilec.kernel import load_file
from tilec.launch.binding import bind_arguments, grid_size, launch_grid, spec_for
from tilec.launch.tensor_maps import TensorMapLayout, tensor_map_layout
from tilec.runtime.arrays import ArrayArg, c_strides
from tilec.tools.bisect import bisect

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "bmm.py"
TEXT = SAMPLE.read_text(encoding="utf-8")
SMALL = dict(BM=64, BN=64, BK=32)
HOPPER = dict(arch="sm_90a", BM=128, BN=128, BK=64, stages=3)
BASE = 1 << 20


def bmm(text: str = TEXT):
    return load_file(SAMPLE, text=text)["bmm"]


def retyped(dtype: str, out: str = "f32") -> str:
    """bmm.py with A and B read as ``dtype`` and C written as ``out``."""
    text = TEXT.replace("A: f16[", f"A: {dtype}[").replace("B: f16[", f"B: {dtype}[")
    if out != "f32":
        text = text.replace("C: f32[", f"C: {out}[").replace("] = acc\n", f"] = acc.to({out})\n")
    return text


def error_of(text: str) -> TileError:
    with pytest.raises(TileError) as info:
        bmm(text).compile(arch="sm_80")  # lowering's errors, then the passes'
    return info.value


def assert_caret_at(err: TileError, line: int, fragment: str) -> None:
    """The error names the line and its caret stands under ``fragment``."""
    assert err.loc is not None and err.loc.line == line, str(err)
    source_line, caret = str(err).split("\n")[1:3]
    assert source_line[caret.index("^"):].startswith(fragment), str(err)


def float64_bmm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    assert not np.isnan(out).any(), "some outputs were never written"
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


# -- the frontend ----------------------------------------------------------------------------

def test_a_batch_index_is_one_view_per_tensor_right_after_the_grid():
    kernel = bmm().lower(**SMALL)
    ops = [op.name for op in kernel.body.ops]
    grid_at = ops.index("tile.grid")
    assert ops[grid_at + 1:grid_at + 4] == ["tensor.batch"] * 3  # A, B, C: once each
    assert ops.count("tensor.batch") == 3
    text = print_kernel(kernel)
    assert "%A_b = tensor.batch %A, %b : tensor<f16,[M,K]>" in text
    assert "%A: tensor<f16,[Bt,M,K]>" in text
    # The loads and the store read the views, two slices each.
    assert "tile.load %A_b, " in text and "tile.store %C_b, " in text


ACCESS = "acc += A[b, m * BM : +BM, k : +BK] @ B[b, k : +BK, n * BN : +BN]"


@pytest.mark.parametrize("old, new, message, line, fragment", [
    # A 3-D tensor indexed with two subscripts, and with four.
    ("A[b, m * BM : +BM, k : +BK]", "A[m * BM : +BM, k : +BK]",
     "the tensor 'A' is 3-D (a batch of matrices) but this access has 2 indices", 12,
     "A[m * BM"),
    ("B[b, k : +BK, n * BN : +BN]", "B[b, b, k : +BK, n * BN : +BN]",
     "the tensor 'B' is 3-D (a batch of matrices) but this access has 4 indices", 12,
     "B[b, b"),
    ("C[b, m * BM", "C[m * BM", "the tensor 'C' is 3-D (a batch of matrices) but this access "
     "has 2 indices", 13, "C[m * BM"),
    # The batch index: a single index, a program id of the grid's batch axis.
    ("A[b, m * BM", "A[b : +1, m * BM", "the batch index of the tensor 'A' is a single index, "
     "not a slice", 12, "b : +1"),
    ("A[b, m * BM", "A[k, m * BM", "the batch index of the tensor 'A' must be a program id of "
     "the grid", 12, "k, m"),
    ("A[b, m * BM", "A[bb, m * BM", "unknown name 'bb'", 12, "bb"),
    ("A[b, m * BM", "A[m, m * BM", "the grid axis of the batch index must be the batch count "
     "of 'A' (Bt)", 12, "A[m, m"),
    ("grid(Bt,", "grid(M,", "the grid axis of the batch index must be the batch count of "
     "'A' (Bt)", 12, "A[b"),
    # A 2-D view of a 3-D tensor is only ever one batch's matrix.
    ("B[b, k : +BK, n * BN : +BN]", "B.T[k : +BK, n * BN : +BN]",
     "'.T' needs a 2-D tensor; the tensor 'B' is 3-D", 12, "T[k"),
    ("C: f32[Bt, M, N]", "C: f32[Bt, M, N, N]", "tensors have 1 to 3 dims", 8, "C: f32"),
])
def test_bad_batched_accesses_are_located_with_a_caret(old, new, message, line, fragment):
    assert old in TEXT
    err = error_of(TEXT.replace(old, new, 1))
    assert message in err.message, str(err)
    assert_caret_at(err, line, fragment)


def test_a_2d_tensor_with_a_batch_index_is_a_rank_error():
    text = TEXT.replace("B: f16[Bt, K, N]", "B: f16[K, N]")
    err = error_of(text)
    assert "the tensor 'B' is 2-D but this access has 3 slices" in err.message, str(err)
    assert_caret_at(err, 12, "B[b")


def test_a_transposed_batch_view_reads_the_batchs_matrix_transposed():
    """B stored [Bt, N, K]: ``B[b, n*BN : +BN, k : +BK].T`` is batch b of B, transposed."""
    text = TEXT.replace("B: f16[Bt, K, N]", "B: f16[Bt, N, K]").replace(
        "B[b, k : +BK, n * BN : +BN]", "B[b, n * BN : +BN, k : +BK].T")
    kernel = bmm(text).lower(**SMALL)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 50, 40)).astype(np.float16)
    b = rng.standard_normal((2, 70, 40)).astype(np.float16)
    c = np.full((2, 50, 70), np.nan, dtype=np.float32)
    run_kernel(kernel, {"A": a, "B": b, "C": c})
    assert rel_error(c, float64_bmm(a, b.transpose(0, 2, 1))) < 1e-6


# -- the interpreter and the executor against float64 -----------------------------------------

def operands(batches, m, n, k, dtype=np.float16, shared=""):
    """Random A [Bt, M, K], B [Bt, K, N] and a NaN C; ``shared`` names the operands given
    with a batch stride of 0 (numpy.broadcast_to of one matrix)."""
    rng = np.random.default_rng(m * 7 + n)
    def tensor(name, rows, cols):
        if name in shared:
            one = rng.standard_normal((rows, cols)).astype(dtype)
            return np.broadcast_to(one, (batches, rows, cols))
        return rng.standard_normal((batches, rows, cols)).astype(dtype)
    a, b = tensor("A", m, k), tensor("B", k, n)
    assert all(x.strides[0] == 0 for x, name in ((a, "A"), (b, "B")) if name in shared)
    return a, b, np.full((batches, m, n), np.nan, dtype=np.float32)


@pytest.mark.parametrize("sizes", [(1, 1, 1, 1), (3, 70, 66, 50), (2, 129, 65, 97)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("shared", ["", "A", "B"])
def test_the_tile_ir_matches_float64_at_ragged_sizes_and_stride_0(sizes, shared):
    a, b, c = operands(*sizes, shared=shared)
    run_kernel(bmm().lower(**SMALL), {"A": a, "B": b, "C": c})
    assert rel_error(c, float64_bmm(a, b)) < 1e-6


@pytest.mark.parametrize("options", [dict(arch="sm_80", **SMALL), dict(arch="sm_80"),
                                     HOPPER], ids=["sm_80-64x64", "sm_80-128x128", "sm_90a"])
@pytest.mark.parametrize("shared", ["", "A", "B"])
def test_the_lowered_ir_matches_float64_with_stride_0(options, shared):
    """The final IR (cp.async + mma.sync, or TMA + wgmma on sm_90a) in the executor:
    ragged M, N and K in every batch, one operand shared by all batches."""
    a, b, c = operands(3, 130, 72, 80, shared=shared)
    compiled = bmm().compile(**options)
    if options["arch"] == "sm_90a":
        assert compiled.kernel.schedule.tiling.kind == "wgmma"
    run_kernel(compiled.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < 1e-6


@pytest.mark.parametrize("options", [dict(arch="sm_80"), dict(HOPPER)], ids=["sm_80", "sm_90a"])
def test_bisect_finds_every_stage_right(options):
    """Every pass's IR against the float64 reference, on the CPU (tilec bisect)."""
    from tilec.options import Options
    arch = options.pop("arch")
    consts = {k: v for k, v in options.items() if k in ("BM", "BN", "BK")}
    stages = options.get("stages", 3)
    report = bisect(bmm(), consts, Options(arch=arch, stages=stages),
                    dict(Bt=2, M=70, N=72, K=100), seed=2)
    assert report.first_bad is None, report
    assert report.stages[0].compared_with == "float64 reference"


def test_bf16_and_f16_outputs_through_tma_stores():
    """A 16-bit C goes out through TMA stores on sm_90a: the 3-D map clips the ragged rows
    at each batch's own M (a 2-D map of the whole tensor would write into the next batch)."""
    for dtype in ("f16", "bf16"):
        function = bmm(retyped(dtype, dtype))
        compiled = function.compile(**HOPPER)
        assert compiled.kernel.schedule.epilogue.via == "tma"
        assert "cp.async.bulk.tensor.3d.global.shared::cta" in compiled.ptx
    # The executor, f16: C rows past M of batch 0 stay as they were in batch 1.
    function = bmm(retyped("f16", "f16"))
    compiled = function.compile(**HOPPER)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 70, 64)).astype(np.float16)
    b = rng.standard_normal((2, 64, 64)).astype(np.float16)
    c = np.full((2, 70, 64), 7.0, dtype=np.float16)
    run_kernel(compiled.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < 2e-3


# -- the float64 reference -------------------------------------------------------------------

def test_the_reference_evaluates_each_batch_and_writes_the_whole_tensor():
    a, b, c = operands(3, 20, 30, 40, dtype=np.float32, shared="B")
    written = reference(bmm().lower(**SMALL), {"A": a, "B": b, "C": c}, {})
    assert list(written) == ["C"] and written["C"].shape == (3, 20, 30)
    np.testing.assert_allclose(written["C"], float64_bmm(a, b), rtol=1e-12, atol=1e-12)


# -- launching: binding, the grid, tensor maps ------------------------------------------------

def test_binding_takes_a_stride_0_batch_and_the_grid_counts_the_batches():
    kernel = bmm().lower()
    a = np.broadcast_to(np.ones((100, 64), np.float16), (5, 100, 64))
    b = np.ones((5, 64, 300), np.float16)
    c = np.zeros((5, 100, 300), np.float32)
    bound = bind_arguments(kernel.params, kernel.symbols, [a, b, c], {})
    assert bound.symbols == {"Bt": 5, "M": 100, "K": 64, "N": 300}
    assert bound.tensors["A"].strides == (0, 64, 1)
    spec = spec_for(bound)
    assert spec.tensor("A", 3, 2).contiguous_dim == 2 and spec.tensor("A", 3, 2).vec_elems == 8
    sizes = grid_size(kernel, bound.symbols)
    assert sizes == [5, 1, 3]
    compiled = bmm().compile(arch="sm_80", spec=spec)
    # The (m, n) tiles folded on x in grouped order, the batch on y: consecutive blocks
    # share a batch's matrices in L2.
    grid = next(op for op in compiled.kernel.body.ops if op.name == "tile.grid")
    assert grid.attrs["batch_axis"] == 0 and grid.attrs["raster_group"] == 8
    assert launch_grid(sizes, compiled.kernel) == (3, 5, 1)
    ptx = compiled.ptx
    assert "%ctaid.x" in ptx and "%ctaid.y" in ptx and "%ctaid.z" not in ptx


def test_batches_that_disagree_are_refused_naming_the_arguments():
    kernel = bmm().lower()
    a, b, c = (np.ones(s, np.float16) for s in ((2, 8, 8), (3, 8, 8), (2, 8, 8)))
    with pytest.raises(ValueError, match="argument 'B' has Bt=3 .* but argument 'A' has Bt=2"):
        bind_arguments(kernel.params, kernel.symbols, [a, b, c.astype(np.float32)], {})


def test_an_output_with_a_batch_stride_of_0_is_refused_naming_it():
    """Every batch would store into the same matrix: refused before any GPU work."""
    from tilec.kernel import written_params
    from tilec.launch.binding import check_outputs
    kernel = bmm().lower()
    a, b = np.ones((4, 8, 16), np.float16), np.ones((4, 16, 8), np.float16)
    c = np.broadcast_to(np.zeros((8, 8), np.float32), (4, 8, 8))
    bound = bind_arguments(kernel.params, kernel.symbols, [a, b, c], {})
    assert written_params(kernel) == ["C"]
    with pytest.raises(ValueError, match="argument 'C': the kernel stores into it but its "
                                         "dim 0 has stride 0"):
        check_outputs(bound, written_params(kernel))
    check_outputs(bind_arguments(kernel.params, kernel.symbols,
                                 [np.broadcast_to(a[0], a.shape), b, np.zeros((4, 8, 8),
                                                                               np.float32)],
                                 {}), ["C"])  # a shared input is fine


def device_array(name, shape, strides=None, dtype="f16") -> ArrayArg:
    strides = c_strides(shape) if strides is None else strides
    return ArrayArg(name, BASE, dtype, tuple(shape), tuple(strides), device=0)


def test_a_3d_argument_maps_its_batch_as_the_third_dim():
    layout = tensor_map_layout("A", device_array("A", (4, 1000, 80)), (64, 128), 128)
    assert layout == TensorMapLayout("A", "f16", BASE, (80, 1000), 160, (64, 128), 128,
                                     batch=(4, 160_000))
    assert layout.encoding() == ((80, 1000, 4), (160, 160_000), (64, 128, 1))
    # The 2-D encoding is as before.
    flat = tensor_map_layout("A", device_array("A", (1000, 80)), (64, 128), 128)
    assert flat.encoding() == ((80, 1000), (160,), (64, 128))


@pytest.mark.parametrize("shape, strides", [((4, 1000, 80), (0, 80, 1)),
                                            ((1, 1000, 80), (80_000, 80, 1))])
def test_a_stride_0_batch_or_a_single_one_is_mapped_as_one_batch(shape, strides):
    """The kernel reads batch 0 of such a map whatever its program id (it tests the batch
    stride for 0); the stride, never stepped along, is a legal one."""
    layout = tensor_map_layout("A", device_array("A", shape, strides), (64, 128), 128)
    assert layout.batch == (1, 160_000)
    assert layout.encoding()[0] == (80, 1000, 1)


def test_a_misaligned_batch_stride_is_refused_naming_the_operand():
    # [3, 8, 64] batches 8 * 64 + 4 elements apart: 1032 bytes, not a multiple of 16.
    arg = device_array("B", (3, 8, 64), (8 * 64 + 4, 64, 1))
    with pytest.raises(ValueError, match=r"TMA operand 'B': the batch stride must be a "
                                         r"positive multiple of 16 bytes"):
        tensor_map_layout("B", arg, (64, 8), 128)


def test_the_sm_90a_kernel_loads_and_stores_with_3d_coordinates_of_the_batch():
    ptx = bmm(retyped("f16", "f16")).compile(**HOPPER).ptx
    loads = [line for line in ptx.splitlines() if "cp.async.bulk.tensor" in line]
    assert loads and all(".3d." in line for line in loads), loads
    # The batch coordinate is the program id, or 0 where the batch stride is 0.
    assert ptx.count("selp.b32") >= len(loads)


def test_a_2d_program_keeps_2d_maps():
    matmul = load_file(SAMPLE.with_name("matmul.py"))["matmul"]
    ptx = matmul.compile(**HOPPER).ptx
    assert "cp.async.bulk.tensor.2d" in ptx and ".3d." not in ptx


# -- what batched programs refuse ---------------------------------------------------------------

def test_split_k_is_refused_with_a_caret():
    with pytest.raises(TileError) as info:
        bmm().compile(arch="sm_80", split_k=2)
    assert "split_k adds a grid axis; a 3-D grid has none left" in info.value.message
    assert info.value.loc is not None and info.value.loc.line in (9, 12), str(info.value)
    assert "^" in str(info.value)


def test_a_cluster_refuses_a_3d_grid_without_a_batch_axis():
    """A 3-D grid no batch view indexes does not fold its (M, N) tiles into CUDA's x, so
    the blocks of a cluster could not be paired along M: refused at the grid."""
    text = (TEXT.replace("f16[Bt, M, K]", "f16[M, K]").replace("f16[Bt, K, N]", "f16[K, N]")
            .replace("f32[Bt, M, N]", "f32[M, N]").replace("grid(Bt,", "grid(2,")
            .replace("A[b, m * BM", "A[m * BM").replace("B[b, k", "B[k")
            .replace("C[b, m * BM", "C[m * BM"))
    bmm(text).compile(**HOPPER)  # without a cluster it compiles
    with pytest.raises(TileError) as info:
        bmm(text).compile(**dict(HOPPER, cluster=2))
    assert "cluster=2 pairs M tiles of a grid whose (M, N) tiles fold" in info.value.message
    assert_caret_at(info.value, 9, "for b, m, n in grid(2,")


# -- persistent blocks over batches x tiles ------------------------------------------------------

PERSISTENT = dict(HOPPER, persistent=True)


def test_a_persistent_batched_kernel_takes_its_views_per_tile():
    """The schedule says the tile loop runs over batches; the producer reads its own views
    of A and B (first in its region: per tile), and C's view follows the producer, with the
    consumers' per-tile ops, not between the grid and the producer (run once)."""
    kernel = bmm().compile(**PERSISTENT).kernel
    roles = kernel.schedule.roles
    assert roles.persistent and roles.batches
    assert ", persistent over batches x tiles}" in print_kernel(kernel)
    top = [op.name for op in kernel.body.ops]
    producer = next(op for op in kernel.body.ops if op.name == "ws.producer")
    region = [op.name for op in producer.regions[0].ops]
    assert region[:2] == ["tensor.batch"] * 2
    assert top.count("tensor.batch") == 1
    assert top.index("ws.producer") < top.index("tensor.batch") < top.index("scf.for")
    # One tile a block is unchanged: the views right after the grid.
    one = bmm().compile(**HOPPER).kernel
    assert [op.name for op in one.body.ops].count("tensor.batch") == 3
    assert not one.schedule.roles.batches


@pytest.mark.parametrize("out", ["f32", "f16"])
@pytest.mark.parametrize("shared", ["", "A", "B"])
def test_the_persistent_batched_kernel_matches_float64(out, shared):
    """The executor runs a tile a program (ring base 0), f32 and f16 C (TMA stores through
    the 3-D map), ragged M, N and K in every batch, one operand with a batch stride of 0;
    the mbarrier checker accepts the ring over the tile loop's iterations."""
    from tilec.analysis.hazards import check_schedule
    a, b, c = operands(3, 130, 72, 80, shared=shared)
    c = c.astype(np.float16) if out == "f16" else c
    compiled = bmm(retyped("f16", out)).compile(**PERSISTENT)
    assert compiled.kernel.schedule.epilogue.via == "tma"
    check_schedule(compiled.kernel)
    run_kernel(compiled.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < (2e-3 if out == "f16" else 1e-6)


def test_a_persistent_kernel_storing_a_batch_of_one_product():
    """Only C is batched (every batch stores A @ B): the producer reads 2-D maps and needs
    no view; C's view still goes per tile; in a cluster too (the pair's B is the one
    matrix)."""
    text = (TEXT.replace("A: f16[Bt, M, K]", "A: f16[M, K]")
            .replace("B: f16[Bt, K, N]", "B: f16[K, N]")
            .replace("A[b, m * BM", "A[m * BM").replace("B[b, k", "B[k"))
    compiled = bmm(text).compile(**PERSISTENT)
    assert compiled.kernel.schedule.roles.batches
    producer = next(op for op in compiled.kernel.body.ops if op.name == "ws.producer")
    assert not any(op.name == "tensor.batch" for op in producer.walk())
    rng = np.random.default_rng(4)
    a = rng.standard_normal((130, 80)).astype(np.float16)
    b = rng.standard_normal((80, 72)).astype(np.float16)
    c = np.full((3, 130, 72), np.nan, dtype=np.float32)
    run_kernel(compiled.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, np.broadcast_to(float64_bmm(a, b), c.shape)) < 1e-6
    clustered = bmm(text).compile(**dict(PERSISTENT, cluster=2))
    c = np.full((3, 130, 72), np.nan, dtype=np.float32)
    run_kernel(clustered.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, np.broadcast_to(float64_bmm(a, b), c.shape)) < 1e-6
    assert ".2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast" in clustered.ptx


def test_misaligned_c_rows_of_a_persistent_batched_kernel():
    """C's rows 2-byte aligned: the row-store epilogue, in the executor, into each batch."""
    from tilec.options import Spec, TensorSpec
    spec = Spec(tensors=(("A", TensorSpec(2, 8)), ("B", TensorSpec(2, 8)),
                         ("C", TensorSpec(2, 1))))
    compiled = bmm(retyped("f16", "f16")).compile(**PERSISTENT, spec=spec)
    assert compiled.kernel.schedule.epilogue.via == "rows"
    a, b, c = operands(2, 130, 67, 64)
    c = np.full(c.shape, 7.0, np.float16)
    run_kernel(compiled.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < 2e-3


def test_the_persistent_tile_loop_numbers_batches_x_tiles():
    """Both roles' tile loops: the batch is the tile index over the tiles a batch, the
    (m, n) tile the remainder's in grouped order; the grid is a block per SM, at most one a
    tile of all batches."""
    compiled = bmm().compile(**PERSISTENT)
    ptx = compiled.ptx
    assert ptx.count("%nctaid.x;") == 2 and "%ctaid.y" not in ptx
    for role in ptx.split("setmaxnreg.inc")[0].split("setmaxnreg.dec")[1], \
            ptx.split("setmaxnreg.inc")[1]:
        loop = role[role.index("$L_tile_"):]
        # Batch, group and the last group's rows by the host's magic numbers, no division.
        assert "div.u32" not in loop and "rem.u32" not in loop
        assert len(re.findall(r"mul\.hi\.u32 %r\d+, %r\d+, %r\d+;", loop)) == 3
        # The batch's base address moves per tile, inside the loop.
        assert "mad.lo.s64" in re.split(r"\$L_tiles_done_\d+:", loop)[0]
    loads = [line for line in ptx.splitlines() if "cp.async.bulk.tensor" in line]
    assert loads and all(".3d." in line for line in loads)
    kernel = compiled.kernel
    assert launch_grid([32, 8, 8], kernel, 132) == (132, 1, 1)
    assert launch_grid([2, 3, 5], kernel, 132) == (30, 1, 1)


# -- clusters: pairs of M tiles within each batch ------------------------------------------------

CLUSTER = dict(HOPPER, cluster=2)

def test_a_cluster_takes_the_batch_axis_anywhere_and_pairs_the_first_other_axis():
    """The pair takes the first axis but the batch's: grid(M tiles, Bt, N tiles) pairs M
    tiles, sharing B's tile; grid(Bt, N tiles, M tiles) pairs N tiles, sharing A's (B's
    moves along n); with A's tile indexed by n too, both move along n: refused at the last
    operand's slice."""
    from tilec.families.tma_boxes import LOAD
    moved = TEXT.replace("for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):",
                         "for m, b, n in grid(cdiv(M, BM), Bt, cdiv(N, BN)):")
    a, b, c = operands(3, 300, 200, 80)
    run_kernel(bmm(moved).compile(**CLUSTER, persistent=True).kernel,
               {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < 1e-6
    swapped = TEXT.replace("for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):",
                           "for b, n, m in grid(Bt, cdiv(N, BN), cdiv(M, BM)):")
    kernel = bmm(swapped).compile(**CLUSTER).kernel
    shared = {op.attrs["tensor"] for op in kernel.walk()
              if op.name == LOAD and op.attrs.get("multicast")}
    assert shared == {"A"}
    c[...] = np.nan
    run_kernel(kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < 1e-6
    both = TEXT.replace("for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):",
                        "for b, n, m in grid(Bt, cdiv(N, BN), cdiv(M, BM)):")
    both = both.replace("A[b, m * BM : +BM", "A[b, (m + n) * BM : +BM")
    assert both != swapped
    with pytest.raises(TileError) as info:
        bmm(both).compile(**CLUSTER)
    assert "along grid axis 1 (n)" in info.value.message
    assert "both operands' tiles move along that axis" in info.value.message
    assert_caret_at(info.value, 12, "B[b, k : +BK")


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("out", ["f32", "f16"])
@pytest.mark.parametrize("shared", ["", "A", "B"])
@pytest.mark.parametrize("cluster", [2, 4])
def test_batched_clusters_match_float64(persistent, out, shared, cluster):
    """cluster=2 or 4 on a batched program: 300 rows are 3 M tiles a batch (the last
    cluster's last block past M, in fours the last two), ragged N and K, one operand with a
    batch stride of 0; the executor against float64 and the mbarrier checker on the
    cluster's ring."""
    from tilec.analysis.hazards import check_schedule
    a, b, c = operands(3, 300, 200, 80, shared=shared)
    c = c.astype(np.float16) if out == "f16" else c
    compiled = bmm(retyped("f16", out)).compile(**{**CLUSTER, "cluster": cluster},
                                                persistent=persistent)
    roles = compiled.kernel.schedule.roles
    assert (roles.cluster, roles.persistent, roles.batches) == (cluster, persistent,
                                                                persistent)
    check_schedule(compiled.kernel)
    run_kernel(compiled.kernel, {"A": a, "B": b, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, b)) < (2e-3 if out == "f16" else 1e-6)


def test_a_batched_cluster_masks_the_stores_of_the_block_past_m():
    """5 M tiles a batch of a launch specialised on M = 640: the pair's block past M stores
    under its M mask, not into the next batch's first rows."""
    compiled = bmm().compile(**CLUSTER, M=640, N=1024, K=1024, Bt=5)
    (store,) = [op for op in compiled.kernel.walk() if op.name == "tile.store"]
    assert store.attrs["masked"][0]
    plain = bmm().compile(**HOPPER, M=640, N=1024, K=1024, Bt=5).kernel
    assert not next(op for op in plain.walk() if op.name == "tile.store").attrs["masked"][0]


def test_a_batched_cluster_pairs_m_tiles_within_each_batch():
    """The launch: pairs of M tiles a batch (3 M tiles are 2 pairs), whole clusters;
    persistent, at most a cluster a pair of all batches' (the batch is axis 0 of the
    sizes, not M); one tile a block, the pairs on x and the batch on y. B goes through 3-D
    maps, multicast, half a box's rows a block."""
    from tilec.families.tma_boxes import tensor_map_box
    from tilec.launch.binding import launch_cluster
    wide = dict(CLUSTER, BN=256)
    persistent = bmm().compile(**wide, persistent=True).kernel
    one_tile = bmm().compile(**wide).kernel
    assert launch_cluster(persistent) == launch_cluster(one_tile) == (2, 1, 1)
    assert launch_grid([3, 3, 2], persistent, 132) == (2 * 3 * 2 * 2, 1, 1)
    assert launch_grid([32, 8, 4], persistent, 132) == (132, 1, 1)
    assert launch_grid([32, 8, 4], persistent, 131) == (130, 1, 1)
    assert launch_grid([3, 3, 2], one_tile) == (4 * 2, 3, 1)
    assert tensor_map_box(persistent, "B") == (64, 32, 128)
    ptx = bmm().ptx(**wide, persistent=True)
    multicasts = [line for line in ptx.splitlines() if ".multicast::cluster" in line]
    assert len(multicasts) == 4 and all(".3d." in line for line in multicasts)


def test_explain_says_a_cluster_pairs_m_tiles_within_each_batch():
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(bmm().compile(**CLUSTER, persistent=True,
                                                    raster_group=16), ptxas=False))
    line = next(line for line in text.splitlines()
                if line.strip().startswith("cluster tiles"))
    assert "8 a group (16 rows of tiles, the raster group)" in line
    assert "a batch's M tiles go 2 a cluster within it" in line and "persistent" in line


def test_explain_says_the_persistent_blocks_walk_the_batches():
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(bmm().compile(**PERSISTENT), ptxas=False))
    line = next(line for line in text.splitlines() if line.strip().startswith("batches"))
    assert "persistent: a block per SM walks the tile index t over batches x tiles" in line


# -- explain and PTX provenance -----------------------------------------------------------------

def test_explain_says_how_the_grid_picks_the_batches():
    from tilec.tools.explain import explain, render_explanation
    for options, tma in ((dict(arch="sm_80"), False), (HOPPER, True)):
        text = render_explanation(explain(bmm().compile(**options), ptxas=False))
        line = next(line for line in text.splitlines() if line.strip().startswith("batches"))
        assert "grid axis 0 (b) picks matrix b of A, B, C" in line
        assert ("3-D tensor maps" in line) == tma, line


def test_the_batch_offset_carries_its_source_line():
    ptx = bmm().compile(arch="sm_80", annotate=True).ptx
    lines = ptx.splitlines()
    views = [i for i, line in enumerate(lines) if "<- tensor.batch" in line]
    assert len(views) == 3
    assert "line 12: `acc += A[b, m * BM : +BM, k : +BK]" in lines[views[0]]
    assert "line 13: `C[b, m * BM : +BM, n * BN : +BN] = acc`" in lines[views[2]]
    assert any("mad.lo.s64" in line for line in lines[views[0]:views[0] + 4])


# -- ptxas ---------------------------------------------------------------------------------------

@pytest.mark.skipif(__import__("shutil").which("ptxas") is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_16_bit_outputs_assemble_on_every_target(dtype, tmp_path):
    """bmm.py writing C in the inputs' dtype (sm_90a: TMA stores through a 3-D map) on
    every target, ragged; tests/test_ptxas.py assembles the sample itself."""
    from tests.test_ptxas import assert_assembles
    function = bmm(retyped(dtype, dtype))
    def ptx_for(arch: str) -> str:
        options = dict(HOPPER, arch=arch) if arch == "sm_90a" else dict(arch=arch)
        return function.ptx(M=1000, N=1000, K=77, **options)
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx_for("sm_90a")
    assert_assembles(ptx_for, tmp_path, archs=("sm_80", "sm_86", "sm_90", "sm_90a"))


# -- packing misaligned operands at launch ---------------------------------------------------

def batched_args(batches, m, n, k, b_strides=None):
    return {"A": device_array("A", (batches, m, k)),
            "B": device_array("B", (batches, k, n), b_strides),
            "C": device_array("C", (batches, m, n), dtype="f32")}


def test_a_batch_of_misaligned_rows_is_packed_as_one_2d_array():
    from tilec.launch.packing import plan_packing
    kernel = bmm().lower()
    plan = plan_packing(kernel, batched_args(8, 4095, 4097, 128), "auto", ["C"])
    assert plan.names == ("B",) and plan.padded == ()  # K is never padded in a batch
    (packed,) = plan.tensors
    # 8 batches of 128 rows of 4097 elements, one after another: 1024 rows of 4160.
    assert (packed.batches, packed.shared_batch) == (8, False)
    assert packed.shape == (1024, 4097) and packed.row_stride == 4160
    assert packed.argument_shape == (8, 128, 4097)
    assert packed.argument_strides == (128 * 4160, 4160, 1)
    assert (packed.spec.contiguous_dim, packed.spec.vec_elems) == (2, 8)
    assert packed.describe() == "B packed to stride 4160 (rows were 2-byte aligned)"


def test_a_shared_batch_packs_its_one_matrix_and_stays_shared():
    from tilec.launch.packing import plan_packing
    plan = plan_packing(bmm().lower(), batched_args(8, 4095, 4097, 128, (0, 4097, 1)),
                        "auto", ["C"])
    (packed,) = plan.tensors
    assert packed.shared_batch and packed.shape == (128, 4097)
    assert packed.argument_shape == (8, 128, 4097) and packed.argument_strides == (0, 4160, 1)


def test_batches_that_are_not_one_after_another_are_read_in_place():
    from tilec.launch.packing import plan_packing
    # Each batch padded by a row: not one 2-D array.
    args = batched_args(8, 4095, 4097, 128, (129 * 4097, 4097, 1))
    assert not plan_packing(bmm().lower(), args, "always", ["C"])


def test_the_packer_copies_the_batches_and_hands_the_kernel_a_3d_scratch(monkeypatch):
    from tests.test_packing import FakeBuffer, FakeFunction, fake_launch
    from tilec.launch.packing import Packer, plan_packing
    monkeypatch.setattr("tilec.runtime.launch", fake_launch)
    fake = FakeFunction()
    monkeypatch.setattr("tilec.launch.packing.pack_function", lambda itemsize, arch: fake)
    tensors = batched_args(8, 4095, 4097, 128)
    plan = plan_packing(bmm().lower(), tensors, "auto", ["C"])
    packer = Packer(plan, tensors, "sm_90a", {"B": FakeBuffer(1024 * 4160 * 2, ptr=0xB0000)})
    packer.launch()
    [(_, _, _, args, _)] = fake.launches
    # src, dst, rows, rows copied, cols, src row stride, src element stride, dst row stride
    assert args == (BASE, 0xB0000, 1024, 1024, 4097, 4097, 1, 4160)
    scratch = packer.args["B"]
    assert (scratch.ptr, scratch.shape, scratch.strides) == (0xB0000, (8, 128, 4097),
                                                             (128 * 4160, 4160, 1))
    assert packer.args["A"] is tensors["A"] and packer.args["C"] is tensors["C"]


@pytest.mark.parametrize("shared", [False, True])
def test_a_packed_batch_compiles_for_wgmma_and_reads_right(shared):
    """What the pack kernel writes (numpy here), read by the sm_90a kernel compiled for the
    packed spec (wgmma, 3-D TMA maps) in the executor: the float64 product."""
    from tilec.launch.binding import Bound
    from tilec.launch.packing import plan_packing
    batches, m, n, k = 3, 70, 77, 64
    strides = (0, n, 1) if shared else None
    kernel = bmm().lower(BM=128, BN=128, BK=64)
    tensors = batched_args(batches, m, n, k, strides)
    plan = plan_packing(kernel, tensors, "always", ["C"])
    assert plan.names == ("B",)
    (packed,) = plan.tensors
    rng = np.random.default_rng(4)
    a = rng.standard_normal((batches, m, k)).astype(np.float16)
    b = rng.standard_normal((1 if shared else batches, k, n)).astype(np.float16)
    flat = np.zeros((packed.rows, packed.row_stride), np.float16)
    flat[:, :n] = b.reshape(-1, n)
    itemsize = flat.itemsize
    b_packed = np.lib.stride_tricks.as_strided(
        flat, packed.argument_shape, tuple(s * itemsize for s in packed.argument_strides))
    spec = plan.spec(spec_for(Bound(tensors, {}, {"Bt": batches, "M": m, "N": n, "K": k})))
    compiled = bmm().compile(arch="sm_90a", spec=spec, BM=128, BN=128, BK=64)
    assert compiled.kernel.schedule.tiling.kind == "wgmma"
    c = np.full((batches, m, n), np.nan, np.float32)
    run_kernel(compiled.kernel, {"A": a, "B": b_packed, "C": c}, ops=op_catalogue())
    assert rel_error(c, float64_bmm(a, np.broadcast_to(b, (batches, k, n)))) < 1e-6
