"""Batched matmul (samples/bmm.py: C[b] = A[b] @ B[b] over a grid axis of batches) on the GPU
against a float64 reference (torch.bmm in float64): the mma.sync path (sm_80 code, which
every GPU from sm_80 runs) and the wgmma + TMA path (sm_90a, compute capability 9.0 only),
f16 and bf16 (and f32 on mma.sync), ragged M, N and K in every batch, one operand shared by
every batch through a batch stride of 0 (torch's expand), 16-bit outputs (TMA stores on
sm_90a), clusters of two pairing M tiles within each batch (an odd number of them
included), outputs poisoned with NaN. The sm_90a runs check that the kernel they ran loads with
3-D TMA boxes, so a silent fallback to cp.async does not pass for the Hopper path."""
from __future__ import annotations

from pathlib import Path

import pytest

from tilec.kernel import load_file
from tilec.runtime.driver import current_device, gpu_unavailable_reason, has_gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "bmm.py"
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5}  # f32: exact FFMA
# (Bt, M, N, K): one element; ragged M, N and K (no tile divides them) in every batch; a
# larger batch of aligned matrices.
SHAPES = [(1, 1, 1, 1), (3, 127, 129, 65), (4, 1000, 1003, 77), (8, 512, 512, 256)]
# sm_90a: aligned rows (TMA needs 16-byte row strides), ragged M and N edges, and a K whose
# last step runs past K (77: TMA's zero fill must stop at the batch's own K rows of B).
HOPPER_SHAPES = [(3, 1000, 1024, 64), (4, 1000, 1016, 77 + 3), (2, 2048, 2048, 1024)]
HOPPER_TILES = [dict(BM=128, BN=256, BK=64, stages=3), dict(BM=128, BN=128, BK=64, stages=4)]
TMA_3D = "cp.async.bulk.tensor.3d"


M_MAJOR_GRID = "for b, m, n in grid(Bt, cdiv(M, BM), cdiv(N, BN)):"


def bmm(dtype: str, out: str = "f32", n_major: bool = False):
    """bmm.py with A and B read as ``dtype`` and C written as ``out``; with ``n_major`` its
    grid written ``for b, n, m``, so consecutive blocks walk N tiles within a batch."""
    text = SAMPLE.read_text().replace("A: f16[", f"A: {dtype}[").replace("B: f16[", f"B: {dtype}[")
    if out != "f32":
        text = text.replace("C: f32[", f"C: {out}[").replace("] = acc\n", f"] = acc.to({out})\n")
    if n_major:
        assert M_MAJOR_GRID in text
        text = text.replace(M_MAJOR_GRID, "for b, n, m in grid(Bt, cdiv(N, BN), cdiv(M, BM)):")
    return load_file(SAMPLE, text=text)["bmm"]


def randn(shape, dtype: str):
    return torch.randn(*shape, device="cuda").to(TORCH[dtype])


def operands(batches, m, n, k, dtype, shared="", out="f32"):
    """A [Bt, M, K], B [Bt, K, N] and a NaN C; the operands named in ``shared`` are one
    matrix expanded over the batch (stride 0)."""
    def tensor(name, rows, cols):
        if name in shared:
            return randn((rows, cols), dtype).expand(batches, rows, cols)
        return randn((batches, rows, cols), dtype)
    a, b = tensor("A", m, k), tensor("B", k, n)
    if batches > 1:
        assert [x.stride(0) == 0 for x in (a, b)] == [name in shared for name in "AB"]
    c = torch.full((batches, m, n), float("nan"), device="cuda", dtype=TORCH[out])
    return a, b, c


def rel_error(out, ref) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - ref) / max(float(torch.linalg.norm(ref)),
                                                            1e-30))


def check(function, a, b, c, tolerance, **options) -> None:
    ref = torch.bmm(a.double(), b.double())
    function(a, b, c, **options)
    torch.cuda.synchronize()
    assert rel_error(c, ref) < tolerance


# -- mma.sync (sm_80 code) ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mma_sync(shape, stages, dtype):
    a, b, c = operands(*shape, dtype)
    check(bmm(dtype), a, b, c, TOLERANCE[dtype], arch="sm_80", stages=stages)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shared", ["A", "B"])
