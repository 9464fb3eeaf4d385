"""The Hopper path (arch="sm_90a": wgmma products, TMA + mbarrier loads, warp specialization)
on a compute capability 9.0 GPU, against a float64 reference: the matmul samples at the tile
shapes TMA takes (128x256x64, 128x128x64, 64x128x128) and stages 2 to 4, square and ragged
sizes, f16 and bf16, outputs poisoned with NaN; a transposed view of B; ragged K read through
TMA's out-of-bounds zeros; a prepared launch run again on fresh inputs; and HGMMA in the SASS.
Each run also checks that the kernel it ran loads with TMA, so a silent fallback to the
cp.async path does not pass for the Hopper one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tilec.benchmarking import tuning
from tilec.kernel import load_file
from tilec.runtime.driver import gpu_unavailable_reason, has_gpu

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.usefixtures("hopper"),  # tests/gpu/conftest.py
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]
torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
ARCH = "sm_90a"
TILES = [dict(BM=128, BN=256, BK=64), dict(BM=128, BN=128, BK=64), dict(BM=64, BN=128, BK=128)]
TILE_IDS = ["128x256x64", "128x128x64", "64x128x128"]
STAGES = [2, 3, 4]
# 1000x1003x77: ragged M and N edges, and K = 77 (one whole BK = 64 step and a ragged one).
SHAPES = [(256, 256, 256), (1000, 1003, 77)]
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2}
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
SAMPLE_FUNCTIONS = {"matmul": "matmul", "matmul_bt": "matmul_bt", "gemm_epilogue": "gemm"}
TMA_LOAD = "cp.async.bulk.tensor"


M_MAJOR_GRID = "for m, n in grid(cdiv(M, BM), cdiv(N, BN)):"
N_MAJOR_GRID = "for n, m in grid(cdiv(N, BN), cdiv(M, BM)):"


def sample(name: str, dtype: str, n_major: bool = False):
    """The sample's tile function with every f16 of its source read as ``dtype``; with
    ``n_major`` its grid written ``for n, m``, so consecutive blocks walk N tiles."""
    path = SAMPLES / f"{name}.py"
    text = re.sub(r"\bf16\b", dtype, path.read_text())
    if n_major:
        assert M_MAJOR_GRID in text
        text = text.replace(M_MAJOR_GRID, N_MAJOR_GRID)
    return load_file(path, text=text)[SAMPLE_FUNCTIONS[name]]


def rel_error(out, ref) -> float:
    assert not torch.isnan(out).any(), "some outputs were never written"
    return float(torch.linalg.norm(out.double() - ref) / max(float(torch.linalg.norm(ref)),
                                                            1e-30))


def randn(shape, dtype: str):
    return torch.randn(*shape, device="cuda").to(TORCH[dtype])


class Case:
    """One sample's arguments for an (m, n, k) problem and its float64 reference.
    ``b`` is given as the sample reads it: [K, N] for matmul and gemm, [N, K] for
    matmul_bt."""

    def __init__(self, name: str, dtype: str, m: int, n: int, k: int, a=None, b=None):
        self.name, self.dtype = name, dtype
        self.a = randn((m, k), dtype) if a is None else a
        b_shape = (n, k) if name == "matmul_bt" else (k, n)
        self.b = randn(b_shape, dtype) if b is None else b
        self.m, self.n = m, n
        if name == "gemm_epilogue":
            # C is read (beta * C) and written: random, not NaN; a missed element keeps its
            # input value, which the reference does not.
            self.c = randn((m, n), dtype)
            self.bias = torch.randn(n, device="cuda")
            self.alpha, self.beta = 0.75, -0.5
        else:
            self.c = torch.full((m, n), float("nan"), device="cuda")

    def args(self) -> tuple:
        if self.name == "gemm_epilogue":
            return self.a, self.b, self.c, self.bias, self.alpha, self.beta
        return self.a, self.b, self.c

    def reference(self):
        """Computed from the inputs as they are now (call before the kernel overwrites C)."""
        b = self.b.double().T if self.name == "matmul_bt" else self.b.double()
        product = self.a.double() @ b
        if self.name == "gemm_epilogue":
            return torch.relu(self.alpha * product + self.beta * self.c.double()
                              + self.bias.double())
        return product

    def tolerance(self) -> float:
        # gemm's output is rounded to 16 bits: allow that rounding on top of the product's.
        return TOLERANCE[self.dtype] * (2 if self.name == "gemm_epilogue" else 1)

    def check(self, ref) -> None:
        torch.cuda.synchronize()
        assert rel_error(self.c, ref) < self.tolerance()


def assert_loads_with_tma(function, case: Case, **options) -> None:
    """The kernel a call with these arguments and options runs (prepare() compiles and packs
    as a call does, from the compile cache) loads its operands with TMA and multiplies with
    wgmma."""
    ptx = function.prepare(*case.args(), **options).compiled.ptx
    assert TMA_LOAD in ptx and "wgmma.mma_async" in ptx, "the call did not take the TMA path"


def rerun_with_fresh_inputs(launch, case: Case) -> None:
    """A prepared launch that meets through a workspace (split-K, stream-K) run four times:
    correct each time, fresh inputs from the third on (the workspace must hold this launch's
    partials, and its counters or flags be back at zero), the same bits for the same inputs
    (the parts are added in a fixed order)."""
    c0 = case.c.clone()
    results = []
    for round_ in range(4):
        if round_ == 2:
            case.a.copy_(randn(case.a.shape, case.dtype))
            case.b.copy_(randn(case.b.shape, case.dtype))
        case.c.copy_(c0)
        ref = case.reference()
        launch()
        case.check(ref)
        results.append(case.c.clone())
    assert torch.equal(results[0], results[1]) and torch.equal(results[2], results[3])


def run_and_check_on_mma_sync(name: str, dtype: str, shape: tuple[int, int, int],
                              **options) -> None:
    """The sample on fresh inputs of ``shape`` against float64, on mma.sync without TMA
    (the tuning's tiles for misaligned rows it reads in place)."""
    function = sample(name, dtype)
    case = Case(name, dtype, *shape)
    ref = case.reference()
    function(*case.args(), arch=ARCH, **options)
    case.check(ref)
    ptx = function.prepare(*case.args(), arch=ARCH, **options).compiled.ptx
    assert "mma.sync" in ptx and TMA_LOAD not in ptx


def run_and_check(name: str, dtype: str, shape: tuple[int, int, int], n_major: bool = False,
                  **options) -> None:
    """The sample on fresh inputs of ``shape`` against float64, on the TMA path."""
    function = sample(name, dtype, n_major)
    case = Case(name, dtype, *shape)
    options = dict(arch=ARCH, **options)
    ref = case.reference()
    function(*case.args(), **options)
    case.check(ref)
    assert_loads_with_tma(function, case, **options)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("tiles", TILES, ids=TILE_IDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_samples(shape, tiles, stages, name, dtype):
    run_and_check(name, dtype, shape, stages=stages, **tiles)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (2048, 2048, 2048)],
                         ids=lambda s: "x".join(map(str, s)))