@pytest.mark.parametrize("shape", SHAPES[1:], ids=lambda s: "x".join(map(str, s)))
def test_mma_sync_with_a_batch_stride_of_0(shape, shared, dtype):
    a, b, c = operands(*shape, dtype, shared=shared)
    check(bmm(dtype), a, b, c, TOLERANCE[dtype], arch="sm_80")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_mma_sync_16_bit_outputs(dtype):
    a, b, c = operands(3, 1000, 1003, 77, dtype, out=dtype)
    check(bmm(dtype, dtype), a, b, c, 2 * TOLERANCE[dtype], arch="sm_80",
          BM=128, BN=256, BK=64, warps=(2, 4))


def test_the_default_target_runs_it():
    """The call's own target (the device's), 128x128x32 defaults."""
    a, b, c = operands(4, 1000, 1003, 77, "f16")
    check(bmm("f16"), a, b, c, TOLERANCE["f16"])


# -- wgmma + TMA (sm_90a) -------------------------------------------------------------------

def assert_loads_with_3d_tma(function, a, b, c, **options) -> None:
    ptx = function.prepare(a, b, c, **options).compiled.ptx
    assert TMA_3D in ptx and "wgmma.mma_async" in ptx, "the call did not take the TMA path"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles", HOPPER_TILES, ids=["128x256x64", "128x128x64"])