def test_two_blocks_per_sm(shape, name, dtype):
    """64x128x64 tiles, two blocks resident on each SM (.minnctapersm 2, the register file
    and shared memory halved): the same results."""
    run_and_check(name, dtype, shape, stages=4, BM=64, BN=128, BK=64, blocks_per_sm=2)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (2048, 3072, 1000), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_persistent(shape, stages, name, dtype):
    """One block per SM looping over the tiles: more tiles than blocks, K steps that are
    not a multiple of the ring (the phases go on across tiles), ragged edges."""
    run_and_check(name, dtype, shape, stages=stages, BM=128, BN=256, BK=64, persistent=True)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", [{}, {"cluster": 2}, {"persistent": True},
                                      {"persistent": True, "consumers": "pingpong", "BM": 64}],
                         ids=["one-tile", "cluster", "persistent", "pingpong"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (300, 520, 1000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_one_stage(shape, schedule, name, dtype):
    """A ring of one stage: every product group waited for before the stage goes back."""
    run_and_check(name, dtype, shape, stages=1, **{**TILES[1], **schedule})


@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", [{}, {"persistent": True},
                                      {"persistent": True, "consumers": "pingpong", "BM": 64},
                                      {"persistent": True, "stream_k": True}],
                         ids=["one-tile", "persistent", "pingpong", "stream-k"])
def test_no_k_step_stores_the_epilogue_of_zero_products(schedule, name):
    """K = 0: the K loop runs no step on any tile, so every tile's accumulators stay zeros
    and the epilogue stores its value of them (C for matmul; relu(beta C + bias) for
    gemm_epilogue). The same kernel then runs at K = 77, and again at K = 0. 2000 x 1500
    is 192 tiles: a persistent block takes two, the second after the first's epilogue."""
    function = sample(name, "f16")
    options = dict(arch=ARCH, stages=3, **{"BM": 128, "BN": 128, "BK": 64, **schedule})
    for k in (0, 77, 0):
        case = Case(name, "f16", 2000, 1500, k)
        ref = case.reference()
        function(*case.args(), **options)
        torch.cuda.synchronize()
        assert not torch.isnan(case.c).any(), "some outputs were never written"
        assert torch.allclose(case.c.double(), ref, atol=2e-2, rtol=2e-2), f"K = {k}"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
def test_4096_cubed(name, dtype):
    run_and_check(name, dtype, (4096, 4096, 4096), stages=4, **TILES[0])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("tiles", TILES, ids=TILE_IDS)
@pytest.mark.parametrize("shape", [(256, 256, 256), (1000, 1003, 80), (1000, 1003, 77)],
                         ids=lambda s: "x".join(map(str, s)))
def test_a_transposed_view_of_b(shape, tiles, dtype):
    """matmul.py with B [K, N] given as the transpose of a row-major [N, K] (K contiguous):
    its tensor map has K inner. K = 77 leaves the columns 154 bytes apart, so the call packs
    B (and A) into aligned scratch first."""
    m, n, k = shape
    function = sample("matmul", dtype)
    case = Case("matmul", dtype, m, n, k, b=randn((n, k), dtype).T)
    options = dict(arch=ARCH, stages=3, **tiles)
    ref = case.reference()
    function(*case.args(), **options)
    case.check(ref)
    assert_loads_with_tma(function, case, **options)