@pytest.mark.parametrize("shape", HOPPER_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_wgmma(hopper, shape, tiles, dtype):
    function = bmm(dtype)
    a, b, c = operands(*shape, dtype)
    options = dict(arch="sm_90a", **tiles)
    check(function, a, b, c, TOLERANCE[dtype], **options)
    assert_loads_with_3d_tma(function, a, b, c, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shared", ["A", "B"])
def test_wgmma_with_a_batch_stride_of_0(hopper, shared, dtype):
    """The expanded operand's map holds one batch, which every program reads."""
    function = bmm(dtype)
    a, b, c = operands(4, 1000, 1024, 80, dtype, shared=shared)
    options = dict(arch="sm_90a", **HOPPER_TILES[0])
    check(function, a, b, c, TOLERANCE[dtype], **options)
    assert_loads_with_3d_tma(function, a, b, c, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_wgmma_16_bit_outputs_stored_with_tma(hopper, dtype):
    """C in 16 bits leaves through TMA stores of a 3-D map: the ragged last row tile of a
    batch (M = 1000) must not write into the next batch's first rows."""
    function = bmm(dtype, dtype)
    a, b, c = operands(3, 1000, 1024, 128, dtype, out=dtype)
    options = dict(arch="sm_90a", **HOPPER_TILES[0])
    check(function, a, b, c, 2 * TOLERANCE[dtype], **options)
    ptx = function.prepare(a, b, c, **options).compiled.ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shared", ["", "B"])
def test_wgmma_after_packing_misaligned_rows(hopper, shared, dtype):
    """N = 1003: B's rows are 2-byte aligned, so the launch packs B (its batches as one 2-D
    array, or its one shared matrix) into aligned scratch, which TMA then reads."""
    function = bmm(dtype)
    a, b, c = operands(3, 1000, 1003, 128, dtype, shared=shared)
    options = dict(arch="sm_90a", **HOPPER_TILES[0])
    check(function, a, b, c, TOLERANCE[dtype], **options)
    launch = function.prepare(a, b, c, **options)
    assert launch.packing.names == ("B",)
    assert TMA_3D in launch.compiled.ptx and "wgmma.mma_async" in launch.compiled.ptx


def test_the_ragged_bench_row_matches_float64():
    """The bench's 8x4095x4097x128 f16 row in its tuned configuration (f16 C)."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.tuning import tuned_config
    from tilec.options import target_arch
    arch = target_arch(current_device().compute_capability)
    case = Case(4095, 4097, 128, "f16", batch=8)
    a, b, c = operands(8, 4095, 4097, 128, "f16", out="f16")
    check(bmm("f16", "f16"), a, b, c, 2 * TOLERANCE["f16"], **tuned_config(case, arch))


def padded(batches: int, rows: int, cols: int, dtype: str, pad_to: int = 16):
    """A [Bt, rows, cols] view of [Bt, rows, cols rounded up to ``pad_to``]: 16-byte aligned
    rows and batches whatever ``cols`` is, random values in the padding."""
    storage = randn((batches, rows, -(-cols // pad_to) * pad_to), dtype)
    return storage[:, :, :cols]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_wgmma_ragged_k_reads_zeros_not_the_next_batch(hopper, dtype):
    """K = 77 in padded storage: the last K step's box of A runs into the padding and the one
    of B into the next batch's rows; TMA's 3-D map must fill both with zeros."""
    batches, m, n, k = 3, 1000, 1024, 77
    function = bmm(dtype)
    a, b = padded(batches, m, k, dtype), randn((batches, k, n), dtype)
    c = torch.full((batches, m, n), float("nan"), device="cuda")
    options = dict(arch="sm_90a", **HOPPER_TILES[0])
    check(function, a, b, c, TOLERANCE[dtype], **options)
    assert_loads_with_3d_tma(function, a, b, c, **options)


# -- C's rows not 16-byte aligned: staged, then stored a row at a time (via = rows) -----------

def assert_row_store_epilogue(function, a, b, c, **options) -> None:
    launch = function.prepare(a, b, c, **options)
    assert launch.compiled.kernel.schedule.epilogue.via == "rows"
    assert "ld.shared.b16" in launch.compiled.ptx and "wgmma.mma_async" in launch.compiled.ptx


ROW_STORE_TILES = [dict(BM=128, BN=256, BK=64, stages=3), dict(BM=64, BN=128, BK=64, stages=6),
                   dict(BM=128, BN=128, BK=64, stages=4)]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles", ROW_STORE_TILES, ids=["128x256x64", "64x128x64", "128x128x64"])
@pytest.mark.parametrize("shape", [(3, 1000, 1003, 128), (2, 129, 4097, 64), (5, 64, 67, 256)],
                         ids=lambda s: "x".join(map(str, s)))
def test_wgmma_16_bit_outputs_with_misaligned_rows(hopper, shape, tiles, dtype):
    """N odd: C's rows are 2-byte aligned, so TMA cannot store them; the consumers copy the
    staged tile out a row at a time, masking the last columns (N) and stopping at the last
    row (M) of each batch, never writing into the next batch's rows."""
    function = bmm(dtype, dtype)
    a, b, c = operands(*shape, dtype, out=dtype)
    options = dict(arch="sm_90a", **tiles)
    check(function, a, b, c, 2 * TOLERANCE[dtype], **options)
    assert_row_store_epilogue(function, a, b, c, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_row_stores_into_an_odd_address_view_leave_its_neighbours_alone(hopper, dtype):
    """C a view starting one element into its storage (a 2-byte aligned address) with rows of
    N + 3 elements: the elements around each row must keep their sentinel."""
    batches, m, n, k = 3, 1000, 1000, 64
    function = bmm(dtype, dtype)
    a, b, _ = operands(batches, m, n, k, dtype, out=dtype)
    storage = torch.full((batches, m, n + 3), 7.0, device="cuda", dtype=TORCH[dtype])
    c = storage[:, :, 1:n + 1]
    c.fill_(float("nan"))
    options = dict(arch="sm_90a", **ROW_STORE_TILES[0])
    check(function, a, b, c, 2 * TOLERANCE[dtype], **options)
    assert_row_store_epilogue(function, a, b, c, **options)
    assert bool((storage[:, :, 0] == 7).all()) and bool((storage[:, :, n + 1:] == 7).all())


@pytest.mark.parametrize("persistent", [False, True])
def test_2d_matmul_with_misaligned_output_rows(hopper, persistent):
    """samples/matmul.py with f16 C of 4097 columns (the 4095x4097x4093 bench shape's C),
    one tile a block and persistent blocks (the staging tile reused across tiles)."""
    from tilec.benchmarking.contenders import sample_kernel
    m, n, k = 1000, 4097, 200
    a, b = randn((m, k), "f16"), randn((k, n), "f16")
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    function = sample_kernel("f16", "f16")
    options = dict(arch="sm_90a", BM=128, BN=128, BK=64, stages=4, persistent=persistent)
    function(a, b, c, **options)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < 2 * TOLERANCE["f16"]
    assert_row_store_epilogue(function, a, b, c, **options)


# -- persistent blocks over batches x tiles -----------------------------------------------------

def assert_persistent_over_batches(function, a, b, c, **options) -> None:
    compiled = function.prepare(a, b, c, **options).compiled
    roles = compiled.kernel.schedule.roles
    assert roles.persistent and roles.batches, roles
    assert TMA_3D in compiled.ptx and "%nctaid.x" in compiled.ptx


# More tiles than an H100 has SMs (each block takes several, across batches: 8 x 8 x 4 =
# 256 tiles of 128x256), fewer (a block a tile), ragged M / N / K edges in every batch.
PERSISTENT_SHAPES = [(8, 1000, 1024, 80), (3, 129, 255, 64), (5, 1024, 1000, 1024)]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles", HOPPER_TILES, ids=["128x256x64", "128x128x64"])
@pytest.mark.parametrize("shape", PERSISTENT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("out", ["f32", "c16"])
def test_persistent_wgmma_walks_every_batch(hopper, out, shape, tiles, dtype):
    """persistent=True on a batched program: a block per SM loops over batches x tiles; each
    tile's loads and stores (f32: direct; 16-bit C: TMA stores) take the tile's batch."""
    out = dtype if out == "c16" else out
    function = bmm(dtype, out)
    a, b, c = operands(*shape, dtype, out=out)
    options = dict(arch="sm_90a", persistent=True, **tiles)
    check(function, a, b, c, 2 * TOLERANCE[dtype], **options)
    assert_persistent_over_batches(function, a, b, c, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shared", ["A", "B"])
def test_persistent_wgmma_with_a_batch_stride_of_0(hopper, shared, dtype):
    function = bmm(dtype, dtype)
    a, b, c = operands(6, 1000, 1024, 80, dtype, shared=shared, out=dtype)
    options = dict(arch="sm_90a", persistent=True, **HOPPER_TILES[0])
    check(function, a, b, c, 2 * TOLERANCE[dtype], **options)
    assert_persistent_over_batches(function, a, b, c, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_persistent_wgmma_16_bit_outputs_with_misaligned_rows(hopper, dtype):
    """N odd: the row-store epilogue of each tile into its own batch, the staging tile
    reused across tiles (and batches)."""
    function = bmm(dtype, dtype)
    a, b, c = operands(8, 1000, 1003, 128, dtype, out=dtype)
    options = dict(arch="sm_90a", persistent=True, **HOPPER_TILES[1])
    check(function, a, b, c, 2 * TOLERANCE[dtype], **options)
    assert_row_store_epilogue(function, a, b, c, **options)
    assert_persistent_over_batches(function, a, b, c, **options)


# -- clusters of two blocks: pairs of M tiles within each batch ---------------------------------

def check_batched_cluster(function, a, b, c, dtype, persistent, **options) -> None:
    """The batched product in clusters against float64, and its kernel in clusters of
    ``options["cluster"]`` multicasting through 3-D maps."""
    check(function, a, b, c, 2 * TOLERANCE[dtype], persistent=persistent, **options)
    compiled = function.prepare(a, b, c, persistent=persistent, **options).compiled
    roles = compiled.kernel.schedule.roles
    assert roles.cluster == options["cluster"] and roles.persistent == persistent, roles
    multicasts = [line for line in compiled.ptx.splitlines() if ".multicast::cluster" in line]
    assert multicasts and all(".3d." in line for line in multicasts)


# An odd number of M tiles a batch (300 rows: 3 of 128; 640: 5), the last pair's second
# block past M in every batch; an even one with ragged edges and more pairs than an H100
# has clusters (8 x 4 x 4 = 128 of 128x256); ragged N, K past the batch's own K rows.
CLUSTER_SHAPES = [(3, 300, 264, 64), (5, 640, 1000, 1024), (8, 1000, 1024, 80)]


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles", HOPPER_TILES, ids=["128x256x64", "128x128x64"])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("out", ["f32", "c16"])
def test_clusters_pair_m_tiles_within_each_batch(hopper, out, shape, tiles, dtype, persistent):
    """cluster=2 on a batched program: the pair multicasts one batch's B tile; f32 C
    (direct stores) and 16-bit C (TMA stores)."""
    out = dtype if out == "c16" else out
    function = bmm(dtype, out)
    a, b, c = operands(*shape, dtype, out=out)
    options = dict(arch="sm_90a", cluster=2, **tiles)
    check_batched_cluster(function, a, b, c, dtype, persistent, **options)


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("shared", ["", "B"])
def test_clusters_of_four_group_m_tiles_within_each_batch(hopper, shared, shape, dtype,
                                                          persistent):
    """cluster=4 on a batched program, 16-bit C: the four multicast one batch's B tile (or,
    with a batch stride of 0, the one matrix); 3 and 5 M tiles a batch leave one and three
    blocks of a batch's last cluster past M."""
    function = bmm(dtype, dtype)
    a, b, c = operands(*shape, dtype, shared=shared, out=dtype)
    options = dict(arch="sm_90a", cluster=4, **HOPPER_TILES[1])
    check_batched_cluster(function, a, b, c, dtype, persistent, **options)


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", CLUSTER_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("shared", ["", "A", "B"])
def test_two_dimensional_clusters_within_each_batch(hopper, shared, shape, dtype, persistent):
    """cluster=2, cluster_n=2 on a batched program, f32 C: a 2x2 cluster's tiles lie in one
    batch, each M row multicasting one batch's A tile and each N column its B tile (or,
    with a batch stride of 0, the one matrix); 264 and 1000 columns (3 and 8 tiles of 128)
    leave the last cluster column half past N in every batch."""
    function = bmm(dtype, "f32")
    a, b, c = operands(*shape, dtype, shared=shared, out="f32")
    options = dict(arch="sm_90a", cluster=2, cluster_n=2, **HOPPER_TILES[1])
    check_batched_cluster(function, a, b, c, dtype, persistent, **options)
    roles = function.prepare(a, b, c, persistent=persistent, **options).compiled.kernel \
        .schedule.roles
    assert roles.cluster_n == 2


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shared", ["", "B"])
@pytest.mark.parametrize("out", ["f32", "c16"])
def test_clusters_pair_n_tiles_of_an_n_major_grid(hopper, out, shared, dtype, persistent):
    """``for b, n, m``: the pair takes two N tiles of one batch and multicasts their A tile;
    1000 columns are 8 tiles of 128, 1100 are 9 (the last pair's second block past N in
    every batch); B expanded over the batches (stride 0) as well."""
    out = dtype if out == "c16" else out
    function = bmm(dtype, out, n_major=True)
    for shape in [(3, 300, 1100, 80), (4, 520, 1000, 1024)]:
        a, b, c = operands(*shape, dtype, shared=shared, out=out)
        options = dict(arch="sm_90a", cluster=2, **HOPPER_TILES[1])
        check_batched_cluster(function, a, b, c, dtype, persistent, **options)


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shared", ["A", "B"])
def test_clusters_with_a_batch_stride_of_0(hopper, shared, dtype, persistent):
    """The expanded operand (torch's expand) in clusters: B's one matrix multicast, or A's
    one matrix read by every batch; 5 M tiles a batch."""
    function = bmm(dtype, dtype)
    a, b, c = operands(6, 640, 1024, 80, dtype, shared=shared, out=dtype)
    options = dict(arch="sm_90a", cluster=2, **HOPPER_TILES[0])
    check_batched_cluster(function, a, b, c, dtype, persistent, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_persistent_clusters_with_misaligned_output_rows(hopper, dtype):
    """N odd: the row-store epilogue of each tile in a cluster, into its batch; 1000 rows
    are 8 M tiles of 128, the last one ragged."""
    function = bmm(dtype, dtype)
    a, b, c = operands(8, 1000, 1003, 128, dtype, out=dtype)
    options = dict(arch="sm_90a", cluster=2, **HOPPER_TILES[1])
    check_batched_cluster(function, a, b, c, dtype, True, **options)
    assert_row_store_epilogue(function, a, b, c, persistent=True, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_batched_bench_row_in_clusters_matches_float64(hopper, dtype):
    """The bench's 32x1024x1024x1024 row, its tuned configuration with cluster=2."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.tuning import tuned_config
    config = dict(tuned_config(Case(1024, 1024, 1024, dtype, batch=32), "sm_90a"), cluster=2)
    a, b, c = operands(32, 1024, 1024, 1024, dtype, out=dtype)
    persistent = config.pop("persistent", False)
    check_batched_cluster(bmm(dtype, dtype), a, b, c, dtype, persistent, **config)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_the_tuned_batched_bench_row_matches_float64(hopper, dtype):
    """The bench's 32x1024x1024x1024 row in its tuned configuration (16-bit C)."""
    from tilec.benchmarking.cases import Case
    from tilec.benchmarking.tuning import tuned_config
    case = Case(1024, 1024, 1024, dtype, batch=32)
    a, b, c = operands(32, 1024, 1024, 1024, dtype, out=dtype)
    check(bmm(dtype, dtype), a, b, c, 2 * TOLERANCE[dtype], **tuned_config(case, "sm_90a"))