def padded(rows: int, cols: int, dtype: str, pad_to: int = 16):
    """A [rows, cols] view of a [rows, cols rounded up to ``pad_to``] tensor: rows 16-byte
    aligned whatever ``cols`` is, so nothing is packed and TMA reads the view as it is."""
    storage = randn((rows, -(-cols // pad_to) * pad_to), dtype)
    return storage[:, :cols]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tiles", TILES, ids=TILE_IDS)
def test_ragged_k_reads_tmas_out_of_bounds_zeros(tiles, name, dtype):
    """K = 77 in aligned, padded storage: no packing, no K padding; the last K step's box
    runs past K and TMA fills it with zeros (the padding holds random values, which would
    show if it were read)."""
    m, n, k = 1000, 1003, 77
    b = padded(n, k, dtype) if name == "matmul_bt" else padded(k, n, dtype)
    case = Case(name, dtype, m, n, k, a=padded(m, k, dtype), b=b)
    function = sample(name, dtype)
    options = dict(arch=ARCH, stages=4, **tiles)
    launch = function.prepare(*case.args(), **options)
    assert not launch.packing, "aligned operands should not be packed"
    assert TMA_LOAD in launch.compiled.ptx
    ref = case.reference()
    function(*case.args(), **options)
    case.check(ref)


def test_misaligned_operands_unpacked_fall_back_to_cp_async():
    """pack="off" with K = 77 rows (154 bytes apart): TMA cannot read them, so the compile
    takes the mma.sync + cp.async path; the result is right all the same."""
    function = sample("matmul", "f16")
    case = Case("matmul", "f16", 1000, 1003, 77)
    options = dict(arch=ARCH, stages=3, pack="off", **TILES[1])
    ref = case.reference()
    function(*case.args(), **options)
    case.check(ref)
    assert TMA_LOAD not in function.prepare(*case.args(), **options).compiled.ptx


@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_prepared_launch_runs_again_on_fresh_inputs(shape, name):
    """The tensor maps are built once, with the argument list: refilling the same buffers
    and launching again must read the new values."""
    dtype = "bf16"
    function = sample(name, dtype)
    case = Case(name, dtype, *shape)
    launch = function.prepare(*case.args(), arch=ARCH, stages=4, **TILES[1])
    assert TMA_LOAD in launch.compiled.ptx
    for _ in range(3):
        case.a.copy_(randn(case.a.shape, dtype))
        case.b.copy_(randn(case.b.shape, dtype))
        if name == "gemm_epilogue":
            case.c.copy_(randn(case.c.shape, dtype))
        else:
            case.c.fill_(float("nan"))
        ref = case.reference()
        launch()
        case.check(ref)


@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
def test_the_sass_multiplies_with_hgmma(name):
    from tilec.tools.sass import sass, sass_unavailable_reason
    reason = sass_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no SASS: {reason}")
    compiled = sample(name, "f16").compile(arch=ARCH, stages=4, **TILES[0])
    assert "HGMMA" in sass(compiled.ptx, ARCH)


TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta"


def matmul_with_c_as_inputs(dtype: str):
    """samples/matmul.py with C in the inputs' dtype (acc.to(dtype)), as tilec bench runs
    it: a 16-bit output the tma_store pass takes when C's rows are 16-byte aligned."""
    from tilec.benchmarking.contenders import sample_kernel
    return sample_kernel(dtype, dtype)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("tiles", TILES, ids=TILE_IDS)
@pytest.mark.parametrize("shape", [(1000, 1024, 77), (300, 520, 200), (64, 64, 64),
                                   (2048, 3072, 1000)], ids=lambda s: "x".join(map(str, s)))
def test_the_tma_store_epilogue_clips_at_the_edges(shape, tiles, persistent, dtype):
    """C through the staging tile and TMA stores: tiles that cross the bottom and right
    edges (TMA clips them), a problem smaller than one tile, persistent blocks reusing the
    staging tile; NaN-poisoned C, so an unwritten element fails."""
    function = matmul_with_c_as_inputs(dtype)
    m, n, k = shape
    a, b = randn((m, k), dtype), randn((k, n), dtype)
    c = torch.full((m, n), float("nan"), device="cuda").to(TORCH[dtype])
    options = dict(arch=ARCH, stages=3, persistent=persistent, **tiles)
    ref = a.double() @ b.double()
    function(a, b, c, **options)
    torch.cuda.synchronize()
    assert rel_error(c, ref) < 2 * TOLERANCE[dtype]
    compiled = function.prepare(a, b, c, **options).compiled
    assert TMA_STORE in compiled.ptx, compiled.kernel.schedule.epilogue


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("shape", [(1000, 1024, 77), (300, 520, 200), (2048, 3072, 1000),
                                   (4096, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_slabs_stored_in_turn_through_two_buffers(shape, persistent, dtype):
    """128x256 beside four stages: the tile's four slabs go out in turn through two one-slab
    staging buffers (the whole tile's does not fit); persistent blocks carry the buffers'
    turns across tiles; NaN-poisoned C."""
    function = matmul_with_c_as_inputs(dtype)
    m, n, k = shape
    a, b = randn((m, k), dtype), randn((k, n), dtype)
    c = torch.full((m, n), float("nan"), device="cuda").to(TORCH[dtype])
    options = dict(arch=ARCH, stages=4, persistent=persistent, raster_group=16, **TILES[0])
    ref = a.double() @ b.double()
    function(a, b, c, **options)
    torch.cuda.synchronize()
    assert rel_error(c, ref) < 2 * TOLERANCE[dtype]
    compiled = function.prepare(a, b, c, **options).compiled
    assert compiled.kernel.schedule.epilogue.buffers == 2, compiled.kernel.schedule.epilogue


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
def test_an_unaligned_c_is_staged_and_stored_by_rows(persistent):
    """N = 1003: C's rows are not 16-byte aligned, so TMA cannot address them; the kernel
    stages the tile all the same and its consumers store it a row at a time, and says so."""
    function = matmul_with_c_as_inputs("f16")
    a, b = randn((200, 64), "f16"), randn((64, 1003), "f16")
    c = torch.full((200, 1003), float("nan"), device="cuda").to(torch.float16)
    options = dict(arch=ARCH, stages=3, persistent=persistent, **TILES[0])
    function(a, b, c, **options)
    torch.cuda.synchronize()
    assert rel_error(c, a.double() @ b.double()) < 2 * TOLERANCE["f16"]
    compiled = function.prepare(a, b, c, **options).compiled
    assert TMA_STORE not in compiled.ptx
    assert compiled.kernel.schedule.epilogue.via == "rows"


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tiles", [dict(BM=256, BN=128, BK=64), dict(BM=192, BN=128, BK=64),
                                   dict(BM=192, BN=192, BK=64)],
                         ids=["256x128x64", "192x128x64", "192x192x64"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (1024, 1024, 1024), (2048, 2056, 1000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_three_and_four_consumer_warpgroups(shape, tiles, name, dtype):
    """512 and 640 threads: the consumers' setmaxnreg.inc asks for what the producer's dec
    left of the registers the block starts with (more than that hung the GPU). 192x192 is
    the bench's one-wave tile for 2048x2056 (tuning.rounds.WIDE_SQUARE_TILE): m64n192 products,
    its last row and column of tiles mostly past M and N."""
    run_and_check(name, dtype, shape, stages=3, **tiles)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tiles", [TILES[0], TILES[1]], ids=TILE_IDS[:2])
@pytest.mark.parametrize("shape", [(640, 1024, 200), (300, 520, 200), (1000, 1003, 77),
                                   (2048, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
def test_clusters_of_two_blocks_share_b(shape, tiles, name, dtype):
    """cluster=2: each block loads half of every B stage and multicasts it; an odd number
    of M tiles (640 and 300 rows) leaves the last cluster's second block past M, loading
    zeros and storing nothing, while its half of B still reaches its peer."""
    run_and_check(name, dtype, shape, stages=3, cluster=2, **tiles)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", [{}, dict(persistent=True), dict(split_k=2)],
                         ids=["one-tile", "persistent", "split2"])
@pytest.mark.parametrize("shape", [(1000, 1100, 77), (520, 300, 1030), (2048, 2304, 256)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cluster", [2, 4])
def test_clusters_over_an_n_major_grid_share_a(cluster, shape, schedule, name, dtype):
    """``for n, m in grid(...)``: the cluster takes consecutive N tiles and multicasts their
    one A tile. 1100 and 300 columns are an odd number of 128-column tiles (9 and 3), so the
    last cluster's last blocks lie past N, loading zeros and storing nothing while their
    share of A still reaches their peers; 2048x2304 gives the persistent clusters several
    tiles each."""
    run_and_check(name, dtype, shape, n_major=True, stages=4, cluster=cluster,
                  BM=128, BN=128, BK=64, **schedule)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", [dict(persistent=True, raster_group=16),
                                      dict(persistent=True, raster_group=16, cluster=2)],
                         ids=["persistent", "persistent-cluster2"])
@pytest.mark.parametrize("tile", tuning.rounds.WHOLE_ROUND_TILES,
                         ids=lambda tile: f"{tile['BM']}x{tile['BN']}")
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (4224, 2048, 256), (2500, 4000, 200),
                                   (2100, 4000, 200)], ids=lambda s: "x".join(map(str, s)))
def test_whole_round_tiles_over_several_rounds(shape, tile, schedule, name, dtype):
    """The bench's 192x192, 128x192 and padded tiles (128x144 to 128x240, B's last slab
    padded) over more than a wave (tuning.rounds.WHOLE_ROUNDS and MULTICAST): 242, 294 and 231
    squares (352, 693 and 693 128x192 tiles, 476, 952 and 952 of 128x144) for at most 132
    blocks, so the ring goes on across tiles; 2500 rows are 14 M tiles of 192, the last 4
    rows deep; 2100 rows are 11 of 192 (17 of 128), so in clusters the last pair's second
    block lies wholly past M."""
    run_and_check(name, dtype, shape, **tile, **schedule)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tile", [*tuning.skinny.SKINNY_TILES, *tuning.rounds.STRIP_TILES],
                         ids=lambda tile: f"{tile['BM']}x{tile['BN']}")
@pytest.mark.parametrize("shape", [(96, 3000, 1100), (200, 4104, 520), (1000, 1003, 300)],
                         ids=lambda s: "x".join(map(str, s)))
def test_skinny_and_strip_tiles_one_a_block(shape, tile, name, dtype):
    """tuning.skinny.SKINNY_TILES (64x192 in six stages, 64x256 in four, one consumer warpgroup)
    and the STRIP_TILES (256 rows in 128-row warpgroups) one tile a block, as the bench runs
    them in one wave: 96 and 200 rows leave the last M tile part empty (a 256-row one mostly
    past M), 3000 and 1003 columns the last N tile, 1003 and 4104 put B's rows off 128-byte
    lines, 1100 and 300 make a ragged last K step."""
    run_and_check(name, dtype, shape, **tile)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("cluster", [1, 2], ids=["alone", "cluster2"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (1024, 2056, 1000), (1536, 2112, 520)],
                         ids=lambda s: "x".join(map(str, s)))
def test_128x192_tiles_one_a_block(shape, cluster, name, dtype):
    """tuning.rounds.WIDE_ROW_TILE one tile a block, as the bench runs it in one wave, alone or in
    clusters of 2 sharing B (where B's rows are off 128-byte lines: N 2056): N 2056 is 11
    tiles of 192, the last 136 columns past N; 1536x2112 is 12 x 11 = 132 tiles; 1000 rows
    are 8 M tiles, the last 104 rows deep."""
    run_and_check(name, dtype, shape, cluster=cluster, **tuning.rounds.WIDE_ROW_TILE)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("tile", [
    dict(BM=128, BN=144, stages=4), dict(BM=128, BN=80, stages=4),
    dict(BM=128, BN=160, stages=4, persistent=True, cluster=2),
    dict(BM=128, BN=240, stages=3, persistent=True, cluster=2),
    dict(BM=192, BN=176, stages=3), dict(BM=128, BN=208, stages=3, persistent=True),
    dict(BM=128, BN=224, stages=3, persistent=True, cluster=2),
    dict(BM=64, BN=144, stages=4, persistent=True, consumers="pingpong"),
    dict(BM=128, BN=208, stages=3, tma_swizzle=64)],
    ids=lambda t: "-".join(f"{k}{v}" for k, v in t.items()))
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (300, 2056, 520), (129, 4104, 200)],
                         ids=lambda s: "x".join(map(str, s)))
def test_padded_slabs(shape, tile, name, dtype):
    """B's rows not whole 128-byte lines, stored in 128-byte slabs (or the 64-byte ones
    tma_swizzle asks for) the last padded: its box loads the next tile's columns, or zeros
    past N (1003, 2056 and 4104 columns: the last tile's padding past the tensor), which
    wgmma's descriptors never read."""
    run_and_check(name, dtype, shape, BK=64, **tile)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", [(640, 1024, 200), (300, 520, 200), (1000, 1003, 77),
                                   (4224, 2048, 256), (4096, 4096, 512)],
                         ids=lambda s: "x".join(map(str, s)))
def test_persistent_clusters_walk_pairs_of_tiles(shape, name, dtype):
    """persistent + cluster=2 at 128x256x64: each pair of blocks walks pairs of M tiles,
    multicasting B to both. 4224x2048 (17 pairs of M tiles, the last half past M, x 8 N
    tiles: 136 pairs for at most 66 clusters) and 4096^2 (256 pairs) give every cluster
    several tiles, so the ring's stages and phases go on across tiles in both blocks; the
    smaller shapes give some clusters none."""
    run_and_check(name, dtype, shape, stages=3, cluster=2, persistent=True,
                  BM=128, BN=256, BK=64)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", [
    dict(BM=64, BN=128, stages=6),
    dict(BM=128, BN=256, stages=3, persistent=True, raster_group=16),
    dict(BM=64, BN=224, stages=5, persistent=True, consumers="pingpong"),
    dict(BM=64, BN=128, stages=6, split_k=2),
], ids=["64x128", "128x256-persistent", "64x224-pingpong", "64x128-split2"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (300, 520, 1030), (2500, 2048, 512)],
                         ids=lambda s: "x".join(map(str, s)))
def test_clusters_of_four_blocks_share_b(shape, schedule, name, dtype):
    """cluster=4: each block loads a quarter of every B stage's rows and multicasts them to
    all four, handing each stage back to every block. 1000 rows are 16 tiles of 64 (8 of
    128: two clusters, the second's last block past M), 300 are 5 of 64 (the second cluster's
    last three past M); 2500x2048 gives the persistent clusters several tiles each."""
    run_and_check(name, dtype, shape, cluster=4, BK=64, **schedule)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("schedule", [
    dict(BM=64, BN=160, stages=7, cluster=4, cluster_n=2),
    dict(BM=128, BN=128, stages=4, cluster=2, cluster_n=2, persistent=True, raster_group=16),
    dict(BM=64, BN=128, stages=6, cluster=2, cluster_n=4),
    dict(BM=128, BN=256, stages=3, cluster_n=2, persistent=True),
    dict(BM=64, BN=128, stages=5, cluster=2, cluster_n=2, persistent=True,
         consumers="pingpong"),
    dict(BM=64, BN=128, stages=6, cluster=2, cluster_n=2, split_k=2),
], ids=["64x160-4x2", "128x128-2x2-persistent", "64x128-2x4", "128x256-1x2-persistent",
        "64x128-2x2-pingpong", "64x128-2x2-split2"])
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (300, 520, 1030), (2500, 2048, 512),
                                   (900, 1200, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_two_dimensional_clusters_share_a_and_b(shape, schedule, name, dtype):
    """cluster x cluster_n blocks: those of an N column multicast B's stage to each other,
    those of an M row A's, each block handing its stage back to every block of its row and
    column. Ragged counts of tiles leave the last clusters' blocks past N (1003 columns: 7
    tiles of 160 in clusters of 2; 520: 5 of 128 in clusters of 2 or 4) and past M (300
    rows: 5 tiles of 64 in clusters of 2 or 4), loading zeros for their own tile while
    their shares still reach their peers; 900x1200x4096 is a shape cuBLAS runs in 4x2
    clusters of 64x152."""
    run_and_check(name, dtype, shape, BK=64, **schedule)


@pytest.mark.parametrize("persistent", [False, True], ids=["one-tile", "persistent"])
@pytest.mark.parametrize("raster_group", [1, 3, 16])
@pytest.mark.parametrize("shape", [(4224, 2048, 256), (1000, 1003, 77)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cluster_raster_groups_count_rows_of_tiles(shape, raster_group, persistent):
    """A cluster's grouped order takes cdiv(raster_group, 2) pairs a group (one pair for 1,
    two for 3, eight for 16), with 33 and 8 M tiles (a ragged last group, a pair half past
    M): every tile still computed once."""
    run_and_check("matmul", "f16", shape, stages=3, cluster=2, persistent=persistent,
                  raster_group=raster_group, BM=128, BN=256, BK=64)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", [(1000, 1003, 77), (300, 517, 33), (130, 1003, 128)],
                         ids=lambda s: "x".join(map(str, s)))
def test_small_ragged_problems_take_k_in_one_step(shape, name, dtype):
    """The tuned kernel for small ragged problems on sm_90a (benchmarking.contenders:
    mma.sync 64x128 tiles, 2x4 warps, all of K in one step of one stage, the operands read
    unpacked with element copies): K of 77, 33 and 128 in one step, ragged M and N edges."""
    from tilec.benchmarking.cases import Case as BenchCase
    m, n, k = shape
    config = tuning.tuned_config(BenchCase(m, n, k, dtype), ARCH)
    assert (config["stages"], config["BK"]) == (1, -(-k // 16) * 16)
    run_and_check_on_mma_sync(name, dtype, shape, **config)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", [(1950, 934, 4), (2481, 1608, 3), (8891, 14, 722)],
                         ids=lambda v: "x".join(map(str, v)))
def test_the_tuned_kernels_for_rows_the_launch_leaves_misaligned(shape, dtype):
    """Misaligned rows of too few elements to pack, over many tiles (tuning's unpacked_rows,
    session 36): all of a tiny K in one step, or mma.sync's in-place tiles past it, where
    wgmma's tiles ran on mma.sync and spilled; ragged edges everywhere."""
    from tilec.benchmarking.cases import Case as BenchCase
    config, _, rules = tuning.tuned_rules(BenchCase(*shape, dtype), ARCH)
    assert rules == ["unpacked_rows"], rules
    run_and_check_on_mma_sync("matmul", dtype, shape, **config)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape, rule", [
    ((1752, 3200, 512), "_persistent_for_shallow_rounds"),  # 128x128 persistent, 3 rounds
    ((3000, 3000, 1024), "_persistent_for_shallow_rounds"),  # 192x192 persistent, 2 rounds
    # 128x128 persistent in clusters of 2 (B's rows off 128-byte lines), 45 M tiles: the
    # last cluster's second block runs past M
    ((5712, 792, 768), "_persistent_for_shallow_rounds"),
    ((4000, 600, 1024), "_tile_for_whole_waves"),  # one wave of 128x192 in clusters of 2
    ((3893, 1176, 2040), "_tile_for_whole_waves"),  # 256x160 in persistent clusters of 2
    ((2368, 512, 512), "_skinny"),  # 64x192 in six stages, one wave
    ((1760, 424, 768), "_skinny"),  # 64x128 in clusters of 2 (B's rows off 128-byte lines)
    ((2368, 512, 192), "_skinny"),  # 64x192: six stages over three K steps
    ((1000, 1000, 256), "_skinny"),  # 64x128 in clusters of 2 over four K steps
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_the_tuned_kernels_for_a_shallow_k(shape, rule, name, dtype):
    """The tuning's choices over a K of 192 to 2040 (benchmarks/NOTES.md, sessions 34 to 36),
    as the bench runs them: persistent tiles walking several rounds of a shallow K, and the
    skinny tile where few tiles have 16-byte aligned rows, its ring deeper than K's steps;
    ragged M and N edges."""
    from tilec.benchmarking.cases import Case as BenchCase
    config, _, rules = tuning.tuned_rules(BenchCase(*shape, dtype), ARCH)
    assert rule in rules, rules
    run_and_check(name, dtype, shape, **config)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", list(SAMPLE_FUNCTIONS))
@pytest.mark.parametrize("shape", [(900, 1200, 4096), (2000, 392, 4096), (3936, 392, 768),
                                   (450, 3000, 4096), (803, 320, 768), (640, 2000, 4096)],
                         ids=lambda v: "x".join(map(str, v)))
def test_the_tuned_swapped_pairs(shape, name, dtype):
    """The tuning's _swapped_pairs (session 38): C.T tiles 64 columns wide and 32 to 232
    rows of C deep, in clusters of 2 along M sharing B's tile, one wave; ragged M and N
    edges (803 rows: 13 pairs of 32-row tiles, the last block's rows past M)."""
    from tilec.benchmarking.cases import Case as BenchCase
    config, _, rules = tuning.tuned_rules(BenchCase(*shape, dtype), ARCH)
    assert "_swapped_pairs" in rules, rules
    run_and_check(name, dtype, shape, **config)


@pytest.mark.parametrize("consumers", ["cooperative", "pingpong"])
def test_a_persistent_kernel_reading_c_before_its_k_loop(consumers):
    """C read before the K loop (its offsets shared with the loads: made per tile by
    warp_specialize, session 36), persistent over more tiles than SMs so that each block
    walks several: every tile's C and product land where they belong."""
    from tests.test_hopper import C_BEFORE_THE_LOOP
    (function,) = load_file("c_first.py", text=C_BEFORE_THE_LOOP).values()
    m, n, k = 2000, 1500, 200  # 32 x 12 = 384 tiles of 64x128
    a, b, c = randn((m, k), "f16"), randn((k, n), "f16"), randn((m, n), "f16")
    want = a.double() @ b.double() + c.double()
    function(a, b, c, arch=ARCH, stages=3, persistent=True, consumers=consumers)
    torch.cuda.synchronize()
    assert rel_error(c, want) < 2 * TOLERANCE["f16"]
